#pragma once
// The AdamW element update shared by adamw_step (optimizer.cu) and embedding_forward_updated (embedding.cu):
// one definition, so that a row computed on the fly is bitwise the row the optimizer stores. With it, the
// master split / join of core/master_split.h on device floats.
#include <cuda_bf16.h>

#include <cmath>

#include "core/master_split.h"
#include "ops/optimizer.h"

namespace primus::ops::cuda::detail {

struct AdamCoeffs {
  float lr, b1, one_minus_b1, b2, one_minus_b2, inv_bc1, inv_bc2, eps, wd, grad_scale;
};

inline AdamCoeffs adam_coeffs(const AdamWParams& p) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  return AdamCoeffs{p.lr,
                    p.beta1,
                    static_cast<float>(1.0 - p.beta1),
                    p.beta2,
                    static_cast<float>(1.0 - p.beta2),
                    static_cast<float>(1.0 / bc1),
                    static_cast<float>(1.0 / bc2),
                    p.eps,
                    p.weight_decay,
                    p.grad_scale};
}

// Every product and sum is rounded as written (__fmul_rn / __fmaf_rn are never contracted): left to the
// compiler, the contraction depended on the surrounding kernel -- the row-sparse AdamW's m came out as
// fma(1 - b1, g, b1 m), the dense one's as fma(b1, m, (1 - b1) g) (H200, 2026-11-28: N = 1 kernels not
// bitwise equal) -- and the kernels sharing this update must give the same bits. The form is the one the
// dense kernel had, so its results are unchanged; sqrt and the division stay --use_fast_math's.
__device__ __forceinline__ void adam_update(float& w, float g, float& m, float& v, const AdamCoeffs& c) {
  g = __fmul_rn(g, c.grad_scale);
  m = __fmaf_rn(c.b1, m, __fmul_rn(c.one_minus_b1, g));
  v = __fmaf_rn(c.b2, v, __fmul_rn(g, __fmul_rn(c.one_minus_b2, g)));
  const float upd = __fmaf_rn(c.wd, w, __fmul_rn(c.inv_bc1, m) / (sqrtf(__fmul_rn(c.inv_bc2, v)) + c.eps));
  w = __fsub_rn(w, __fmul_rn(c.lr, upd));
}

// The f32 master of a (hi, rem) pair, and back.
__device__ __forceinline__ float join_master(uint16_t hi, int16_t rem) {
  return __uint_as_float(join_bits(hi, rem));
}
__device__ __forceinline__ void split_master(float w, uint16_t& hi, int16_t& rem) {
  const uint32_t b = __float_as_uint(w);
  hi = compute_bits(b);
  rem = remainder_bits(b, hi);
}
// The bf16 compute weight of an f32 master (hi of the split), the rounding of every bf16 compute copy.
__device__ __forceinline__ __nv_bfloat16 compute_bf16(float w) {
  return __ushort_as_bfloat16(compute_bits(__float_as_uint(w)));
}

}  // namespace primus::ops::cuda::detail
