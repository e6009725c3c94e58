#pragma once
// FP8 tensors and the `quant` op family: casting to FP8 with scales, and the FP8 GEMM (docs/kernels/fp8.md).
//
// An FP8 tensor is its bytes plus f32 *dequantisation* multipliers (`scale_inv`): the value of element (r, c)
// is fp8_to_float(data[r, c]) * scale_inv[group(r, c)]. The groups are one of:
//   kTensorwise     one multiplier for the whole tensor             scale_inv [1]
//   kRowwise        one per row                                     scale_inv [rows]
//   kBlock1x128     one per 1 x 128 tile of a row                   scale_inv [ceil(cols / 128), rows]
//                   (row index fastest: the layout cuBLASLt's VEC128_32F scale mode reads)
//   kBlock128x128   one per 128 x 128 block                         scale_inv [ceil(rows/128),
//   ceil(cols/128)]
// Rows are the "outer" dimension and cols the contiguous one; every FP8 GEMM operand is stored [outer, K]
// with K contiguous, the only layout Hopper's FP8 tensor cores take ("TN"), so the GEMM's K is always `cols`.
//
// Quantisation is q = fp8(x * scale) with scale = 1 / scale_inv: round to nearest even, saturating to the
// largest finite value (+-448 E4M3, +-57344 E5M2; NaN stays NaN), which is what the GPU's cvt ...satfinite
// does. For the computed groups (rowwise and blockwise; tensorwise with `current` scaling) the scale is
// fp8_max / amax(group) in f32 (IEEE division), clamped to FLT_MAX (an amax below ~1.3e-36 would make it
// +inf and every zero of the group 0 * inf = NaN, as Transformer Engine guards too), or 1 when the group's
// amax is 0 or not finite; scale_inv is 1 / scale in f32. The CPU implementation is the exact emulation the
// GPU kernels are checked against bit for bit.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace primus::ops {

enum class Fp8Format : uint8_t { kE4M3, kE5M2 };
enum class Fp8Granularity : uint8_t { kTensorwise, kRowwise, kBlock1x128, kBlock128x128 };

const char* fp8_format_name(Fp8Format f);            // "e4m3", "e5m2"
const char* fp8_granularity_name(Fp8Granularity g);  // "tensorwise", "rowwise", "1x128", "128x128"
inline DType fp8_dtype(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? DType::kFP8E4M3 : DType::kFP8E5M2;
}
inline float fp8_max(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? 448.0f : 57344.0f;
}

// Scalar conversions (host): the definition the kernels match. float_to_fp8_reference states the rounding
// in f64 arithmetic (readable, ~50 ns); float_to_fp8 computes the same bits from the float's bit pattern
// (~3 ns: the CPU's FP8 casts spent more than half of an FP8 training step in the reference's libm calls),
// checked equal to the reference on a stride of all 2^32 patterns and every rounding boundary (FP8Cast
// tests in tests/ops/quant_test.cpp).
uint8_t float_to_fp8_reference(float x, Fp8Format f);
float fp8_to_float(uint8_t bits, Fp8Format f);

// The same rounding on the float's bits: with s the 24-bit significand and E the unbiased exponent
// (|x| = s * 2^(E - 23)), the format's quantum at |x| is 2^(max(E, min_exp) - mant_bits); dropping `shift`
// low bits of s with round-to-nearest-even counts quanta exactly. Below min_exp the count is the subnormal
// encoding itself (a count of 2^mant_bits is the smallest normal's encoding too); from min_exp on a count
// of 2^(mant_bits + 1) carries into the next exponent.
inline uint8_t float_to_fp8(float x, Fp8Format f) {
  const bool e4m3 = f == Fp8Format::kE4M3;
  const int mant_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, min_exp = 1 - bias;
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint8_t sign = (u >> 24) & 0x80;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;             // NaN
  const uint8_t max_bits = e4m3 ? 0x7e : 0x7b;  // S.1111.110 / S.11110.11
  if (a == 0) return sign;
  const int biased = static_cast<int>(a >> 23);
  const uint64_t sig = biased == 0 ? (a & 0x7fffffu) : ((a & 0x7fffffu) | 0x800000u);
  const int e = biased == 0 ? -126 : biased - 127;
  if (e > bias + 1) return sign | max_bits;  // >= 2^(max exponent + 1) (infinity included): saturates
  const int shift = std::min(63, std::max(e, min_exp) - mant_bits - e + 23);
  uint64_t count = sig >> shift;
  const uint64_t rem = sig & ((uint64_t{1} << shift) - 1), half = uint64_t{1} << (shift - 1);
  if (rem > half || (rem == half && (count & 1))) ++count;
  uint32_t enc;
  if (e < min_exp) {
    enc = static_cast<uint32_t>(count);  // subnormal (or, at 2^mant_bits, the smallest normal)
  } else {
    int exp_field = e + bias;
    if (count == (uint64_t{2} << mant_bits)) {
      count >>= 1;
      ++exp_field;
    }
    enc = (static_cast<uint32_t>(exp_field) << mant_bits) | static_cast<uint32_t>(count - (1u << mant_bits));
  }
  return sign | static_cast<uint8_t>(std::min<uint32_t>(enc, max_bits));
}
// The scale_inv shape of a [rows, cols] tensor under a granularity (see the table above).
Shape fp8_scale_shape(Fp8Granularity g, int64_t rows, int64_t cols);

struct Fp8Tensor {
  Tensor data;       // kFP8E4M3 / kFP8E5M2, [rows, cols] row-major, contiguous
  Tensor scale_inv;  // f32, fp8_scale_shape(granularity, rows, cols)
  Fp8Format format = Fp8Format::kE4M3;
  Fp8Granularity granularity = Fp8Granularity::kTensorwise;

  bool defined() const { return data.defined(); }
  int64_t rows() const { return data.size(0); }
  int64_t cols() const { return data.size(1); }
  // Uninitialised data and scale_inv on `s`'s device.
  static Fp8Tensor empty(int64_t rows, int64_t cols, Fp8Format f, Fp8Granularity g, const Stream& s);
  std::string describe() const;  // "e4m3 1x128 [8192, 4096] on cuda:0"
};

// What quantize() reads besides x.
struct QuantizeArgs {
  // kTensorwise only: the quantisation multiplier, f32 [1] on x's device. Null = current scaling: the
  // tensor's own amax decides it (one more pass over x).
  const Tensor* scale = nullptr;
  // If set (f32 [1] on x's device): amax_out[0] = max(amax_out[0], max |x|). Delayed scaling records each
  // use of a tensor here; NaN in x makes it NaN.
  Tensor* amax_out = nullptr;
};

// Casts x [R, C] (bf16 or f32 on CUDA; f32 or f64 on the CPU) to FP8 in one read of x:
//   out   [R, C] grouped along x's rows (a GEMM operand whose K is C), when `out` is non-null;
//   out_t [C, R] = x^T grouped along x's columns (an operand whose K is R: the weight-gradient GEMM's), when
//                 `out_t` is non-null.
// Each given output must be allocated (Fp8Tensor::empty) with its format and granularity; they may differ in
// granularity (a weight's 128x128 blocks and ... ) but not tensorwise-with-scale vs computed. Throws
// primus::Error naming `what` on a shape, dtype or device mismatch.
void quantize(const Tensor& x, Fp8Tensor* out, Fp8Tensor* out_t, const QuantizeArgs& args, const Stream& s,
              const char* what = "quantize");

// x = dequantised t (f32 [rows, cols]; CPU or CUDA). Tests and the CPU GEMM use it.
void dequantize(const Fp8Tensor& t, Tensor& x, const Stream& s);

// max |x| over x into amax [1] (f32, overwritten). NaN propagates.
void amax(const Tensor& x, Tensor& amax, const Stream& s);

// c [M, N] = alpha * deq(a) [M, K] @ deq(b) [N, K]^T + beta * c_in (c_in defaults to c). a is the left
// operand with K = a.cols(), b the right one stored [N, K] (a weight [out, in] as it is). Scaling pairs:
// tensorwise x tensorwise, rowwise x rowwise, 1x128 x 128x128, 1x128 x 1x128, 128x128 x 1x128. At least one
// of a, b must be E4M3 (Hopper has no E5M2 x E5M2). K must be a multiple of 16 (of 128 for blockwise), N
// of 16, M any (a multiple of 16 for a 1x128 a). c is bf16 or f32 (CUDA), f32 or f64 (CPU). fast_accum:
// Hopper's faster FP8 accumulation (tensorwise only; ignored elsewhere and on the CPU). CPU: an f64 c is
// computed exactly per element (raw FP8 products summed per K-group in f64, times the group's multipliers) --
// the reference the GPU is checked against; an f32 c (CPU training) multiplies the raw FP8 values with
// OpenBLAS per K-group and sums in f32, as the GPU does. The GPU's FP8 accumulation is not f32-exact (~2e-4
// relative, docs/kernels/fp8.md).
void fp8_gemm(const Fp8Tensor& a, const Fp8Tensor& b, Tensor& c, float alpha, float beta, bool fast_accum,
              const Stream& s, const Tensor* c_in = nullptr);

// The operand scaling pairs (a, b) fp8_gemm takes: those cuBLASLt has Hopper kernels for (128x128 x 128x128
// has none).
struct Fp8ScalingPair {
  Fp8Granularity a, b;
};
inline constexpr Fp8ScalingPair kFp8GemmPairs[] = {
    {Fp8Granularity::kTensorwise, Fp8Granularity::kTensorwise},
    {Fp8Granularity::kRowwise, Fp8Granularity::kRowwise},
    {Fp8Granularity::kBlock1x128, Fp8Granularity::kBlock128x128},
    {Fp8Granularity::kBlock1x128, Fp8Granularity::kBlock1x128},
    {Fp8Granularity::kBlock128x128, Fp8Granularity::kBlock1x128}};

// Throws primus::Error (naming `what`) unless fp8_gemm accepts these shapes and scalings.
void check_fp8_gemm(const Fp8Tensor& a, const Fp8Tensor& b, const char* what);

}  // namespace primus::ops
