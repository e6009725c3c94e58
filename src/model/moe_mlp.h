#pragma once
// The MoE MLP of one decoder layer (docs/moe.md), with explicit forward and backward:
//   logits = h Wr^T (f32)   ids, probs = router(logits, expert bias)   [capacity: drop entries]
//   x_perm = permute(h)     y_perm = grouped(swiglu(grouped(x_perm, W_gu)), W_down)
//   y = unpermute(y_perm, probs) [+ [sigmoid(h w_g^T) *] shared expert swiglu(h Ws_gu^T) Ws_down^T]
// The optional gate on the shared expert is Qwen2-MoE's (moe_shared_expert_gate): one f32 logit per token.
// The load-balancing (aux / seq-aux) and z losses are computed on the logits in forward (their values, for
// the log) and their gradients are added to dlogits in backward, scaled by StepContext::aux_grad_scale.
//
// Experts are stacked: W_gu [E, 2F, d], W_down [E, d, F], so an expert-parallel layout later owns a
// contiguous slice of experts and the all-to-all sends each expert's block of permuted rows (the permute
// plan's layout) without changing this code's shape.
//
// The per-expert row counts go to the host once per forward (the grouped GEMMs take host counts; see
// ops/grouped_gemm.h); backward reuses them.
//
// Forced load balancing (MoeConfig::force_balance; docs/moe.md): "uniform" overwrites the logits with random
// ones before routing and treats them as the logits in backward (Megatron's straight-through RandomSTE: the
// router weight and the input still get a gradient, through the random logits); "even" routes for real, then
// dispatches token t's slot j to expert (t k + j) % E (Megatron's token order) carrying the j-th largest real
// weight, and backward takes the real experts' probabilities; "round_robin" (TorchTitan) dispatches
// round-robin and weighs each slot with the router's probability of its expert.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "model/model_spec.h"
#include "model/param_store.h"
#include "model/step_context.h"
#include "ops/moe_permute.h"
#include "ops/moe_router.h"
#include "parallel/expert_dispatch.h"

namespace primus {

// What an MoE MLP forward saved for backward.
struct MoeActivations {
  Tensor logits;  // [n, E], f32 (f64 in whole-model gradient checks)
  // [n, k]: the experts whose router probabilities weigh the slots, and those weights, before capacity
  // dropping (the router backward takes them). Slot j of token t is dispatched to ids[t][j], except under
  // forced "even" balancing: to its round-robin expert (ids are then the real top-k, largest weight first).
  Tensor ids, probs;
  Tensor kept_probs;         // [n, k]: probs with dropped entries 0 (= probs when dropless)
  ops::MoePermutePlan plan;  // built from the kept dispatched ids
  // host: rows of each expert's block that this rank's grouped GEMMs process: every expert's on one rank, the
  // local experts' (received from every peer) under expert parallelism
  std::vector<int64_t> rows;
  parallel::ExpertDispatch dispatch;  // expert parallelism: the exchange of this forward
  Tensor x_perm;                      // [R, d]: the experts' input rows (R = sum of rows)
  Tensor gu_perm;                     // [R, 2F]
  Tensor act_perm;                    // [R, F] (dropped under selective recompute)
  Tensor y_perm;                      // [plan.num_rows, d]: the experts' outputs back in the plan's order
  Tensor sh_gu, sh_act;               // shared expert [n, 2Fs], [n, Fs]
  // the shared expert's output [n, d] (before the gate when gated; under expert parallelism until it is
  // added) and the gate's logits [n, 1]
  Tensor sh_out, gate_logit;
  // [sequences, E] i32: the aux loss's routing counts (summed over the cp ranks under context parallelism;
  // backward takes them as they were)
  Tensor aux_counts;
  bool selective_dropped = false;
};

// Routing statistics summed since the last take (MoeMlp::take_stats).
struct MoeLayerStats {
  int layer = 0;
  double aux_loss = 0, z_loss = 0;  // summed over forwards
  int64_t forwards = 0;
  int64_t routed = 0;    // routing entries (tokens x k)
  int64_t dropped = 0;   // entries dropped by the capacity
  int64_t max_load = 0;  // the largest per-forward load of one expert
  double mean_load = 0;  // routed / (forwards x experts)
};

class MoeMlp {
 public:
  MoeMlp(const ModelSpec& spec, ParamStore& params, int layer_index);
  // Parameters named `prefix` + "router.weight", ... (e.g. "mtp.0.layer.mlp."); stats_layer labels the
  // statistics.
  MoeMlp(const ModelSpec& spec, ParamStore& params, const std::string& prefix, int stats_layer);

  // y [n, d] (overwritten) from the normed input h [n, d]. record_stats: a training forward whose losses and
  // loads are logged and feed the expert-bias update (not a recompute or an evaluation).
  void forward(const StepContext& ctx, const Tensor& h, Tensor& y, MoeActivations& a, bool record_stats);
  // Recomputes what selective recompute dropped.
  void recompute_selective(const StepContext& ctx, MoeActivations& a);
  // dh [n, d] (overwritten) from dy [n, d]; accumulates the parameter gradients. Frees the activations.
  void backward(const StepContext& ctx, const Tensor& dy, const Tensor& h, MoeActivations& a, Tensor& dh);

  // End of a training step (after the last micro-batch, on the compute stream): the aux-loss-free expert
  // bias moves by bias_update_rate towards balance, from the loads of this step's forwards.
  void end_step(const Stream& s);
  // The routing statistics since the last call (synchronises the stream), then resets them.
  MoeLayerStats take_stats(const Stream& s);
  // Sum of the aux and z losses of the latest forward (synchronises; for tests).
  double last_losses(const Stream& s) const;

  std::vector<int> gemm_weight_entries() const;

  // FP8 (model/fp8_experts.h, fp8_linear.h): the scaling slot of one of this layer's projections, named as
  // fp8_projections() names them ("mlp.experts.gate_up_proj", "mlp.shared_expert.down_proj", ...), for the
  // decoder layer to register; nullptr for a name this layer does not have. Unregistered slots run BF16.
  int* fp8_slot(std::string_view projection);

  // Expert parallelism (spec.ep.size > 1): `ep` is the group over which tokens travel to the ranks owning
  // their experts (parallel/expert_dispatch.h; under tensor parallelism the ranks of this tp coordinate,
  // whose experts hold the same columns); `loads` the group whose routing the expert bias follows
  // (every rank of a step's global batch: dp x cp), its per-expert loads summed there before the update. Not
  // owned; nullptr = one rank.
  void set_groups(comm::Communicator* ep, comm::Communicator* loads);

 private:
  void expert_mlp_forward(const StepContext& ctx, MoeActivations& a);
  // Which sequence each router row belongs to for the aux loss (context parallelism: chunks of sequences),
  // and the tokens the z-loss's mean is over (0: these rows).
  ops::MoeAuxSeqs aux_seqs(const StepContext& ctx) const;
  int64_t z_loss_tokens(const StepContext& ctx) const;
  // The shared expert. forward: y += its output when y is given; else (expert parallelism, computed while the
  // tokens travel) its output stays in a.sh_out until add_shared. backward: its input gradient into dh
  // (accumulate = false: overwrites), its weight gradients.
  void shared_forward(const StepContext& ctx, const Tensor& h, MoeActivations& a, Tensor* y);
  void add_shared(const StepContext& ctx, MoeActivations& a, Tensor& y);
  void shared_backward(const StepContext& ctx, const Tensor& dy, const Tensor& h, MoeActivations& a,
                       Tensor& dh, bool accumulate);
  // Expert parallelism: the stream the token exchange runs on beside the compute stream (made on first use).
  Stream side_stream(const Stream& s);

  const ModelSpec& spec_;
  ParamStore& params_;
  int layer_;
  int router_, bias_ = -1, w_gu_, w_down_, sh_gu_ = -1, sh_down_ = -1, sh_gate_ = -1;
  int fp8_gu_ = -1, fp8_down_ = -1, fp8_sh_gu_ = -1, fp8_sh_down_ = -1;
  ops::MoeRouterConfig router_cfg_;
  enum class ForceBalance { kNone, kEven, kUniform, kRoundRobin } force_ = ForceBalance::kNone;
  uint64_t name_hash_ = 0;  // of the parameter prefix: keys this layer's random logits
  // Device accumulators (lazily allocated on the first forward's stream).
  Tensor last_losses_;   // [2] stat dtype: aux, z of the latest forward
  Tensor sum_losses_;    // [2] summed over recorded forwards since take_stats
  Tensor step_load_;     // [E] i32: loads of this step's recorded forwards (expert bias)
  MoeLayerStats stats_;  // host part (loads, drops) since take_stats
  Stream side_;
  bool side_made_ = false;
  comm::Communicator* ep_ = nullptr;
  comm::Communicator* loads_ = nullptr;
};

}  // namespace primus
