#pragma once
// Every named process group of a ParallelDims layout, built once through Communicator::split and fetched by
// name (TorchTitan's named mesh):
//   world        all ranks
//   tp cp pp     tensor / context / pipeline parallel groups
//   embedding    the first and the last pipeline stage (each other rank alone): a tied embedding's two copies
//                sum their gradients over it (Megatron's embedding group)
//   dp           all data-parallel ranks (dp_replicate x dp_shard): DDP's gradient all-reduce, ZeRO-1 shards
//   dp_shard     FSDP's shard group (inside one replica);   dp_replicate: HSDP's replica group
//   dp_cp        dp x cp: where gradients are reduced when CP > 1 (Megatron's data_parallel_group_with_cp)
//   dp_shard_cp  dp_shard x cp: TorchTitan's FSDP mesh when CP > 1
//   ep edp       expert-parallel group and expert data-parallel group (expert grid, parallel_dims.h)
//   edp_shard    the expert data-parallel ranks inside one HSDP replica (FSDP's shard group of the experts)
//   tp_ep        etp x ep: the ranks that hold one stage's experts between them (Megatron's expert
//                tensor-and-model-parallel group; checkpoints gather a store split over both through it)
// Groups whose membership is the same for the layout (e.g. dp and dp_shard when dp_replicate = 1, or every
// group of size 1) share one communicator, named after all of them ("dp=dp_shard=dp_cp=dp_shard_cp").
//
//   ProcessGroups g = build_groups(layout.dims, *world.comm);
//   g.get("dp").all_reduce(grads, ReduceOp::kSum, stream, "grads");
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "parallel/parallel_dims.h"

namespace primus::parallel {

class ProcessGroups {
 public:
  // Throws ConfigError naming the known groups for an unknown name.
  comm::Communicator& get(const std::string& name) const;
  std::shared_ptr<comm::Communicator> shared(const std::string& name) const;
  const ParallelDims& dims() const { return dims_; }
  // Aborts every group (also done by the watchdog on any failure).
  void abort(const std::string& reason);

 private:
  friend ProcessGroups build_groups(const ParallelDims& dims, comm::Communicator& world);
  ParallelDims dims_;
  comm::Communicator* world_ = nullptr;
  std::map<std::string, std::shared_ptr<comm::Communicator>> groups_;  // "world" aliases, not owned
};

// Collective over `world` (whose size must equal dims.world_size()). Every rank builds every group.
ProcessGroups build_groups(const ParallelDims& dims, comm::Communicator& world);

}  // namespace primus::parallel
