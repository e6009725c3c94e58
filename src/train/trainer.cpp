#include "train/trainer.h"

#include <signal.h>

#include <algorithm>
#include <cmath>

#include "bench/gemm_tuning.h"
#include "comm/world.h"
#include "config/not_supported.h"
#include "config/plan.h"
#include "core/log.h"
#include "core/memory_owner.h"
#include "core/timer.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "parallel/context_parallel.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_runtime.h"
#include "parallel/process_groups.h"
#include "profile/trace.h"
#include "safe/run_monitor.h"
#include "train/stop_signal.h"
#include "train/tensorboard_sink.h"

namespace primus {

namespace {
constexpr double kPeakBf16Flops = 989e12;  // H100/H200 SXM dense BF16, the MFU denominator

// "parameters 2.30 GB, optimizer state 4.61 GB, ..., others 0.12 GB": the largest holders, the rest summed.
std::string describe_holders(const std::vector<std::pair<std::string, size_t>>& holders) {
  constexpr size_t kShown = 6;
  std::string out;
  size_t rest = 0;
  for (size_t i = 0; i < holders.size(); ++i) {
    if (i >= kShown) {
      rest += holders[i].second;
      continue;
    }
    out += fmt::format("{}{} {:.2f} GB", out.empty() ? "" : ", ", holders[i].first,
                       static_cast<double>(holders[i].second) / 1e9);
  }
  if (holders.size() > kShown) out += fmt::format(", others {:.2f} GB", static_cast<double>(rest) / 1e9);
  return out;
}
}  // namespace

Stream select_stream(const std::string& device_key, int gpu_index) {
  if (device_key == "cpu") return Stream::cpu();
  if (device_key == "cuda" || device_key == "gpu") {
    if (!cuda_available())
      throw ConfigError("device: 'cuda' requested but no usable GPU is visible (or this build has no CUDA)",
                        "use device: auto or device: cpu");
    return cuda_compute_stream(gpu_index);
  }
  if (device_key == "auto" || device_key.empty())
    return cuda_available() ? cuda_compute_stream(gpu_index) : Stream::cpu();
  throw ConfigError("device: '" + device_key + "' (expected auto, cpu or cuda)");
}

Trainer::Trainer(const TrainConfig& cfg, const std::string& run_dir, const std::string& resolved_yaml)
    : cfg_(cfg), run_dir_(run_dir), resolved_yaml_(resolved_yaml), spikes_(cfg.guards.spiky_loss_factor) {
  init_distributed();  // world size 1 without a launcher: nothing to do
  stream_ = select_stream(cfg.device, gpu_index_);
  set_memory_timeline_device(stream_.device);
  if (stream_.device.is_cuda()) {
    const int tuned = bench::load_gemm_tuning(cfg.gemm_tuning_file, stream_.device.index);
    if (tuned > 0) log::info("gemm tuning: {} tuned shapes loaded", tuned);
  }
  // Every other GPU op is bitwise reproducible already; attention's backward needs its slower variant.
  ops::set_deterministic_attention(cfg.deterministic);
  if (cfg.deterministic && stream_.device.is_cuda())
    log::info(
        "deterministic mode: attention backward without cross-block dQ accumulation (bitwise reproducible)");
  // FP8: a recipe this GPU or these sizes cannot run is refused before any GPU memory is touched.
  if (auto r = Fp8Recipe::from_config(cfg.fp8)) {
    check_fp8_runnable(*r, cfg, stream_);
    fp8_recipe_ = *r;
    fp8_share_ = fp8_gemm_flop_share(*r, cfg);
  }
  data_ = build_data_sources(cfg);
  const config::BatchLayout layout = config::batch_layout(cfg);
  micro_batches_ = layout.micro_batches;

  ModelSpec spec = ModelSpec::from_config(cfg.model);
  // Data parallelism shards the flat buffers (regions padded to divide) and hooks into the model.
  init_data_parallel();
  // The projections' first weight-gradient GEMM of a step (FSDP: of a micro-batch) overwrites, so only norms,
  // biases and an untied embedding need zeroing. On the H100 the accumulating (beta = 1) weight-gradient
  // GEMMs of the 1B shape also ran ~25% slower. Emulation replays each rank's sum and keeps zeroing.
  // Pipeline schedules may run a region's weight-gradient passes out of micro-batch order (zero-bubble):
  // every write then accumulates into the zeroed buffer.
  if ((!dp_ || !dp_cfg_->emulate) && !pipeline_)
    params_->set_overwritten_grads(model_->gemm_written_grad_entries());
  optim_ = std::make_unique<AdamW>(cfg.optim, *params_);
  // The overlapped update: one GPU, and DDP / expert-parallel ranks (whole-model buffers; the update is
  // launched once the gradients are reduced). Sharded optimizers update their chunks serially.
  // Tensor parallelism sums partial gradients over tp after the dp reduction: the serial update follows it.
  // Pipeline stages hold a part of the model and sum their gradient norms over pp: serial too.
  const bool whole_dp =
      dp_ && !dp_cfg_->emulate && params_->shard_mode() == ShardMode::kNone && !tp_ && !pipeline_;
  if (stream_.device.is_cuda() && (!dp_ || whole_dp)) {
    {
      PRIMUS_MEMORY_OWNER("gradient norm");
      norm_ = std::make_unique<ChunkedGradNorm>(*params_, stream_);
    }
    if (overlap_update_enabled()) {
      PRIMUS_MEMORY_OWNER("optimizer update");
      overlap_ = std::make_unique<OverlappedUpdate>(*params_, *optim_, *norm_, stream_, update_sm_reserve());
      hooks_.add(overlap_.get());
      model_->set_hooks(&hooks_);
    }
  }
  const int64_t decay_iters = cfg.optim.lr_decay_iters.value_or(cfg.train_iters);
  schedule_ = std::make_unique<LrSchedule>(cfg.optim.lr, cfg.optim.min_lr, cfg.optim.lr_warmup_iters,
                                           decay_iters, cfg.optim.lr_decay_style,
                                           cfg.optim.lr_wsd_decay_iters, cfg.optim.lr_wsd_decay_style);
  inject_ = FaultInjection::from_env();
  if (inject_.slow_gpu_rank == world_rank_ && stream_.device.is_cuda())
    ops::reserve_gemm_sms(stream_, inject_.slow_gpu_sms);
  // Checkpoint or HF weights (auto_continue_train / load): sets the start iteration and data position.
  {
    PRIMUS_MEMORY_OWNER("checkpoint");
    resume_or_start();
  }
  consumed_ = start_consumed_;
  // Each rank reads its own micro-batches ahead of time (a data-parallel rank every DP-th global one); one
  // process emulating a layout reads every virtual rank's directly (train/train_step.cpp).
  if (!dp_ || !dp_cfg_->emulate)
    loader_ = std::make_unique<DataLoader>(data_.train, cfg.micro_batch_size, start_consumed_, data_.eod_id,
                                           cfg.data.eod_mask_loss, 4,
                                           dp_ ? LoaderStride{dp_cfg_->dp, dp_rank_} : LoaderStride{});
  const std::string metrics_path = run_dir + "/metrics.jsonl";
  // A resumed run appends, after dropping records of iterations past the checkpoint (they run again).
  if (resumed_ && is_rank0()) truncate_metrics_after(metrics_path, start_iter_);
  if (is_rank0()) sinks_.push_back(std::make_unique<JsonlSink>(metrics_path, /*append=*/resumed_));
  if (is_rank0() && cfg.logging.tensorboard.enabled) {
    const TensorBoardConfig& tb = cfg.logging.tensorboard;
    auto sink = std::make_unique<TensorBoardSink>(tb, tensorboard_dir(tb, run_dir), cfg.global_batch_size,
                                                  world_size_);
    log::info("TensorBoard: {}", sink->path());
    sinks_.push_back(std::move(sink));
  }
  if (!cfg.checkpoint.save.empty() && is_rank0())
    writer_ = std::make_unique<ckpt::CheckpointWriter>(cfg.checkpoint.save, cfg.checkpoint.keep_latest_k,
                                                       cfg.checkpoint.async_save);
  // 6 N' + 6 L T d, N' = parameters except the input embedding (the PyTorch anchor's formula).
  flops_per_token_ = config::flops_per_token(cfg.model, cfg.data.seq_length).causal;

  monitor_ = std::make_unique<safe::RunMonitor>(cfg.stability, safe::monitor_context(run_dir, stream_));
  if (stream_.device.is_cuda()) {
    step_marks_ = std::make_unique<CudaStepMarks>(stream_);
    monitor_->set_step_marks(step_marks_.get());
    if (dp_) dp_->set_step_marks(step_marks_.get());
  }
  // spec is the whole model; a split store (expert / tensor parallelism) holds this rank's part of it.
  const ParamStore& model_store = base_ ? *base_ : *params_;
  log::info(
      "model: {} ({:.2f}M parameters{}, {:.2f} GFLOP/token)", spec.describe(),
      (model_store.split() ? ParamStore(spec).parameter_count() : model_store.parameter_count()) / 1e6,
      model_store.split() ? fmt::format(", {:.2f}M on this rank", model_store.parameter_count() / 1e6) : "",
      flops_per_token_ / 1e9);
  if (cfg.model.moe.enabled()) {
    const config::ParamCounts pc = config::count_parameters(cfg.model);
    log::info(
        "MoE: FLOPs count the active parameters only: {:.2f}M of {:.2f}M non-embedding per token (top-{} of "
        "{} experts in {} MoE layers)",
        pc.active_non_embedding / 1e6, pc.non_embedding / 1e6, cfg.model.moe.topk, cfg.model.moe.num_experts,
        pc.moe_layers);
  }
  log::info("data: {}", data_.summary);
  log::info("device: {} | micro-batch {} x {} micro-batches = global batch {} | seq {}", stream_.device.str(),
            cfg.micro_batch_size, micro_batches_, cfg.global_batch_size, cfg.data.seq_length);
  const DType mdt = cfg.optim.exp_avg_dtype, vdt = cfg.optim.exp_avg_sq_dtype;
  if (mdt != DType::kF32 || vdt != DType::kF32)
    log::info(
        "optimizer: AdamW with the precision-aware state: exp_avg {}, exp_avg_sq {} ({} bytes per "
        "parameter instead of 8; the update computes in f32)",
        dtype_name(mdt), dtype_name(vdt), dtype_size(mdt) + dtype_size(vdt));
}

Trainer::~Trainer() = default;

void Trainer::note_mtp() {
  if (cfg_.model.mtp_num_layers > 0) mtp_micro_.emplace_back(model_->mtp_losses(), model_->mtp_counts());
}

std::vector<double> Trainer::take_mtp_losses() {
  std::vector<double> out(static_cast<size_t>(cfg_.model.mtp_num_layers), 0.0);
  if (mtp_micro_.empty()) return {};
  for (const auto& [losses, counts] : mtp_micro_)
    for (size_t k = 0; k < losses.size() && k < out.size(); ++k) {
      double sum = 0;
      for (double x : losses[k].to_vector<double>()) sum += x;
      out[k] += counts[k] > 0 ? sum / static_cast<double>(counts[k]) : 0.0;
    }
  for (double& x : out) x /= static_cast<double>(mtp_micro_.size());
  mtp_micro_.clear();
  return out;
}

MoeStepMetrics Trainer::moe_metrics() {
  MoeStepMetrics out;
  std::vector<MoeLayerStats> layers = model_->take_moe_stats();
  reduce_moe_stats(layers);  // data parallelism: the step's routing over every rank's micro-batches
  if (pipeline_ && cfg_.model.moe.enabled()) gather_stage_moe_stats(layers);  // every stage's layers
  if (layers.empty()) return out;
  out.present = true;
  out.per_layer_logging = cfg_.model.moe.per_layer_logging;
  int64_t routed = 0, dropped = 0;
  for (const MoeLayerStats& l : layers) {
    const double f = l.forwards > 0 ? static_cast<double>(l.forwards) : 1.0;
    out.layers.push_back({l.layer, l.aux_loss / f, l.z_loss / f, l.mean_load, l.max_load, l.dropped});
    out.aux_loss += l.aux_loss / f;
    out.z_loss += l.z_loss / f;
    if (l.mean_load > 0)
      out.max_load_ratio = std::max(out.max_load_ratio, static_cast<double>(l.max_load) / l.mean_load);
    routed += l.routed;
    dropped += l.dropped;
  }
  out.aux_loss /= static_cast<double>(layers.size());
  out.z_loss /= static_cast<double>(layers.size());
  out.dropped_fraction = routed > 0 ? static_cast<double>(dropped) / static_cast<double>(routed) : 0.0;
  return out;
}

void Trainer::gather_stage_moe_stats(std::vector<MoeLayerStats>& layers) {
  // One slot per MoE layer of the whole model, filled by the stage that holds it and summed over pp (the
  // others add zeros): every stage ends with every layer's statistics, in layer order.
  std::vector<int> moe_layers;
  const int64_t L = cfg_.model.num_layers;
  for (int64_t l = 0; l < L; ++l)
    if (cfg_.model.moe.is_moe_layer(l)) moe_layers.push_back(static_cast<int>(l));
  // The MTP depths' MoE layers (the kind of the last main layer; labelled L + depth, model/mtp.h), on the
  // loss stage.
  if (L > 0 && cfg_.model.moe.is_moe_layer(L - 1))
    for (int64_t k = 0; k < cfg_.model.mtp_num_layers; ++k) moe_layers.push_back(static_cast<int>(L + k));
  const int64_t n = static_cast<int64_t>(moe_layers.size()), w = 8;
  std::vector<double> slots(static_cast<size_t>(n * w), 0.0);
  for (const MoeLayerStats& s : layers) {
    const auto it = std::find(moe_layers.begin(), moe_layers.end(), s.layer);
    PRIMUS_CHECK(it != moe_layers.end(), "MoE statistics of layer {}, which is not an MoE layer", s.layer);
    double* d = slots.data() + (it - moe_layers.begin()) * w;
    d[0] = 1;  // present
    d[1] = s.aux_loss;
    d[2] = s.z_loss;
    d[3] = static_cast<double>(s.forwards);
    d[4] = static_cast<double>(s.routed);
    d[5] = static_cast<double>(s.dropped);
    d[6] = static_cast<double>(s.max_load);
    d[7] = s.mean_load;
  }
  Tensor t = Tensor::from_vector(slots, {n * w});
  if (stream_.device.is_cuda()) t = t.to(stream_);
  groups_->get("pp").all_reduce(t, comm::ReduceOp::kSum, stream_, "moe routing statistics (pp)");
  const std::vector<double> all = t.to_vector<double>();
  layers.clear();
  for (int64_t i = 0; i < n; ++i) {
    const double* d = all.data() + i * w;
    if (d[0] == 0) continue;  // no stage holds it (layers the model did not build)
    layers.push_back({moe_layers[static_cast<size_t>(i)], d[1], d[2], static_cast<int64_t>(d[3]),
                      static_cast<int64_t>(d[4]), static_cast<int64_t>(d[5]), static_cast<int64_t>(d[6]),
                      d[7]});
  }
}

double Trainer::step_grad_norm(int64_t iter) {
  if (!norm_) return optim_->grad_norm(stream_);
  // The background summed every region during the backward, unless a fault was injected after it.
  const bool early = overlap_ && overlap_->norm_complete() && !inject_.poisons_grad(iter);
  if (overlap_) overlap_->join_norm();
  if (!early) norm_->launch_all(stream_);
  return norm_->read();
}

void Trainer::settle() {
  if (overlap_) overlap_->finish();
  stream_sync(stream_);
}

int Trainer::stop_request() const {
  if (const int sig = StopSignal::requested()) return sig == SIGTERM ? 5 : sig == SIGINT ? 4 : 3;
  const double limit = cfg_.checkpoint.exit_duration_in_mins;
  if (limit > 0 && run_clock_.seconds() / 60.0 >= limit) return 2;
  return 0;
}

void Trainer::run_guards(int64_t iter, StepOutcome& o, const std::vector<double>& micro_losses) {
  const GuardConfig& g = cfg_.guards;
  if (!std::isfinite(o.loss) || !std::isfinite(o.grad_norm)) {
    if (!g.check_nan) return;  // check_for_nan_in_loss_and_grad: false applies the update, as Megatron
    std::string what;
    if (!std::isfinite(o.loss)) {
      for (size_t i = 0; i < micro_losses.size(); ++i)
        if (!std::isfinite(micro_losses[i])) {
          what = fmt::format("loss of micro-batch {} is {}", i, micro_losses[i]);
          break;
        }
    }
    if (!std::isfinite(o.grad_norm) && params_->shard_mode() == ShardMode::kNone) {
      const NonFiniteReport r = locate_non_finite_grad(*params_, stream_);
      what += (what.empty() ? "" : "; ") + r.describe();
    } else if (!std::isfinite(o.grad_norm)) {
      what += (what.empty() ? "" : "; ") + std::string("non-finite gradient norm (gradients are sharded)");
    }
    o.applied = false;
    monitor_->event(iter, g.nan_policy == "halt" ? "nan_halt" : "nan_skip", what);
    if (g.nan_policy == "halt") {
      o.halt = true;
      log::error(
          "iteration {}: non-finite loss/gradient: {} (loss {}, grad-norm {}); halting before the update "
          "(nan_policy: halt, exit code {})",
          iter, what, o.loss, o.grad_norm, kExitGuardHalt);
      return;
    }
    log::warn(
        "iteration {}: skipped the update: {} (loss {}, grad-norm {}); parameters and optimizer state are "
        "unchanged (nan_policy: skip)",
        iter, what, o.loss, o.grad_norm);
    return;
  }
  if (g.check_spiky_loss && spikes_.is_spike(o.loss)) {
    const double ref = spikes_.reference();
    monitor_->event(iter, "loss_spike",
                    fmt::format("loss {:.4f} >= {} x {:.4f} ({})", o.loss, g.spiky_loss_factor, ref,
                                g.spiky_loss_policy == "skip" ? "update skipped" : "update applied"),
                    o.loss);
    if (g.spiky_loss_policy == "skip") {
      o.applied = false;
      log::warn(
          "iteration {}: loss spike {:.4f} >= {} x {:.4f} (max of recent losses): skipped the update "
          "(spiky_loss_policy: skip)",
          iter, o.loss, g.spiky_loss_factor, ref);
      return;
    }
    log::warn(
        "iteration {}: loss spike {:.4f} >= {} x {:.4f} (max of recent losses); the update is applied "
        "(spiky_loss_policy: warn)",
        iter, o.loss, g.spiky_loss_factor, ref);
    return;  // a spike does not join the reference window
  }
  spikes_.accept(o.loss);
}

double Trainer::evaluate() {
  if (!data_.valid || cfg_.logging.eval_iters <= 0) return -1;
  // Every rank evaluates the same samples (FSDP's gathers need all of them).
  struct EvalMode {
    DataParallel* dp;
    explicit EvalMode(DataParallel* d) : dp(d) {
      if (dp) dp->set_training(false);
    }
    ~EvalMode() {
      if (dp) dp->set_training(true);
    }
  } eval_mode(dp_.get());
  // The same validation samples every time (from sample 0), so successive evaluations are comparable.
  double total = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < cfg_.logging.eval_iters; ++i) {
    Batch b = make_batch(*data_.valid, i * cfg_.micro_batch_size, cfg_.micro_batch_size, data_.eod_id,
                         cfg_.data.eod_mask_loss);
    if (cp_) {  // this rank's chunks; the cp ranks' loss sums add up below
      b.tokens = cp_->local_tokens(b.tokens);
      b.targets = cp_->local_tokens(b.targets);
    }
    Tensor tokens = stream_.device.is_cpu() ? b.tokens : b.tokens.to(stream_);
    Tensor targets = stream_.device.is_cpu() ? b.targets : b.targets.to(stream_);
    Tensor positions, seg_starts;  // packed rows with isolated samples
    if (cfg_.sft.isolated_rows() && b.positions.defined()) {
      positions = stream_.device.is_cpu() ? b.positions : b.positions.to(stream_);
      seg_starts = stream_.device.is_cpu() ? b.seg_starts : b.seg_starts.to(stream_);
    }
    model_->set_packing(positions, seg_starts);
    const BatchOrigin origin{static_cast<uint64_t>(cfg_.seed), true, b.first_sample};
    // Pipeline parallelism: stage after stage; only the loss stage has losses (summed over pp below).
    const Tensor losses =
        pipeline_ ? pipeline_->evaluate({tokens, targets, 1.0f, 0.0f, origin, {}, positions, seg_starts})
                  : model_->forward_loss(tokens, targets, false, origin);
    if (losses.defined())
      for (double x : losses.to_vector<double>()) total += x;
    count += b.valid_tokens;
  }
  if (pipeline_)
    total = groups_->get("pp").all_reduce_value(total, comm::ReduceOp::kSum, stream_, "pp validation loss");
  if (cp_) total = cp_->group().all_reduce_value(total, comm::ReduceOp::kSum, stream_, "cp validation loss");
  return count > 0 ? total / static_cast<double>(count) : -1;
}

TrainResult Trainer::train() {
  TrainResult res;
  StopSignal stop_signal;
  const bool on_gpu = stream_.device.is_cuda();
  const int64_t tokens_per_step = cfg_.global_batch_size * cfg_.data.seq_length;
  const CheckpointConfig& ck = cfg_.checkpoint;
  std::vector<double> step_ms;
  Stopwatch& total = run_clock_;
  total.reset();
  Stopwatch window;
  // A step returns with its optimizer update still queued on the GPU, so the host logs and prepares the next
  // step while the GPU works (no idle gap between steps); the step time is then taken between successive
  // points where the host waited for a step's gradient norm -- the step period. Phases that are not training
  // (evaluation, checkpoints) wait for the GPU and are left out of that period. Data-parallel steps order
  // their communication streams with events, so they overlap the same way.
  Stopwatch period;
  double excluded_ms = 0;
  int64_t window_steps = 0;
  size_t mem_used = 0, mem_total = 0;
  reset_peak_allocated_bytes(stream_.device);
  if (start_iter_ >= cfg_.train_iters)
    log::info("nothing to train: the checkpoint is at iteration {} and train_iters is {}", start_iter_,
              cfg_.train_iters);
  res.last_iteration = start_iter_;
  for (int64_t iter = start_iter_ + 1; iter <= cfg_.train_iters; ++iter) {
    monitor_->step_begin(iter);
    const StepOutcome o = train_step(iter);
    const double ms = period.ms() - excluded_ms;
    period.reset();
    excluded_ms = 0;
    monitor_->step_end(iter, ms);
    if (o.halt) {
      res.exit_code = kExitGuardHalt;
      res.stop_reason = fmt::format("halted at iteration {} by check_for_nan_in_loss_and_grad", iter);
      break;
    }
    step_ms.push_back(ms);
    res.losses.push_back(o.loss);
    if (res.steps == 0) res.first_loss = o.loss;
    res.last_loss = o.loss;
    ++res.steps;
    res.last_iteration = iter;
    if (!o.applied) {
      ++res.skipped;
      ++skipped_total_;
    }
    ++window_steps;

    const bool log_now = iter % cfg_.logging.log_interval == 0 || iter == cfg_.train_iters || iter == 1 ||
                         iter == start_iter_ + 1;
    StepMetrics m;
    m.step = iter;
    m.total_steps = cfg_.train_iters;
    m.loss = o.loss;
    m.lr = o.lr;
    m.grad_norm = o.grad_norm;
    m.iter_ms = ms;
    m.tokens_per_s = tokens_per_step / (ms / 1e3);
    m.tokens_per_s_gpu = m.tokens_per_s / world_size_;
    m.tflops_per_gpu = m.tokens_per_s_gpu * flops_per_token_ / 1e12;
    m.mfu = on_gpu ? m.tflops_per_gpu * 1e12 / kPeakBf16Flops : -1;
    m.mem_gb = static_cast<double>(peak_allocated_bytes(stream_.device)) / 1e9;
    if (on_gpu) {
      device_memory_info(stream_.device, &mem_used, &mem_total);
      m.mem_total_gb = static_cast<double>(mem_total) / 1e9;
    }
    m.consumed_samples = consumed_samples();
    m.skipped = !o.applied;
    m.skipped_total = skipped_total_;
    m.moe = moe_metrics();
    m.mtp_losses = o.mtp_losses;
    if (fp8_recipe_) {
      m.fp8_recipe = fp8_recipe_->id();
      m.fp8_share = fp8_share_;
    }
    for (auto& sink : sinks_) sink->write_step(m);
    if (log_now) {
      // Averages over the log window smooth out single-step noise in the printed line.
      const double avg_ms = window.ms() / static_cast<double>(window_steps);
      StepMetrics shown = m;
      shown.iter_ms = avg_ms;
      shown.tokens_per_s = tokens_per_step / (avg_ms / 1e3);
      shown.tokens_per_s_gpu = shown.tokens_per_s / world_size_;
      shown.tflops_per_gpu = shown.tokens_per_s_gpu * flops_per_token_ / 1e12;
      shown.mfu = on_gpu ? shown.tflops_per_gpu * 1e12 / kPeakBf16Flops : -1;
      shown.eta_s = avg_ms / 1e3 * static_cast<double>(cfg_.train_iters - iter);
      log::info("{}", format_log_line(shown, on_gpu));
      window.reset();
      window_steps = 0;
    }
    const bool eval_now = cfg_.logging.eval_interval > 0 &&
                          (iter % cfg_.logging.eval_interval == 0 || iter == cfg_.train_iters);
    if (eval_now) {
      settle();  // the step's update finishes inside the step's period
      Stopwatch ev;
      monitor_->set_phase(fmt::format("evaluation after step {}", iter));
      PRIMUS_MEMORY_OWNER("evaluation");
      const double vl = evaluate();
      if (vl >= 0) {
        res.last_val_loss = vl;
        log::info("validation at iter {} | loss {:.4f} | ppl {:.2f} | {} batches in {:.1f} s", iter, vl,
                  std::exp(vl), cfg_.logging.eval_iters, ev.seconds());
        for (auto& sink : sinks_) sink->write_scalar(iter, "val_loss", vl);
      }
      window.reset();  // evaluation time is not training time
      window_steps = 0;
      excluded_ms += ev.ms();
    }

    // Stop conditions (Megatron's): a signal, exit_interval, exit_duration_in_mins. Each saves first.
    // Ranks agree on the reason (the highest code), so that all of them save and stop together: requests
    // that can differ between ranks (signals, time) were exchanged with the step's losses; exit_interval is
    // the same on every rank.
    int code = o.stop_request;
    if (ck.exit_interval > 0 && iter % ck.exit_interval == 0) code = std::max(code, 1);
    std::string stop;
    if (code == 5) stop = "received SIGTERM";
    if (code == 4) stop = "received SIGINT";
    if (code == 3) stop = "received a signal";
    if (code == 1) stop = fmt::format("exit_interval {} reached", ck.exit_interval);
    if (code == 2) stop = fmt::format("exit_duration_in_mins {} reached", ck.exit_duration_in_mins);
    const bool periodic = ck.save_interval > 0 && iter % ck.save_interval == 0;
    const bool last = iter == cfg_.train_iters && !ck.disable_last_saving;
    if (!ck.save.empty() && (periodic || last || !stop.empty())) {  // a collective when sharded
      settle();
      Stopwatch save_time;
      PRIMUS_MEMORY_OWNER("checkpoint");
      save_checkpoint(iter);
      window.reset();  // checkpoint time is not training time
      window_steps = 0;
      excluded_ms += save_time.ms();
    }
    if (!stop.empty()) {
      res.stop_reason = stop;
      log::info("stopping after iteration {}: {}{}", iter, stop,
                !ck.save.empty() ? " (checkpoint saved)" : " (no checkpoint: save is not set)");
      break;
    }
  }
  settle();  // the last update
  monitor_->finish();
  if (writer_) writer_->wait();  // an async write finishes (or fails) before the process exits
  if (base_) {
    PRIMUS_MEMORY_OWNER("checkpoint");
    export_peft_adapter();
  }
  res.steps = static_cast<int64_t>(res.losses.size());
  double med = 0;
  if (!step_ms.empty()) {
    // Median over steps after the first two (warm-up: allocator growth, cuBLASLt/cuDNN plan building).
    std::vector<double> steady(step_ms.begin() + std::min<size_t>(2, step_ms.size() - 1), step_ms.end());
    std::sort(steady.begin(), steady.end());
    med = steady[steady.size() / 2];
    res.tokens_per_s = tokens_per_step / (med / 1e3);
  }
  res.peak_mem_gb = static_cast<double>(peak_allocated_bytes(stream_.device)) / 1e9;
  res.memory_at_peak = memory_holders_at_peak(stream_.device);
  log::info(
      "done: {} steps in {} | loss {:.4f} -> {:.4f}{} | median {:.0f} ms/step, {} tok/s | peak mem {:.2f} "
      "GB{}",
      res.steps, format_duration(total.seconds()), res.first_loss, res.last_loss,
      res.last_val_loss >= 0 ? fmt::format(" | val loss {:.4f}", res.last_val_loss) : std::string(), med,
      human_count(res.tokens_per_s), res.peak_mem_gb,
      res.skipped > 0 ? fmt::format(" | {} update(s) skipped", res.skipped) : std::string());
  if (!res.memory_at_peak.empty()) log::info("memory at peak: {}", describe_holders(res.memory_at_peak));
  return res;
}

}  // namespace primus
