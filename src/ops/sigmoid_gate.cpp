#include "ops/sigmoid_gate.h"

#include "ops/cpu/sigmoid_gate_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/sigmoid_gate_cuda.h"
#endif

namespace primus::ops {

void sigmoid_gate_forward(const Tensor& g, const Tensor& x, Tensor& y, const Stream& s) {
  check_same_device("sigmoid_gate_forward", x.device(), {&g, &x, &y});
  PRIMUS_DISPATCH(x, sigmoid_gate_forward, g, x, y, s);
}

void sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& dg,
                           const Stream& s) {
  check_same_device("sigmoid_gate_backward", x.device(), {&g, &x, &dy, &dx, &dg});
  PRIMUS_DISPATCH(x, sigmoid_gate_backward, g, x, dy, dx, dg, s);
}

}  // namespace primus::ops
