#include "train/trainer.h"

#include <algorithm>
#include <cmath>

#include "bench/gemm_tuning.h"
#include "config/plan.h"
#include "core/log.h"
#include "core/timer.h"
#include "ops/elementwise.h"

namespace primus {

namespace {
constexpr double kPeakBf16Flops = 989e12;  // H100/H200 SXM dense BF16, the MFU denominator
}

Stream select_stream(const std::string& device_key) {
  if (device_key == "cpu") return Stream::cpu();
  if (device_key == "cuda" || device_key == "gpu") {
    if (!cuda_available())
      throw ConfigError("device: 'cuda' requested but no usable GPU is visible (or this build has no CUDA)",
                        "use device: auto or device: cpu");
    return cuda_compute_stream(0);
  }
  if (device_key == "auto" || device_key.empty())
    return cuda_available() ? cuda_compute_stream(0) : Stream::cpu();
  throw ConfigError("device: '" + device_key + "' (expected auto, cpu or cuda)");
}

Trainer::Trainer(const TrainConfig& cfg, const std::string& run_dir) : cfg_(cfg), run_dir_(run_dir) {
  stream_ = select_stream(cfg.device);
  if (stream_.device.is_cuda()) {
    const int tuned = bench::load_gemm_tuning(cfg.gemm_tuning_file, stream_.device.index);
    if (tuned > 0) log::info("gemm tuning: {} tuned shapes loaded", tuned);
  }
  data_ = build_data_sources(cfg);
  const config::BatchLayout layout = config::batch_layout(cfg);
  PRIMUS_CHECK(layout.data_parallel == 1, "data-parallel size {} needs the distributed trainer",
               layout.data_parallel);
  micro_batches_ = layout.micro_batches;

  ModelSpec spec = ModelSpec::from_config(cfg.model);
  params_ = std::make_unique<ParamStore>(spec);
  params_->allocate(stream_.device.is_cpu() ? DType::kF32 : DType::kBF16, stream_);
  params_->initialize(static_cast<uint64_t>(cfg.seed), stream_);
  model_ = std::make_unique<LlamaModel>(cfg.model, cfg.recompute, *params_, stream_, cfg.data.seq_length);
  optim_ = std::make_unique<AdamW>(cfg.optim, *params_);
  const int64_t decay_iters = cfg.optim.lr_decay_iters.value_or(cfg.train_iters);
  schedule_ = std::make_unique<LrSchedule>(cfg.optim.lr, cfg.optim.min_lr, cfg.optim.lr_warmup_iters,
                                           decay_iters, cfg.optim.lr_decay_style);
  loader_ = std::make_unique<DataLoader>(data_.train, cfg.micro_batch_size, 0, data_.eod_id,
                                         cfg.data.eod_mask_loss);
  sinks_.push_back(std::make_unique<JsonlSink>(run_dir + "/metrics.jsonl", /*append=*/false));
  // 6 N' + 6 L T d, N' = parameters except the input embedding (the PyTorch anchor's formula).
  flops_per_token_ = config::flops_per_token(cfg.model, cfg.data.seq_length).causal;

  log::info("model: {} ({:.2f}M parameters, {:.2f} GFLOP/token)", spec.describe(),
            params_->parameter_count() / 1e6, flops_per_token_ / 1e9);
  log::info("data: {}", data_.summary);
  log::info("device: {} | micro-batch {} x {} micro-batches = global batch {} | seq {}", stream_.device.str(),
            cfg.micro_batch_size, micro_batches_, cfg.global_batch_size, cfg.data.seq_length);
}

double Trainer::train_step(int64_t iter, double* grad_norm_out, double* lr_out) {
  params_->grad_flat().zero_(stream_);
  std::vector<Tensor> losses;
  std::vector<int64_t> valid;
  for (int64_t mb = 0; mb < micro_batches_; ++mb) {
    Batch b = loader_->next();
    PRIMUS_CHECK(b.valid_tokens > 0, "micro-batch at sample {} has no tokens that count toward the loss",
                 b.first_sample);
    // Megatron's default: each micro-batch's loss is its mean over counted tokens; the step averages them.
    const float scale = 1.0f / (static_cast<float>(b.valid_tokens) * static_cast<float>(micro_batches_));
    Tensor tokens = stream_.device.is_cpu() ? b.tokens : b.tokens.to(stream_);
    Tensor targets = stream_.device.is_cpu() ? b.targets : b.targets.to(stream_);
    losses.push_back(model_->forward_backward(tokens, targets, scale));
    valid.push_back(b.valid_tokens);
  }
  const double norm = optim_->grad_norm(stream_);
  const double lr = schedule_->at(iter);
  *grad_norm_out = norm;
  *lr_out = lr;
  double loss = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    std::vector<double> l = losses[i].to_vector<double>();
    double sum = 0;
    for (double x : l) sum += x;
    loss += sum / static_cast<double>(valid[i]);
  }
  loss /= static_cast<double>(losses.size());
  if (!std::isfinite(loss) || !std::isfinite(norm)) {
    throw Error(ErrorKind::kRuntime,
                fmt::format("non-finite {} at iteration {} (loss {}, grad-norm {})",
                            std::isfinite(loss) ? "gradient" : "loss", iter, loss, norm),
                {}, "lower lr, check the data, or enable clip_grad");
  }
  optim_->step(lr, clip_coefficient(norm, cfg_.optim.clip_grad), stream_);
  return loss;
}

double Trainer::evaluate() {
  if (!data_.valid || cfg_.logging.eval_iters <= 0) return -1;
  // The same validation samples every time (from sample 0), so successive evaluations are comparable.
  double total = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < cfg_.logging.eval_iters; ++i) {
    Batch b = make_batch(*data_.valid, i * cfg_.micro_batch_size, cfg_.micro_batch_size, data_.eod_id,
                         cfg_.data.eod_mask_loss);
    Tensor tokens = stream_.device.is_cpu() ? b.tokens : b.tokens.to(stream_);
    Tensor targets = stream_.device.is_cpu() ? b.targets : b.targets.to(stream_);
    std::vector<double> l = model_->forward_loss(tokens, targets).to_vector<double>();
    for (double x : l) total += x;
    count += b.valid_tokens;
  }
  return count > 0 ? total / static_cast<double>(count) : -1;
}

TrainResult Trainer::train() {
  TrainResult res;
  const bool on_gpu = stream_.device.is_cuda();
  const int64_t tokens_per_step = cfg_.global_batch_size * cfg_.data.seq_length;
  std::vector<double> step_ms;
  Stopwatch total;
  Stopwatch window;
  int64_t window_steps = 0;
  size_t mem_used = 0, mem_total = 0;
  reset_peak_allocated_bytes(stream_.device);
  for (int64_t iter = 1; iter <= cfg_.train_iters; ++iter) {
    Stopwatch sw;
    double norm = 0, lr = 0;
    const double loss = train_step(iter, &norm, &lr);
    stream_sync(stream_);
    const double ms = sw.ms();
    step_ms.push_back(ms);
    res.losses.push_back(loss);
    if (iter == 1) res.first_loss = loss;
    res.last_loss = loss;
    ++window_steps;

    const bool log_now = iter % cfg_.logging.log_interval == 0 || iter == cfg_.train_iters || iter == 1;
    StepMetrics m;
    m.step = iter;
    m.total_steps = cfg_.train_iters;
    m.loss = loss;
    m.lr = lr;
    m.grad_norm = norm;
    m.iter_ms = ms;
    m.tokens_per_s = tokens_per_step / (ms / 1e3);
    m.tokens_per_s_gpu = m.tokens_per_s;
    m.tflops_per_gpu = m.tokens_per_s_gpu * flops_per_token_ / 1e12;
    m.mfu = on_gpu ? m.tflops_per_gpu * 1e12 / kPeakBf16Flops : -1;
    m.mem_gb = static_cast<double>(peak_allocated_bytes(stream_.device)) / 1e9;
    if (on_gpu) {
      device_memory_info(stream_.device, &mem_used, &mem_total);
      m.mem_total_gb = static_cast<double>(mem_total) / 1e9;
    }
    m.consumed_samples = loader_->consumed_samples();
    for (auto& sink : sinks_) sink->write_step(m);
    if (log_now) {
      // Averages over the log window smooth out single-step noise in the printed line.
      const double avg_ms = window.ms() / static_cast<double>(window_steps);
      StepMetrics shown = m;
      shown.iter_ms = avg_ms;
      shown.tokens_per_s = shown.tokens_per_s_gpu = tokens_per_step / (avg_ms / 1e3);
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
      Stopwatch ev;
      const double vl = evaluate();
      if (vl >= 0) {
        res.last_val_loss = vl;
        log::info("validation at iter {} | loss {:.4f} | ppl {:.2f} | {} batches in {:.1f} s", iter, vl,
                  std::exp(vl), cfg_.logging.eval_iters, ev.seconds());
        for (auto& sink : sinks_) sink->write_scalar(iter, "val_loss", vl);
      }
      window.reset();  // evaluation time is not training time
      window_steps = 0;
    }
  }
  res.steps = cfg_.train_iters;
  // Median over steps after the first two (warm-up: allocator growth, cuBLASLt/cuDNN plan building).
  std::vector<double> steady(step_ms.begin() + std::min<size_t>(2, step_ms.size() - 1), step_ms.end());
  std::sort(steady.begin(), steady.end());
  const double med = steady[steady.size() / 2];
  res.tokens_per_s = tokens_per_step / (med / 1e3);
  res.peak_mem_gb = static_cast<double>(peak_allocated_bytes(stream_.device)) / 1e9;
  log::info(
      "done: {} steps in {} | loss {:.4f} -> {:.4f}{} | median {:.0f} ms/step, {} tok/s | peak mem {:.2f} GB",
      res.steps, format_duration(total.seconds()), res.first_loss, res.last_loss,
      res.last_val_loss >= 0 ? fmt::format(" | val loss {:.4f}", res.last_val_loss) : std::string(), med,
      human_count(res.tokens_per_s), res.peak_mem_gb);
  return res;
}

}  // namespace primus
