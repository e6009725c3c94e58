#pragma once
// `primus projection performance`: the step time of a training run from an op-level model. Every GEMM,
// attention, grouped GEMM, elementwise pass, collective and the optimizer of one step, each timed by the
// GPU's ceilings (projection/gpu_catalog.h: our measured GEMM / streaming ceilings on the H100) with a shape
// efficiency, communication from link bandwidths per collective and the overlap our runtime gives it, and
// the pipeline's bubble from the schedule simulator run with the projected per-rank costs.
//
//   PerformanceProjection p = project_performance(setup, gpu, links);
//   p.step_time_s, p.tokens_per_s_per_gpu, p.mfu; p.ops: what the slowest rank spends, op by op
#include <string>
#include <vector>

#include <set>

#include "projection/calibration.h"
#include "projection/gpu_catalog.h"
#include "projection/setup.h"

namespace primus::projection {

struct Links {
  double intra_node_gbps = 0;   // per GPU per direction; 0: the GPU's NVLink
  double inter_node_gbps = 50;  // per GPU per direction (400 Gb/s InfiniBand / RoCE NIC per GPU)
  // share of the link a collective's bus bandwidth reaches: NCCL all-reduce / all-gather of 32-64 MiB between
  // two H100 / H200 over NVLink measured 208-222 GB/s of 450 (docs/performance.md, tensor parallelism)
  double efficiency = 0.48;
};

struct OpTime {
  std::string name;    // "layer GEMMs", "attention", "MoE grouped GEMMs", "TP collectives", ...
  std::string kind;    // compute | memory | comm | optimizer
  double seconds = 0;  // per step on this rank
  double flops = 0;    // per step on this rank
};

struct RankTime {
  int pp_rank = 0;
  double forward_s = 0, backward_s = 0;  // one micro-batch (backward includes recomputation)
  std::vector<OpTime> ops;               // per step
};

struct PerformanceProjection {
  double step_time_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;  // model FLOPs (the trainer's formula) / step time / GPU peak
  double model_tflops_per_gpu = 0;
  // Breakdown of the step on the critical path
  double compute_s = 0;  // micro-batches x (forward + backward) of the slowest rank, comm inside included
  double exposed_comm_s = 0;     // data-parallel reductions not hidden under the backward
  double bubble_s = 0;           // pipeline idle time
  double optimizer_s = 0;        // gradient norm + update not hidden under the next forward
  double comm_in_compute_s = 0;  // TP / CP / EP collectives, exposed inside the micro-batches
  std::vector<RankTime> ranks;
  int slowest_rank = 0;
  int measured_ops = 0,
      modelled_ops = 0;  // GEMM / attention calls timed by a calibration, or by the roofline
  std::vector<std::string> assumptions;
};

// The bf16 GEMM and attention shapes a step runs (what `projection calibrate` times).
struct OpShapes {
  std::set<GemmShape> gemms;
  std::set<AttentionShapeKey> attention;
};

// `calibration`: measured times used instead of the roofline for the shapes it holds (null: roofline only);
// `shapes`: when given, filled with the step's shapes.
PerformanceProjection project_performance(const Setup& s, const GpuSpec& gpu, const Links& links,
                                          const Calibration* calibration = nullptr,
                                          OpShapes* shapes = nullptr);

// GEMM time on the GPU for [M, K] x [K, N] in bf16 (fp8 when `fp8`): the ceiling scaled by the wave
// quantisation of 128 x 256 output tiles over the SMs, or the bytes at the streaming ceiling when larger.
double gemm_seconds(const GpuSpec& gpu, double m, double n, double k, bool fp8 = false);

}  // namespace primus::projection
