#include "ops/moe_router.h"

#include <cmath>
#include <limits>

#include "ops/cpu/moe_router_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/moe_router_cuda.h"
#endif

namespace primus::ops {

void validate_moe_router_config(const MoeRouterConfig& cfg, int64_t num_experts) {
  PRIMUS_CHECK(num_experts >= 1, "moe router: num_experts must be >= 1, got {}", num_experts);
  PRIMUS_CHECK(cfg.topk >= 1 && cfg.topk <= num_experts, "moe router: topk must be in [1, {}], got {}",
               num_experts, cfg.topk);
  PRIMUS_CHECK(!cfg.pre_softmax || cfg.score == MoeScoreFunction::kSoftmax,
               "moe router: pre_softmax applies to the softmax score function only");
  PRIMUS_CHECK(std::isfinite(cfg.scaling_factor), "moe router: scaling_factor must be finite, got {}",
               cfg.scaling_factor);
  if (cfg.num_groups == 0) {
    PRIMUS_CHECK(cfg.group_topk == 0, "moe router: group_topk {} given without num_groups", cfg.group_topk);
    return;
  }
  PRIMUS_CHECK(cfg.num_groups >= 1 && num_experts % cfg.num_groups == 0,
               "moe router: num_groups {} must divide num_experts {}", cfg.num_groups, num_experts);
  PRIMUS_CHECK(cfg.group_topk >= 1 && cfg.group_topk <= cfg.num_groups,
               "moe router: group_topk must be in [1, num_groups = {}], got {}", cfg.num_groups,
               cfg.group_topk);
  PRIMUS_CHECK(cfg.topk % cfg.group_topk == 0, "moe router: topk {} must be a multiple of group_topk {}",
               cfg.topk, cfg.group_topk);
  PRIMUS_CHECK(cfg.topk <= cfg.group_topk * (num_experts / cfg.num_groups),
               "moe router: topk {} exceeds the experts of {} groups of {}", cfg.topk, cfg.group_topk,
               num_experts / cfg.num_groups);
}

int64_t moe_expert_capacity(int64_t num_tokens, int64_t topk, int64_t num_experts, double capacity_factor) {
  PRIMUS_CHECK(num_experts >= 1 && topk >= 1 && num_tokens >= 0,
               "moe_expert_capacity: need num_experts >= 1, topk >= 1, num_tokens >= 0, got {}, {}, {}",
               num_experts, topk, num_tokens);
  PRIMUS_CHECK(capacity_factor > 0 && std::isfinite(capacity_factor),
               "moe_expert_capacity: capacity_factor must be > 0, got {}", capacity_factor);
  const double cap = std::ceil(static_cast<double>(num_tokens * topk) / num_experts * capacity_factor);
  return std::max<int64_t>(1, static_cast<int64_t>(cap));
}

void moe_router_forward(const Tensor& logits, const Tensor* expert_bias, const MoeRouterConfig& cfg,
                        Tensor& ids, Tensor& probs, const Stream& s) {
  check_same_device("moe_router_forward", logits.device(), {&logits, expert_bias, &ids, &probs});
  PRIMUS_DISPATCH(logits, moe_router_forward, logits, expert_bias, cfg, ids, probs, s);
}

void moe_router_backward(const Tensor& logits, const Tensor& ids, const Tensor& dprobs,
                         const MoeRouterConfig& cfg, Tensor& dlogits, const Stream& s) {
  check_same_device("moe_router_backward", logits.device(), {&logits, &ids, &dprobs, &dlogits});
  PRIMUS_DISPATCH(logits, moe_router_backward, logits, ids, dprobs, cfg, dlogits, s);
}

namespace {

// The sequence layout with its defaults filled in, checked against the rows of logits.
MoeAuxSeqs resolve_seqs(const char* op, const Tensor& logits, const MoeAuxSeqs& in) {
  PRIMUS_CHECK(logits.ndim() == 2, "{}: logits must be [T, E], got {}", op, logits.describe());
  const int64_t rows = logits.size(0);
  MoeAuxSeqs s = in;
  PRIMUS_CHECK(s.num_seqs >= 1 && rows > 0 && rows % s.num_seqs == 0,
               "{}: num_seqs {} must divide the {} tokens", op, s.num_seqs, rows);
  if (s.chunk == 0) s.chunk = rows / s.num_seqs;
  if (s.seq_tokens == 0) s.seq_tokens = rows / s.num_seqs;
  PRIMUS_CHECK(s.chunk >= 1 && rows % s.chunk == 0 && (rows / s.chunk) % s.num_seqs == 0,
               "{}: {} tokens in chunks of {} do not hold the same share of each of {} sequences", op, rows,
               s.chunk, s.num_seqs);
  PRIMUS_CHECK(s.seq_tokens * s.num_seqs >= rows,
               "{}: {} sequences of {} tokens cannot hold this rank's {} tokens", op, s.num_seqs,
               s.seq_tokens, rows);
  return s;
}

}  // namespace

void moe_aux_loss(const Tensor& logits, int64_t topk, MoeScoreFunction score, int64_t num_seqs, float coeff,
                  float grad_scale, Tensor& loss, Tensor* dlogits, const Stream& s) {
  check_same_device("moe_aux_loss", logits.device(), {&logits, &loss, dlogits});
  MoeAuxSeqs seqs;
  seqs.num_seqs = num_seqs;
  seqs = resolve_seqs("moe_aux_loss", logits, seqs);
  Tensor counts = Tensor::empty({num_seqs, logits.size(1)}, DType::kI32, s);
  moe_aux_counts(logits, topk, seqs, counts, s);
  moe_aux_loss_from_counts(logits, counts, topk, score, seqs, coeff, grad_scale, loss, dlogits, s);
}

void moe_aux_counts(const Tensor& logits, int64_t topk, const MoeAuxSeqs& seqs, Tensor& counts,
                    const Stream& s) {
  check_same_device("moe_aux_counts", logits.device(), {&logits, &counts});
  const MoeAuxSeqs r = resolve_seqs("moe_aux_counts", logits, seqs);
  PRIMUS_DISPATCH(logits, moe_aux_counts, logits, topk, r, counts, s);
}

void moe_aux_loss_from_counts(const Tensor& logits, const Tensor& counts, int64_t topk,
                              MoeScoreFunction score, const MoeAuxSeqs& seqs, float coeff, float grad_scale,
                              Tensor& loss, Tensor* dlogits, const Stream& s) {
  check_same_device("moe_aux_loss_from_counts", logits.device(), {&logits, &counts, &loss, dlogits});
  const MoeAuxSeqs r = resolve_seqs("moe_aux_loss_from_counts", logits, seqs);
  PRIMUS_DISPATCH(logits, moe_aux_loss_from_counts, logits, counts, topk, score, r, coeff, grad_scale, loss,
                  dlogits, s);
}

void moe_z_loss(const Tensor& logits, float coeff, int64_t mean_over, float grad_scale, Tensor& loss,
                Tensor* dlogits, const Stream& s) {
  check_same_device("moe_z_loss", logits.device(), {&logits, &loss, dlogits});
  PRIMUS_CHECK(logits.ndim() == 2 && mean_over >= 0 && (mean_over == 0 || mean_over >= logits.size(0)),
               "moe_z_loss: the mean is over {} tokens, fewer than the {} rows given", mean_over,
               logits.ndim() == 2 ? logits.size(0) : 0);
  const int64_t n = mean_over == 0 ? logits.size(0) : mean_over;
  PRIMUS_DISPATCH(logits, moe_z_loss, logits, coeff, n, grad_scale, loss, dlogits, s);
}

void moe_expert_load(const Tensor& ids, int64_t num_experts, Tensor& counts, bool accumulate,
                     const Stream& s) {
  check_same_device("moe_expert_load", ids.device(), {&ids, &counts});
  PRIMUS_DISPATCH(ids, moe_expert_load, ids, num_experts, counts, accumulate, s);
}

void moe_expert_bias_update(const Tensor& counts, float rate, Tensor& bias, const Stream& s) {
  check_same_device("moe_expert_bias_update", counts.device(), {&counts, &bias});
  PRIMUS_DISPATCH(counts, moe_expert_bias_update, counts, rate, bias, s);
}

void moe_capacity_drop(const Tensor& ids, const Tensor& probs, int64_t num_experts, int64_t capacity,
                       MoeDropPolicy policy, Tensor& kept_ids, Tensor& kept_probs, const Stream& s) {
  check_same_device("moe_capacity_drop", ids.device(), {&ids, &probs, &kept_ids, &kept_probs});
  PRIMUS_DISPATCH(ids, moe_capacity_drop, ids, probs, num_experts, capacity, policy, kept_ids, kept_probs, s);
}

void validate_moe_random_logits(const MoeRandomLogitsKey& key, int64_t rows, int64_t num_experts) {
  constexpr int64_t k2p32 = int64_t{1} << 32;
  PRIMUS_CHECK(num_experts >= 1 && num_experts < k2p32,
               "moe_random_logits: num_experts must be in [1, 2^32), got {}", num_experts);
  PRIMUS_CHECK(key.seq_len >= 1 && rows % key.seq_len == 0,
               "moe_random_logits: seq_len {} must be >= 1 and divide the {} rows", key.seq_len, rows);
  PRIMUS_CHECK(key.first_sample >= 0, "moe_random_logits: first_sample must be >= 0, got {}",
               key.first_sample);
  PRIMUS_CHECK(key.pos_offset >= 0 && key.pos_offset + key.seq_len <= k2p32,
               "moe_random_logits: positions pos_offset {} + seq_len {} must lie in [0, 2^32)",
               key.pos_offset, key.seq_len);
}

void validate_moe_round_robin(int64_t num_experts, int64_t num_seqs, int64_t rows, int64_t topk) {
  PRIMUS_CHECK(num_experts >= 1 && num_experts <= std::numeric_limits<int32_t>::max(),
               "moe_round_robin_ids: num_experts must be in [1, 2^31), got {}", num_experts);
  PRIMUS_CHECK(topk >= 1 && topk <= num_experts,
               "moe_round_robin_ids: topk (ids' columns) must be in [1, num_experts = {}], got {}",
               num_experts, topk);
  PRIMUS_CHECK(num_seqs >= 1 && rows % num_seqs == 0,
               "moe_round_robin_ids: num_seqs {} must be >= 1 and divide the {} rows", num_seqs, rows);
}

void moe_random_logits(const MoeRandomLogitsKey& key, Tensor& logits, const Stream& s) {
  check_same_device("moe_random_logits", logits.device(), {&logits});
  PRIMUS_DISPATCH(logits, moe_random_logits, key, logits, s);
}

void moe_round_robin_ids(int64_t num_experts, int64_t num_seqs, Tensor& ids, const Stream& s) {
  check_same_device("moe_round_robin_ids", ids.device(), {&ids});
  PRIMUS_DISPATCH(ids, moe_round_robin_ids, num_experts, num_seqs, ids, s);
}

void moe_sort_by_prob(const Tensor& ids, const Tensor& probs, Tensor& sorted_ids, Tensor& sorted_probs,
                      const Stream& s) {
  check_same_device("moe_sort_by_prob", probs.device(), {&ids, &probs, &sorted_ids, &sorted_probs});
  PRIMUS_DISPATCH(probs, moe_sort_by_prob, ids, probs, sorted_ids, sorted_probs, s);
}

void moe_router_probs(const Tensor& logits, const Tensor& ids, const MoeRouterConfig& cfg, Tensor& probs,
                      const Stream& s) {
  check_same_device("moe_router_probs", logits.device(), {&logits, &ids, &probs});
  PRIMUS_DISPATCH(logits, moe_router_probs, logits, ids, cfg, probs, s);
}

}  // namespace primus::ops
