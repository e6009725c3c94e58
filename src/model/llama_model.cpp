#include "model/llama_model.h"

#include "core/device.h"
#include "core/memory_owner.h"
#include "model/tp_boundary.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/row_sparse_grad.h"

namespace primus {

std::vector<RecomputeMode> recompute_plan(const RecomputeConfig& cfg, int64_t num_layers,
                                          const std::vector<char>& held) {
  std::vector<RecomputeMode> plan(static_cast<size_t>(num_layers), RecomputeMode::kNone);
  if (cfg.granularity.empty() || cfg.granularity == "none") return plan;
  if (cfg.granularity == "selective") {
    std::fill(plan.begin(), plan.end(), RecomputeMode::kSelective);
    return plan;
  }
  PRIMUS_CHECK(cfg.granularity == "full", "recompute_granularity '{}' (expected full or selective)",
               cfg.granularity);
  if (!cfg.layer_ids.empty()) {
    // Primus's recompute_layer_ids: exactly these global layers (MTP depth k is layer num_layers + k).
    for (int64_t l : cfg.layer_ids)
      if (l >= 0 && l < num_layers) plan[static_cast<size_t>(l)] = RecomputeMode::kFull;
  } else if (cfg.method == "block") {
    // Megatron "block": the first recompute_num_layers layers of the pipeline stage recompute fully, the rest
    // keep activations (Megatron counts per model chunk; with interleaved chunks this counts over the rank's
    // chunks together, as the memory projection does).
    int64_t counted = 0;
    for (int64_t l = 0; l < num_layers && counted < cfg.num_layers; ++l) {
      if (l < static_cast<int64_t>(held.size()) && held[static_cast<size_t>(l)] == 0) continue;
      plan[l] = RecomputeMode::kFull;
      ++counted;
    }
  } else {
    // "uniform" (and the default): every layer keeps only its input. Megatron checkpoints every
    // recompute_num_layers-th boundary; checkpointing each boundary costs the same compute and one d-wide
    // tensor per layer more memory, and keeps the per-layer schedule simple.
    std::fill(plan.begin(), plan.end(), RecomputeMode::kFull);
  }
  return plan;
}

ops::RopeConfig rope_config(const ModelConfig& m) {
  ops::RopeConfig r;
  r.theta = m.rotary_base;
  if (m.mla.enabled) {
    // MLA rotates only its qk_pos_emb_head_dim slice, with YaRN (Megatron's default for MLA) or plain rope.
    const MlaConfig& a = m.mla;
    r.yarn = a.yarn;
    r.factor = a.rotary_scaling_factor;
    r.original_max_position = a.original_max_position;
    r.beta_fast = a.beta_fast;
    r.beta_slow = a.beta_slow;
    r.mscale = a.mscale;
    r.mscale_all_dim = a.mscale_all_dim;
    return r;
  }
  r.llama3_scaling = m.use_rope_scaling;
  r.factor = m.rope_scaling_factor;
  r.low_freq_factor = m.rope_low_freq_factor;
  r.high_freq_factor = m.rope_high_freq_factor;
  r.original_max_position = m.rope_original_max_position;
  return r;
}

LlamaModel::LlamaModel(const ModelConfig& cfg, const RecomputeConfig& recompute, ParamStore& params,
                       const Stream& stream, int64_t max_seq)
    : cfg_(cfg),
      // The experts this rank holds are the parameter store's (the layout split them when it was laid out).
      // So are its tensor-parallel sizes.
      spec_(ModelSpec::from_config(cfg)
                .with_expert_shard(params.expert_shard().size, params.expert_shard().rank)
                .with_tensor_shard(params.tensor_shard().size, params.tensor_shard().rank,
                                   params.tensor_shard().sequence_parallel)),
      params_(params),
      stream_(stream),
      act_dtype_(stream.device.is_cpu() ? params.compute_flat().dtype() : DType::kBF16) {
  // The pipeline stage's share too (model_spec.h): a module another stage holds is not built here.
  spec_.pp = params.spec().pp;
  if (spec_.pp.head) head_ = std::make_unique<LmHead>(spec_, params);
  rope_table_ = ops::rope_table(rope_config(cfg), max_seq, spec_.rope_dim()).to(stream);
  for (int l = 0; l < spec_.layers; ++l) {
    layers_.push_back(spec_.holds_layer(l) ? std::make_unique<DecoderLayer>(spec_, params, l) : nullptr);
    // Named once: a layer's scope opens per micro-batch (core/memory_owner.h).
    owner_forward_.push_back(intern_memory_owner(fmt::format("layer {} forward", l)));
    owner_backward_.push_back(intern_memory_owner(fmt::format("layer {} backward", l)));
  }
  // MTP depths continue the layer numbering (Primus: depth k is layer L + k) in the recompute plan.
  const std::vector<RecomputeMode> plan = recompute_plan(
      recompute, spec_.layers + spec_.mtp_layers, spec_.pp.split ? spec_.pp.layers : std::vector<char>{});
  recompute_.assign(plan.begin(), plan.begin() + spec_.layers);
  mtp_recompute_.assign(plan.begin() + spec_.layers, plan.end());
  // The depths are the head's stage's under pipeline parallelism (they run between its forward and backward).
  for (int k = 0; k < spec_.local_mtp_layers(); ++k)
    mtp_.push_back(std::make_unique<MtpDepth>(spec_, params, k));
  // The head's stage of a tied model holds the embedding only as its output layer's weight; with MTP it also
  // looks up the shifted tokens in its copy (ModelSpec::holds_tied_copy).
  if (spec_.pp.embedding || !mtp_.empty()) embed_ = params.find("embed_tokens.weight");
}

void LlamaModel::enable_fp8(const Fp8Recipe& recipe) {
  fp8_ = std::make_unique<Fp8State>(recipe, stream_);
  for (size_t l = 0; l < layers_.size(); ++l)
    if (layers_[l]) layers_[l]->enable_fp8(*fp8_, static_cast<int64_t>(l));
  if (head_ && recipe.output_layer && recipe.covers(0, 1, "output")) head_->enable_fp8(*fp8_);
}

StepContext LlamaModel::context(const Tensor& tokens) const {
  PRIMUS_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::kI32, "tokens must be i32 [B, T], got {}",
               tokens.describe());
  StepContext ctx;
  ctx.stream = stream_;
  ctx.act_dtype = act_dtype_;
  ctx.batch = tokens.size(0);
  ctx.seq = tokens.size(1);
  ctx.rope_table = &rope_table_;
  if (packed_positions_.defined()) ctx.positions = &packed_positions_;
  if (packed_seg_starts_.defined()) ctx.seg_starts = &packed_seg_starts_;
  ctx.hooks = hooks_;
  ctx.tp = tp_;
  ctx.cp = cp_;
  ctx.fp8 = fp8_.get();
  PRIMUS_CHECK(ctx.seq <= rope_table_.size(0), "sequence length {} exceeds the rope table ({})", ctx.seq,
               rope_table_.size(0));
  return ctx;
}

Tensor LlamaModel::embed(const StepContext& ctx, const Tensor& lookup) {
  Tensor e = ctx.act({lookup.size(0), spec_.hidden});
  if (!ctx.tp) {
    if (!(hooks_ && hooks_->embedding_forward(lookup, e)))
      ops::embedding_forward(lookup, params_.param(embed_), e, ctx.stream);
    return e;
  }
  // Vocabulary-parallel: each rank looks up the ids in its rows (zeros for the others); the sum is the
  // embedding (this rank's tokens of it under sequence parallelism).
  ops::embedding_forward(lookup, params_.param(embed_), e, ctx.stream, spec_.vocab_begin(),
                         spec_.whole_vocab());
  const int64_t n = ctx.tokens(), blocks = lookup.size(0) / n;
  if (!ctx.tp->sequence_parallel() || blocks == 1) return tp_sum_rows(ctx, e, "tp embedding");
  // Several blocks of n ids (the inputs, the MTP depths' shifted tokens) under sequence parallelism: each
  // block reduce-scatters on its own, so that this rank holds its own tokens' rows of every block.
  const int64_t nl = local_tokens(ctx);
  Tensor out = ctx.act({blocks * nl, spec_.hidden});
  for (int64_t b = 0; b < blocks; ++b)
    out.slice(b * nl, (b + 1) * nl)
        .copy_from(tp_sum_rows(ctx, e.slice(b * n, (b + 1) * n), "tp embedding"), ctx.stream);
  return out;
}

void LlamaModel::embed_backward(const StepContext& ctx, const Tensor& lookup, const Tensor& grad) {
  if (!embedding_trains()) return;  // (a frozen embedding has no gradient)
  const int64_t n = ctx.tokens(), nl = local_tokens(ctx);
  for (int64_t b = 0; b < lookup.size(0) / n; ++b)
    embedding_grad(ctx, lookup.slice(b * n, (b + 1) * n),
                   tp_gather_rows(ctx, grad.slice(b * nl, (b + 1) * nl), "sp gather embedding gradient"));
}

bool LlamaModel::embedding_trains() const {
  return params_.sparse_entry() == embed_ || params_.grad(embed_).defined();
}

void LlamaModel::embedding_grad(const StepContext& ctx, const Tensor& lookup, const Tensor& dout) {
  if (params_.sparse_entry() == embed_) {
    if (const Tensor rows = params_.take_sparse_reservation(); rows.defined())
      ops::row_sparse_reserve(rows, params_.sparse_grad(), ctx.stream);
    ops::embedding_backward_sparse(lookup, dout, params_.sparse_grad(), ctx.stream, spec_.vocab_begin(),
                                   spec_.whole_vocab());
    return;
  }
  Tensor g_embed = params_.grad(embed_);
  if (!g_embed.defined()) return;  // (a frozen embedding has none)
  ops::embedding_backward(lookup, dout, g_embed, ctx.stream, spec_.vocab_begin(), spec_.whole_vocab());
}

void LlamaModel::set_tensor_parallel(const parallel::TensorParallel* tp) {
  const int size = tp ? tp->size() : 1;
  PRIMUS_CHECK(size == spec_.tp.size && (!tp || tp->rank() == spec_.tp.rank) &&
                   (!tp || tp->sequence_parallel() == spec_.tp.sequence_parallel) &&
                   (!tp || tp->kv_replicas() == spec_.tp.kv_replicas),
               "tensor-parallel group (size {}) does not match the parameters' split ({} of {})", size,
               spec_.tp.rank, spec_.tp.size);
  tp_ = tp;
}

const MtpBatch& LlamaModel::mtp_rows(const StepContext& ctx, const Tensor& tokens, const Tensor& targets,
                                     const MtpBatch* given, MtpBatch& own) const {
  const int64_t D = spec_.mtp_layers;
  if (!given) {
    // Without context parallelism the rows are whole sequences, whose shift the model can build itself.
    PRIMUS_CHECK(
        !cp_,
        "multi-token prediction under context parallelism: the depths' ids and targets must be built "
        "from the whole sequences before they are chunked (mtp_batch, then ContextParallel::"
        "local_tokens of each depth's rows)");
    stream_sync(ctx.stream);  // the tokens' and targets' device copies must be complete before they are read
    const Tensor starts =
        ctx.seg_starts ? ctx.seg_starts->to(Stream::cpu()).view({ctx.batch, ctx.seq}) : Tensor();
    own = mtp_batch(tokens.to(Stream::cpu()).view({ctx.batch, ctx.seq}),
                    targets.to(Stream::cpu()).view({ctx.batch, ctx.seq}), D,
                    ctx.seg_starts ? &starts : nullptr);
    given = &own;
  }
  PRIMUS_CHECK(static_cast<int64_t>(given->tokens.size()) == D &&
                   static_cast<int64_t>(given->targets.size()) == D &&
                   static_cast<int64_t>(given->counts.size()) == D,
               "MTP batch of {} depths for a model of {}", given->tokens.size(), D);
  for (int64_t k = 0; k < D; ++k)
    PRIMUS_CHECK(given->tokens[k].shape() == tokens.shape() && given->targets[k].shape() == tokens.shape(),
                 "MTP depth {}: ids {} and targets {} for tokens {}", k + 1, given->tokens[k].describe(),
                 given->targets[k].describe(), tokens.describe());
  return *given;
}

Tensor LlamaModel::depth_rows(const StepContext& ctx, const Tensor* inputs,
                              const std::vector<Tensor>& depths) const {
  const int64_t n = ctx.tokens(), D = static_cast<int64_t>(depths.size()), first = inputs ? 1 : 0;
  Tensor host = Tensor::empty({D * n}, DType::kI32);
  for (int64_t k = 0; k < D; ++k)
    host.slice(k * n, (k + 1) * n).copy_from(depths[k].view({n}), Stream::cpu());
  if (!inputs) return host.to(ctx.stream);
  Tensor all = ctx.empty({(first + D) * n}, DType::kI32);
  all.slice(0, n).copy_from(inputs->view({n}), ctx.stream);
  all.slice(n, (first + D) * n).copy_from(host.to(ctx.stream), ctx.stream);
  return all;
}

Tensor LlamaModel::mtp_heads(const StepContext& ctx, const Tensor& x, const Tensor& e_mtp,
                             const Tensor& targets, const MtpBatch& mtp, float grad_scale, Tensor& losses,
                             Tensor& de) {
  const int64_t n = ctx.tokens(), nl = local_tokens(ctx), D = spec_.mtp_layers, d = spec_.hidden;
  const Stream& s = ctx.stream;
  mtp_counts_ = mtp.counts;
  const Tensor mtp_targets = depth_rows(ctx, nullptr, mtp.targets);

  Tensor h0 = ctx.act({nl, d}), rstd0 = ctx.empty({nl}, ctx.stat_dtype());
  head_->norm_forward(ctx, x, head_->norm_entry(), h0, rstd0);
  std::vector<MtpActivations> acts(static_cast<size_t>(D));
  for (int64_t k = 0; k < D; ++k)
    mtp_[k]->forward(ctx, e_mtp.slice(k * nl, (k + 1) * nl), k == 0 ? h0 : acts[k - 1].h, acts[k],
                     mtp_recompute_[k], /*record_stats=*/true);

  // The output projection of normed rows h (this rank's): it reads every token (gathered under sequence
  // parallelism) and gives dL/dh of this rank's rows, summed over the tp ranks' vocabulary columns
  // (LmHead::run).
  auto project = [&](const Tensor& h, const Tensor& t, float scale, Tensor& l) {
    const Tensor all = tp_gather_rows(ctx, h, "sp gather head input");
    Tensor dh = ctx.act({n, d});
    head_->project(ctx, all, t, scale, l, &dh);
    return tp_sum_rows(ctx, dh, "tp head input gradient");
  };
  // Deepest first: depth k's gradient reaches h_{k-1}, which depth k - 1's head adds to.
  mtp_losses_.assign(static_cast<size_t>(D), Tensor());
  Tensor dh_next;
  for (int64_t k = D - 1; k >= 0; --k) {
    const double lambda = spec_.mtp_loss_scale / static_cast<double>(D);
    const float scale = mtp.counts[k] > 0
                            ? static_cast<float>(lambda * grad_scale * static_cast<double>(mtp.counted) /
                                                 static_cast<double>(mtp.counts[k]))
                            : 0.0f;
    mtp_losses_[k] = ctx.empty({n}, ctx.stat_dtype());
    Tensor dh = project(acts[k].h, mtp_targets.slice(k * n, (k + 1) * n), scale, mtp_losses_[k]);
    if (dh_next.defined()) ops::add(dh, dh_next, dh, s);
    Tensor dprev = ctx.act({nl, d});
    Tensor de_k = de.slice(k * nl, (k + 1) * nl);
    mtp_[k]->backward(ctx, dh, k == 0 ? h0 : acts[k - 1].h, acts[k], de_k, dprev);
    dh_next = dprev;
  }
  Tensor dh0 = project(h0, targets.view({n}), grad_scale, losses);
  ops::add(dh0, dh_next, dh0, s);
  Tensor dx = ctx.act({nl, d});
  head_->norm_backward(ctx, dh0, x, head_->norm_entry(), rstd0, dx);
  return dx;
}

Tensor LlamaModel::chunk_forward(const Chunk& c, ChunkState& st, const Tensor& input, const Tensor& tokens,
                                 const Tensor& targets, float grad_scale, float aux_grad_scale,
                                 const BatchOrigin& origin, const MtpBatch* mtp) {
  st.ctx = context(tokens);
  StepContext& ctx = st.ctx;
  // The micro-batch's packing stays with its state: a pipeline runs later micro-batches' forwards (which set
  // the model's packing anew) before this one's backward.
  st.positions = packed_positions_;
  st.seg_starts = packed_seg_starts_;
  ctx.positions = st.positions.defined() ? &st.positions : nullptr;
  ctx.seg_starts = st.seg_starts.defined() ? &st.seg_starts : nullptr;
  ctx.aux_grad_scale = aux_grad_scale;
  ctx.origin = origin;
  ctx.training = st.train;
  const int64_t n = ctx.tokens();
  auto hook = [&](void (ParamHooks::*f)(int), int region) {
    if (hooks_) (hooks_->*f)(region);
  };
  Tensor x = input;
  if (c.embedding) {
    PRIMUS_CHECK(embed_ >= 0, "chunk_forward: this rank does not hold the embedding");
    st.lookup = tokens.view({n});
    hook(&ParamHooks::before_forward, 0);
    x = embed(ctx, st.lookup);
    hook(&ParamHooks::after_forward, 0);
  }
  if (st.train) st.slots.assign(static_cast<size_t>(c.num_layers), LayerActivations{});
  for (int i = 0; i < c.num_layers; ++i) {
    const int l = c.first_layer + i;
    PRIMUS_MEMORY_OWNER(owner_forward_[l]);
    PRIMUS_CHECK(layers_[l] != nullptr, "chunk_forward: this rank does not hold layer {}", l);
    hook(&ParamHooks::before_forward, l + 1);
    x = st.train ? layers_[l]->forward(ctx, x, &st.slots[i], recompute_[l], /*record_stats=*/true)
                 : layers_[l]->forward(ctx, x, nullptr, RecomputeMode::kNone);
    hook(&ParamHooks::after_forward, l + 1);
  }
  if (!c.loss) return x;
  PRIMUS_MEMORY_OWNER("output layer + loss");
  PRIMUS_CHECK(head_ != nullptr, "chunk_forward: this rank does not hold the output layer");
  // The head's forward and backward run together (lm_head.h), between its region's forward and backward
  // hooks.
  const int head_region = static_cast<int>(layers_.size()) + 1;
  st.losses = ctx.empty({n}, ctx.stat_dtype());
  hook(&ParamHooks::before_forward, head_region);
  if (st.train && !mtp_.empty()) {
    // Multi-token prediction on the head's stage (pipeline parallelism): the depths embed the shifted tokens
    // with this stage's embedding (the first stage's copy unless it is this stage), and the gradient of
    // those rows accumulates into it here, inside the head's hooks, which gather and reduce the copy with
    // the head's region; the embedding group sums it with the first stage's afterwards.
    PRIMUS_CHECK(embed_ >= 0, "chunk_forward: the MTP depths need the embedding on the head's stage");
    const int64_t D = spec_.mtp_layers;
    MtpBatch own;
    const MtpBatch& rows = mtp_rows(ctx, tokens, targets, mtp, own);
    const Tensor lookup = depth_rows(ctx, nullptr, rows.tokens);
    const Tensor e = embed(ctx, lookup);
    Tensor de = ctx.act({D * local_tokens(ctx), spec_.hidden});
    st.dx = mtp_heads(ctx, x, e, targets, rows, grad_scale, st.losses, de);
    st.mtp_losses = mtp_losses_;
    st.mtp_counts = mtp_counts_;
    embed_backward(ctx, lookup, de);
  } else {
    head_->run(ctx, x, targets.view({n}), grad_scale, st.losses, st.train ? &st.dx : nullptr);
  }
  hook(st.train ? &ParamHooks::after_backward : &ParamHooks::after_forward, head_region);
  return Tensor();
}

Shape LlamaModel::chunk_io_shape(const Tensor& tokens) const {
  return {local_tokens(context(tokens)), spec_.hidden};
}

void LlamaModel::chunk_weight_grad(ChunkState& st) {
  for (auto& gemm : st.wgrad) gemm();
  st.wgrad.clear();
}

Tensor LlamaModel::chunk_backward(const Chunk& c, ChunkState& st, Tensor grad_out, bool defer_weight_grads) {
  PRIMUS_CHECK(st.train, "chunk_backward after an evaluation forward");
  st.ctx.deferred_wgrad = defer_weight_grads ? &st.wgrad : nullptr;
  const StepContext& ctx = st.ctx;
  auto hook = [&](void (ParamHooks::*f)(int), int region) {
    if (hooks_) (hooks_->*f)(region);
  };
  Tensor dx = c.loss ? std::move(st.dx) : std::move(grad_out);
  for (int i = c.num_layers; i-- > 0;) {
    const int l = c.first_layer + i;
    PRIMUS_MEMORY_OWNER(owner_backward_[l]);
    hook(&ParamHooks::before_backward, l + 1);
    const size_t queued = st.wgrad.size();
    dx = layers_[l]->backward(ctx, dx, st.slots[i]);
    if (st.wgrad.size() > queued) {
      // The layer's gradient is complete only once the BW pass has run its queued GEMMs: the hooks hear
      // after_backward then (FSDP reduce-scatters the region there), in the queue right after them.
      hook(&ParamHooks::backward_deferred, l + 1);
      st.wgrad.push_back([this, region = l + 1] {
        if (hooks_) hooks_->after_backward(region);
      });
    } else {
      hook(&ParamHooks::after_backward, l + 1);
    }
  }
  st.slots.clear();
  if (!c.embedding) return dx;
  hook(&ParamHooks::before_backward, 0);
  if (embedding_trains())  // (a frozen embedding has no gradient)
    embedding_grad(ctx, st.lookup, tp_gather_rows(ctx, dx, "sp gather embedding gradient"));
  hook(&ParamHooks::after_backward, 0);
  return Tensor();
}

Tensor LlamaModel::forward_backward(const Tensor& tokens, const Tensor& targets, float grad_scale,
                                    float aux_grad_scale, const MtpBatch* mtp, const BatchOrigin& origin) {
  if (spec_.mtp_layers == 0) {
    ChunkState st;
    chunk_forward(whole_model(), st, Tensor(), tokens, targets, grad_scale, aux_grad_scale, origin);
    chunk_backward(whole_model(), st, Tensor());
    return st.losses;
  }
  // Multi-token prediction: the depths sit between the head's forward and backward and read the embedding.
  StepContext ctx = context(tokens);
  ctx.aux_grad_scale = aux_grad_scale;
  ctx.origin = origin;
  ctx.training = true;
  const int64_t n = ctx.tokens(), nl = local_tokens(ctx), D = spec_.mtp_layers;
  const int head_region = static_cast<int>(layers_.size()) + 1;
  auto hook = [&](void (ParamHooks::*f)(int), int region) {
    if (hooks_) (hooks_->*f)(region);
  };
  // One lookup serves the input and every MTP depth: the overlapped update defers the table's update behind
  // the forward's (single) lookup.
  MtpBatch own;
  const MtpBatch& rows = mtp_rows(ctx, tokens, targets, mtp, own);
  Tensor lookup = depth_rows(ctx, &tokens, rows.tokens);
  hook(&ParamHooks::before_forward, 0);
  Tensor e_all = embed(ctx, lookup);  // [(1 + D) * nl, d]: the inputs' rows, then each depth's
  hook(&ParamHooks::after_forward, 0);
  Tensor x = e_all.slice(0, nl);

  std::vector<LayerActivations> slots(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    PRIMUS_MEMORY_OWNER(owner_forward_[l]);
    hook(&ParamHooks::before_forward, static_cast<int>(l) + 1);
    x = layers_[l]->forward(ctx, x, &slots[l], recompute_[l], /*record_stats=*/true);
    hook(&ParamHooks::after_forward, static_cast<int>(l) + 1);
  }

  Tensor losses, dx, de;
  {
    PRIMUS_MEMORY_OWNER("output layer + loss");  // the head only: the embedding's backward is the caller's
    losses = ctx.empty({n}, ctx.stat_dtype());
    hook(&ParamHooks::before_forward, head_region);
    de = ctx.act({D * nl, spec_.hidden});
    dx = mtp_heads(ctx, x, e_all.slice(nl, (1 + D) * nl), targets, rows, grad_scale, losses, de);
    hook(&ParamHooks::after_backward, head_region);
  }
  x = Tensor();
  for (size_t l = layers_.size(); l-- > 0;) {
    PRIMUS_MEMORY_OWNER(owner_backward_[l]);
    hook(&ParamHooks::before_backward, static_cast<int>(l) + 1);
    dx = layers_[l]->backward(ctx, dx, slots[l]);
    hook(&ParamHooks::after_backward, static_cast<int>(l) + 1);
  }

  hook(&ParamHooks::before_backward, 0);
  embed_backward(ctx, lookup.slice(0, n), dx);
  embed_backward(ctx, lookup.slice(n, (1 + D) * n), de);
  hook(&ParamHooks::after_backward, 0);
  return losses;
}

std::vector<MoeMlp*> LlamaModel::moe_layers() {
  std::vector<MoeMlp*> out;
  for (auto& layer : layers_)
    if (MoeMlp* m = layer ? layer->moe() : nullptr) out.push_back(m);
  for (auto& depth : mtp_)
    if (MoeMlp* m = depth->layer().moe()) out.push_back(m);
  return out;
}

void LlamaModel::set_expert_groups(comm::Communicator* ep, comm::Communicator* loads) {
  for (MoeMlp* m : moe_layers()) m->set_groups(ep, loads);
}

void LlamaModel::end_step() {
  for (MoeMlp* m : moe_layers()) m->end_step(stream_);
}

std::vector<MoeLayerStats> LlamaModel::take_moe_stats() {
  std::vector<MoeLayerStats> out;
  for (MoeMlp* m : moe_layers()) out.push_back(m->take_stats(stream_));
  return out;
}

double LlamaModel::moe_losses_of_last_forward() {
  double sum = 0;
  for (MoeMlp* m : moe_layers()) sum += m->last_losses(stream_);
  return sum;
}

void LlamaModel::attach_adapters(ParamStore& adapters) {
  PRIMUS_CHECK(params_.frozen(), "LoRA adapters need the base model's store frozen (allocate_frozen)");
  // The decoder trunk's layers take adapters; multi-token-prediction depths run frozen on the base (their
  // loss still reaches the trunk's adapters through the hidden states they read).
  for (auto& layer : layers_)
    if (layer) layer->set_adapters(adapters);
  adapted_ = true;
}

std::vector<int> LlamaModel::gemm_written_grad_entries() const {
  std::vector<int> out;
  if (adapted_) return out;  // the adapters' gradients accumulate (thin GEMMs: nothing to save)
  for (const auto& layer : layers_)
    if (layer)
      for (int i : layer->gemm_weight_entries()) out.push_back(i);
  for (const auto& depth : mtp_)
    for (int i : depth->gemm_weight_entries()) out.push_back(i);
  if (head_) out.push_back(head_->weight_entry());
  return out;
}

Tensor LlamaModel::forward_loss(const Tensor& tokens, const Tensor& targets, bool with_mtp,
                                const BatchOrigin& origin, const MtpBatch* mtp) {
  if (!with_mtp || spec_.mtp_layers == 0) {  // the whole model as one chunk, forward only
    ChunkState st;
    st.train = false;
    chunk_forward(whole_model(), st, Tensor(), tokens, targets, 1.0f, 0.0f, origin);
    return st.losses;
  }
  // Multi-token prediction: the depths read the embedding of the shifted tokens.
  StepContext ctx = context(tokens);
  ctx.origin = origin;
  const int64_t n = ctx.tokens(), nl = local_tokens(ctx), D = spec_.mtp_layers;
  const int head_region = static_cast<int>(layers_.size()) + 1;
  MtpBatch own;
  const MtpBatch& rows = mtp_rows(ctx, tokens, targets, mtp, own);
  Tensor lookup = depth_rows(ctx, &tokens, rows.tokens);
  const Tensor mtp_targets = depth_rows(ctx, nullptr, rows.targets);
  if (hooks_) hooks_->before_forward(0);
  Tensor e_all = embed(ctx, lookup);
  if (hooks_) hooks_->after_forward(0);
  Tensor x = e_all.slice(0, nl);
  for (size_t l = 0; l < layers_.size(); ++l) {
    PRIMUS_MEMORY_OWNER(owner_forward_[l]);
    if (hooks_) hooks_->before_forward(static_cast<int>(l) + 1);
    x = layers_[l]->forward(ctx, x, nullptr, RecomputeMode::kNone);
    if (hooks_) hooks_->after_forward(static_cast<int>(l) + 1);
  }
  PRIMUS_MEMORY_OWNER("output layer + loss");
  Tensor losses = ctx.empty({n}, ctx.stat_dtype());
  if (hooks_) hooks_->before_forward(head_region);
  head_->run(ctx, x, targets.view({n}), 1.0f, losses, nullptr);
  Tensor h = ctx.act({nl, spec_.hidden}), rstd = ctx.empty({nl}, ctx.stat_dtype());
  head_->norm_forward(ctx, x, head_->norm_entry(), h, rstd);
  mtp_losses_.assign(static_cast<size_t>(D), Tensor());
  for (int64_t k = 0; k < D; ++k) {
    MtpActivations a;
    mtp_[k]->forward(ctx, e_all.slice((k + 1) * nl, (k + 2) * nl), h, a, RecomputeMode::kNone, false);
    mtp_losses_[k] = ctx.empty({n}, ctx.stat_dtype());
    head_->project(ctx, tp_gather_rows(ctx, a.h, "sp gather head input"),
                   mtp_targets.slice(k * n, (k + 1) * n), 1.0f, mtp_losses_[k], nullptr);
    h = a.h;
  }
  if (hooks_) hooks_->after_forward(head_region);
  return losses;
}

}  // namespace primus
