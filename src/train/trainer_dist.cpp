// The trainer's data-parallel side (docs/distributed.md, "Data-parallel training"): the world and its groups,
// the per-rank sample stream, the DP step, and checkpoints of sharded state.
#include <signal.h>

#include <cstdlib>

#include "checkpoint/hf_weights.h"
#include "comm/rank_names.h"
#include "comm/world.h"
#include "core/log.h"
#include "parallel/config_agreement.h"
#include "parallel/data_parallel.h"
#include "parallel/expert_state.h"
#include "parallel/parallel_dims.h"
#include "parallel/process_groups.h"
#include "profile/trace.h"
#include "train/trainer.h"

namespace primus {

namespace {

std::optional<std::string> env_str(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

// PRIMUS_INJECT_KILL="<iteration>:<rank>": that rank SIGKILLs itself in the middle of that iteration (after
// its first micro-batch's backward, before the gradient reduction) — the fault test of the DP trainer.
// PRIMUS_INJECT_KILL / PRIMUS_INJECT_SIGTERM=<iteration>:<rank>: that rank SIGKILLs itself in the middle of
// the iteration, or sends itself SIGTERM as the iteration starts (only that rank sees the signal; the stop
// agreement must carry it to the others).
struct RankInjection {
  int64_t iter = -1;
  int rank = -1;
  static RankInjection from_env(const char* var) {
    RankInjection k;
    if (auto v = env_str(var)) {
      const auto colon = v->find(':');
      if (colon == std::string::npos)
        throw ConfigError(fmt::format("{}='{}' (expected <iteration>:<rank>)", var, *v));
      k.iter = std::stoll(v->substr(0, colon));
      k.rank = std::stoi(v->substr(colon + 1));
    }
    return k;
  }
};

std::atomic<bool> g_mpi_world{false};

}  // namespace

bool distributed_errors_need_printing() {
  return g_mpi_world.load();
}

void Trainer::init_distributed() {
  const comm::LaunchEnv env = comm::resolve_launch_env(comm::process_env_lookup());
  world_rank_ = env.rank;
  world_size_ = env.world_size;
  const auto emulate = env_str("PRIMUS_DP_EMULATE");
  if (env.world_size <= 1 && !emulate) return;

  parallel::ParallelLayout layout;
  if (env.world_size > 1) {
    log::set_rank(env.rank, env.world_size);
    const bool gpu = cfg_.device == "cuda" || cfg_.device == "gpu" ||
                     ((cfg_.device == "auto" || cfg_.device.empty()) && cuda_available());
    if (gpu) {
      const int n = cuda_device_count();
      if (n < 1) throw ConfigError("device: a GPU run with no visible GPU", "use device: cpu");
      gpu_index_ = env.local_rank % n;
    }
    std::string backend = gpu ? "nccl" : "auto";
    if (auto b = env_str("PRIMUS_COMM_BACKEND")) backend = *b;
    comm::WorldOptions wo;
    wo.backend = backend;
    wo.timeout_s = cfg_.parallel.distributed_timeout_s;
    wo.cuda_device = gpu ? gpu_index_ : -1;
    // The layout's model and batch rules (heads, experts, batch split) before any communicator or memory.
    parallel::layout_from_config(cfg_.parallel, env.world_size).dims.validate_training(cfg_);
    world_.reset(new comm::World(comm::init_world(env, wo)));
    // Every rank must run the same experiment before any group or shape is derived from it.
    parallel::check_ranks_agree(
        *world_->comm, resolved_yaml_,
        world_->comm->device_type() == DeviceType::kCUDA ? cuda_compute_stream(gpu_index_) : Stream::cpu());
    layout = parallel::layout_from_config(cfg_.parallel, env.world_size);
    std::vector<std::string> places;  // failure reports name a rank with its coordinates from here on
    for (int r = 0; r < env.world_size; ++r) places.push_back(layout.dims.describe_rank(r));
    comm::set_rank_coordinates(std::move(places));
    if (layout.dims.tp() > 1 || layout.dims.pp() > 1 || layout.dims.cp() > 1)
      throw ConfigError(
          fmt::format("{}: tensor, pipeline and context parallelism are not implemented yet "
                      "(data parallelism only)",
                      layout.describe()));
    groups_.reset(new parallel::ProcessGroups(parallel::build_groups(layout.dims, *world_->comm)));
    dp_cfg_ = std::make_unique<DpConfig>(dp_config(layout, cfg_.parallel));
    dp_rank_ = groups_->get("dp").rank();
    shard_rank_ = dp_cfg_->fsdp() ? groups_->get("dp_shard").rank() : dp_cfg_->zero1() ? dp_rank_ : 0;
  } else {
    // A single process reproducing the arithmetic of a DP layout of the given size (equivalence tests).
    int n = 0;
    try {
      n = std::stoi(*emulate);
    } catch (...) {
    }
    if (n < 1)
      throw ConfigError(fmt::format("PRIMUS_DP_EMULATE='{}' (expected a data-parallel size >= 1)", *emulate));
    layout = parallel::layout_from_config(cfg_.parallel, n);
    dp_cfg_ = std::make_unique<DpConfig>(dp_config(layout, cfg_.parallel));
    dp_cfg_->emulate = true;
    if (dp_cfg_->ep > 1)
      throw ConfigError(fmt::format("PRIMUS_DP_EMULATE={}: one process cannot emulate expert parallelism "
                                    "(expert_model_parallel_size {})",
                                    n, dp_cfg_->ep),
                        "launch the ranks (primus launch / mpirun) or set expert_model_parallel_size: 1");
  }
  if (dp_cfg_->emulate) layout.dims.validate_training(cfg_);
}

ModelSpec Trainer::local_spec() const {
  ModelSpec spec = ModelSpec::from_config(cfg_.model);
  if (!groups_ || groups_->dims().ep() == 1) return spec;
  // Expert parallelism: this rank holds the experts of its ep coordinate (the layout decides, not the model).
  return spec.with_expert_shard(groups_->dims().ep(), groups_->dims().coords(world_rank_).ep);
}

std::unique_ptr<ParamStore> Trainer::local_store_layout() const {
  return std::make_unique<ParamStore>(local_spec(), dp_cfg_ ? dp_cfg_->shard_ranks() : 1,
                                      dp_cfg_ ? dp_cfg_->expert_shard_ranks() : 1);
}

void Trainer::init_data_parallel() {
  const DType compute = stream_.device.is_cpu() ? DType::kF32 : DType::kBF16;
  params_ = local_store_layout();
  if (dp_cfg_ && !dp_cfg_->emulate) {
    const int expert_rank = dp_cfg_->expert_shard_ranks() > 1 ? groups_->get("edp").rank() : 0;
    params_->allocate_sharded(compute, stream_, dp_cfg_->shard_mode(), dp_cfg_->shard_ranks(), shard_rank_,
                              dp_cfg_->expert_shard_ranks(), expert_rank);
  } else {
    params_->allocate(compute, stream_);
  }
  params_->initialize(static_cast<uint64_t>(cfg_.seed), stream_);
  model_ = std::make_unique<LlamaModel>(cfg_.model, cfg_.recompute, *params_, stream_, cfg_.data.seq_length);
  if (!dp_cfg_) return;
  // MoE: tokens travel over ep to their experts; the expert bias follows the loads of every dp x cp rank.
  if (groups_) model_->set_expert_groups(&groups_->get("ep"), &groups_->get("dp_cp"));
  // Micro-batches per rank: global batch = micro-batch x accumulation x DP.
  micro_batches_ = cfg_.global_batch_size / (cfg_.micro_batch_size * dp_cfg_->dp);
  dp_ = std::make_unique<DataParallel>(*dp_cfg_, *params_, groups_.get(), stream_);
  hooks_.add(dp_.get());
  model_->set_hooks(&hooks_);
  log::info("data parallel: {} | {} micro-batch(es) of {} per rank per step", dp_cfg_->describe(),
            micro_batches_, cfg_.micro_batch_size);
  // Persistent parameter state per rank (FSDP adds the gathered regions in use, ZeRO-1 its f32 gradient
  // chunks), against the whole model's.
  // DDP on the GPU keeps its master weights in remainders (2 bytes beside the bf16 copy instead of 4).
  const bool rem = params_->master_in_remainders();
  // Under expert parallelism this rank's store holds a share of the experts: the whole model is the unsplit
  // one.
  const int64_t whole_numel =
      experts_split() ? ParamStore(ModelSpec::from_config(cfg_.model)).total_numel() : params_->total_numel();
  const double whole_bytes = static_cast<double>(whole_numel) *
                             ((rem ? 2.0 : 4.0) + 3 * 4.0 +
                              (compute == DType::kF32 ? 0.0 : static_cast<double>(dtype_size(compute))));
  const bool big = whole_bytes >= 1e9;
  auto sz = [&](double bytes) {
    return fmt::format("{:.2f} {}", bytes / (big ? 1e9 : 1e6), big ? "GB" : "MB");
  };
  auto nb = [](const Tensor& t) { return static_cast<double>(t.nbytes()); };
  log::info(
      "parameter state per rank: master {}{}, Adam moments {}, gradients {}, compute copy {} (whole model: "
      "{})",
      sz(nb(rem ? params_->remainder_flat() : params_->master_flat())), rem ? " (i16 remainders)" : "",
      sz(nb(params_->adam_m_flat()) + nb(params_->adam_v_flat())), sz(nb(params_->grad_flat())),
      sz(params_->compute_aliases_master() ? 0.0 : nb(params_->compute_flat())), sz(whole_bytes));
  if (world_) log::info("parallel layout: {}", groups_->dims().describe());
}

void Trainer::reduce_moe_stats(std::vector<MoeLayerStats>& layers) {
  if (!groups_ || groups_->get("dp_cp").size() == 1) return;
  comm::Communicator& g = groups_->get("dp_cp");
  const Stream s = g.device_type() == DeviceType::kCPU ? Stream::cpu() : stream_;
  const int64_t n = static_cast<int64_t>(layers.size());
  std::vector<double> sums;
  std::vector<int64_t> maxes;
  for (const MoeLayerStats& l : layers) {
    sums.insert(sums.end(), {l.aux_loss, l.z_loss, static_cast<double>(l.forwards),
                             static_cast<double>(l.routed), static_cast<double>(l.dropped)});
    maxes.push_back(l.max_load);
  }
  Tensor st = Tensor::from_vector(sums, {5 * n}), mt = Tensor::from_vector(maxes, {n});
  if (!s.device.is_cpu()) {
    st = st.to(s);
    mt = mt.to(s);
  }
  g.all_reduce(st, comm::ReduceOp::kSum, s, "moe routing statistics");
  g.all_reduce(mt, comm::ReduceOp::kMax, s, "moe max load");
  const std::vector<double> su = st.to_vector<double>();
  const std::vector<int64_t> mx = mt.to_vector<int64_t>();
  const double experts = static_cast<double>(cfg_.model.moe.num_experts);
  for (int64_t i = 0; i < n; ++i) {
    MoeLayerStats& l = layers[i];
    l.aux_loss = su[5 * i];
    l.z_loss = su[5 * i + 1];
    l.forwards = static_cast<int64_t>(su[5 * i + 2]);
    l.routed = static_cast<int64_t>(su[5 * i + 3]);
    l.dropped = static_cast<int64_t>(su[5 * i + 4]);
    l.max_load = mx[i];
    l.mean_load =
        l.forwards > 0 ? static_cast<double>(l.routed) / (static_cast<double>(l.forwards) * experts) : 0.0;
  }
}

int64_t Trainer::consumed_samples() const {
  return loader_ ? loader_->consumed_samples() : consumed_;
}

Trainer::StepOutcome Trainer::train_step_dp(int64_t iter) {
  static const RankInjection kill = RankInjection::from_env("PRIMUS_INJECT_KILL");
  static const RankInjection term = RankInjection::from_env("PRIMUS_INJECT_SIGTERM");
  if (iter == term.iter && world_rank_ == term.rank) {
    log::warn("PRIMUS_INJECT_SIGTERM: rank {} sends itself SIGTERM in iteration {}", world_rank_, iter);
    ::raise(SIGTERM);
  }
  const DpConfig& c = dp_->config();
  const int D = c.dp;
  const int64_t A = micro_batches_;  // per rank
  const int64_t mbs = cfg_.micro_batch_size;
  const int64_t base = consumed_;
  // Micro-batch a of DP rank d holds samples base + (a*D + d)*mbs ...: global micro-batch k = a*D + d, the
  // order in which a single process with the same global batch reads them.
  std::vector<Tensor> loss_t(static_cast<size_t>(A * D));
  std::vector<int64_t> valid(static_cast<size_t>(A * D), 0);
  auto run_micro = [&](int64_t a, int d) {
    const int64_t k = a * D + d;
    // A rank reads its own micro-batches from its (strided, prefetching) loader; the emulation every
    // virtual rank's directly.
    Batch b = [&] {
      PRIMUS_TRACE_RANGE("data");
      return loader_ ? loader_->next()
                     : make_batch(*data_.train, base + k * mbs, mbs, data_.eod_id, cfg_.data.eod_mask_loss);
    }();
    PRIMUS_CHECK(b.first_sample == base + k * mbs,
                 "data-parallel rank {}: micro-batch {} starts at sample {}, expected {}", d, a,
                 b.first_sample, base + k * mbs);
    PRIMUS_CHECK(b.valid_tokens > 0, "micro-batch at sample {} has no tokens that count toward the loss",
                 b.first_sample);
    // As the single process: 1 / (counted tokens x micro-batches in the global batch).
    const float scale = 1.0f / (static_cast<float>(b.valid_tokens) * static_cast<float>(A * D));
    Tensor tokens = stream_.device.is_cpu() ? b.tokens : b.tokens.to(stream_);
    Tensor targets = stream_.device.is_cpu() ? b.targets : b.targets.to(stream_);
    PRIMUS_TRACE_RANGE("forward_backward");
    loss_t[k] =
        model_->forward_backward(tokens, targets, scale, 1.0f / static_cast<float>(A * D), &b.targets,
                                 BatchOrigin{static_cast<uint64_t>(cfg_.seed), false, b.first_sample});
    valid[k] = b.valid_tokens;
    note_mtp();
    if (iter == kill.iter && world_rank_ == kill.rank && a == 0) {
      log::warn("PRIMUS_INJECT_KILL: rank {} kills itself in iteration {}", world_rank_, iter);
      ::raise(SIGKILL);
    }
  };

  std::vector<double> micro(static_cast<size_t>(A * D), 0.0);
  int stop_any = 0;
  auto micro_loss = [&](int64_t k) {
    std::vector<double> l = loss_t[k].to_vector<double>();
    double sum = 0;
    for (double x : l) sum += x;
    return sum / static_cast<double>(valid[k]);
  };
  if (c.emulate) {
    dp_->emulate_grads(A, run_micro);
    model_->end_step();
    for (int64_t k = 0; k < A * D; ++k) micro[k] = micro_loss(k);
  } else {
    dp_->begin_step(/*grads_prepared=*/overlap_ && overlap_->take_grads_prepared());
    for (int64_t a = 0; a < A; ++a) {
      dp_->begin_micro(a == A - 1);
      run_micro(a, dp_rank_);
    }
    {
      PRIMUS_TRACE_RANGE("finish_grads");
      dp_->finish_grads();
    }
    model_->end_step();
    PRIMUS_TRACE_RANGE("loss exchange");
    // Every rank's micro-batch losses, in global order, and after them its stop request (signals and
    // time can differ between ranks; all must stop at the same step).
    std::vector<double> mine(static_cast<size_t>(A + 1));
    for (int64_t a = 0; a < A; ++a) mine[a] = micro_loss(a * D + dp_rank_);
    mine[A] = stop_request();
    Tensor in = Tensor::from_vector(mine, {A + 1});
    Tensor out = Tensor::empty({(A + 1) * D}, DType::kF64, stream_);
    if (stream_.device.is_cuda()) in = in.to(stream_);
    groups_->get("dp").all_gather(in, out, stream_, "micro-batch losses");
    const std::vector<double> all = out.to_vector<double>();  // [d][a], then d's stop request
    for (int d = 0; d < D; ++d) {
      for (int64_t a = 0; a < A; ++a) micro[a * D + d] = all[d * (A + 1) + a];
      stop_any = std::max(stop_any, static_cast<int>(all[d * (A + 1) + A]));
    }
  }
  if (params_->shard_mode() != ShardMode::kFull) inject_.maybe_poison_grad(iter, *params_, stream_);
  StepOutcome o;
  o.stop_request = c.emulate ? stop_request() : stop_any;
  {
    PRIMUS_TRACE_RANGE("grad_norm");
    o.grad_norm = dp_->grad_norm();
  }
  o.lr = schedule_->at(iter);
  for (double m : micro) o.loss += m;
  o.loss /= static_cast<double>(micro.size());
  o.mtp_losses = take_mtp_losses();
  if (inject_.spike_iter && *inject_.spike_iter == iter) o.loss *= inject_.spike_factor;
  run_guards(iter, o, micro);
  if (o.applied) {
    PRIMUS_TRACE_RANGE("optimizer");
    const float clip = clip_coefficient(o.grad_norm, cfg_.optim.clip_grad);
    if (overlap_)  // DDP: reduced whole gradients, updated under the next forward as on one GPU
      overlap_->launch(o.lr, clip);
    else
      dp_->step(*optim_, o.lr, clip);
  }
  consumed_ += cfg_.global_batch_size;
  return o;
}

// ---------------------------------------------------------------------------------------------------------
// Checkpoints. Saves are whole-model files written by world rank 0 (sharded state is gathered first), so a
// checkpoint loads at any DP size and mode: every rank reads it and keeps its own chunks.

bool Trainer::experts_split() const {
  return params_->expert_shard().size > 1;
}

// Expert parallelism: `whole` (the unsplit model, on the CPU) into this rank's parameters.
void Trainer::load_from_whole_model(ParamStore& whole) {
  std::unique_ptr<ParamStore> local = local_store_layout();
  local->allocate(DType::kF32, Stream::cpu());
  parallel::take_expert_share(whole, *local);
  if (params_->shard_mode() == ShardMode::kNone) {
    parallel::copy_param_state(*local, *params_, stream_);
  } else {
    dp_->load_from_full(*local);
  }
}

ckpt::LoadReport Trainer::load_checkpoint_params(const ckpt::Verification& v, const ckpt::LoadOptions& opt) {
  if (experts_split()) {
    ParamStore whole(ModelSpec::from_config(cfg_.model));
    whole.allocate(DType::kF32, Stream::cpu());
    const ckpt::LoadReport rep = ckpt::load_into_params(v, whole, Stream::cpu(), opt);
    load_from_whole_model(whole);
    return rep;
  }
  if (params_->shard_mode() == ShardMode::kNone) return ckpt::load_into_params(v, *params_, stream_, opt);
  ParamStore full(ModelSpec::from_config(cfg_.model), params_->shard_ranks());
  full.allocate(DType::kF32, Stream::cpu());
  const ckpt::LoadReport rep = ckpt::load_into_params(v, full, Stream::cpu(), opt);
  dp_->load_from_full(full);
  return rep;
}

void Trainer::load_hf_params(const ckpt::HfCheckpoint& hf) {
  if (experts_split()) {
    ParamStore whole(ModelSpec::from_config(cfg_.model));
    whole.allocate(DType::kF32, Stream::cpu());
    ckpt::load_hf_into_params(hf, whole, Stream::cpu());
    load_from_whole_model(whole);
    return;
  }
  if (params_->shard_mode() == ShardMode::kNone) {
    ckpt::load_hf_into_params(hf, *params_, stream_);
    return;
  }
  ParamStore full(ModelSpec::from_config(cfg_.model), params_->shard_ranks());
  full.allocate(DType::kF32, Stream::cpu());
  ckpt::load_hf_into_params(hf, full, Stream::cpu());
  dp_->load_from_full(full);
}

const ParamStore* Trainer::params_for_save() {
  if (experts_split()) {
    // The whole model: this rank's whole state (ZeRO-1 chunks gathered first), then every ep rank's experts.
    ParamStore* local = params_.get();
    Stream s = stream_;
    if (params_->shard_mode() != ShardMode::kNone) {
      if (!ckpt_local_) {
        ckpt_local_ = local_store_layout();
        ckpt_local_->allocate(DType::kF32, Stream::cpu());
      }
      dp_->gather_full(*ckpt_local_);
      local = ckpt_local_.get();
      s = Stream::cpu();
    }
    if (!ckpt_full_) {
      ckpt_full_ = std::make_unique<ParamStore>(ModelSpec::from_config(cfg_.model));
      ckpt_full_->allocate(stream_.device.is_cpu() ? DType::kF32 : DType::kBF16, Stream::cpu(), DType::kF32,
                           MasterStorage::kF32);
    }
    parallel::gather_expert_state(*local, s, groups_->get("ep"), *ckpt_full_);
    return is_rank0() ? ckpt_full_.get() : nullptr;
  }
  if (params_->shard_mode() == ShardMode::kNone) return is_rank0() ? params_.get() : nullptr;
  // Collective over the shard group; HSDP replicas hold the same shards, so every replica gathers.
  if (!ckpt_full_) {
    ckpt_full_ = std::make_unique<ParamStore>(ModelSpec::from_config(cfg_.model), params_->shard_ranks());
    ckpt_full_->allocate(stream_.device.is_cpu() ? DType::kF32 : DType::kBF16, Stream::cpu());
  }
  dp_->gather_full(*ckpt_full_);
  return is_rank0() ? ckpt_full_.get() : nullptr;
}

}  // namespace primus
