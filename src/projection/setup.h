#pragma once
// What a projection plans for: a config, the world it runs in, and what each pipeline rank holds. The one
// place that turns (config, world) into per-rank modules and in-flight micro-batches, for the memory and the
// performance models and the planner alike.
//
//   config::ResolvedConfig rc = load_for_projection(...);   // planning mode, plan_world_size = N x G
//   Setup s = make_setup(rc, /*world=*/16, /*gpu=*/true);
#include <string>
#include <vector>

#include <memory>

#include "config/load_config.h"
#include "parallel/parallel_dims.h"
#include "parallel/pipeline_projection.h"

namespace primus::projection {

// One pipeline rank: its decoder layers (every chunk's), its MTP layers, whether it holds the embedding and
// the loss, and how many micro-batches of its activations its schedule holds at once at the peak.
struct RankPlan {
  int pp_rank = 0;
  std::vector<int> layers;
  int mtp_layers = 0;
  bool embedding = false, loss = false;
  double inflight = 1;  // micro-batches of this rank's whole layer set (the simulator's peak_microbatches)
  // The most decoder layers whose whole gradient a backward keeps at once: 1, or under a zero-bubble schedule
  // every layer of the chunks whose weight-gradient pass (BW) is still queued, plus the layer of a backward
  // of another chunk running meanwhile. FSDP holds each such layer's full f32 gradient until its BW has run.
  int grad_layers = 1;
  std::string holds;  // "embedding + layers 0-3"
};

struct Setup {
  TrainConfig train;
  parallel::ParallelLayout layout;
  int world = 1;
  int nproc_per_node = 1;         // GPUs per node (collectives inside a node run over NVLink)
  bool gpu = true;                // the GPU backend (BF16 activations) or the CPU one (FP32 everything)
  std::string schedule = "none";  // the pipeline schedule ("1f1b", "interleaved", ...) or "none" (PP 1)
  std::vector<RankPlan> ranks;    // one per pipeline rank
  int64_t microbatches = 1;       // per step, per data-parallel rank
  double bubble = 0;              // the schedule's idle share with uniform layer costs (0 without PP)
  std::shared_ptr<const parallel::PipelinePlan> plan;  // PP > 1: the split and the schedule's action lists
  std::vector<std::string> notes;  // what the setup assumed (a schedule the config names but we cannot run)

  int tp() const { return layout.dims.tp(); }
  int cp() const { return layout.dims.cp(); }
  int ep() const { return layout.dims.ep(); }
  int pp() const { return layout.dims.pp(); }
  bool sequence_parallel() const { return train.parallel.sequence_parallel && tp() > 1; }
  // Tokens of one micro-batch that one rank processes (the sequence split over CP).
  int64_t tokens_per_rank() const;
};

// The parameters one pipeline rank holds, outside and inside the routed experts (TP-split; experts also over
// EP), and its largest layer's (what FSDP gathers at a time). The one count both projections use.
struct RankParams {
  double dense = 0;
  double expert = 0;
  double largest_layer = 0;
};
RankParams rank_parameters(const Setup& s, const RankPlan& r);

// How many ranks the parameter state is sharded over, dense and expert regions: the trainer's own rule
// (DpConfig::shard_ranks / expert_shard_ranks, parallel/data_parallel.h) for the layout.
struct StateShards {
  double dense = 1, expert = 1;
};
StateShards state_shards(const Setup& s);

// Throws ConfigError when the layout cannot exist (degrees not dividing the world, heads not divisible by TP,
// a pipeline split that cannot be made).
Setup make_setup(const config::ResolvedConfig& rc, int world, int nproc_per_node, bool gpu);

}  // namespace primus::projection
