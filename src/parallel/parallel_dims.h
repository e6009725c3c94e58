#pragma once
// ParallelDims: the parallel degrees of a job, validated once, and the arithmetic between a rank and its
// coordinates. Rank order is Megatron's tp-cp-ep-dp-pp (TP innermost: its ranks are consecutive and stay in
// one node); the data-parallel coordinate splits as dp = dp_shard + dp_shard_size * dp_replicate (the shard
// dimension inside the replicas, as TorchTitan's mesh [pp, dp_replicate, dp_shard, cp, tp]).
//
// Dense grid:   rank = tp_r + TP * (cp_r + CP * (dp_r + DP * pp_r)),    DP = dp_replicate * dp_shard
// Expert grid:  rank = etp_r + ETP * (ep_r + EP * (edp_r + EDP * pp_r)), ETP = TP, EDP = DP * CP / EP
//
//   ParallelDims d = ParallelDims::make({.dp_shard = -1, .tp = 2}, /*world=*/8);  // dp_shard inferred: 4
//   ParallelCoords c = d.coords(5);   // tp 1, dp_shard 2, ...
#include <cstdint>
#include <string>
#include <vector>

#include "config/train_config.h"

namespace primus::parallel {

struct ParallelDegrees {
  int dp_replicate = 1;
  int dp_shard = -1;  // -1: what the world size leaves
  int cp = 1;
  int tp = 1;
  int pp = 1;
  int ep = 1;
};

struct ParallelCoords {
  int tp = 0, cp = 0, dp = 0, dp_shard = 0, dp_replicate = 0, pp = 0;
  int ep = 0, edp = 0;  // expert grid
};

// How data parallelism shares state (Megatron's data_parallel_sharding_strategy).
enum class Sharding {
  kNoShard,           // DDP: every DP rank holds everything; gradients all-reduced
  kOptim,             // ZeRO-1 (use_distributed_optimizer): master weights and moments sharded
  kOptimGrads,        // ZeRO-2: gradients reduce-scattered as well
  kOptimGradsParams,  // ZeRO-3 / FSDP: parameters sharded and all-gathered per layer
};
const char* sharding_name(Sharding s);
// Throws ConfigError for anything but no_shard | optim | optim_grads | optim_grads_params.
Sharding sharding_from_name(const std::string& name);

class ParallelDims {
 public:
  // Validates (every degree >= 1 except dp_shard = -1; product = world size; ep divides dp_shard * cp)
  // and infers dp_shard. Throws ConfigError naming the rule.
  static ParallelDims make(const ParallelDegrees& degrees, int world_size);

  int dp_replicate() const { return d_.dp_replicate; }
  int dp_shard() const { return d_.dp_shard; }
  int cp() const { return d_.cp; }
  int tp() const { return d_.tp; }
  int pp() const { return d_.pp; }
  int ep() const { return d_.ep; }
  int dp() const { return d_.dp_replicate * d_.dp_shard; }
  int world_size() const { return world_; }
  int edp() const { return dp() * cp() / ep(); }  // expert data-parallel degree

  ParallelCoords coords(int rank) const;
  // "tp 1, cp 0, dp 2, pp 0" (", ep 1" when EP > 1): how messages name a rank's place (comm/rank_names.h).
  std::string describe_rank(int rank) const;
  int rank_of(int tp_r, int cp_r, int dp_r, int pp_r) const;

  // The names build_groups() knows, and the world ranks of `rank`'s group of that name (ascending, so that
  // the position in the list is the group rank). Throws ConfigError for an unknown name.
  static const std::vector<std::string>& group_names();
  std::vector<int> group_ranks(const std::string& name, int rank) const;

  // Megatron/TorchTitan model and batch rules (heads % tp, kv heads vs tp, layers % pp, seq % 2cp,
  // gbs % (mbs * dp)). Throws ConfigError listing every broken rule.
  // pipeline_split_checked: the caller has already checked the pipeline split (parallel/pipeline_layout.h
  // knows uneven splits and layout strings), so layers % pp is not required.
  void validate_training(const TrainConfig& cfg, bool pipeline_split_checked = false) const;

  std::string describe() const;  // "dp_replicate 1 x dp_shard 4 x cp 1 x tp 2 x pp 1 (ep 1) = 8 ranks"

 private:
  ParallelDegrees d_;
  int world_ = 1;
};

// The job's layout from the typed config: Megatron keys (tensor/pipeline/context/expert_model_parallel_size,
// use_distributed_optimizer, use_torch_fsdp2, data_parallel_sharding_strategy,
// data_parallel_replicate_degree) and TorchTitan's (parallelism.data_parallel_shard_degree with -1 = infer,
// data_parallel_replicate_degree), both already mapped into ParallelConfig by the dialect mappers.
//   no_shard / optim / optim_grads: dp_shard = 1, dp_replicate = DP (the DP group is the replicas)
//   optim_grads_params (FSDP):      dp_replicate = data_parallel_replicate_degree, dp_shard = the rest
struct ParallelLayout {
  ParallelDims dims;
  Sharding sharding = Sharding::kNoShard;
  std::string describe() const;
};
ParallelLayout layout_from_config(const ParallelConfig& p, int world_size);

}  // namespace primus::parallel
