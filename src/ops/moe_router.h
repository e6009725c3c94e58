#pragma once
// MoE router ops: scores, top-k (optionally group-limited, optionally with a selection-only expert bias),
// probability normalisation and scaling, the exact backward into the router logits, the load-balancing
// losses (switch aux loss per micro-batch or per sequence, z-loss), the expert-load histogram, the
// aux-loss-free expert-bias update and the capacity (token-dropping) mode. The router linear itself is a
// plain GEMM (ops/gemm.h) producing f32 logits [T, E].
//
// Semantics follow Megatron-LM (megatron/core/transformer/moe/moe_utils.py: topk_routing_with_score_function,
// group_limited_topk, compute_routing_scores_for_aux_loss, switch_load_balancing_loss_func,
// sequence_load_balancing_loss_func, z_loss_func, get_updated_expert_bias, topk_softmax_with_capacity) and
// the HF models; the differences are listed where they occur.
//
// Determinism and ties: top-k takes the larger value first and, among equal values, the LOWER expert id (on
// the CPU and on the GPU alike; torch.topk leaves ties unspecified). Selection never depends on a summation
// order, so the GPU picks the same ids as the CPU reference: the selection score of expert e is
//   softmax, not pre-softmax:  x_e + bias_e
//   softmax, pre-softmax:      exp(x_e - max_j x_j) + bias_e   (softmax without its common denominator: the
//                              same order and the same group ranking as Megatron's softmax scores)
//   sigmoid:                   sigmoid(x_e) + bias_e
// with exp / sigmoid evaluated in double and rounded to the logits' type (f32), identically on both devices.
//
// Dtypes: logits, probabilities and gradients f32 on CUDA; f32 or f64 (one dtype per call) on the CPU. Ids
// i32.
#include <cstdint>

#include "core/tensor.h"

namespace primus::ops {

enum class MoeScoreFunction { kSoftmax, kSigmoid };

struct MoeRouterConfig {
  int64_t topk = 1;
  MoeScoreFunction score = MoeScoreFunction::kSoftmax;
  // softmax only. false (Megatron's default, Mixtral, Qwen3-MoE with norm_topk_prob): top-k on the logits,
  // then a softmax over the k chosen logits. true: softmax over all experts, then top-k of those
  // probabilities (DeepSeek-V2, Qwen with norm_topk_prob = false).
  bool pre_softmax = false;
  // Divide the k chosen probabilities by their sum. sigmoid: p_i = s_i / (sum_j s_j + 1e-20) when topk > 1
  // (Megatron always does this; HF DeepSeek-V3's norm_topk_prob). pre-softmax softmax: renormalised, which
  // equals the non-pre-softmax result. Ignored for non-pre-softmax softmax (normalised by construction) and
  // for topk == 1 with sigmoid (Megatron leaves a single sigmoid score as it is).
  bool normalize = true;
  // Group-limited routing (DeepSeek-V2/V3; Megatron moe_router_num_groups / moe_router_group_topk): experts
  // split into num_groups equal consecutive groups; a group's score is the sum of its top
  // (topk / group_topk) selection scores (2 for DeepSeek-V3's 8 of 256 experts, top-4 of 8 groups, as HF's
  // sum of top-2); the group_topk best groups are kept and the top-k experts are chosen inside them.
  // num_groups == 0: no grouping.
  int64_t num_groups = 0;
  int64_t group_topk = 0;
  // Multiplies the final probabilities (moe_router_topk_scaling_factor, DeepSeek-V3's routed_scaling_factor
  // 2.5). 1 = none.
  float scaling_factor = 1.0f;
};

// Throws primus::Error naming the field unless cfg is valid for num_experts experts (topk in [1, E]; groups
// dividing E, group_topk in [1, num_groups], topk divisible by group_topk and topk <= group_topk * group
// size).
void validate_moe_router_config(const MoeRouterConfig& cfg, int64_t num_experts);

// logits [T, E]; expert_bias [E] (same float dtype) or nullptr: added to the selection score only, never to
// the probabilities (aux-loss-free balancing; Megatron applies it with sigmoid only, we accept it with every
// score function). Outputs ids [T, k] i32 in descending selection-score order and probs [T, k].
void moe_router_forward(const Tensor& logits, const Tensor* expert_bias, const MoeRouterConfig& cfg,
                        Tensor& ids, Tensor& probs, const Stream& s);

// dlogits [T, E] = d(sum probs * dprobs)/d(logits), with the ids of the forward held fixed (selection is
// piecewise constant). Overwrites dlogits; entries outside the chosen experts are 0 except with pre-softmax
// without normalisation, where the full softmax makes every logit matter.
void moe_router_backward(const Tensor& logits, const Tensor& ids, const Tensor& dprobs,
                         const MoeRouterConfig& cfg, Tensor& dlogits, const Stream& s);

// Which sequence a router row belongs to, for the load-balancing loss. Token t of the logits is in sequence
// (t / chunk) % num_seqs; a whole sequence has seq_tokens tokens. One process: chunk = seq_tokens = T /
// num_seqs (batch-major rows). Context parallelism: a rank holds 2 chunks of C tokens of each of B sequences,
// chunk-major ([2B, C] rows, parallel/context_parallel.h): chunk = C, num_seqs = B, seq_tokens = the whole
// sequence (C * 2 * CP, or B * S when the micro-batch is one "sequence"). 0 = the one-process value.
struct MoeAuxSeqs {
  int64_t num_seqs = 1;
  int64_t chunk = 0;
  int64_t seq_tokens = 0;
};

// Load-balancing loss (Megatron's aux_loss when num_seqs == 1, seq_aux_loss otherwise). With scores
// sc = softmax(logits) (softmax) or sigmoid(logits) / (sum_e sigmoid + 1e-20) (sigmoid), the routing used
// for the counts is the plain top-k of sc (no groups, no bias: Megatron's
// compute_routing_scores_for_aux_loss; it equals the top-k of the logits, ties to the lower id). Tokens t = b
// * S + i of num_seqs equal sequences of S = T / num_seqs (batch-major; Megatron views [S, B] sequence-major:
// the same loss on our layout). count[b][e] = tokens of sequence b routed to e;
//   loss = coeff * E / (topk * num_seqs * S^2) * sum_b sum_e count[b][e] * sum_{t in b} sc[t][e]
// which is switch_load_balancing_loss_func for num_seqs == 1 and sequence_load_balancing_loss_func
// (mean over sequences) otherwise. loss [1] (logits' dtype). dlogits (optional) += grad_scale * dloss/dlogits
// (counts held constant, as in Megatron). = moe_aux_counts, then moe_aux_loss_from_counts.
void moe_aux_loss(const Tensor& logits, int64_t topk, MoeScoreFunction score, int64_t num_seqs, float coeff,
                  float grad_scale, Tensor& loss, Tensor* dlogits, const Stream& s);

// The aux loss in two steps, so that the counts can be summed over the ranks that share sequences (context
// parallelism) in between. counts [num_seqs, E] i32 (overwritten): the plain top-k routing of these rows.
void moe_aux_counts(const Tensor& logits, int64_t topk, const MoeAuxSeqs& seqs, Tensor& counts,
                    const Stream& s);
// loss [1] = this rank's share: coeff * E / (topk * num_seqs * seq_tokens^2) * sum over these rows t of
// sum_e counts[seq(t)][e] * sc[t][e]; the shares of the ranks holding a sequence's tokens add up to the loss
// above when counts are the sums of their moe_aux_counts. dlogits (optional) += grad_scale * dloss/dlogits.
void moe_aux_loss_from_counts(const Tensor& logits, const Tensor& counts, int64_t topk,
                              MoeScoreFunction score, const MoeAuxSeqs& seqs, float coeff, float grad_scale,
                              Tensor& loss, Tensor* dlogits, const Stream& s);

// z-loss (Megatron z_loss_func): loss [1] = coeff * sum_t logsumexp(logits[t])^2 / N, N = mean_over (the
// tokens the mean is over; 0 = T, this call's rows; context parallelism passes the whole micro-batch's so
// that the ranks' shares add up). dlogits (optional) += grad_scale * dloss/dlogits = grad_scale * coeff * 2 *
// lse_t / N * softmax(logits[t]).
void moe_z_loss(const Tensor& logits, float coeff, int64_t mean_over, float grad_scale, Tensor& loss,
                Tensor* dlogits, const Stream& s);

// Expert-load histogram: counts [E] i32 = number of entries of ids [T, k] equal to e. Entries < 0 (dropped by
// the capacity mode) are skipped; an id >= E is an error (the CPU throws; the GPU skips it). accumulate: add
// to counts (sums micro-batches for the bias update) instead of overwriting.
void moe_expert_load(const Tensor& ids, int64_t num_experts, Tensor& counts, bool accumulate,
                     const Stream& s);

// Aux-loss-free balancing (Megatron get_updated_expert_bias): bias[e] += rate * sign(mean(counts) -
// counts[e]), with sign(0) = 0 (decided exactly in integers: sign(sum - E * counts[e])). counts [E] i32, bias
// [E] f32.
void moe_expert_bias_update(const Tensor& counts, float rate, Tensor& bias, const Stream& s);

enum class MoeDropPolicy { kProbs, kPosition };

// Capacity of one expert (Megatron get_capacity): ceil(T * topk / E * capacity_factor), at least 1.
int64_t moe_expert_capacity(int64_t num_tokens, int64_t topk, int64_t num_experts, double capacity_factor);

// Capacity mode (Megatron topk_softmax_with_capacity): each expert keeps at most `capacity` of the entries
// routed to it. kProbs keeps the largest probabilities (equal probabilities: the earlier token); kPosition
// keeps the earliest tokens. Writes kept_ids [T, k] = ids, or -1 where the entry is dropped, and kept_probs
// [T, k] = probs, or 0 where dropped. The router backward still takes the original ids: a dropped entry
// gets dprobs 0 from moe_unpermute_backward, and the kept probabilities keep the normalisation over all k,
// as in Megatron (which normalises before dropping). Padding to capacity is a layout matter: see
// moe_permute.h (Megatron pads with real tokens of probability 0; we pad with zero rows, which give the same
// layer output).
void moe_capacity_drop(const Tensor& ids, const Tensor& probs, int64_t num_experts, int64_t capacity,
                       MoeDropPolicy policy, Tensor& kept_ids, Tensor& kept_probs, const Stream& s);

// ---------------------------------------------------------------------------------------------------------------
// Forced load balancing (moe_router_force_load_balancing, TorchTitan's debug.moe_force_load_balance; a
// benchmarking aid that makes expert loads balanced whatever the router has learned; docs/moe.md).

// The stream and the data position of a batch's random router logits (moe_random_logits).
struct MoeRandomLogitsKey {
  uint64_t stream = 0;       // the stream: the run's seed mixed with the layer's name (evaluation: its own)
  int64_t first_sample = 0;  // global index of the batch's first sequence (training: consumed samples)
  int64_t seq_len = 1;       // tokens per sequence; rows are batch-major, row t = b * seq_len + i
  int64_t pos_offset = 0;    // position of each sequence's first row (a context-parallel shard)
};

// Megatron's apply_random_logits (force_load_balancing_type uniform): overwrites logits [T, E] with standard
// normals, logits[t][e] = portable_normal(stream, first_sample + t / seq_len, (position << 32) | e) with
// position = pos_offset + t % seq_len. Keyed by the data, not by the call order: a recompute, a resume, a
// different micro-batch split or data-parallel layout give a token the same values (Megatron draws from a
// per-rank generator instead). The values are bitwise the same on the CPU and the GPU
// (core/portable_normal.h). T must be a multiple of seq_len; positions and E below 2^32. CPU: f32 or f64 (the
// f32 values, widened).
void moe_random_logits(const MoeRandomLogitsKey& key, Tensor& logits, const Stream& s);
// Throws primus::Error naming the field unless key fits logits [rows, num_experts] (seq_len >= 1 dividing
// rows, first_sample and pos_offset >= 0, positions and num_experts below 2^32).
void validate_moe_random_logits(const MoeRandomLogitsKey& key, int64_t rows, int64_t num_experts);

// Round-robin dispatch: ids [T, k] (i32) = (n(t) * k + j) % E, where n(t) numbers the tokens of num_seqs
// equal batch-major sequences (t = b * S + i) in sequence-major order, n = i * num_seqs + b, as Megatron's
// [S, B] activations (Primus's _force_even_routing and TorchTitan's _debug_force_load_balance_routing use
// arange over their own token order; pass num_seqs = 1 for TorchTitan's batch-major [B, S]). The k experts
// of a token are distinct since k <= E, and every expert gets floor or ceil of T * k / E entries (exactly
// T * k / E when E divides it).
void moe_round_robin_ids(int64_t num_experts, int64_t num_seqs, Tensor& ids, const Stream& s);
// Throws primus::Error unless 1 <= topk <= num_experts and num_seqs >= 1 divides rows.
void validate_moe_round_robin(int64_t num_experts, int64_t num_seqs, int64_t rows, int64_t topk);

// Primus's "even" carries each token's real top-k probabilities, largest first, onto its round-robin slots:
// sorted_ids / sorted_probs [T, k] = each row's (id, prob) pairs of ids / probs ordered by descending prob
// (stable: equal probabilities keep their order; torch.topk leaves that order unspecified). Slot j of the
// round-robin dispatch then carries sorted_probs[t][j], and the router backward takes sorted_ids with the
// dispatch's dprobs (its per-row result does not depend on the order of the pairs). The outputs may be the
// inputs (in place). probs f32 / f64 (CPU), f32 (CUDA).
void moe_sort_by_prob(const Tensor& ids, const Tensor& probs, Tensor& sorted_ids, Tensor& sorted_probs,
                      const Stream& s);

// The router's probabilities of given experts: probs [T, k] = what moe_router_forward would weigh ids [T, k]
// with had it chosen them (the score function, normalisation and scaling of cfg; no bias, no selection).
// TorchTitan's forced balancing gathers the router's scores at the round-robin experts this way; its gradient
// is moe_router_backward with the same ids. ids must be in [0, E) and distinct per row.
void moe_router_probs(const Tensor& logits, const Tensor& ids, const MoeRouterConfig& cfg, Tensor& probs,
                      const Stream& s);

}  // namespace primus::ops
