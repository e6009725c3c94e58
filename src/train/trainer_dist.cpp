// The trainer's data-parallel side (docs/distributed.md, "Data-parallel training"): the world and its groups,
// the per-rank sample stream, the DP step, and checkpoints of sharded state.
#include <fmt/ranges.h>

#include <cstdlib>

#include "checkpoint/hf_weights.h"
#include "checkpoint/peft_adapter.h"
#include "comm/rank_names.h"
#include "comm/world.h"
#include "config/not_supported.h"
#include "config/plan.h"
#include "core/log.h"
#include "core/memory_owner.h"
#include "parallel/config_agreement.h"
#include "parallel/context_parallel.h"
#include "parallel/data_parallel.h"
#include "parallel/parallel_dims.h"
#include "parallel/pipeline_runtime.h"
#include "parallel/process_groups.h"
#include "parallel/split_state.h"
#include "parallel/tensor_parallel.h"
#include "profile/trace.h"
#include "train/sparse_embedding.h"
#include "train/trainer.h"

namespace primus {

namespace {

std::optional<std::string> env_str(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

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
    layout = parallel::layout_from_config(cfg_.parallel, env.world_size);
    layout.dims.validate_training(cfg_);
    world_.reset(new comm::World(comm::init_world(env, wo)));
    // Every rank must run the same experiment before any group or shape is derived from it.
    parallel::check_ranks_agree(
        *world_->comm, resolved_yaml_,
        world_->comm->device_type() == DeviceType::kCUDA ? cuda_compute_stream(gpu_index_) : Stream::cpu());
    std::vector<std::string> places;  // failure reports name a rank with its coordinates from here on
    for (int r = 0; r < env.world_size; ++r) places.push_back(layout.dims.describe_rank(r));
    comm::set_rank_coordinates(std::move(places));
    groups_.reset(new parallel::ProcessGroups(parallel::build_groups(layout.dims, *world_->comm)));
    dp_cfg_ = std::make_unique<DpConfig>(dp_config(layout, cfg_.parallel));
    if (layout.dims.pp() > 1) init_pipeline(layout);
    dp_rank_ = groups_->get("dp").rank();
    shard_rank_ = dp_cfg_->shard_ranks() > 1 ? groups_->get(dp_cfg_->shard_group()).rank() : 0;
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
    layout.dims.validate_training(cfg_);
    dp_cfg_ = std::make_unique<DpConfig>(dp_config(layout, cfg_.parallel));
    dp_cfg_->emulate = true;
    if (dp_cfg_->ep > 1 || layout.dims.tp() > 1)
      throw ConfigError(
          fmt::format("PRIMUS_DP_EMULATE={}: one process cannot emulate expert or tensor "
                      "parallelism (expert_model_parallel_size {}, tensor_model_parallel_size {})",
                      n, dp_cfg_->ep, layout.dims.tp()),
          "launch the ranks (primus launch / mpirun)");
  }
}

void Trainer::init_pipeline(const parallel::ParallelLayout& layout) {
  // What the runtime composes with so far; the rest is refused before anything is allocated.
  auto refuse = [&](const std::string& what) {
    throw config::NotSupportedError(
        fmt::format("{}: not supported yet: pipeline parallelism with {}", layout.describe(), what));
  };
  if (!cfg_.pipeline)
    refuse("a TorchTitan config (parallelism.pipeline_parallel_* are not mapped; use the Megatron dialect)");
  pp_plan_ = std::make_unique<parallel::PipelinePlan>(parallel::training_plan(*cfg_.pipeline));
  // FSDP composes with every schedule: under the zero-bubble ones a region's reduce-scatter waits for its
  // deferred weight gradients (ParamHooks::backward_deferred, DataParallel::after_backward).
  // Multi-token prediction runs in the loss's chunk, between the head's forward and backward (Megatron
  // requires the MTP block on the last stage too); a layout that gives the depths a chunk of their own
  // (Megatron's mtp_standalone) is not run.
  const parallel::PipelineLayout& split = pp_plan_->layout;
  for (int r = 0; r < split.pp(); ++r)
    for (int c = 0; c < split.vpp(); ++c)
      if (split.at(r, c).num_mtp > 0 && !split.at(r, c).loss)
        refuse(fmt::format(
            "multi-token-prediction layers in a chunk without the loss (pipeline_model_parallel_layout "
            "places the m's in chunk {} of rank {}, the L elsewhere; put them in the loss's chunk, as in "
            "\"...|t*4,mL\")",
            c, r));
  const int64_t micro = config::batch_layout(cfg_, dp_cfg_->dp).micro_batches;
  PRIMUS_CHECK(pp_plan_->schedule.microbatches == micro,
               "the pipeline schedule has {} micro-batches, the batch layout {}",
               pp_plan_->schedule.microbatches, micro);
}

ModelSpec Trainer::whole_spec() const {
  ModelSpec spec = ModelSpec::from_config(cfg_.model);
  if (cfg_.lora.enabled) spec.adapters = cfg_.lora;
  return spec;
}

ModelSpec Trainer::local_spec() const {
  ModelSpec spec = whole_spec();
  if (!groups_) return spec;
  // This rank holds the experts of its ep coordinate and the heads / ffn / vocabulary of its tp coordinate
  // (the layout decides, not the model).
  const parallel::ParallelDims& dims = groups_->dims();
  const parallel::ParallelCoords c = dims.coords(world_rank_);
  if (dims.ep() > 1) spec = spec.with_expert_shard(dims.ep(), c.ep);
  if (dims.tp() > 1) spec = spec.with_tensor_shard(dims.tp(), c.tp, cfg_.parallel.sequence_parallel);
  if (pp_plan_) spec = parallel::stage_spec(spec, pp_plan_->layout, c.pp);
  return spec;
}

void Trainer::end_fp8_step() {
  Fp8State* st = model_->fp8();
  if (st == nullptr) return;
  std::vector<comm::Communicator*> groups;
  if (groups_ && dp_cfg_ && !dp_cfg_->emulate)
    for (const char* g : {"dp_cp", "tp"}) groups.push_back(&groups_->get(g));
  st->end_step(groups);
}

std::unique_ptr<ParamStore> Trainer::local_store_layout() const {
  return std::make_unique<ParamStore>(local_spec(), dp_cfg_ ? dp_cfg_->shard_ranks() : 1,
                                      dp_cfg_ ? dp_cfg_->expert_shard_ranks() : 1);
}

void Trainer::init_data_parallel() {
  const DType compute = stream_.device.is_cpu() ? DType::kF32 : DType::kBF16;
  params_ = local_store_layout();
  params_->set_moment_dtypes(cfg_.optim.exp_avg_dtype, cfg_.optim.exp_avg_sq_dtype);
  if (const int64_t rows = sparse_embedding_rows(cfg_, world_size_); rows > 0) {
    params_->set_sparse_embedding_grad(rows);
    const ParamEntry& e = params_->entry(params_->sparse_entry());
    log::info("input embedding gradient: row-sparse, {} rows of {} ({:.1f} MB instead of {:.1f} MB dense{})",
              rows, e.shape[0], 4e-6 * static_cast<double>(rows * (e.shape[1] + 1) + e.shape[0]),
              4e-6 * static_cast<double>(e.numel),
              dp_cfg_ ? "; the dp ranks all-reduce the rows their step touches" : "");
  }
  // The store names its buffers' owners itself (parameters, gradients, optimizer state).
  if (dp_cfg_ && !dp_cfg_->emulate) {
    const int expert_rank =
        dp_cfg_->expert_shard_ranks() > 1 ? groups_->get(dp_cfg_->expert_group()).rank() : 0;
    params_->allocate_sharded(compute, stream_, dp_cfg_->shard_mode(), dp_cfg_->shard_ranks(), shard_rank_,
                              dp_cfg_->expert_shard_ranks(), expert_rank);
  } else {
    params_->allocate(compute, stream_);
  }
  params_->initialize(static_cast<uint64_t>(cfg_.seed), stream_);
  if (cfg_.lora.enabled) {
    // The base model: weights only, whole on every data-parallel rank (this rank's part under tp).
    ModelSpec base = local_spec();
    base.adapters = LoraConfig{};
    base_ = std::make_unique<ParamStore>(base);
    base_->allocate_frozen(compute, stream_);
    // A base named by `load` overwrites every weight (load_lora_base refuses a missing one): no random
    // initialisation to throw away (8B parameters: ~32 GB of host memory and half a minute).
    if (cfg_.checkpoint.load.empty()) base_->initialize(static_cast<uint64_t>(cfg_.seed), stream_);
  }
  PRIMUS_MEMORY_OWNER("model buffers");  // RoPE tables, FP8 scaling state, parallel layouts' own
  model_ = std::make_unique<LlamaModel>(cfg_.model, cfg_.recompute, base_ ? *base_ : *params_, stream_,
                                        cfg_.data.seq_length);
  if (base_) {
    model_->attach_adapters(*params_);
    log::info(
        "LoRA: rank {}, alpha {} (scale {:.4g}) on {}; {:.3f}M trainable parameters on this rank, the "
        "{:.2f}M of the base model frozen ({} weights only)",
        cfg_.lora.rank, cfg_.lora.alpha, cfg_.lora.scale(), fmt::join(cfg_.lora.targets, ", "),
        params_->parameter_count() / 1e6, base_->parameter_count() / 1e6, dtype_name(compute));
    if (const std::string why = ckpt::peft_export_problem(cfg_.model, hf_config_); !why.empty())
      log::warn("LoRA: the end-of-run PEFT export cannot express this model ({}); {}", why,
                cfg_.checkpoint.save.empty() ? "set `save` to keep the trained adapters"
                                             : "the adapters are kept in the checkpoints under `save`");
  }
  if (fp8_recipe_) {
    model_->enable_fp8(*fp8_recipe_);
    log::info("fp8: {}; {} projections on this rank, {:.1f}% of the step's GEMM FLOPs in FP8",
              fp8_recipe_->describe(), model_->fp8()->slots(), 100.0 * fp8_share_);
  }
  if (!dp_cfg_) return;
  if (groups_ && groups_->dims().cp() > 1) {
    cp_ = std::make_unique<parallel::ContextParallel>(groups_->get("cp"));
    model_->set_context_parallel(cp_.get());
    log::info(
        "context parallel: {} ranks, this rank holds chunks {} and {} of {} per sequence (cp_comm_type {})",
        cp_->size(), cp_->chunk(0), cp_->chunk(1), 2 * cp_->size(),
        cfg_.parallel.cp_comm_type == "all_gather" ? std::string("all_gather")
                                                   : cfg_.parallel.cp_comm_type + ", run as all_gather");
  }
  if (groups_ && groups_->dims().tp() > 1) {
    tp_ = std::make_unique<parallel::TensorParallel>(groups_->get("tp"), cfg_.parallel.sequence_parallel,
                                                     params_->tensor_shard().kv_replicas);
    tp_->set_overlap(cfg_.parallel.tp_comm_overlap);
    model_->set_tensor_parallel(tp_.get());
    log::info("tensor parallel: {} ranks{}{}, this rank tp {}: {}", tp_->size(),
              tp_->sequence_parallel() ? " with sequence parallelism" : "",
              tp_->overlap() ? " and async TP (tp_comm_overlap)" : "", tp_->rank(),
              params_->spec().describe());
  }
  if (pp_plan_) {
    pipeline_ = std::make_unique<parallel::PipelineRuntime>(*pp_plan_, groups_->get("pp"), *model_, stream_);
    log::info(
        "pipeline parallel: {} ranks x {} chunk(s), schedule {} over {} micro-batches; this rank (pp {}) "
        "holds {}",
        pp_plan_->layout.pp(), pp_plan_->layout.vpp(), parallel::schedule_name(pp_plan_->kind),
        pp_plan_->schedule.microbatches, groups_->get("pp").rank(), params_->spec().pipeline_modules());
    for (const std::string& n : cfg_.pipeline->notes) log::warn("pipeline: {}", n);
  }
  // MoE: tokens travel over ep to their experts; the expert bias follows the loads of every dp x cp rank.
  if (groups_) model_->set_expert_groups(&groups_->get("ep"), &groups_->get("dp_cp"));
  // Micro-batches per rank: global batch = micro-batch x accumulation x DP.
  micro_batches_ = config::batch_layout(cfg_, dp_cfg_->dp).micro_batches;
  {
    PRIMUS_MEMORY_OWNER("data parallel buffers");
    dp_ = std::make_unique<DataParallel>(*dp_cfg_, *params_, groups_.get(), stream_);
  }
  dp_->set_tensor_parallel(tp_.get());
  if (pipeline_) dp_->set_pipeline(&groups_->get("pp"), &groups_->get("embedding"));
  hooks_.add(dp_.get());
  model_->set_hooks(&hooks_);
  log::info("data parallel: {} | {} micro-batch(es) of {} per rank per step", dp_cfg_->describe(),
            micro_batches_, cfg_.micro_batch_size);
  // Persistent parameter state per rank (FSDP adds the gathered regions in use, ZeRO-1 its f32 gradient
  // chunks), against the whole model's.
  // DDP on the GPU keeps its master weights in remainders (2 bytes beside the bf16 copy instead of 4).
  const bool rem = params_->master_in_remainders();
  // Under expert / tensor parallelism this rank's store holds a share of the model: the whole model is the
  // unsplit one.
  const int64_t whole_numel = model_split() ? ParamStore(whole_spec()).total_numel() : params_->total_numel();
  const double whole_bytes = static_cast<double>(whole_numel) *
                             ((rem ? 2.0 : 4.0) + 3 * 4.0 +
                              (compute == DType::kF32 ? 0.0 : static_cast<double>(dtype_size(compute))));
  const bool big = whole_bytes >= 1e9;
  auto sz = [&](double bytes) {
    return fmt::format("{:.2f} {}", bytes / (big ? 1e9 : 1e6), big ? "GB" : "MB");
  };
  auto nb = [](const Tensor& t) { return t.defined() ? static_cast<double>(t.nbytes()) : 0.0; };
  double grad_bytes = nb(params_->grad_flat());
  if (params_->sparse_entry() >= 0) {  // the row-sparse embedding's slots and maps
    const ops::RowSparseGrad& g = params_->sparse_grad();
    grad_bytes += nb(g.rows) + nb(g.slot_of) + nb(g.row_of) + nb(g.count);
  }
  log::info(
      "parameter state per rank: master {}{}, Adam moments {}, gradients {}, compute copy {} (whole model: "
      "{})",
      sz(nb(rem ? params_->remainder_flat() : params_->master_flat())), rem ? " (i16 remainders)" : "",
      sz(nb(params_->adam_m_flat()) + nb(params_->adam_v_flat())), sz(grad_bytes),
      sz(params_->compute_aliases_master() ? 0.0 : nb(params_->compute_flat())), sz(whole_bytes));
  if (world_) log::info("parallel layout: {}", groups_->dims().describe());
}

void Trainer::reduce_moe_stats(std::vector<MoeLayerStats>& layers) {
  // (A pipeline stage of dense layers has none; its dp x cp peers hold the same stage.)
  if (!groups_ || groups_->get("dp_cp").size() == 1 || layers.empty()) return;
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
  // Context parallelism: the cp ranks' forwards are shares of the same micro-batches (their aux and z losses
  // add up to each micro-batch's, their largest loads are the micro-batch's): a forward counts once.
  const int64_t cp = groups_->dims().cp();
  for (int64_t i = 0; i < n; ++i) {
    MoeLayerStats& l = layers[i];
    l.aux_loss = su[5 * i];
    l.z_loss = su[5 * i + 1];
    l.forwards = static_cast<int64_t>(su[5 * i + 2]) / cp;
    l.routed = static_cast<int64_t>(su[5 * i + 3]);
    l.dropped = static_cast<int64_t>(su[5 * i + 4]);
    l.max_load = mx[i];
    l.mean_load =
        l.forwards > 0 ? static_cast<double>(l.routed) / (static_cast<double>(l.forwards) * experts) : 0.0;
  }
}

int64_t Trainer::consumed_samples() const {
  return consumed_;  // the steps' count, every layout (the loaders read ahead)
}

// ---------------------------------------------------------------------------------------------------------
// Checkpoints. Saves are whole-model files written by world rank 0 (sharded state is gathered first), so a
// checkpoint loads at any DP size and mode: every rank reads it and keeps its own chunks.

bool Trainer::model_split() const {
  return params_->split();
}

comm::Communicator& Trainer::split_group() const {
  // The ranks whose shares make up this stage's model: the tp group, the ep group, or under EP x TP both
  // (tp_ep is the one of them that the layout splits over).
  return groups_->get("tp_ep");
}

void Trainer::fill_base(const std::function<void(ParamStore& whole, const Stream& s)>& fill) {
  if (!base_->split()) {
    fill(*base_, stream_);
    return;
  }
  // Tensor parallelism: the whole model on the host, then this rank's part of it.
  ParamStore whole(ModelSpec::from_config(cfg_.model));
  whole.allocate(DType::kF32, Stream::cpu());
  fill(whole, Stream::cpu());
  ParamStore local(base_->spec());
  local.allocate(DType::kF32, Stream::cpu());
  parallel::take_split_share(whole, local);
  for (int i = 0; i < static_cast<int>(local.entries().size()); ++i)
    base_->set_master(i, local.master(i), stream_);
  stream_sync(stream_);
}

// Expert / tensor parallelism: `whole` (the unsplit model, on the CPU) into this rank's parameters.
void Trainer::load_from_whole_model(ParamStore& whole) {
  std::unique_ptr<ParamStore> local = local_store_layout();
  local->allocate(DType::kF32, Stream::cpu());
  parallel::take_split_share(whole, *local);
  if (params_->shard_mode() == ShardMode::kNone) {
    parallel::copy_param_state(*local, *params_, stream_);
  } else {
    dp_->load_from_full(*local);
  }
}

ckpt::LoadReport Trainer::load_checkpoint_params(const ckpt::Verification& v, const ckpt::LoadOptions& opt) {
  if (model_split()) {
    ParamStore whole(whole_spec());
    whole.allocate(DType::kF32, Stream::cpu());
    const ckpt::LoadReport rep = ckpt::load_into_params(v, whole, Stream::cpu(), opt);
    load_from_whole_model(whole);
    return rep;
  }
  if (params_->shard_mode() == ShardMode::kNone) return ckpt::load_into_params(v, *params_, stream_, opt);
  ParamStore full(whole_spec(), params_->shard_ranks());
  full.allocate(DType::kF32, Stream::cpu());
  const ckpt::LoadReport rep = ckpt::load_into_params(v, full, Stream::cpu(), opt);
  dp_->load_from_full(full);
  return rep;
}

void Trainer::load_hf_params(const ckpt::HfCheckpoint& hf) {
  if (model_split()) {
    ParamStore whole(whole_spec());
    whole.allocate(DType::kF32, Stream::cpu());
    ckpt::load_hf_into_params(hf, whole, Stream::cpu());
    load_from_whole_model(whole);
    return;
  }
  if (params_->shard_mode() == ShardMode::kNone) {
    ckpt::load_hf_into_params(hf, *params_, stream_);
    return;
  }
  ParamStore full(whole_spec(), params_->shard_ranks());
  full.allocate(DType::kF32, Stream::cpu());
  ckpt::load_hf_into_params(hf, full, Stream::cpu());
  dp_->load_from_full(full);
}

const ParamStore* Trainer::params_for_save() {
  PRIMUS_MEMORY_OWNER("checkpoint");
  if (model_split()) {
    // The whole model: this rank's whole state (ZeRO-1 / FSDP chunks gathered first), then every ep / tp
    // rank's part.
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
    auto whole_store = [&](const ModelSpec& spec) {
      auto p = std::make_unique<ParamStore>(spec);
      p->allocate(stream_.device.is_cpu() ? DType::kF32 : DType::kBF16, Stream::cpu(), DType::kF32,
                  MasterStorage::kF32);
      return p;
    };
    if (!ckpt_full_) ckpt_full_ = whole_store(whole_spec());
    if (!pp_plan_) {
      parallel::gather_split_state(*local, s, split_group(), stream_, *ckpt_full_);
      return is_rank0() ? ckpt_full_.get() : nullptr;
    }
    // Pipeline parallelism: this stage's modules whole over tp / ep first, then every stage's.
    const ModelSpec whole = whole_spec();
    std::vector<ModelSpec> stages;
    for (int r = 0; r < pp_plan_->layout.pp(); ++r)
      stages.push_back(parallel::stage_spec(whole, pp_plan_->layout, r));
    if (params_->expert_shard().size > 1 || params_->tensor_shard().size > 1) {
      if (!ckpt_stage_) ckpt_stage_ = whole_store(stages[static_cast<size_t>(groups_->get("pp").rank())]);
      parallel::gather_split_state(*local, s, split_group(), stream_, *ckpt_stage_);
      local = ckpt_stage_.get();
      s = Stream::cpu();
    }
    parallel::gather_pipeline_state(*local, s, groups_->get("pp"), stream_, stages, *ckpt_full_);
    return is_rank0() ? ckpt_full_.get() : nullptr;
  }
  if (params_->shard_mode() == ShardMode::kNone) return is_rank0() ? params_.get() : nullptr;
  // Collective over the shard group; HSDP replicas hold the same shards, so every replica gathers.
  if (!ckpt_full_) {
    ckpt_full_ = std::make_unique<ParamStore>(whole_spec(), params_->shard_ranks());
    ckpt_full_->allocate(stream_.device.is_cpu() ? DType::kF32 : DType::kBF16, Stream::cpu());
  }
  dp_->gather_full(*ckpt_full_);
  return is_rank0() ? ckpt_full_.get() : nullptr;
}

}  // namespace primus
