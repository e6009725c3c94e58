#include "ops/gemm.h"

#include "ops/cpu/gemm_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/gemm_cuda.h"
#endif

namespace primus::ops {

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha, float beta,
          const Stream& s, const Tensor* c_in) {
  check_same_device("gemm", a.device(), {&a, &b, &c, c_in});
  PRIMUS_DISPATCH(a, gemm, a, trans_a, b, trans_b, c, alpha, beta, s, c_in);
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, const Stream& s,
                    const Tensor* residual) {
  check_same_device("linear_forward", x.device(), {&x, &w, bias, &y, residual});
  PRIMUS_DISPATCH(x, linear_forward, x, w, bias, y, s, residual);
}

void linear_backward_input(const Tensor& dy, const Tensor& w, Tensor& dx, bool accumulate, const Stream& s) {
  check_same_device("linear_backward_input", dy.device(), {&dy, &w, &dx});
  PRIMUS_DISPATCH(dy, linear_backward_input, dy, w, dx, accumulate, s);
}

void linear_backward_weight(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor* dbias, const Stream& s,
                            bool accumulate) {
  check_same_device("linear_backward_weight", dy.device(), {&dy, &x, &dw, dbias});
  PRIMUS_DISPATCH(dy, linear_backward_weight, dy, x, dw, dbias, s, accumulate);
}

int reserve_gemm_sms(const Stream& s, int reserve) {
#ifdef PRIMUS_WITH_CUDA
  if (s.device.is_cuda()) return cuda::reserve_gemm_sms(s, reserve);
#else
  (void)s;
  (void)reserve;
#endif
  return 0;
}

}  // namespace primus::ops
