#pragma once
// The model-based projection commands (memory, performance, plan) and what they share: the world, the GPU and
// the backend they plan for.
#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "cli/cli_context.h"
#include "projection/gpu_catalog.h"
#include "projection/perf_model.h"
#include "projection/setup.h"

namespace primus::cli {

struct ModelProjectionArgs {
  std::string config;
  int nnodes = 0, nproc_per_node = 0;  // 0: the config's model-parallel degrees with one data-parallel rank
  int target_nodes = 0;                // Primus's --target-nodes: --nnodes with 8 GPUs per node unless given
  std::string gpu = "H100-SXM";
  double gpu_memory_gb = 0;  // > 0: this much memory (an unnamed GPU gets H100 speeds)
  std::string backend = "gpu";
  bool json = false;
  double intra_node_gbps = 0;  // 0: the GPU's NVLink
  double inter_node_gbps = 50;
  std::string calibration;      // --calibration FILE (else the cache file of --gpu when it exists)
  bool no_calibration = false;  // --no-calibration: the roofline only
  std::string output;           // HTML page
  std::vector<std::string> overrides;
};
void add_model_projection_options(CLI::App& app, ModelProjectionArgs& args);

struct ProjectionContext {
  config::ResolvedConfig rc;
  projection::Setup setup;
  projection::GpuSpec gpu;
  projection::Links links;
  std::optional<projection::Calibration> calibration;  // measured op times for this GPU, when present
  const projection::Calibration* cal() const { return calibration ? &*calibration : nullptr; }
  std::string title;
};
// Loads the config for the world, picks the GPU, builds the setup. ConfigError for bad input, before any
// work.
ProjectionContext projection_context(const ModelProjectionArgs& args, const std::string& command);
void write_file(const std::string& path, const std::string& text);

void attach_memory(CLI::App& projection, CliContext& ctx);
void attach_performance(CLI::App& projection, CliContext& ctx);
void attach_plan(CLI::App& projection, CliContext& ctx);
void attach_calibrate(CLI::App& projection, CliContext& ctx);

}  // namespace primus::cli
