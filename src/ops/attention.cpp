#include "ops/attention.h"

#include <atomic>

#include "ops/cpu/attention_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/attention_cuda.h"
#endif

namespace primus::ops {

namespace {
std::atomic<bool>& deterministic_flag() {
  static std::atomic<bool> on{false};
  return on;
}
}  // namespace

void set_deterministic_attention(bool on) {
  deterministic_flag().store(on);
}

bool deterministic_attention() {
  return deterministic_flag().load();
}

void attention_forward(const Tensor& qkv, const AttentionShape& shape, Tensor& out, Tensor& lse,
                       const Stream& s) {
  check_same_device("attention_forward", qkv.device(), {&qkv, &out, &lse});
  PRIMUS_DISPATCH(qkv, attention_forward, qkv, shape, out, lse, s);
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const AttentionShape& shape, Tensor& dqkv, const Stream& s) {
  check_same_device("attention_backward", qkv.device(), {&dout, &qkv, &out, &lse, &dqkv});
  PRIMUS_DISPATCH(qkv, attention_backward, dout, qkv, out, lse, shape, dqkv, s);
}

void attention_merge(Tensor& acc, Tensor& acc_lse, const Tensor& part, const Tensor& part_lse,
                     const Stream& s) {
  check_same_device("attention_merge", acc.device(), {&acc, &acc_lse, &part, &part_lse});
  PRIMUS_DISPATCH(acc, attention_merge, acc, acc_lse, part, part_lse, s);
}

}  // namespace primus::ops
