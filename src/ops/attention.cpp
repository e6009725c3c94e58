#include "ops/attention.h"

#include <algorithm>
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

Tensor attention_segment_starts(const std::vector<std::vector<int64_t>>& lengths, int64_t seq) {
  PRIMUS_CHECK(!lengths.empty() && seq >= 1, "attention_segment_starts: need at least one row and seq >= 1");
  Tensor r = Tensor::empty({static_cast<int64_t>(lengths.size()), seq}, DType::kI32);
  int32_t* p = r.data<int32_t>();
  for (size_t b = 0; b < lengths.size(); ++b) {
    int64_t start = 0;
    for (int64_t len : lengths[b]) {
      PRIMUS_CHECK(len >= 1 && start + len <= seq,
                   "attention_segment_starts: row {}: sample of length {} at token {} does not fit T = {}", b,
                   len, start, seq);
      std::fill_n(p + start, len, static_cast<int32_t>(start));
      start += len;
    }
    std::fill(p + start, p + seq, static_cast<int32_t>(start));  // padding: one sample of its own
    p += seq;
  }
  return r;
}

void check_segment_starts(const char* op, const Tensor& seg_starts, int64_t batch, int64_t seq) {
  PRIMUS_CHECK(seg_starts.device().is_cpu() && seg_starts.dtype() == DType::kI32 &&
                   seg_starts.is_contiguous() && seg_starts.shape() == Shape({batch, seq}),
               "{}: seg_starts must be a contiguous host i32 [{}, {}], got {}", op, batch, seq,
               seg_starts.describe());
  const int32_t* seg = seg_starts.data<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t* r = seg + b * seq;
    PRIMUS_CHECK(r[0] == 0, "{}: seg_starts[{}, 0] must be 0, got {}", op, b, r[0]);
    for (int64_t i = 1; i < seq; ++i)
      PRIMUS_CHECK(r[i] == r[i - 1] || r[i] == i,
                   "{}: seg_starts[{}, {}] = {} must continue the sample starting at {} or start one at {}",
                   op, b, i, r[i], r[i - 1], i);
  }
}

void attention_forward(const Tensor& qkv, const AttentionShape& shape, Tensor& out, Tensor& lse,
                       const Stream& s) {
  check_same_device("attention_forward", qkv.device(), {&qkv, &out, &lse, shape.seg_starts});
  PRIMUS_DISPATCH(qkv, attention_forward, qkv, shape, out, lse, s);
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const AttentionShape& shape, Tensor& dqkv, const Stream& s) {
  check_same_device("attention_backward", qkv.device(), {&dout, &qkv, &out, &lse, &dqkv, shape.seg_starts});
  PRIMUS_DISPATCH(qkv, attention_backward, dout, qkv, out, lse, shape, dqkv, s);
}

void attention_merge(Tensor& acc, Tensor& acc_lse, const Tensor& part, const Tensor& part_lse,
                     const Stream& s) {
  check_same_device("attention_merge", acc.device(), {&acc, &acc_lse, &part, &part_lse});
  PRIMUS_DISPATCH(acc, attention_merge, acc, acc_lse, part, part_lse, s);
}

}  // namespace primus::ops
