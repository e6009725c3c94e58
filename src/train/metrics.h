#pragma once
// Per-step metrics: the console log line (design.md §3) and machine-readable sinks (JSONL now; TensorBoard
// and CSV sit behind the same interface).
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace primus {

struct StepMetrics {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double iter_ms = 0;
  double tokens_per_s = 0;      // whole job
  double tokens_per_s_gpu = 0;  // per device
  double tflops_per_gpu = 0;
  double mfu = -1;    // < 0 when not meaningful (CPU)
  double mem_gb = 0;  // peak allocated on the device (GB)
  double mem_total_gb = 0;
  double eta_s = -1;
  int64_t consumed_samples = 0;
  bool skipped = false;  // a guard did not apply this step's update
};

// "iter 120/1000 | loss 3.214 | lr 2.9e-4 | grad-norm 0.83 | 412 ms | 39.8k tok/s/GPU | 487 TFLOP/s/GPU |
//  MFU 49.2% | mem 31.2/80 GB | ETA 6m12s"
std::string format_log_line(const StepMetrics& m, bool on_gpu);

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void write_step(const StepMetrics& m) = 0;
  virtual void write_scalar(int64_t step, const std::string& name, double value) = 0;
};

// One JSON object per line in `path`, flushed per line so a killed run keeps every finished step. A fresh run
// truncates the file; a resumed run appends.
class JsonlSink : public MetricsSink {
 public:
  JsonlSink(const std::string& path, bool append);
  void write_step(const StepMetrics& m) override;
  void write_scalar(int64_t step, const std::string& name, double value) override;

 private:
  std::ofstream out_;
  std::string path_;
};

// Keeps the records of iterations <= `iteration` (a resumed run recomputes the later ones); rewrites the file
// through a temporary and a rename. Returns the number of records dropped. A missing file is fine (0).
int64_t truncate_metrics_after(const std::string& path, int64_t iteration);

// Short human numbers: 39.8k, 1.2M.
std::string human_count(double v);

}  // namespace primus
