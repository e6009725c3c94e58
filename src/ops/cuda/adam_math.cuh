#pragma once
// The AdamW element update shared by adamw_step (optimizer.cu) and embedding_forward_updated (embedding.cu):
// one definition, so that a row computed on the fly is bitwise the row the optimizer stores.
#include <cmath>

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

}  // namespace primus::ops::cuda::detail
