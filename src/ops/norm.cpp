#include "ops/norm.h"

#include "ops/cpu/norm_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/norm_cuda.h"
#endif

namespace primus::ops {

void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd, const Stream& s) {
  check_same_device("rmsnorm_forward", x.device(), {&x, &w, &y, &rstd});
  PRIMUS_DISPATCH(x, rmsnorm_forward, x, w, eps, y, rstd, s);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw, bool accumulate_dx, const Stream& s) {
  check_same_device("rmsnorm_backward", x.device(), {&dy, &x, &w, &rstd, &dx, &dw});
  PRIMUS_DISPATCH(x, rmsnorm_backward, dy, x, w, rstd, dx, dw, accumulate_dx, s);
}

void head_rmsnorm_forward(const Tensor& x, int64_t head_begin, int64_t n_heads, int64_t head_dim,
                          const Tensor& w, float eps, Tensor& y, Tensor& rstd, const Stream& s) {
  check_same_device("head_rmsnorm_forward", x.device(), {&x, &w, &y, &rstd});
  PRIMUS_DISPATCH(x, head_rmsnorm_forward, x, head_begin, n_heads, head_dim, w, eps, y, rstd, s);
}

void head_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           int64_t head_begin, int64_t n_heads, int64_t head_dim, Tensor& dx, Tensor& dw,
                           const Stream& s) {
  check_same_device("head_rmsnorm_backward", x.device(), {&dy, &x, &w, &rstd, &dx, &dw});
  PRIMUS_DISPATCH(x, head_rmsnorm_backward, dy, x, w, rstd, head_begin, n_heads, head_dim, dx, dw, s);
}

}  // namespace primus::ops
