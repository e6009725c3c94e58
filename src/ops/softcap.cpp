#include "ops/softcap.h"

#include "ops/cpu/softcap_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/softcap_cuda.h"
#endif

namespace primus::ops {

void softcap_forward(const Tensor& x, float cap, Tensor& y, const Stream& s) {
  check_same_device("softcap_forward", x.device(), {&x, &y});
  PRIMUS_DISPATCH(x, softcap_forward, x, cap, y, s);
}

void softcap_backward(const Tensor& y, const Tensor& dy, float cap, Tensor& dx, const Stream& s) {
  check_same_device("softcap_backward", y.device(), {&y, &dy, &dx});
  PRIMUS_DISPATCH(y, softcap_backward, y, dy, cap, dx, s);
}

}  // namespace primus::ops
