#pragma once
// CPU reference implementations (src/ops/cpu/norm.cpp): f32 and f64, OpenMP.
// Same contract as ops/norm.h, which documents every function; the dispatcher ops/norm.cpp routes here.
#include "ops/norm.h"

namespace primus::ops::cpu {

void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd, const Stream& s);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw, bool accumulate_dx, const Stream& s);
void head_rmsnorm_forward(const Tensor& x, int64_t head_begin, int64_t n_heads, int64_t head_dim,
                          const Tensor& w, float eps, Tensor& y, Tensor& rstd, const Stream& s);
void head_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           int64_t head_begin, int64_t n_heads, int64_t head_dim, Tensor& dx, Tensor& dw,
                           const Stream& s);

}  // namespace primus::ops::cpu
