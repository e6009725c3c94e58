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

__device__ __forceinline__ void adam_update(float& w, float g, float& m, float& v, const AdamCoeffs& c) {
  g *= c.grad_scale;
  m = c.b1 * m + c.one_minus_b1 * g;
  v = c.b2 * v + c.one_minus_b2 * g * g;
  const float upd = (m * c.inv_bc1) / (sqrtf(v * c.inv_bc2) + c.eps) + c.wd * w;
  w -= c.lr * upd;
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
