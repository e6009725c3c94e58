#pragma once
// `primus projection pipeline`: from a config, the pipeline split, every schedule's generated list and its
// simulated step (bubble, step time, peak activations per rank). No GPU is touched; nothing is trained.
//
//   config::ResolvedConfig rc = config::load_config(path, {.planning = true});
//   PipelineProjection p = project_pipeline(pipeline_input_from_config(rc), {});
//   std::puts(projection_text(p).c_str());
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/load_config.h"
#include "parallel/pipeline_layout.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_sim.h"

namespace primus::parallel {

// What the projection takes from a config (Megatron dialect).
struct PipelinePlanInput {
  PipelineSplitSpec split;  // the split keys as configured (v_shape is set per schedule)
  int64_t microbatches = 1;
  std::string microbatches_from;           // "global_batch_size 256 / (micro_batch_size 1 x data-parallel 1)"
  int group_size = 0;                      // microbatch_group_size_per_vp_stage (0 = pp)
  std::optional<ScheduleKind> configured;  // the schedule a training run would use (none: not generated)
  std::string configured_from;             // the keys that chose it
  std::vector<std::string> notes;          // what the projection does not model, for the reader
  // Costs: Primus's pp_cost_f / pp_cost_b / pp_cost_w when set (per rank, or one value for all), else the
  // layers of each chunk with B = 2F, BI = BW = F (parallel/pipeline_sim.h).
  std::vector<double> cost_f, cost_b, cost_w;
  bool overlap_p2p_comm = true;
};

// Reads the keys. A projection reads them through get(), which the key-use self-check does not count as a
// use; the config loader's read for training (training_use) counts: the split and schedule keys decide what
// the pipeline runtime runs. Throws ConfigError for a TorchTitan config or a malformed value.
PipelinePlanInput pipeline_input_from_config(const config::ResolvedConfig& rc, bool training_use = false);

// One schedule's split and action lists for the given micro-batches (the schedule's own chunk count: 2 in a
// V for zb-v, the configured virtual stages for interleaved, else 1). Throws ConfigError when it cannot run.
struct PipelinePlan {
  ScheduleKind kind = ScheduleKind::k1F1B;
  PipelineLayout layout;
  Schedule schedule;
  std::string note;  // how the split differs from the config's
};
PipelinePlan plan_schedule(ScheduleKind kind, const PipelinePlanInput& in, int64_t microbatches);
// What a training run executes: the configured schedule for the configured micro-batches. ConfigError when
// the config selects a schedule that is not generated (a Primus variant) or cannot run.
PipelinePlan training_plan(const PipelinePlanInput& in);

struct ProjectionOptions {
  std::optional<int64_t> microbatches;  // replaces the config's count
  std::vector<ScheduleKind> schedules;  // empty: all of them
  double p2p = 0;                       // send-to-arrival latency, in units of F
  // What the embedding and the loss (final norm + output layer + cross-entropy) cost, in decoder layers;
  // unset: 1 when account_for_{embedding,loss}_in_pipeline_split say so, else 0.
  std::optional<double> embedding_layers, loss_layers;
};

struct ScheduleProjection {
  ScheduleKind kind = ScheduleKind::k1F1B;
  bool configured = false;
  std::string note;     // how this schedule's split differs from the config's ("vpp 2 assumed")
  std::string skipped;  // why it was not projected (the error it raised); empty when projected
  std::optional<PipelineLayout> layout;
  Schedule schedule;
  PipelineCosts costs;
  SimResult sim;
};

struct PipelineProjection {
  PipelinePlanInput input;
  int64_t microbatches = 1;
  double p2p = 0;
  double embedding_layers = 0, loss_layers = 0;  // the costs used (ProjectionOptions)
  std::vector<ScheduleProjection> schedules;
};

// Builds, validates and simulates each schedule. A schedule that cannot run with the config is kept with
// `skipped` set, except the configured one and a single one asked for by name: their errors are the user's
// (ConfigError, exit 2).
PipelineProjection project_pipeline(const PipelinePlanInput& in, const ProjectionOptions& options);

// The table for the terminal: one row per schedule, then the split and the per-rank numbers.
std::string projection_text(const PipelineProjection& p);
// The same as JSON (machine-readable; the HTML page's numbers).
std::string projection_json(const PipelineProjection& p);

}  // namespace primus::parallel
