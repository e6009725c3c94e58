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

void vocab_parallel_ce_stats(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                             int64_t vocab_total, Tensor& stats, const Stream& s) {
  check_same_device("vocab_parallel_ce_stats", logits.device(), {&logits, &targets, &stats});
  PRIMUS_DISPATCH(logits, vocab_parallel_ce_stats, logits, targets, vocab_begin, vocab_total, stats, s);
}

void vocab_parallel_ce_finish(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                              const Tensor& all_stats, float grad_scale, Tensor& losses, Tensor* dlogits,
                              const Stream& s) {
  check_same_device("vocab_parallel_ce_finish", logits.device(),
                    {&logits, &targets, &all_stats, &losses, dlogits});
  PRIMUS_DISPATCH(logits, vocab_parallel_ce_finish, logits, targets, vocab_begin, all_stats, grad_scale,
                  losses, dlogits, s);
}

}  // namespace primus::ops
