#pragma once
// The training loop: micro-batches accumulated to the global batch, gradient-norm clipping, AdamW, the LR
// schedule, periodic evaluation, one log line and one metrics record per step.
#include <memory>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "data/data_loader.h"
#include "model/llama_model.h"
#include "model/param_store.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/optimizer.h"

namespace primus {

// Picks the device from the `device` key: auto = the first GPU when one is usable, else the CPU.
Stream select_stream(const std::string& device_key);

struct TrainResult {
  int64_t steps = 0;
  double first_loss = 0, last_loss = 0;
  double last_val_loss = -1;
  double tokens_per_s = 0;  // median over the steps after warm-up
  double peak_mem_gb = 0;
  std::vector<double> losses;  // per step
};

class Trainer {
 public:
  Trainer(const TrainConfig& cfg, const std::string& run_dir);
  TrainResult train();

  ParamStore& params() { return *params_; }
  LlamaModel& model() { return *model_; }
  const Stream& stream() const { return stream_; }

 private:
  double evaluate();
  // One optimizer step; returns the mean loss over its micro-batches.
  double train_step(int64_t iter, double* grad_norm_out, double* lr_out);

  TrainConfig cfg_;
  std::string run_dir_;
  Stream stream_;
  DataSources data_;
  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<AdamW> optim_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<DataLoader> loader_;
  std::vector<std::unique_ptr<MetricsSink>> sinks_;
  int64_t micro_batches_ = 1;
  double flops_per_token_ = 0;
};

}  // namespace primus
