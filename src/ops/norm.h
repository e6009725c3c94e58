#pragma once
// RMSNorm: y = x / sqrt(mean(x^2) + eps) * w, over the last dimension.
#include "core/tensor.h"

namespace primus::ops {

// x, y [R, D]; w [D]; rstd [R] = 1 / sqrt(mean(x^2) + eps).
void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd, const Stream& s);
// dx = d/dx (+= when accumulate_dx, which fuses the residual-stream gradient add); dw += d/dw.
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw, bool accumulate_dx, const Stream& s);

// Per-head RMSNorm (Qwen3 qk-norm) on heads [head_begin, head_begin + n_heads) of each row of x [R, total*D];
// y has x's shape and only those columns are written. w [D]; rstd [R, n_heads].
void head_rmsnorm_forward(const Tensor& x, int64_t head_begin, int64_t n_heads, int64_t head_dim,
                          const Tensor& w, float eps, Tensor& y, Tensor& rstd, const Stream& s);
// Writes dx in the same columns (overwrites them), dw += ... .
void head_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           int64_t head_begin, int64_t n_heads, int64_t head_dim, Tensor& dx, Tensor& dw,
                           const Stream& s);

}  // namespace primus::ops
