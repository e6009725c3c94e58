#pragma once
// `primus projection memory`: the bytes each pipeline rank allocates at its peak, by what holds them, from
// the config alone. The model follows what our trainer allocates (docs/projection.md has the derivation and
// its check against measured peaks):
//
//   parameter state  per parameter on the rank: bf16 weight, f32 gradient, Adam m and v, and the f32 master
//                    (as a 16-bit remainder of the bf16 weight on one GPU / DDP), each sharded as the data-
//                    parallel mode says; MoE experts divided over EP and sharded over expert-DP
//   activations      what each layer saves for its backward, by layer kind (dense, MoE, MLA) and recompute
//                    mode, times the micro-batches the pipeline schedule holds in flight
//   peak transient   the larger of the output layer's logits chunk (forward end) and one layer's backward
//                    working set (plus the recomputed layer under full recompute)
//   buffers          FSDP's gathered layers, pipeline send/receive buffers, FP8 weight copies, GEMM
//                    workspace
// Outside the allocator (for the headroom only): the CUDA context and NCCL's buffers.
#include <string>
#include <vector>

#include "projection/gpu_catalog.h"
#include "projection/setup.h"

namespace primus::projection {

struct MemoryItem {
  std::string name;  // "parameters", "gradients", ...
  double bytes = 0;
  std::string note;  // how it was counted
};

struct RankMemory {
  int pp_rank = 0;
  std::string holds;
  std::vector<MemoryItem> items;
  double peak_bytes = 0;  // the sum of the items: what the trainer's "peak mem" reports (allocator peak)
};

struct MemoryProjection {
  std::vector<RankMemory> ranks;  // one per pipeline rank
  double peak_bytes = 0;          // the largest rank's
  int peak_rank = 0;
  double outside_allocator_bytes = 0;  // CUDA context + communicator buffers (headroom only)
  double capacity_bytes = 0;           // the GPU's memory (0 on the CPU)
  std::string device;                  // "H100-SXM (85.0 GB)" or "CPU"
  double headroom_bytes() const { return capacity_bytes - peak_bytes - outside_allocator_bytes; }
  bool fits() const { return capacity_bytes <= 0 || headroom_bytes() >= 0; }
  std::vector<std::string> assumptions;
};

MemoryProjection project_memory(const Setup& s, const GpuSpec& gpu);

// LoRA: the adapter parameters of one decoder layer on one tp rank (model/param_store.cpp lays them out),
// r x (in + out) per adapted projection, the per-head side split over tp. A model whose MoE layers take no
// MLP adapters is refused with MLP targets (config/validate.cpp), so every layer counts alike.
double lora_parameters_per_layer(const ModelConfig& m, const LoraConfig& l, int tp);

}  // namespace primus::projection
