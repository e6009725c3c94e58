#pragma once
// Element types. bf16/f16/fp8 are stored as raw bits on the host; the conversions below round to nearest
// even, matching what the GPU's conversion instructions do.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace primus {

enum class DType : uint8_t { kF32, kF64, kBF16, kF16, kFP8E4M3, kFP8E5M2, kI32, kI64, kU8, kU16, kI16 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses "f32", "float32", "fp32", "bf16", "bfloat16", ... ; throws ConfigError on an unknown name.
DType dtype_from_name(std::string_view name);
inline bool is_floating(DType t) {
  return t != DType::kI32 && t != DType::kI64 && t != DType::kU8 && t != DType::kU16 && t != DType::kI16;
}

struct bf16_t {
  uint16_t bits = 0;
};

inline float bf16_to_float(bf16_t v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
    return bf16_t{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return bf16_t{static_cast<uint16_t>(u >> 16)};
}

// Maps a C++ type to its DType (for typed data access checks).
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct DTypeOf<bf16_t> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct DTypeOf<uint16_t> {
  static constexpr DType value = DType::kU16;
};
template <>
struct DTypeOf<int16_t> {
  static constexpr DType value = DType::kI16;
};

}  // namespace primus
