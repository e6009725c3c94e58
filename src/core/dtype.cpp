#include "core/dtype.h"

#include "core/error.h"

namespace primus {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF64:
      return 8;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kFP8E4M3:
      return 1;
    case DType::kFP8E5M2:
      return 1;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
    case DType::kU16:
      return 2;
    case DType::kI16:
      return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kFP8E4M3:
      return "fp8e4m3";
    case DType::kFP8E5M2:
      return "fp8e5m2";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
    case DType::kU16:
      return "u16";
    case DType::kI16:
      return "i16";
  }
  return "?";
}

DType dtype_from_name(std::string_view n) {
  if (n == "f32" || n == "fp32" || n == "float32" || n == "float") return DType::kF32;
  if (n == "f64" || n == "fp64" || n == "float64" || n == "double") return DType::kF64;
  if (n == "bf16" || n == "bfloat16") return DType::kBF16;
  if (n == "f16" || n == "fp16" || n == "float16" || n == "half") return DType::kF16;
  if (n == "fp8" || n == "e4m3" || n == "fp8e4m3") return DType::kFP8E4M3;
  if (n == "e5m2" || n == "fp8e5m2") return DType::kFP8E5M2;
  if (n == "i32" || n == "int32") return DType::kI32;
  if (n == "i64" || n == "int64") return DType::kI64;
  if (n == "u8" || n == "uint8") return DType::kU8;
  if (n == "u16" || n == "uint16") return DType::kU16;
  if (n == "i16" || n == "int16") return DType::kI16;
  throw ConfigError(fmt::format(
      "unknown dtype '{}' (expected one of f32, f64, bf16, f16, fp8e4m3, fp8e5m2, i32, i64, u8, u16, i16)",
      n));
}

}  // namespace primus
