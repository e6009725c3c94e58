#include "parallel/data_parallel.h"

#include <cmath>

#include "core/env.h"
#include "core/log.h"
#include "ops/elementwise.h"
#include "ops/optimizer.h"

namespace primus {

using comm::ReduceOp;
using parallel::Sharding;

std::string DpConfig::describe() const {
  std::string mode = fsdp() ? (dp_replicate > 1 ? "HSDP" : "FSDP") : zero1() ? "ZeRO-1" : "DDP";
  std::string s = fmt::format("{} over dp {} (replicate {} x shard {})", mode, dp, dp_replicate, dp_shard);
  if (ep > 1) s += fmt::format(", experts split over ep {} and reduced over expert-dp {}", ep, edp);
  if (cp > 1) s += fmt::format(", sequences split over cp {} (gradients reduced over dp x cp)", cp);
  if (!fsdp()) s += fmt::format(", overlap_grad_reduce {}", overlap_grad_reduce);
  if (zero1()) s += fmt::format(", overlap_param_gather {}", overlap_param_gather);
  if (!fsdp() && !zero1()) s += reduce_in_bf16 ? ", bf16 reduction" : ", f32 reduction";
  if (emulate) s += " [emulated in one process]";
  return s;
}

DpConfig dp_config(const parallel::ParallelLayout& layout, const ParallelConfig& p) {
  DpConfig c;
  c.sharding = layout.sharding;
  c.dp = layout.dims.dp();
  c.dp_replicate = layout.dims.dp_replicate();
  c.dp_shard = layout.dims.dp_shard();
  c.ep = layout.dims.ep();
  c.edp = layout.dims.edp();
  c.cp = layout.dims.cp();
  // Under HSDP a replica is dp_shard x cp ranks (the expert grid reads them cp-fastest), and each must hold
  // every expert: its ep groups may not straddle two replicas.
  const int replica = layout.dims.dp_shard() * layout.dims.cp();
  if (c.ep > 1 && c.fsdp() && layout.dims.dp_replicate() > 1 && replica % c.ep != 0)
    throw ConfigError(
        fmt::format("{}: expert parallelism with HSDP needs the expert-parallel degree {} to divide "
                    "the shard degree x cp = {} (each replica holds every expert)",
                    layout.describe(), c.ep, replica),
        "set expert_model_parallel_size to a divisor of the FSDP shard degree");
  // (Context parallelism composes: the ep group's ranks hold other tokens of the same or other sequences,
  // which travel to their experts like any data-parallel rank's.)
  // (Tensor parallelism composes too: the expert-dp ranks share the tp coordinate, so they hold the same
  // columns of the same experts.)
  if (!c.fsdp()) {  // without parameter sharding every DP rank is a replica (layout_from_config)
    c.dp_replicate = c.dp;
    c.dp_shard = 1;
  }
  c.overlap_grad_reduce = p.overlap_grad_reduce;
  c.overlap_param_gather = p.overlap_param_gather;
  c.reduce_in_bf16 = p.grad_reduce_in_bf16;
  if (c.reduce_in_bf16 && (c.fsdp() || c.zero1()))
    throw ConfigError("grad_reduce_in_bf16 is implemented for DDP (no_shard) only",
                      "drop grad_reduce_in_bf16 or use_distributed_optimizer / FSDP");
  return c;
}

DataParallel::DataParallel(const DpConfig& cfg, ParamStore& params, const parallel::ProcessGroups* groups,
                           const Stream& compute)
    : cfg_(cfg), params_(params), groups_(groups), compute_(compute) {
  const int n_regions = all_regions();
  reduced_.assign(n_regions, false);
  pending_.assign(n_regions, nullptr);
  gathered_.resize(n_regions);
  owned_.resize(static_cast<size_t>(last_region() + 1));
  for (int x = last_region() + 1; x < n_regions; ++x) {
    const int owner = params_.regions()[x].owner;
    PRIMUS_CHECK(owner >= 0 && owner <= last_region(), "expert region {} has no owner among the layers", x);
    owned_[owner].push_back(x);
  }
  if (cfg_.emulate) {
    PRIMUS_CHECK(params_.shard_mode() == ShardMode::kNone,
                 "DP emulation runs on whole (unsharded) parameters");
    comm_ = update_ = compute_;
    return;
  }
  PRIMUS_CHECK(groups_ != nullptr, "data parallelism needs process groups");
  PRIMUS_CHECK(params_.shard_mode() == cfg_.shard_mode() && params_.shard_ranks() == cfg_.shard_ranks(),
               "parameters are not sharded for {}", cfg_.describe());
  // Shards keep f32 master chunks (shard_spans, gather_full, load_from_full read master_flat()); DDP's whole
  // buffers may hold them in remainders and go through AdamW::step like one GPU.
  PRIMUS_CHECK(cfg_.shard_mode() == ShardMode::kNone || !params_.master_in_remainders(),
               "{}: sharded parameters must keep an f32 master buffer, not remainders", cfg_.describe());
  comm_ = make_comm_stream(compute_);
  if (cfg_.zero1()) zero_grad_shard_ = Tensor::zeros({params_.shard_total()}, DType::kF32, compute_);
  update_ = cfg_.zero1() && cfg_.overlap_param_gather && env_int("PRIMUS_ZERO1_UPDATE_STREAM", 1, 0, 1) == 1
                ? make_background_stream(compute_)
                : compute_;
}

DataParallel::~DataParallel() {
  // Pending work on the communication and update streams uses buffers about to be freed.
  try {
    stream_sync(update_);
    stream_sync(comm_);
  } catch (...) {
  }
}

comm::Communicator& DataParallel::group(const char* name) const {
  return groups_->get(name);
}

comm::Communicator& DataParallel::shard_group() const {
  return group(cfg_.shard_group());
}

comm::Communicator& DataParallel::region_group(int r) const {
  return params_.regions()[r].experts ? group(cfg_.expert_group()) : shard_group();
}

std::vector<int> DataParallel::with_owned(int r) const {
  std::vector<int> out = {r};
  if (r >= 0 && r <= last_region()) out.insert(out.end(), owned_[r].begin(), owned_[r].end());
  return out;
}

Tensor DataParallel::shard_grad() const {
  return cfg_.zero1() ? zero_grad_shard_ : const_cast<ParamStore&>(params_).grad_flat();
}

// ---------------------------------------------------------------------------------------------------------
// Step protocol

void DataParallel::begin_step(bool grads_prepared) {
  std::fill(reduced_.begin(), reduced_.end(), false);
  if (cfg_.fsdp()) {
    // The shard gradient accumulates reduce-scattered micro-batches on the communication stream; the
    // optimizer read it on the compute stream last step.
    stream_wait(comm_, StreamEvent::record(compute_));
    params_.grad_flat().zero_(comm_);
  } else if (!grads_prepared) {
    params_.begin_grad_step(compute_);  // zeroes what the step's GEMMs will not overwrite
  }
}

void DataParallel::reserve_sparse_rows(const std::vector<int32_t>& rows) {
  PRIMUS_CHECK(params_.sparse_entry() >= 0 && !cfg_.emulate && cfg_.shard_mode() == ShardMode::kNone,
               "reserve_sparse_rows: needs a row-sparse embedding gradient under DDP");
  const ops::RowSparseGrad& g = params_.sparse_grad();
  const int64_t vocab = g.vocab();
  // Presence as f32 counts (exact up to 2^24 ranks): one fixed-size all-reduce, whatever the union's size.
  std::vector<float> present(static_cast<size_t>(vocab), 0.0f);
  for (int32_t r : rows) {
    PRIMUS_CHECK(r >= 0 && r < vocab, "reserve_sparse_rows: row {} outside the table's {} rows", r, vocab);
    present[static_cast<size_t>(r)] = 1.0f;
  }
  Tensor t = Tensor::from_vector(present, {vocab});
  if (compute_.device.is_cuda()) t = t.to(compute_);
  region_group(0).all_reduce(t, ReduceOp::kSum, compute_, "sparse embedding rows");
  present = t.to_vector<float>();
  std::vector<int32_t> all;
  for (int64_t r = 0; r < vocab; ++r)
    if (present[static_cast<size_t>(r)] > 0) all.push_back(static_cast<int32_t>(r));
  PRIMUS_CHECK(
      static_cast<int64_t>(all.size()) <= g.capacity(),
      "the dp ranks' tokens of this step touch {} embedding rows, more than the row-sparse gradient's "
      "{} slots",
      all.size(), g.capacity());
  sparse_rows_ = static_cast<int64_t>(all.size());
  Tensor u = Tensor::from_vector(all, {sparse_rows_});
  params_.reserve_sparse_rows(compute_.device.is_cuda() ? u.to(compute_) : u);
}

void DataParallel::begin_micro(bool last) {
  last_micro_ = last;
}

void DataParallel::reduce_region(int r) {
  if (reduced_[r]) return;
  reduced_[r] = true;
  const ParamRegion& reg = params_.regions()[r];
  Tensor g;
  if (params_.sparse_region(r)) {
    // The row-sparse embedding: the slots of the step's reserved rows, laid out alike on every rank.
    const ops::RowSparseGrad& sg = params_.sparse_grad();
    PRIMUS_CHECK(!cfg_.zero1(), "a row-sparse embedding gradient is reduced by DDP only");
    PRIMUS_CHECK(compute_.device.is_cuda() || sg.count.to_vector<int32_t>()[0] == sparse_rows_,
                 "dp rank {}: the step's backward used {} embedding-gradient slots, not the {} reserved for "
                 "the dp ranks' rows (reserve_sparse_rows)",
                 region_group(0).rank(), sg.count.to_vector<int32_t>()[0], sparse_rows_);
    if (sparse_rows_ == 0) return;
    g = sg.rows.slice(0, sparse_rows_).view({-1});
  } else {
    g = params_.grad_span(reg.begin, reg.end);  // (the dense buffer starts at grad_base())
  }
  stream_wait(comm_, StreamEvent::record(compute_));
  const std::string label = fmt::format("grad bucket {}", r);
  if (cfg_.zero1()) {
    Tensor out =
        zero_grad_shard_.slice(params_.shard_offset(r), params_.shard_offset(r) + params_.chunk_len(r));
    region_group(r).reduce_scatter(g, out, ReduceOp::kSum, comm_, label);
  } else if (cfg_.reduce_in_bf16) {
    Tensor b = Tensor::empty({g.numel()}, DType::kBF16, comm_);
    ops::cast(g, b, comm_);
    region_group(r).all_reduce(b, ReduceOp::kSum, comm_, label);
    ops::cast(b, g, comm_);
  } else {
    region_group(r).all_reduce(g, ReduceOp::kSum, comm_, label);
  }
}

void DataParallel::compute_waits_for(const std::shared_ptr<StreamEvent>& e) {
  if (marks_ && e)
    marks_->wait(e);
  else
    stream_wait(compute_, e);
}

void DataParallel::set_pipeline(comm::Communicator* pp, comm::Communicator* embedding) {
  pp_ = pp;
  embedding_ = nullptr;
  // The V shape (ZB-V) puts the embedding and the head on one rank, and a tied or MTP head reads the
  // embedding itself there, in the loss chunk's forward, while the schedule may have run another
  // micro-batch's embedding backward (which reduce-scatters and releases region 0) since that micro-batch's
  // embedding forward: the head gathers, reduces and releases region 0 with its own region too.
  const ModelSpec& spec = params_.spec();
  if (spec.pp.split && spec.pp.embedding && spec.pp.head && spec.head_reads_embedding() &&
      params_.find("embed_tokens.weight") >= 0)
    owned_[last_region()].push_back(0);
  // (A LoRA adapters' store has no embedding: nothing tied to sum.)
  if (!params_.spec().tied_across_stages() || params_.find("embed_tokens.weight") < 0) return;
  PRIMUS_CHECK(embedding != nullptr && embedding->size() == 2,
               "tied embeddings across pipeline stages: the embedding group has {} ranks, expected the first "
               "and the last stage",
               embedding ? embedding->size() : 0);
  embedding_ = embedding;
  // The head's stage reads its copy (region 0) in the head's forward and backward: FSDP gathers, reduces and
  // releases it with the head's region, and ZeRO-1's forward waits for its gather there.
  if (params_.spec().holds_tied_copy()) owned_[last_region()].push_back(0);
}

Tensor DataParallel::region0_grads() {
  if (cfg_.shard_ranks() == 1) return params_.grad_flat().slice(0, params_.regions()[0].end);
  return shard_grad().slice(params_.shard_offset(0), params_.shard_offset(0) + params_.chunk_len(0));
}

void DataParallel::sum_tied_embedding_grads() {
  // After the data-parallel reduction (Megatron's order): both stages add the same two reduced gradients, and
  // a sum of two terms is the same in either order, so the copies take bitwise the same updates for any dp
  // size and backend. Region 0 is laid out alike on both stages, so their ZeRO-1 / FSDP chunks hold the
  // same elements.
  Tensor g = region0_grads();
  embedding_->all_reduce(g, ReduceOp::kSum, compute_, "tied embedding grads");
}

void DataParallel::finish_grads() {
  if (cfg_.emulate) return;
  if (!cfg_.fsdp()) {
    params_.end_grad_step(compute_);
    // Buckets not launched during backward (overlap off, or a region never reached), in backward order;
    // the expert regions (no hook names them) first.
    for (int r = all_regions() - 1; r >= 0; --r) reduce_region(r);
  } else {
    // Every region's gradient must have been reduce-scattered into the shards by now: a buffer still held
    // is a micro-batch's gradient the optimizer would never see (a weight-gradient pass that did not run).
    for (int r = 0; r < all_regions(); ++r)
      PRIMUS_CHECK(!gathered_[r].grads.defined() && gathered_[r].open == 0,
                   "fsdp: region {} still holds an unreduced gradient buffer ({} backward(s) open) at the "
                   "step's end",
                   r, gathered_[r].open);
  }
  if (cfg_.fsdp() && cfg_.dp_replicate > 1) {
    group("dp_replicate").all_reduce(params_.grad_flat(), ReduceOp::kSum, comm_, "hsdp grad shards");
  }
  compute_waits_for(StreamEvent::record(comm_));
  if (embedding_) sum_tied_embedding_grads();
  // Sums commute: the tp sum of the whole tensors' partial gradients may follow the dp reduction.
  if (tp_) tp_->sum_partial_grads(params_, grad_view(), compute_);
}

parallel::TensorParallel::GradView DataParallel::grad_view() {
  if (cfg_.shard_ranks() == 1) return parallel::TensorParallel::whole_grads(params_);
  parallel::TensorParallel::GradView g;
  g.grad = shard_grad();
  for (int r = 0; r < static_cast<int>(params_.regions().size()); ++r) {
    g.first.push_back(params_.chunk_begin(r));
    g.len.push_back(params_.chunk_len(r));
    g.offset.push_back(params_.shard_offset(r));
  }
  return g;
}

double DataParallel::grad_norm() {
  const double stage = stage_grad_norm();
  if (!pp_) return stage;
  return std::sqrt(
      std::max(0.0, pp_->all_reduce_value(stage * stage, ReduceOp::kSum, compute_, "grad norm (pp)")));
}

double DataParallel::stage_grad_norm() {
  // The head's stage of a tied model: its copy of the embedding (region 0, the start of every gradient
  // buffer) is the first stage's embedding again, counted there (Megatron's `shared` parameter).
  const bool skip_copy = embedding_ && params_.spec().holds_tied_copy();
  const int64_t skip = skip_copy ? region0_grads().numel() : 0;
  PRIMUS_CHECK(!skip_copy || cfg_.shard_ranks() == 1 || params_.shard_offset(0) == 0,
               "region 0 does not start the shard buffer");
  if (tp_) {
    // Split tensors count on every tp rank, whole ones once (the same on every tp rank), each dp shard once.
    parallel::TensorParallel::GradView view = grad_view();
    double experts = 0;
    if (cfg_.ep > 1 && cfg_.shard_ranks() == 1) {
      // EP x TP with whole buffers: the expert regions (split over tp too, so counted on every rank) hold
      // other experts on each ep rank: their squares are summed over ep before the tp sum. Sharded, the
      // shard group already spans the ep ranks (see below).
      const int64_t split = params_.regions()[last_region() + 1].begin;
      Tensor sq = Tensor::empty({1}, DType::kF32, compute_);
      ops::sum_squares(view.grad.slice(split, view.grad.numel()), sq, false, compute_);
      group("ep").all_reduce(sq, ReduceOp::kSum, compute_, "grad norm (experts)");
      experts = sq.to_vector<double>()[0];
      view.grad = view.grad.slice(0, split);
      for (size_t r = static_cast<size_t>(last_region() + 1); r < view.len.size(); ++r) view.len[r] = 0;
    }
    double mine = tp_->norm_contribution(params_, view, compute_) + experts;
    if (skip_copy) {  // the embedding is split over tp: norm_contribution counted it whole
      Tensor copy = Tensor::empty({1}, DType::kF32, compute_);
      ops::sum_squares(region0_grads(), copy, false, compute_);
      mine -= copy.to_vector<double>()[0];
    }
    double sq = tp_->group().all_reduce_value(mine, ReduceOp::kSum, compute_, "grad norm (tp)");
    if (cfg_.shard_ranks() > 1)
      sq = shard_group().all_reduce_value(sq, ReduceOp::kSum, compute_, "grad norm");
    return std::sqrt(std::max(0.0, sq));
  }
  Tensor out = Tensor::empty({1}, DType::kF32, compute_);
  if (cfg_.shard_ranks() == 1) {
    if (all_regions() == last_region() + 1) {
      Tensor g = params_.grad_flat();
      ops::sum_squares(g.slice(skip, g.numel()), out, /*accumulate=*/false, compute_);
      // The row-sparse embedding's unused slots are zero: summing all of them adds nothing.
      if (params_.sparse_entry() >= 0)
        ops::sum_squares(params_.sparse_grad().rows.view({-1}), out, /*accumulate=*/true, compute_);
      return std::sqrt(out.to_vector<double>()[0]);
    }
    // Expert parallelism: the replicated part here, plus every ep rank's experts (the same on each expert-dp
    // rank after the reduction).
    const int64_t split = params_.regions()[last_region() + 1].begin;
    Tensor g = params_.grad_flat();
    Tensor experts = Tensor::empty({1}, DType::kF32, compute_);
    ops::sum_squares(g.slice(split, g.numel()), experts, false, compute_);
    if (cfg_.ep > 1) group("ep").all_reduce(experts, ReduceOp::kSum, compute_, "grad norm (experts)");
    ops::sum_squares(g.slice(skip, split), out, false, compute_);
    const double dense = out.to_vector<double>()[0], routed = experts.to_vector<double>()[0];
    return std::sqrt(dense + routed);
  }
  if (cfg_.emulate) {
    // What each shard rank computes over its chunks, then the fixed-order f32 sum of the all-reduce.
    const int n = cfg_.shard_ranks();
    Tensor chunk = Tensor::empty({params_.total_numel() / n}, DType::kF32, compute_);
    float total = 0;
    for (int k = 0; k < n; ++k) {
      int64_t off = 0;
      for (size_t r = 0; r < params_.regions().size(); ++r) {
        const ParamRegion& reg = params_.regions()[r];
        const int64_t len = (reg.end - reg.begin) / n;
        chunk.slice(off, off + len)
            .copy_from(params_.grad_flat().slice(reg.begin + k * len, reg.begin + (k + 1) * len), compute_);
        off += len;
      }
      ops::sum_squares(chunk, out, false, compute_);
      const float v = out.to_vector<float>()[0];
      total = k == 0 ? v : total + v;
    }
    return std::sqrt(static_cast<double>(total));
  }
  // Sharded: every element lives in exactly one rank's chunk, experts included (the dp ranks are the ep x
  // expert-dp grid, checked in dp_config), so one sum over dp covers the model once.
  Tensor g = shard_grad();
  ops::sum_squares(g.slice(skip, g.numel()), out, false, compute_);
  shard_group().all_reduce(out, ReduceOp::kSum, compute_, "grad norm");
  return std::sqrt(out.to_vector<double>()[0]);
}

std::vector<AdamSpan> DataParallel::shard_spans(int region) {
  std::vector<AdamSpan> spans;
  Tensor grad = shard_grad();
  const bool copy = !params_.compute_aliases_master();
  for (size_t ri = 0; ri < params_.regions().size(); ++ri) {
    const int r = static_cast<int>(ri);
    if (region >= 0 && r != region) continue;
    const ParamRegion& reg = params_.regions()[r];
    const int64_t cb = params_.chunk_begin(r), ce = cb + params_.chunk_len(r);
    const int64_t so = params_.shard_offset(r);
    for (int span = 0; span < 2; ++span) {
      const int64_t b = span == 0 ? cb : std::max(cb, reg.decay_end);
      const int64_t e = span == 0 ? std::min(ce, reg.decay_end) : ce;
      if (e <= b) continue;
      const int64_t sb = so + (b - cb), se = so + (e - cb);
      AdamSpan a;
      a.decay = span == 0;
      a.master = params_.master_flat().slice(sb, se);
      a.grad = grad.slice(sb, se);
      a.m = params_.adam_m_flat().slice(sb, se);
      a.v = params_.adam_v_flat().slice(sb, se);
      if (copy)
        a.copy = cfg_.zero1() ? params_.compute_flat().slice(b, e) : params_.compute_flat().slice(sb, se);
      spans.push_back(std::move(a));
    }
  }
  return spans;
}

void DataParallel::step(AdamW& opt, double lr, float grad_scale) {
  if (cfg_.emulate || cfg_.shard_mode() == ShardMode::kNone) {
    opt.step(lr, grad_scale, compute_);
    return;
  }
  if (cfg_.fsdp()) {
    opt.step_spans(lr, grad_scale, shard_spans(), compute_);
    params_ready_ = StreamEvent::record(compute_);
    return;
  }
  // ZeRO-1: region by region in the forward's order (a layer's expert regions with it), this rank's chunk
  // updated, then every rank's updated chunk gathered into the whole compute copy (in place), so a region's
  // gather runs under the next regions' updates. With overlap_param_gather the updates run on a stream of
  // their own (update_) and the next forward waits per region (before_forward): the updates of the later
  // regions may run under the first layers' forward, as OverlappedUpdate's do for one GPU and DDP (measured
  // neutral on the 1B shape's DP 2: the forward's GEMMs leave it no SMs; docs/performance.md). AdamW is
  // elementwise: bitwise the update at once.
  // Nothing of the next step writes what the updates read: the next reduce-scatters queue on comm_ behind
  // every gather, and each gather waits for its region's update.
  stream_wait(update_, StreamEvent::record(compute_));
  opt.begin_step();
  std::vector<char> done(static_cast<size_t>(all_regions()), 0);
  auto update_and_gather = [&](int r) {
    if (done[r]) return;
    done[r] = 1;
    opt.launch_spans(shard_spans(r), lr, grad_scale, update_);
    stream_wait(comm_, StreamEvent::record(update_));
    const ParamRegion& reg = params_.regions()[r];
    Tensor whole = params_.compute_flat().slice(reg.begin, reg.end);
    Tensor mine =
        params_.compute_flat().slice(params_.chunk_begin(r), params_.chunk_begin(r) + params_.chunk_len(r));
    region_group(r).all_gather(mine, whole, comm_, fmt::format("param gather {}", r));
    pending_[r] = StreamEvent::record(comm_);
  };
  for (int r = 0; r <= last_region(); ++r)
    for (int x : with_owned(r)) update_and_gather(x);
  for (int r = 0; r < all_regions(); ++r) update_and_gather(r);  // (every region is owned: a safeguard)
  if (!cfg_.overlap_param_gather) {
    compute_waits_for(StreamEvent::record(comm_));
    std::fill(pending_.begin(), pending_.end(), nullptr);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Emulation (single process)

void DataParallel::emulate_grads(int64_t micro_per_rank, const std::function<void(int64_t, int)>& fwd_bwd) {
  const Stream& s = compute_;
  Tensor grad = params_.grad_flat();
  const int64_t n = grad.numel();
  auto add_into = [&](Tensor& acc, const Tensor& x) { ops::add(acc, x, acc, s); };
  if (!cfg_.fsdp()) {
    // DDP / ZeRO-1: each rank accumulates its micro-batches, then the rank-order sum (all-reduce or
    // reduce-scatter: the same per element).
    Tensor acc = Tensor::empty({n}, DType::kF32, s);
    std::vector<float> acc_bf;  // bf16 reduction: f32 accumulation of bf16 inputs, one rounding at the end
    for (int d = 0; d < cfg_.dp; ++d) {
      grad.zero_(s);
      for (int64_t a = 0; a < micro_per_rank; ++a) fwd_bwd(a, d);
      if (cfg_.reduce_in_bf16) {
        Tensor b = Tensor::empty({n}, DType::kBF16, s);
        ops::cast(grad, b, s);
        Tensor f = Tensor::empty({n}, DType::kF32, s);
        ops::cast(b, f, s);
        std::vector<float> v = f.to_vector<float>();
        if (d == 0) {
          acc_bf = v;
        } else {
          for (int64_t i = 0; i < n; ++i) acc_bf[i] = acc_bf[i] + v[i];
        }
      } else if (d == 0) {
        acc.copy_from(grad, s);
      } else {
        add_into(acc, grad);
      }
    }
    if (cfg_.reduce_in_bf16) {
      Tensor f = Tensor::from_vector(acc_bf, {n});
      Tensor b = Tensor::empty({n}, DType::kBF16);
      ops::cast(f, b, Stream::cpu());
      Tensor back = Tensor::empty({n}, DType::kF32);
      ops::cast(b, back, Stream::cpu());
      grad.copy_from(back, s);
    } else {
      grad.copy_from(acc, s);
    }
    return;
  }
  // FSDP / HSDP: per micro-batch, each replica's shard ranks reduce-scatter (rank-order sum) into the
  // replica's accumulator; at the end the replicas' accumulators are summed in replica order.
  const int R = cfg_.dp_replicate, K = cfg_.dp_shard;
  std::vector<Tensor> acc(R);
  for (auto& t : acc) t = Tensor::zeros({n}, DType::kF32, s);
  Tensor sum = Tensor::empty({n}, DType::kF32, s);
  for (int64_t a = 0; a < micro_per_rank; ++a) {
    for (int j = 0; j < R; ++j) {
      for (int k = 0; k < K; ++k) {
        grad.zero_(s);
        fwd_bwd(a, k + K * j);
        if (k == 0) {
          sum.copy_from(grad, s);
        } else {
          add_into(sum, grad);
        }
      }
      add_into(acc[j], sum);
    }
  }
  grad.copy_from(acc[0], s);
  for (int j = 1; j < R; ++j) add_into(grad, acc[j]);
}

// ---------------------------------------------------------------------------------------------------------
// Hooks

void DataParallel::gather(int r) {
  Gathered& g = gathered_[r];
  if (g.params.defined()) return;
  stream_wait(comm_, params_ready_);
  const int64_t len = params_.region_len(r);
  g.params = Tensor::empty({len}, params_.compute_flat().dtype(), comm_);
  Tensor mine =
      params_.compute_flat().slice(params_.shard_offset(r), params_.shard_offset(r) + params_.chunk_len(r));
  region_group(r).all_gather(mine, g.params, comm_, fmt::format("fsdp gather {}", r));
  g.ready = StreamEvent::record(comm_);
}

void DataParallel::use(int r, bool with_grad) {
  gather(r);
  Gathered& g = gathered_[r];
  if (with_grad && !g.grads.defined()) {
    g.grads = Tensor::empty({params_.region_len(r)}, DType::kF32, comm_);
    params_.begin_region_grads(r, g.grads, comm_);  // zeroes what the region's GEMMs will not overwrite
    g.ready = StreamEvent::record(comm_);
  }
  if (g.attached && (!with_grad || g.grads.defined())) {
    params_.attach_region(r, g.params, g.grads);
    return;
  }
  compute_waits_for(g.ready);
  params_.attach_region(r, g.params, g.grads);
  g.attached = true;
}

void DataParallel::release(int r) {
  Gathered& g = gathered_[r];
  if (g.open > 0) {  // a forward between a zero-bubble BI and its BW: the queued GEMMs still write grads
    release_params(r);
    return;
  }
  if (!g.params.defined() && !g.grads.defined()) return;
  // The buffers were allocated on the communication stream: make it wait for their last use on the compute
  // stream, so that freeing them (stream-ordered) cannot hand the memory out early.
  stream_wait(comm_, StreamEvent::record(compute_));
  params_.detach_region(r);
  g = Gathered();
}

void DataParallel::release_params(int r) {
  Gathered& g = gathered_[r];
  if (!g.params.defined()) return;
  stream_wait(comm_, StreamEvent::record(compute_));  // as in release: the weights' last use first
  g.params = Tensor();
  g.ready = nullptr;
  g.attached = false;  // the next use waits for a new gather
  params_.attach_region(r, Tensor(), g.grads);
}

void DataParallel::reduce_scatter_fsdp(int r) {
  Gathered& g = gathered_[r];
  PRIMUS_CHECK(g.grads.defined(), "fsdp: region {} has no gradient buffer to reduce", r);
  stream_wait(comm_, StreamEvent::record(compute_));
  Tensor part = Tensor::empty({params_.chunk_len(r)}, DType::kF32, comm_);
  region_group(r).reduce_scatter(g.grads, part, ReduceOp::kSum, comm_, fmt::format("fsdp grad {}", r));
  Tensor acc =
      params_.grad_flat().slice(params_.shard_offset(r), params_.shard_offset(r) + params_.chunk_len(r));
  ops::add(acc, part, acc, comm_);
}

void DataParallel::before_forward(int r) {
  if (cfg_.emulate) return;
  if (cfg_.zero1()) {
    for (int x : with_owned(r))  // the layer's experts (expert parallelism) with it
      if (pending_[x]) {
        compute_waits_for(pending_[x]);
        pending_[x] = nullptr;
      }
    return;
  }
  if (!cfg_.fsdp()) return;
  const int L = last_region() - 1;
  for (int x : with_owned(r)) use(x, training_ && edge(r));
  // Prefetch: the next region in forward order; from the head, the last layer (backward comes next).
  auto prefetch = [&](int n) {
    for (int x : with_owned(n)) gather(x);
  };
  if (r < L) prefetch(r + 1);
  if (r == L && r >= 1) prefetch(L + 1);
  if (r == L + 1 && training_ && L >= 1) prefetch(L);
}

void DataParallel::after_forward(int r) {
  if (!cfg_.fsdp() || cfg_.emulate) return;
  if (!edge(r)) {
    for (int x : with_owned(r)) release(x);  // reshard after forward (gathered again for backward)
  } else if (!training_ && r == last_region()) {
    for (int x : with_owned(last_region())) release(x);
    release(0);
  }
}

void DataParallel::before_backward(int r) {
  if (!cfg_.fsdp() || cfg_.emulate) return;
  for (int x : with_owned(r)) {
    use(x, true);
    ++gathered_[x].open;
  }
  if (r > 1)
    for (int x : with_owned(r - 1)) gather(x);
}

void DataParallel::backward_deferred(int r) {
  // Zero-bubble BI: the weight-gradient GEMMs need activations and output gradients, not the weights, so the
  // gathered weights go now (as after a whole backward); the gradient buffer stays until after_backward,
  // which the BW pass calls behind the region's GEMMs.
  if (!cfg_.fsdp() || cfg_.emulate) return;
  for (int x : with_owned(r)) release_params(x);
}

void DataParallel::after_backward(int r) {
  if (cfg_.emulate) return;
  if (cfg_.fsdp()) {
    for (int x : with_owned(r)) {
      Gathered& g = gathered_[x];
      // (The head's region runs forward and backward in one call: no before_backward, nothing open.)
      if (g.open > 0) --g.open;
      if (g.open > 0) {
        // Another micro-batch's weight gradients are still queued (zero-bubble): they accumulate into the
        // same buffer, reduce-scattered once the last of them has run.
        release_params(x);
        continue;
      }
      params_.end_region_grads(x, compute_);
      reduce_scatter_fsdp(x);
      release(x);
    }
    return;
  }
  if (last_micro_ && cfg_.overlap_grad_reduce && groups_) reduce_region(r);
}

// ---------------------------------------------------------------------------------------------------------
// Checkpoints

void DataParallel::gather_full(ParamStore& full) {
  PRIMUS_CHECK(full.total_numel() == params_.total_numel(), "gather_full: layouts differ");
  stream_sync(compute_);
  stream_sync(comm_);
  Tensor* shard_bufs[3] = {&params_.master_flat(), &params_.adam_m_flat(), &params_.adam_v_flat()};
  Tensor* full_bufs[3] = {&full.master_flat(), &full.adam_m_flat(), &full.adam_v_flat()};
  for (int b = 0; b < 3; ++b) {
    for (int r = 0; r < all_regions(); ++r) {
      const ParamRegion& reg = params_.regions()[r];
      // In the shard's dtype (the moments may be bf16: precision-aware optimizer); the full store is f32.
      Tensor whole = Tensor::empty({reg.end - reg.begin}, shard_bufs[b]->dtype(), compute_);
      Tensor mine =
          shard_bufs[b]->slice(params_.shard_offset(r), params_.shard_offset(r) + params_.chunk_len(r));
      region_group(r).all_gather(mine, whole, compute_, fmt::format("checkpoint gather {}", r));
      Tensor to = full_bufs[b]->slice(reg.begin, reg.end);
      ops::copy_cast(whole, to, compute_);
    }
  }
  stream_sync(compute_);
  full.sync_compute_copy(Stream::cpu());
}

void DataParallel::load_from_full(ParamStore& full) {
  PRIMUS_CHECK(full.total_numel() == params_.total_numel(), "load_from_full: layouts differ");
  stream_sync(compute_);
  stream_sync(comm_);
  Tensor* shard_bufs[3] = {&params_.master_flat(), &params_.adam_m_flat(), &params_.adam_v_flat()};
  Tensor* full_bufs[3] = {&full.master_flat(), &full.adam_m_flat(), &full.adam_v_flat()};
  for (int b = 0; b < 3; ++b)
    for (int r = 0; r < all_regions(); ++r) {
      const int64_t cb = params_.chunk_begin(r), len = params_.chunk_len(r), so = params_.shard_offset(r);
      Tensor to = shard_bufs[b]->slice(so, so + len);
      ops::copy_cast(full_bufs[b]->slice(cb, cb + len), to, compute_);
    }
  Tensor& compute = params_.compute_flat();
  if (cfg_.zero1()) {
    Tensor c = Tensor::empty({full.total_numel()}, compute.dtype());
    ParamStore::compute_from_master(full.master_flat(), c, Stream::cpu());
    compute.copy_from(c, compute_);
  } else if (!params_.compute_aliases_master()) {
    ParamStore::compute_from_master(params_.master_flat(), compute, compute_);
  }
  // Replicated entries (the MoE expert bias) also keep a whole copy on every rank (ParamEntry::replicated).
  for (int i = 0; i < static_cast<int>(params_.entries().size()); ++i)
    if (params_.entry(i).replicated) params_.set_master(i, full.master_f32(i, Stream::cpu()), compute_);
  stream_sync(compute_);
  params_ready_ = nullptr;
}

}  // namespace primus
