#pragma once
// Per-step metrics: the console log line (design.md §3) and machine-readable sinks (JSONL now; TensorBoard
// and CSV sit behind the same interface).
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace primus {

// MoE routing of one step (model/moe_mlp.h), summarised over its MoE layers.
struct MoeStepMetrics {
  bool present = false;         // an MoE model
  double aux_loss = 0;          // balancing loss per layer and forward, mean over layers (its coefficient in)
  double z_loss = 0;            // the same for the z-loss
  double max_load_ratio = 0;    // max over layers of (most tokens one expert got) / (mean per expert)
  double dropped_fraction = 0;  // routing entries dropped by the capacity / all entries
  bool per_layer_logging = false;  // moe_per_layer_logging: one log line per layer too
  struct Layer {
    int layer = 0;
    double aux_loss = 0, z_loss = 0, mean_load = 0;
    int64_t max_load = 0, dropped = 0;
  };
  std::vector<Layer> layers;
};

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
  bool skipped = false;       // a guard did not apply this step's update
  int64_t skipped_total = 0;  // updates skipped so far in the job (a resumed run counts those before it)
  MoeStepMetrics moe;
  std::vector<double> mtp_losses;  // multi-token prediction: each depth's loss (empty without MTP)
  std::string fp8_recipe;          // FP8 training: the recipe's id ("" for BF16)
  double fp8_share = 0;            // and the share of the step's GEMM FLOPs it runs in FP8
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

// One JSON object per line in `path`. Each line, its '\n' included, goes to the file with a single write()
// on an O_APPEND descriptor, so a reader polling the file (or a killed run) sees whole lines plus at most one
// unterminated last line. A fresh run truncates the file; a resumed run appends.
class JsonlSink : public MetricsSink {
 public:
  JsonlSink(const std::string& path, bool append);
  ~JsonlSink() override;
  JsonlSink(const JsonlSink&) = delete;
  JsonlSink& operator=(const JsonlSink&) = delete;
  void write_step(const StepMetrics& m) override;
  void write_scalar(int64_t step, const std::string& name, double value) override;

 private:
  void write_line(const nlohmann::json& j);
  int fd_ = -1;
  std::string path_;
};

// write() of all of `data` to `fd` (retried on EINTR and short writes); throws naming `path`.
void write_whole(int fd, std::string_view data, const std::string& path);

// The records (JSON objects) of a JSONL file: a line counts once its '\n' is written, so an unterminated last
// line (still being written, or torn by a kill) is left out. A complete line that is not a JSON object is an
// Error naming file and line, or, with `skipped`, is left out and described there. A missing file gives no
// records.
std::vector<nlohmann::json> read_jsonl_records(const std::string& path,
                                               std::vector<std::string>* skipped = nullptr);

// Cuts an unterminated last line (a torn write of a killed run) so that appending continues on a line of its
// own. Returns the bytes removed (0: the file ends with '\n', is empty or missing).
int64_t repair_torn_tail(const std::string& path);

// Keeps the records of iterations <= `iteration` (a resumed run recomputes the later ones); rewrites the file
// through a temporary and a rename. A torn last line is cut, and a line that is not JSON (left by writers
// before one-write-per-line) is dropped with a warning. Returns the number of lines dropped. A missing file
// is fine (0).
int64_t truncate_metrics_after(const std::string& path, int64_t iteration);

// Short human numbers: 39.8k, 1.2M.
std::string human_count(double v);

}  // namespace primus
