#include "ops/loss.h"

#include "ops/cpu/loss_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/loss_cuda.h"
#endif

namespace primus::ops {

void softmax_cross_entropy(const Tensor& logits, const Tensor& targets, float grad_scale, Tensor& losses,
                           Tensor* dlogits, const Stream& s) {
  check_same_device("softmax_cross_entropy", logits.device(), {&logits, &targets, &losses, dlogits});
  PRIMUS_DISPATCH(logits, softmax_cross_entropy, logits, targets, grad_scale, losses, dlogits, s);
}

}  // namespace primus::ops
