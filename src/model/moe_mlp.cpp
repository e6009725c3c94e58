#include "model/moe_mlp.h"

#include <algorithm>
#include <numeric>

#include "core/env.h"
#include "core/philox.h"
#include "core/stream_events.h"
#include "model/fp8_experts.h"
#include "model/fp8_linear.h"
#include "model/weight_grad.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/grouped_gemm.h"
#include "ops/sigmoid_gate.h"
#include "ops/softcap.h"
#include "parallel/context_parallel.h"
#include "parallel/tensor_parallel.h"

namespace primus {

namespace {
ops::MoeRouterConfig router_config(const MoeConfig& m) {
  ops::MoeRouterConfig c;
  c.topk = m.topk;
  c.score = m.score_function == "sigmoid" ? ops::MoeScoreFunction::kSigmoid : ops::MoeScoreFunction::kSoftmax;
  c.pre_softmax = m.pre_softmax;
  c.normalize = m.normalize_topk;
  c.num_groups = m.num_groups;
  c.group_topk = m.group_topk;
  c.scaling_factor = static_cast<float>(m.topk_scaling_factor);
  return c;
}

}  // namespace

MoeMlp::MoeMlp(const ModelSpec& spec, ParamStore& params, int layer_index)
    : MoeMlp(spec, params, "layers." + std::to_string(layer_index) + ".mlp.", layer_index) {}

MoeMlp::MoeMlp(const ModelSpec& spec, ParamStore& params, const std::string& p, int layer_index)
    : spec_(spec), params_(params), layer_(layer_index), router_cfg_(router_config(spec.moe)) {
  auto need = [&](const std::string& n) {
    int i = params.find(p + n);
    PRIMUS_CHECK(i >= 0, "parameter {}{} missing", p, n);
    return i;
  };
  router_ = need("router.weight");
  w_gu_ = need("experts.gate_up_proj.weight");
  w_down_ = need("experts.down_proj.weight");
  if (spec.moe.expert_bias) bias_ = need("router.expert_bias");
  if (spec.moe.shared_ffn_hidden_size > 0) {
    sh_gu_ = need("shared_expert.gate_up_proj.weight");
    sh_down_ = need("shared_expert.down_proj.weight");
    if (spec.moe.shared_expert_gate) sh_gate_ = need("shared_expert_gate.weight");
  }
  PRIMUS_CHECK(!spec.moe.shared_expert_gate || sh_gu_ >= 0,
               "moe_shared_expert_gate needs a shared expert (moe_shared_expert_intermediate_size)");
  ops::validate_moe_router_config(router_cfg_, spec.moe.num_experts);
  const std::string& fb = spec.moe.force_balance;
  if (fb == "even") {
    force_ = ForceBalance::kEven;
  } else if (fb == "uniform") {
    force_ = ForceBalance::kUniform;
  } else if (fb == "round_robin") {
    force_ = ForceBalance::kRoundRobin;
  } else {
    PRIMUS_CHECK(fb == "none", "MoE force_balance must be none, even, uniform or round_robin, got '{}'", fb);
  }
  name_hash_ = name_hash64(p);
  stats_.layer = layer_index;
  // The stored experts are this rank's share: the layout split them (model_spec.h, ExpertShard).
  const Shape& gu = params.entry(w_gu_).shape;
  PRIMUS_CHECK(gu[0] == spec.local_experts(), "'{}' holds {} experts, the expert split {} of {} wants {}",
               params.entry(w_gu_).name, gu[0], spec.ep.rank, spec.ep.size, spec.local_experts());
}

int* MoeMlp::fp8_slot(std::string_view projection) {
  if (projection == "mlp.experts.gate_up_proj") return &fp8_gu_;
  if (projection == "mlp.experts.down_proj") return &fp8_down_;
  if (projection == "mlp.shared_expert.gate_up_proj") return sh_gu_ >= 0 ? &fp8_sh_gu_ : nullptr;
  if (projection == "mlp.shared_expert.down_proj") return sh_down_ >= 0 ? &fp8_sh_down_ : nullptr;
  return nullptr;
}

void MoeMlp::set_groups(comm::Communicator* ep, comm::Communicator* loads) {
  PRIMUS_CHECK((ep ? ep->size() : 1) == spec_.ep.size,
               "MoE layer {}: an expert-parallel group of {} ranks for experts split over {}", layer_,
               ep ? ep->size() : 1, spec_.ep.size);
  ep_ = ep && ep->size() > 1 ? ep : nullptr;
  loads_ = loads && loads->size() > 1 ? loads : nullptr;
}

std::vector<int> MoeMlp::gemm_weight_entries() const {
  std::vector<int> out = {router_, w_gu_, w_down_};
  if (sh_gu_ >= 0) out.insert(out.end(), {sh_gu_, sh_down_});
  if (sh_gate_ >= 0) out.push_back(sh_gate_);
  return out;
}

void MoeMlp::expert_mlp_forward(const StepContext& ctx, MoeActivations& a) {
  const Stream& s = ctx.stream;
  const int64_t rows = a.x_perm.size(0), F = spec_.moe.ffn_hidden_size;
  a.gu_perm = ctx.act({rows, 2 * F});
  expert_project(ctx, fp8_gu_, a.x_perm, params_.param(w_gu_), a.rows, a.gu_perm);
  a.act_perm = ctx.act({rows, F});
  ops::swiglu_forward(a.gu_perm, a.act_perm, s);
}

ops::MoeAuxSeqs MoeMlp::aux_seqs(const StepContext& ctx) const {
  const bool per_seq = spec_.moe.load_balancing == "seq_aux_loss";
  ops::MoeAuxSeqs q;
  if (!ctx.cp) {
    q.num_seqs = per_seq ? ctx.batch : 1;  // the rest follows from the rows
    return q;
  }
  // This rank's rows: chunk h of sequence b at row h B + b, C = ctx.seq tokens each, of sequences of C 2 CP.
  const int64_t B = ctx.batch / 2, S = ctx.seq * 2 * ctx.cp->size();
  q.num_seqs = per_seq ? B : 1;
  q.chunk = ctx.seq;
  q.seq_tokens = per_seq ? S : B * S;
  return q;
}

int64_t MoeMlp::z_loss_tokens(const StepContext& ctx) const {
  return ctx.cp ? ctx.tokens() * ctx.cp->size() : 0;
}

void MoeMlp::forward(const StepContext& ctx, const Tensor& h, Tensor& y, MoeActivations& a,
                     bool record_stats) {
  const MoeConfig& moe = spec_.moe;
  const int64_t n = ctx.tokens(), d = spec_.hidden, E = moe.num_experts, k = moe.topk;
  const Stream& s = ctx.stream;
  const DType st = ctx.stat_dtype();

  // Router: f32 logits from the (bf16 on the GPU) input and weights; selection and probabilities in f32.
  a.logits = ctx.empty({n, E}, st);
  ops::gemm(h, false, params_.param(router_), true, a.logits, 1.0f, 0.0f, s);
  // Grok-2's router soft-cap, in place: from here on a.logits are the capped ones, which the backward's
  // cap derivative reads (ops/softcap.h).
  if (moe.router_softcap > 0)
    ops::softcap_forward(a.logits, static_cast<float>(moe.router_softcap), a.logits, s);
  if (force_ == ForceBalance::kUniform) {
    // Megatron's apply_random_logits: everything downstream (selection, weights, balancing losses, the bias
    // loads) sees the random logits, and backward treats them as the GEMM's output (straight-through).
    ops::MoeRandomLogitsKey key;
    key.stream = mix64(mix64(ctx.origin.seed ^ name_hash_) + (ctx.origin.eval ? 1 : 0));
    key.first_sample = ctx.origin.first_sample;
    key.seq_len = ctx.seq;
    key.pos_offset = ctx.pos_offset;
    ops::moe_random_logits(key, a.logits, s);
  }
  a.ids = ctx.empty({n, k}, DType::kI32);
  a.probs = ctx.empty({n, k}, st);
  Tensor dispatch_ids = a.ids;
  if (force_ == ForceBalance::kRoundRobin) {
    // TorchTitan: the round-robin experts, weighed with the router's probabilities of them (no selection).
    ops::moe_round_robin_ids(E, /*num_seqs=*/1, a.ids, s);  // TorchTitan's tokens are batch-major
    ops::moe_router_probs(a.logits, a.ids, router_cfg_, a.probs, s);
  } else {
    // The expert bias is read from the f32 master: its updates (1e-3) would vanish in a bf16 copy. With
    // masters in remainders that is a join of E floats; with sharded masters (ZeRO-1 / FSDP) the store's
    // whole copy of this replicated entry (ParamEntry::replicated).
    Tensor bias;
    if (bias_ >= 0 && params_.frozen()) {
      // A frozen base (LoRA) keeps weights only, in the compute dtype; the bias stays as loaded.
      bias = params_.param(bias_);
      if (bias.dtype() != st) {
        Tensor f = ctx.empty({E}, st);
        ops::cast(bias, f, s);
        bias = f;
      }
    } else if (bias_ >= 0) {
      bias = params_.master_dtype() == DType::kF32 ? params_.master_f32(bias_, s) : params_.master(bias_);
    }
    ops::moe_router_forward(a.logits, bias_ >= 0 ? &bias : nullptr, router_cfg_, a.ids, a.probs, s);
  }
  if (force_ == ForceBalance::kEven) {
    // Primus: slot j goes round-robin, carrying the j-th largest real weight; ids stay the real experts
    // (reordered alike) for the router backward and the bias loads.
    dispatch_ids = ctx.empty({n, k}, DType::kI32);
    ops::moe_round_robin_ids(E, /*num_seqs=*/ctx.batch, dispatch_ids, s);  // Megatron's [S, B] order
    ops::moe_sort_by_prob(a.ids, a.probs, a.ids, a.probs, s);
  }

  Tensor kept_ids = dispatch_ids;
  a.kept_probs = a.probs;
  int64_t capacity = 0;
  if (moe.capacity_factor > 0) {
    capacity = ops::moe_expert_capacity(n, k, E, moe.capacity_factor);
    kept_ids = ctx.empty({n, k}, DType::kI32);
    a.kept_probs = ctx.empty({n, k}, st);
    ops::moe_capacity_drop(
        dispatch_ids, a.probs, E, capacity,
        moe.drop_policy == "position" ? ops::MoeDropPolicy::kPosition : ops::MoeDropPolicy::kProbs, kept_ids,
        a.kept_probs, s);
  }
  a.plan = ops::moe_permute_plan(kept_ids, E, moe.pad_to_capacity ? capacity : 0, s);
  // The one synchronisation of the layer: the grouped GEMMs take each expert's rows on the host.
  const std::vector<int32_t> offsets = a.plan.offsets.to_vector<int32_t>();
  a.rows.assign(static_cast<size_t>(E), 0);
  for (int64_t e = 0; e < E; ++e) a.rows[e] = offsets[e + 1] - offsets[e];

  a.x_perm = ctx.act({a.plan.num_rows, d});
  ops::moe_permute(h, a.plan, a.x_perm, s);
  if (ep_) {
    // Each expert's block to its owner; this rank's experts get their rows from every peer. The exchange runs
    // on a side stream while the shared expert computes (added to the output after the unpermute). EP x TP:
    // the tp ranks hold the same rows and send them alike, each to the peers of its own tp coordinate (the
    // ep group), whose experts hold its columns: what comes back is its columns' partial output, summed
    // over tp after the unpermute like the unsplit experts'.
    a.dispatch = parallel::expert_dispatch_plan(a.rows, *ep_, s);
    Tensor x_local = ctx.act({a.dispatch.recv_total, d});
    const Tensor x_src = a.x_perm;  // read by the exchange: alive until the compute stream waited for it
    const Stream side = side_stream(s);
    stream_wait(side, StreamEvent::record(s));
    parallel::expert_dispatch(a.dispatch, x_src, x_local, *ep_, side, "moe dispatch");
    const auto arrived = StreamEvent::record(side);
    if (sh_gu_ >= 0) shared_forward(ctx, h, a, nullptr);
    stream_wait(s, arrived);
    a.x_perm = x_local;
    a.rows = a.dispatch.local_rows;
  }
  expert_mlp_forward(ctx, a);
  Tensor y_exp = ctx.act({a.x_perm.size(0), d});
  expert_project(ctx, fp8_down_, a.act_perm, params_.param(w_down_), a.rows, y_exp);
  if (ep_) {
    // Rows past the sent ones (dropped entries' slack) are never read by the unpermute.
    a.y_perm = ctx.act({a.plan.num_rows, d});
    parallel::expert_combine(a.dispatch, y_exp, a.y_perm, *ep_, s, "moe combine");
  } else {
    a.y_perm = y_exp;
  }
  ops::moe_unpermute(a.y_perm, a.plan, a.kept_probs, y, s);

  if (sh_gu_ >= 0) {
    if (ep_) {
      add_shared(ctx, a, y);  // computed while the tokens travelled
    } else {
      shared_forward(ctx, h, a, &y);
    }
  }

  // Loss values (their gradients are added in backward).
  if (!last_losses_.defined()) {
    last_losses_ = Tensor::empty({2}, st, s);
    sum_losses_ = Tensor::empty({2}, st, s);
    sum_losses_.zero_(s);
  }
  last_losses_.zero_(s);
  Tensor aux = last_losses_.slice(0, 1), z = last_losses_.slice(1, 2);
  const bool use_aux = moe.load_balancing != "none" && moe.aux_loss_coeff > 0;
  if (use_aux) {
    // Context parallelism: every sequence's tokens are spread over the cp ranks, so the counts of its routing
    // are summed there; each rank's loss is then its tokens' share of the whole sequences' loss (Megatron
    // sums tokens_per_expert over tp x cp alike).
    const ops::MoeAuxSeqs seqs = aux_seqs(ctx);
    a.aux_counts = ctx.empty({seqs.num_seqs, E}, DType::kI32);
    ops::moe_aux_counts(a.logits, k, seqs, a.aux_counts, s);
    if (ctx.cp) ctx.cp->group().all_reduce(a.aux_counts, comm::ReduceOp::kSum, s, "moe aux-loss counts (cp)");
    ops::moe_aux_loss_from_counts(a.logits, a.aux_counts, k, router_cfg_.score, seqs,
                                  static_cast<float>(moe.aux_loss_coeff), 0.0f, aux, nullptr, s);
  }
  if (moe.z_loss_coeff > 0)
    ops::moe_z_loss(a.logits, static_cast<float>(moe.z_loss_coeff), z_loss_tokens(ctx), 0.0f, z, nullptr, s);

  if (!record_stats) return;
  ops::add(sum_losses_, last_losses_, sum_losses_, s);
  // A frozen base (LoRA) keeps its bias as loaded: the bias is part of the base, which the exported adapter
  // does not carry, so its loads are not counted at all.
  if (bias_ >= 0 && !params_.frozen()) {
    if (!step_load_.defined()) {
      step_load_ = Tensor::empty({E}, DType::kI32, s);
      step_load_.zero_(s);
    }
    // The router's choices, as the bias selects them: under forced "even" balancing the real routing
    // (Primus counts the routing map before its override), under "round_robin" the dispatch (TorchTitan).
    ops::moe_expert_load(a.ids, E, step_load_, /*accumulate=*/true, s);
  }
  // Context parallelism: each rank routed a share of the micro-batch; the largest load logged is the whole
  // micro-batch's, as one process sees it (the routed and kept entries add up over the ranks as they are).
  std::vector<int32_t> counts = a.plan.counts.to_vector<int32_t>();
  const int64_t kept = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  if (ctx.cp) {
    Tensor whole = ctx.empty({E}, DType::kI32);
    whole.copy_from(a.plan.counts, s);
    ctx.cp->group().all_reduce(whole, comm::ReduceOp::kSum, s, "moe expert loads (cp)");
    counts = whole.to_vector<int32_t>();
  }
  for (int32_t c : counts) stats_.max_load = std::max<int64_t>(stats_.max_load, c);
  stats_.routed += n * k;
  stats_.dropped += n * k - kept;
  ++stats_.forwards;
}

Stream MoeMlp::side_stream(const Stream& s) {
  // PRIMUS_EP_OVERLAP=0 (an A/B switch, docs/performance.md): the exchange on the compute stream, after which
  // the shared expert runs; the same kernels in another order.
  static const bool overlap = env_int("PRIMUS_EP_OVERLAP", 1, 0, 1) == 1;
  if (!overlap) return s;
  if (!side_made_) {
    side_ = make_comm_stream(s);
    side_made_ = true;
  }
  return side_;
}

void MoeMlp::shared_forward(const StepContext& ctx, const Tensor& h, MoeActivations& a, Tensor* y) {
  const int64_t n = ctx.tokens(), d = spec_.hidden, Fs = spec_.moe.shared_ffn_hidden_size;
  const Stream& s = ctx.stream;
  a.sh_gu = ctx.act({n, 2 * Fs});
  project(ctx, fp8_sh_gu_, h, params_.param(sh_gu_), nullptr, a.sh_gu);
  a.sh_act = ctx.act({n, Fs});
  ops::swiglu_forward(a.sh_gu, a.sh_act, s);
  if (sh_gate_ < 0 && y) {
    project(ctx, fp8_sh_down_, a.sh_act, params_.param(sh_down_), nullptr, *y, y);  // y += shared expert
    return;
  }
  // The shared output kept apart: for the gate (sigmoid(h w_g^T) * shared, with the f32 logits, both kept for
  // backward), or until add_shared (expert parallelism computes it before the routed output exists).
  a.sh_out = ctx.act({n, d});
  project(ctx, fp8_sh_down_, a.sh_act, params_.param(sh_down_), nullptr, a.sh_out);
  if (sh_gate_ >= 0) {
    a.gate_logit = ctx.empty({n, 1}, ctx.stat_dtype());
    ops::gemm(h, false, params_.param(sh_gate_), true, a.gate_logit, 1.0f, 0.0f, s);
  }
  if (y) add_shared(ctx, a, *y);
}

void MoeMlp::add_shared(const StepContext& ctx, MoeActivations& a, Tensor& y) {
  const Stream& s = ctx.stream;
  if (sh_gate_ >= 0) {
    ops::sigmoid_gate_forward(a.gate_logit.view({ctx.tokens()}), a.sh_out, y, s);
  } else {
    ops::add(y, a.sh_out, y, s);
    a.sh_out = Tensor();  // backward of the ungated expert needs only its input and activation
  }
}

void MoeMlp::shared_backward(const StepContext& ctx, const Tensor& dy, const Tensor& h, MoeActivations& a,
                             Tensor& dh, bool accumulate) {
  const int64_t n = ctx.tokens(), d = spec_.hidden, Fs = spec_.moe.shared_ffn_hidden_size;
  const Stream& s = ctx.stream;
  const DType st = ctx.stat_dtype();
  // Gated: d shared_out = sigmoid(g) dy, d g = sigmoid'(g) sum_d dy * shared_out, then the gate's GEMMs
  // (dh += dg w_g, dw_g += dg^T h).
  Tensor d_sh_out = dy;
  if (sh_gate_ >= 0) {
    d_sh_out = ctx.act({n, d});
    Tensor dgate = ctx.empty({n, 1}, st);
    Tensor dgate_flat = dgate.view({n});
    ops::sigmoid_gate_backward(a.gate_logit.view({n}), a.sh_out, dy, d_sh_out, dgate_flat, s);
    a.sh_out = Tensor();
    // Tensor parallelism: shared_out is this rank's columns' share, so is the gate's gradient until summed;
    // its input gradient is then whole on every rank, and one rank adds it (as the router's).
    if (ctx.tp) ctx.tp->group().all_reduce(dgate, comm::ReduceOp::kSum, s, "moe shared gate gradient (tp)");
    Tensor dg = dgate;
    if (ctx.act_dtype != st) {
      dg = ctx.act({n, 1});
      ops::cast(dgate, dg, s);
    }
    if (!ctx.tp || ctx.tp->rank() == 0) {
      ops::linear_backward_input(dg, params_.param(sh_gate_), dh, accumulate, s);
      accumulate = true;
    }
    weight_grad(ctx, dg, h, params_.grad(sh_gate_), Tensor(), params_.grad_accumulate(sh_gate_));
  }
  Tensor d_sh_act = ctx.act({n, Fs});
  // d_sh_out may be dy, the decoder's residual-stream gradient buffer (a queued GEMM copies it).
  project_backward(ctx, fp8_sh_down_, d_sh_out, a.sh_act, params_.param(sh_down_), d_sh_act, false,
                   params_.grad(sh_down_), Tensor(), params_.grad_accumulate(sh_down_), dy);
  Tensor d_sh_gu = ctx.act({n, 2 * Fs});
  ops::swiglu_backward(d_sh_act, a.sh_gu, d_sh_gu, s);
  project_backward(ctx, fp8_sh_gu_, d_sh_gu, h, params_.param(sh_gu_), dh, accumulate, params_.grad(sh_gu_),
                   Tensor(), params_.grad_accumulate(sh_gu_));
}

void MoeMlp::recompute_selective(const StepContext& ctx, MoeActivations& a) {
  if (!a.selective_dropped) return;
  a.act_perm = ctx.act({a.gu_perm.size(0), spec_.moe.ffn_hidden_size});
  ops::swiglu_forward(a.gu_perm, a.act_perm, ctx.stream);
  if (sh_gu_ >= 0) {
    a.sh_act = ctx.act({ctx.tokens(), spec_.moe.shared_ffn_hidden_size});
    ops::swiglu_forward(a.sh_gu, a.sh_act, ctx.stream);
  }
  a.selective_dropped = false;
}

void MoeMlp::backward(const StepContext& ctx, const Tensor& dy, const Tensor& h, MoeActivations& a,
                      Tensor& dh) {
  recompute_selective(ctx, a);
  const MoeConfig& moe = spec_.moe;
  const int64_t n = ctx.tokens(), d = spec_.hidden, E = moe.num_experts, k = moe.topk;
  const int64_t rows = a.x_perm.size(0), F = moe.ffn_hidden_size;
  const Stream& s = ctx.stream;
  const DType st = ctx.stat_dtype();

  // Routed experts, last op first.
  Tensor dy_perm = ctx.act({a.plan.num_rows, d});
  Tensor dprobs = ctx.empty({n, k}, st);
  ops::moe_unpermute_backward(dy, a.y_perm, a.plan, a.kept_probs, dy_perm, dprobs, s);
  a.y_perm = Tensor();
  // Tensor parallelism: the experts' outputs here are this rank's columns' share, so the probabilities'
  // gradient (dy . y per slot) is too; summed, it is the same on every rank, and so is the router's backward.
  if (ctx.tp) ctx.tp->group().all_reduce(dprobs, comm::ReduceOp::kSum, s, "moe probability gradient (tp)");
  Tensor dh_shared;  // expert parallelism: the shared expert's input gradient, computed during the exchange
  if (ep_) {  // the output gradient travels as the rows did, on the side stream beside the shared expert
    Tensor dy_local = ctx.act({rows, d});
    const Stream side = side_stream(s);
    stream_wait(side, StreamEvent::record(s));
    parallel::expert_dispatch(a.dispatch, dy_perm, dy_local, *ep_, side, "moe dispatch (backward)");
    const auto arrived = StreamEvent::record(side);
    if (sh_gu_ >= 0) {
      dh_shared = ctx.act({n, d});
      shared_backward(ctx, dy, h, a, dh_shared, /*accumulate=*/false);
    }
    stream_wait(s, arrived);  // dy_perm (read by the exchange) is released after this
    dy_perm = dy_local;
  }
  // The experts' weight gradients, at once or queued for a zero-bubble weight-gradient pass
  // (model/weight_grad.h).
  auto expert_wgrad = [&](const Tensor& d_out, const Tensor& x, Tensor g, bool accumulate) {
    if (!g.defined()) return;  // frozen experts (LoRA's base model)
    if (!ctx.deferred_wgrad) {
      ops::grouped_gemm_backward_weight(d_out, x, a.rows, g, s, accumulate);
      return;
    }
    ctx.deferred_wgrad->push_back([d_out, x, counts = a.rows, g, s, accumulate]() mutable {
      ops::grouped_gemm_backward_weight(d_out, x, counts, g, s, accumulate);
    });
  };
  Tensor d_act = ctx.act({rows, F});
  expert_project_backward_input(ctx, fp8_down_, dy_perm, params_.param(w_down_), a.rows, d_act);
  expert_wgrad(dy_perm, a.act_perm, params_.grad(w_down_), params_.grad_accumulate(w_down_));
  dy_perm = Tensor();
  a.act_perm = Tensor();
  Tensor d_gu = ctx.act({rows, 2 * F});
  ops::swiglu_backward(d_act, a.gu_perm, d_gu, s);
  d_act = Tensor();
  a.gu_perm = Tensor();
  Tensor dx_perm = ctx.act({rows, d});
  expert_project_backward_input(ctx, fp8_gu_, d_gu, params_.param(w_gu_), a.rows, dx_perm);
  expert_wgrad(d_gu, a.x_perm, params_.grad(w_gu_), params_.grad_accumulate(w_gu_));
  d_gu = Tensor();
  a.x_perm = Tensor();
  if (ep_) {  // the input gradient goes back to the ranks the rows came from
    Tensor dx_src = ctx.act({a.plan.num_rows, d});
    parallel::expert_combine(a.dispatch, dx_perm, dx_src, *ep_, s, "moe combine (backward)");
    dx_perm = dx_src;
  }
  ops::moe_permute_backward(dx_perm, a.plan, dh, s);  // overwrites dh
  dx_perm = Tensor();

  // Router: the probabilities' gradient, plus the balancing losses' (scaled like the main loss's
  // micro-batch average), back through the router GEMM.
  Tensor dlogits = ctx.empty({n, E}, st);
  ops::moe_router_backward(a.logits, a.ids, dprobs, router_cfg_, dlogits, s);
  Tensor scratch = ctx.empty({1}, st);
  if (a.aux_counts.defined())
    ops::moe_aux_loss_from_counts(a.logits, a.aux_counts, k, router_cfg_.score, aux_seqs(ctx),
                                  static_cast<float>(moe.aux_loss_coeff), ctx.aux_grad_scale, scratch,
                                  &dlogits, s);
  if (moe.z_loss_coeff > 0)
    ops::moe_z_loss(a.logits, static_cast<float>(moe.z_loss_coeff), z_loss_tokens(ctx), ctx.aux_grad_scale,
                    scratch, &dlogits, s);
  // Back through the soft-cap (random logits replace the capped ones and pass the gradient straight through).
  if (moe.router_softcap > 0 && force_ != ForceBalance::kUniform)
    ops::softcap_backward(a.logits, dlogits, static_cast<float>(moe.router_softcap), dlogits, s);
  Tensor dl = dlogits;
  if (ctx.act_dtype != st) {
    dl = ctx.act({n, E});
    ops::cast(dlogits, dl, s);
  }
  // Tensor parallelism: every rank computed the router's whole input gradient, and the caller sums dh over
  // the tp ranks (the experts' parts are partial): one rank adds it. Its weight gradient is whole everywhere.
  if (!ctx.tp || ctx.tp->rank() == 0)
    ops::linear_backward_input(dl, params_.param(router_), dh, /*accumulate=*/true, s);
  weight_grad(ctx, dl, h, params_.grad(router_), Tensor(), params_.grad_accumulate(router_));

  if (dh_shared.defined()) {
    ops::add(dh, dh_shared, dh, s);
  } else if (sh_gu_ >= 0) {
    shared_backward(ctx, dy, h, a, dh, /*accumulate=*/true);
  }
  a = MoeActivations{};
}

void MoeMlp::end_step(const Stream& s) {
  if (bias_ < 0 || !step_load_.defined()) return;     // no bias, or a frozen base (no loads counted)
  if (params_.master_dtype() != DType::kF32) return;  // f64 gradient-check models take no update steps
  // The master's view, a joined copy in remainders, or the whole copy beside sharded masters; set_master
  // writes it back with its compute copy (and, sharded, into this rank's master chunk).
  Tensor master = params_.master_f32(bias_, s);
  // The loads of the whole global batch (Megatron sums tokens_per_expert over tp x cp x dp): every rank then
  // moves its copy of the bias the same way, so it stays replicated whatever shards the optimizer state.
  if (loads_) loads_->all_reduce(step_load_, comm::ReduceOp::kSum, s, "moe expert loads");
  ops::moe_expert_bias_update(step_load_, static_cast<float>(spec_.moe.bias_update_rate), master, s);
  params_.set_master(bias_, master, s);
  step_load_.zero_(s);
}

MoeLayerStats MoeMlp::take_stats(const Stream& s) {
  MoeLayerStats out = stats_;
  if (sum_losses_.defined()) {
    const std::vector<double> l = sum_losses_.to_vector<double>();
    out.aux_loss = l[0];
    out.z_loss = l[1];
    sum_losses_.zero_(s);
  }
  const double slots = static_cast<double>(out.forwards) * static_cast<double>(spec_.moe.num_experts);
  out.mean_load = slots > 0 ? static_cast<double>(out.routed) / slots : 0.0;
  stats_ = MoeLayerStats{};
  stats_.layer = layer_;
  return out;
}

double MoeMlp::last_losses(const Stream&) const {
  if (!last_losses_.defined()) return 0.0;
  const std::vector<double> l = last_losses_.to_vector<double>();
  return l[0] + l[1];
}

}  // namespace primus
