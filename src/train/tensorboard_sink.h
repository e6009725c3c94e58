#pragma once
// The TensorBoard metrics sink (docs/metrics.md): per-step scalars under Megatron's tag names
// ("lm loss", "learning-rate", "grad-norm", ... and their "vs samples" twins, step = consumed samples) or
// TorchTitan's ("loss_metrics/global_avg_loss", "lr", "tflops", ...), each group behind its
// log_*_to_tensorboard switch, every tensorboard_log_interval iterations.
#include <memory>
#include <string>

#include "config/train_config.h"
#include "train/metrics.h"
#include "train/tensorboard_events.h"

namespace primus {

class TensorBoardSink : public MetricsSink {
 public:
  // Writes a new event file in `dir`. `global_batch` and `world_size` are the batch-size and world-size
  // scalars.
  TensorBoardSink(const TensorBoardConfig& cfg, const std::string& dir, int64_t global_batch, int world_size);
  ~TensorBoardSink() override;
  void write_step(const StepMetrics& m) override;
  // "val_loss" becomes the validation loss (and perplexity); other names are written as they are.
  void write_scalar(int64_t step, const std::string& name, double value) override;
  const std::string& path() const { return file_.path(); }

 private:
  using Values = std::vector<std::pair<std::string, float>>;
  void add(int64_t step, const Values& values);
  TensorBoardConfig cfg_;
  tb::EventFileWriter file_;
  int64_t global_batch_;
  int world_size_;
  int64_t last_samples_ = 0;  // consumed samples after the last step (x axis of "vs samples")
  double last_flush_ = 0;
};

// The directory event files go to: tensorboard_dir when set, else {run_dir}/{subdir}.
std::string tensorboard_dir(const TensorBoardConfig& cfg, const std::string& run_dir);

}  // namespace primus
