#include "checkpoint/fp8_dequant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace primus::ckpt {

namespace {

// All 256 values, built once from the bit fields (the format has no rounding to speak of: every value is a
// small integer times a power of two, exact in f32).
std::array<float, 256> make_e4m3fn_table() {
  std::array<float, 256> t{};
  for (int b = 0; b < 256; ++b) {
    const int sign = b >> 7, exp = (b >> 3) & 0xf, mant = b & 0x7;
    float v;
    if (exp == 0xf && mant == 0x7) {
      v = std::numeric_limits<float>::quiet_NaN();
    } else if (exp == 0) {
      v = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant/8 * 2^(1-7)
    } else {
      v = std::ldexp(static_cast<float>(8 + mant), exp - 10);  // (1 + mant/8) * 2^(exp-7)
    }
    t[static_cast<size_t>(b)] = sign ? -v : v;
  }
  return t;
}

const std::array<float, 256>& e4m3fn_table() {
  static const std::array<float, 256> t = make_e4m3fn_table();
  return t;
}

}  // namespace

float e4m3fn_to_float(uint8_t bits) {
  return e4m3fn_table()[bits];
}

Tensor dequantize_fp8_blocks(const Tensor& q, const Tensor& scale_inv, int64_t br, int64_t bc,
                             const std::string& what) {
  PRIMUS_CHECK(q.device().is_cpu() && q.is_contiguous(), "{}: needs a contiguous host tensor", what);
  if (q.dtype() != DType::kFP8E4M3)
    throw Error(ErrorKind::kRuntime,
                fmt::format("{}: expected an F8_E4M3 weight, got {}", what, dtype_name(q.dtype())));
  if (q.ndim() != 2)
    throw Error(ErrorKind::kRuntime, fmt::format("{}: block-quantised FP8 weights must be 2-D, got shape {}",
                                                 what, shape_str(q.shape())));
  PRIMUS_CHECK(br > 0 && bc > 0, "{}: block size {}x{} must be positive", what, br, bc);
  const int64_t rows = q.size(0), cols = q.size(1);
  const Shape want = {(rows + br - 1) / br, (cols + bc - 1) / bc};
  if (scale_inv.dtype() != DType::kF32 || scale_inv.shape() != want)
    throw Error(ErrorKind::kRuntime,
                fmt::format("{}_scale_inv: expected f32 {} (blocks of {}x{} over {}), got {} {}", what,
                            shape_str(want), br, bc, shape_str(q.shape()), dtype_name(scale_inv.dtype()),
                            shape_str(scale_inv.shape())));
  const float* s = scale_inv.data<float>();
  for (int64_t i = 0; i < scale_inv.numel(); ++i)
    if (!std::isfinite(s[i]))
      throw Error(ErrorKind::kRuntime, fmt::format("{}_scale_inv: block {} (row {}, column {}) is {}", what,
                                                   i, i / want[1], i % want[1], s[i]));
  const auto& table = e4m3fn_table();
  const uint8_t* in = static_cast<const uint8_t*>(q.data_ptr());
  Tensor out = Tensor::empty(q.shape(), DType::kBF16);
  bf16_t* o = out.data<bf16_t>();
  int64_t nan_at = -1;
#pragma omp parallel for schedule(static) reduction(max : nan_at) if (rows * cols > 1 << 16)
  for (int64_t r = 0; r < rows; ++r) {
    const float* srow = s + (r / br) * want[1];
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t b = in[r * cols + c];
      if ((b & 0x7f) == 0x7f) nan_at = std::max(nan_at, r * cols + c);
      o[r * cols + c] = float_to_bf16(table[b] * srow[c / bc]);  // f32 product, then RNE to bf16
    }
  }
  if (nan_at >= 0)
    throw Error(ErrorKind::kRuntime,
                fmt::format("{}: element [{}, {}] is an FP8 NaN (byte 0x{:02x}); the checkpoint is corrupt",
                            what, nan_at / cols, nan_at % cols, in[nan_at]));
  return out;
}

}  // namespace primus::ckpt
