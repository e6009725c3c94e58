#include "train/tensorboard_sink.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

namespace primus {

namespace {
constexpr double kFlushSeconds = 120;  // SummaryWriter's flush_secs: a queue never waits longer than this
}

std::string tensorboard_dir(const TensorBoardConfig& cfg, const std::string& run_dir) {
  if (!cfg.dir.empty()) return cfg.dir;
  if (std::filesystem::path(cfg.subdir).is_absolute()) return cfg.subdir;  // os.path.join semantics
  return run_dir + "/" + cfg.subdir;
}

TensorBoardSink::TensorBoardSink(const TensorBoardConfig& cfg, const std::string& dir, int64_t global_batch,
                                 int world_size)
    : cfg_(cfg), file_(dir), global_batch_(global_batch), world_size_(world_size) {
  last_flush_ = tb::unix_seconds_now();
}

TensorBoardSink::~TensorBoardSink() = default;  // the writer flushes what is queued

void TensorBoardSink::add(int64_t step, const Values& values) {
  if (values.empty()) return;
  const double now = tb::unix_seconds_now();
  file_.add(tb::encode_scalar_event(now, step, values));
  if (file_.pending() >= static_cast<size_t>(std::max<int64_t>(cfg_.queue_size, 1)) ||
      now - last_flush_ >= kFlushSeconds) {
    file_.flush();
    last_flush_ = now;
  }
}

void TensorBoardSink::write_step(const StepMetrics& m) {
  last_samples_ = m.consumed_samples;
  const bool first = m.step == 1;
  if (m.step % cfg_.log_interval != 0 && !(cfg_.tags == "torchtitan" && first)) return;
  auto f = [](double v) { return static_cast<float>(v); };
  Values at_step, at_samples;
  if (cfg_.tags == "torchtitan") {
    // TorchTitan's names (metrics.py): loss, throughput, memory and time groups; lr and grad_norm bare.
    at_step = {{"loss_metrics/global_avg_loss", f(m.loss)},
               {"grad_norm", f(m.grad_norm)},
               {"lr", f(m.lr)},
               {"throughput(tps)", f(m.tokens_per_s_gpu)},
               {"tflops", f(m.tflops_per_gpu)},
               {"memory/max_active(GiB)", f(m.mem_gb * 1e9 / double(1 << 30))},
               {"time_metrics/end_to_end(s)", f(m.iter_ms / 1e3)},
               {"skipped_steps", f(double(m.skipped_total))}};
    if (m.mfu >= 0) at_step.push_back({"mfu(%)", f(100 * m.mfu)});
    add(m.step, at_step);
    return;
  }
  // Megatron's training_log: each scalar against the iteration and (" vs samples") the consumed samples.
  auto both = [&](const std::string& tag, double v) {
    at_step.push_back({tag, f(v)});
    at_samples.push_back({tag + " vs samples", f(v)});
  };
  if (cfg_.learning_rate) both("learning-rate", m.lr);
  if (cfg_.batch_size) both("batch-size", double(global_batch_));
  both("lm loss", m.loss);
  if (cfg_.loss_scale) both("loss-scale", 1.0);  // BF16 training has no loss scaling
  if (cfg_.world_size) both("world-size", world_size_);
  both("grad-norm", m.grad_norm);
  at_step.push_back({"skipped-iterations", f(double(m.skipped_total))});
  if (cfg_.memory) {
    at_step.push_back({"mem-max-allocated-bytes", f(m.mem_gb * 1e9)});
    if (m.mem_total_gb > 0) at_step.push_back({"mem-total-bytes", f(m.mem_total_gb * 1e9)});
  }
  // Megatron's MTP logging names: "mtp_1 loss", ... per depth.
  for (size_t k = 0; k < m.mtp_losses.size(); ++k) both(fmt::format("mtp_{} loss", k + 1), m.mtp_losses[k]);
  if (m.moe.present) {
    // Megatron's track_moe_metrics names, plus our load and drop measures.
    at_step.push_back({"load_balancing_loss", f(m.moe.aux_loss)});
    if (m.moe.z_loss > 0) at_step.push_back({"z_loss", f(m.moe.z_loss)});
    at_step.push_back({"moe/max_load_ratio", f(m.moe.max_load_ratio)});
    at_step.push_back({"moe/dropped_fraction", f(m.moe.dropped_fraction)});
    if (m.moe.per_layer_logging)
      for (const MoeStepMetrics::Layer& l : m.moe.layers)
        at_step.push_back({"moe/load_balancing_loss_layer_" + std::to_string(l.layer), f(l.aux_loss)});
  }
  if (cfg_.timers) at_step.push_back({"iteration-time", f(m.iter_ms / 1e3)});
  if (cfg_.timers && cfg_.throughput) {
    at_step.push_back({"throughput", f(m.tflops_per_gpu)});  // TFLOP/s per GPU, as Megatron
    at_step.push_back({"tokens-per-sec-per-gpu", f(m.tokens_per_s_gpu)});
    if (m.mfu >= 0) at_step.push_back({"mfu", f(m.mfu)});
  }
  add(m.step, at_step);
  add(m.consumed_samples, at_samples);
}

void TensorBoardSink::write_scalar(int64_t step, const std::string& name, double value) {
  if (name != "val_loss") {
    add(step, {{name, static_cast<float>(value)}});
    return;
  }
  if (cfg_.tags == "torchtitan") {
    add(step, {{"validation_metrics/loss", static_cast<float>(value)}});
    return;
  }
  // Megatron's evaluate_and_print_results.
  Values at_step = {{"lm loss validation", static_cast<float>(value)}};
  Values at_samples = {{"lm loss validation vs samples", static_cast<float>(value)}};
  if (cfg_.validation_ppl) {
    const double ppl = std::exp(std::min(20.0, value));  // Megatron clamps the exponent at 20
    at_step.push_back({"lm loss validation ppl", static_cast<float>(ppl)});
    at_samples.push_back({"lm loss validation ppl vs samples", static_cast<float>(ppl)});
  }
  add(step, at_step);
  add(last_samples_, at_samples);
}

}  // namespace primus
