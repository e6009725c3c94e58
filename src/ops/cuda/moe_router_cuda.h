#pragma once
// CUDA implementations (src/ops/cuda/moe_router.cu): f32 router math.
// Same contract as ops/moe_router.h, which documents every function; the dispatcher ops/moe_router.cpp routes
// here.
#include "ops/moe_router.h"

namespace primus::ops::cuda {

void moe_router_forward(const Tensor& logits, const Tensor* expert_bias, const MoeRouterConfig& cfg,
                        Tensor& ids, Tensor& probs, const Stream& s);
void moe_router_backward(const Tensor& logits, const Tensor& ids, const Tensor& dprobs,
                         const MoeRouterConfig& cfg, Tensor& dlogits, const Stream& s);
// seqs resolved (no 0 fields); mean_over > 0.
void moe_aux_counts(const Tensor& logits, int64_t topk, const MoeAuxSeqs& seqs, Tensor& counts,
                    const Stream& s);
void moe_aux_loss_from_counts(const Tensor& logits, const Tensor& counts, int64_t topk,
                              MoeScoreFunction score, const MoeAuxSeqs& seqs, float coeff, float grad_scale,
                              Tensor& loss, Tensor* dlogits, const Stream& s);
void moe_z_loss(const Tensor& logits, float coeff, int64_t mean_over, float grad_scale, Tensor& loss,
                Tensor* dlogits, const Stream& s);
void moe_expert_load(const Tensor& ids, int64_t num_experts, Tensor& counts, bool accumulate,
                     const Stream& s);
void moe_expert_bias_update(const Tensor& counts, float rate, Tensor& bias, const Stream& s);
void moe_capacity_drop(const Tensor& ids, const Tensor& probs, int64_t num_experts, int64_t capacity,
                       MoeDropPolicy policy, Tensor& kept_ids, Tensor& kept_probs, const Stream& s);

void moe_router_probs(const Tensor& logits, const Tensor& ids, const MoeRouterConfig& cfg, Tensor& probs,
                      const Stream& s);
// Forced balancing (moe_force_balance.cu).
void moe_random_logits(const MoeRandomLogitsKey& key, Tensor& logits, const Stream& s);
void moe_round_robin_ids(int64_t num_experts, int64_t num_seqs, Tensor& ids, const Stream& s);
void moe_sort_by_prob(const Tensor& ids, const Tensor& probs, Tensor& sorted_ids, Tensor& sorted_probs,
                      const Stream& s);

}  // namespace primus::ops::cuda
