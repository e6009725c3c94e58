#pragma once
// `primus report RUN_DIR`: the post-flight report of a training run directory as one self-contained HTML
// page: plots over steps (loss with validation loss, tokens/s/GPU, MFU, memory, step time) with guard events
// drawn as markers, the run summary, who held the memory at its peak and the profiled steps' memory timeline,
// the GPU timeline and op summary of every trace under RUN_DIR/trace, and
// a table of every guard event (NaN skips/halts, loss spikes, slow steps, stragglers, hangs) from
// events.jsonl and heartbeat/hang-rank-*.json, and for a pipeline-parallel run its latest measured step
// (pipeline_timeline.json) drawn as the schedule pictures are, beside the simulator's prediction. With
// --compare, other runs' loss curves beside this one's (e.g. FP8 recipes against BF16, docs/fp8.md).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "profile/timeline.h"

namespace primus::report {

struct RunData {
  std::string dir;
  std::vector<nlohmann::json> steps;       // metrics.jsonl records with "loss"
  std::vector<nlohmann::json> validation;  // records with "val_loss"
  std::vector<nlohmann::json> events;      // events.jsonl and hang reports
  nlohmann::json summary;                  // summary.json (null when absent)
  std::string config_yaml;
  std::vector<profile::TimelineReport> timelines;
  nlohmann::json pipeline;  // pipeline_timeline.json: a pipeline run's measured step (null when absent)
  // The memory timeline: rank 0's trace's "device memory" counter (core/device.h), in ms from the trace's
  // first event and GB allocated, in time order (empty without a trace).
  std::vector<double> memory_ms, memory_gb;
  std::vector<std::string> warnings;  // unreadable lines or files, shown in the page
  // Other runs drawn beside this one (`--compare`): the same model in another precision or layout.
  struct Compared {
    std::string name;  // the run directory's last component
    std::vector<nlohmann::json> steps, validation;
  };
  std::vector<Compared> compared;
};

// Throws primus::Error when RUN_DIR has no metrics.jsonl (names the path).
RunData load_run(const std::string& dir);
std::string render_html(const RunData& run);
// Loads, renders and writes `output` (default RUN_DIR/report.html); returns the path written. `compare`:
// run directories whose loss curves are drawn beside this run's, with their last losses' differences.
std::string write_run_report(const std::string& dir, const std::string& output,
                             const std::vector<std::string>& compare = {});

}  // namespace primus::report
