#pragma once
// `primus projection plan`: the layouts a world allows for a config (DP / ZeRO-1 / FSDP x TP x PP x VPP x CP
// x EP, recompute, micro-batch), each checked by the config loader exactly as `train pretrain` would check it
// (so the winner is a run we can start), dropped when the memory projection does not fit the GPU, ranked by
// the performance projection's tokens/s per GPU.
//
//   PlanResult r = plan_layouts(base, loader, {.world = 16, .nproc_per_node = 8}, gpu, links);
//   r.ranked[0].overrides: {{"tensor_model_parallel_size", "2"}, ...}, the best layout as config keys
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "projection/memory_model.h"
#include "projection/perf_model.h"

namespace primus::projection {

struct PlanCandidate {
  std::vector<std::pair<std::string, std::string>>
      overrides;      // config keys (the config's dialect) and values
  std::string label;  // "tp 2 pp 1 cp 1 ep 1 dp 4 fsdp | mbs 2 | recompute selective"
  Setup setup;
  MemoryProjection memory;
  PerformanceProjection perf;
};

struct PlanOptions {
  int world = 1;
  int nproc_per_node = 1;
  int top = 5;
  std::vector<int> micro_batches = {1, 2, 4, 8};
};

struct PlanResult {
  std::vector<PlanCandidate> ranked;  // fitting candidates, fastest first (all of them)
  int structures = 0;                 // parallel structures tried (one config load each)
  int candidates = 0;                 // structures x micro-batch x recompute choices
  int invalid = 0;                    // rejected by the layout rules (with the first reasons below)
  int refused = 0;                    // valid, but training would refuse them ("not supported yet")
  int too_big = 0;                    // valid and trainable, but over the GPU's memory
  std::vector<std::string> reasons;   // a sample of why layouts were dropped
};

// Loads the config with these extra overrides (key=value tokens) for the planned world, in planning mode.
using PlanLoader = std::function<config::ResolvedConfig(const std::vector<std::string>& tokens)>;

PlanResult plan_layouts(const config::ResolvedConfig& base, const PlanLoader& load,
                        const PlanOptions& options, const GpuSpec& gpu, const Links& links,
                        const Calibration* calibration = nullptr);

// The overrides as a flat `key: value` YAML file that `train pretrain --overrides FILE` reads.
std::string overrides_yaml(const PlanCandidate& c, const std::string& header);

}  // namespace primus::projection
