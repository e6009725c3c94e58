#include "ops/activation.h"

#include "ops/cpu/activation_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/activation_cuda.h"
#endif

namespace primus::ops {

void swiglu_forward(const Tensor& gu, Tensor& out, const Stream& s) {
  check_same_device("swiglu_forward", gu.device(), {&gu, &out});
  PRIMUS_DISPATCH(gu, swiglu_forward, gu, out, s);
}

void swiglu_backward(const Tensor& dout, const Tensor& gu, Tensor& dgu, const Stream& s) {
  check_same_device("swiglu_backward", gu.device(), {&dout, &gu, &dgu});
  PRIMUS_DISPATCH(gu, swiglu_backward, dout, gu, dgu, s);
}

}  // namespace primus::ops
