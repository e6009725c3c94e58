#include "cli/projection_commands.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "cli/projection_load.h"
#include "core/error.h"

namespace primus::cli {

void add_model_projection_options(CLI::App& app, ModelProjectionArgs& args) {
  app.add_option("--config,--exp", args.config, "Experiment YAML (Primus format)");
  app.add_option("--nnodes", args.nnodes, "Nodes of the world to plan for (with --nproc-per-node)");
  app.add_option("--nproc-per-node", args.nproc_per_node, "GPUs per node (with --nnodes)");
  app.add_option("--target-nodes", args.target_nodes,
                 "Primus's spelling: --nnodes N with --nproc-per-node 8 unless given");
  app.add_option("--gpu", args.gpu,
                 "GPU: H100, H100-PCIe, H200, A100, A100-40GB, B200, MI300X, MI325X, MI355X")
      ->capture_default_str();
  app.add_option("--gpu-memory-gb", args.gpu_memory_gb,
                 "Device memory in GB (1e9 bytes): another GPU's, with the named GPU's speeds");
  app.add_option("--backend", args.backend, "gpu (BF16 on GPUs) or cpu (the FP32 CPU trainer)")
      ->capture_default_str();
  app.add_option("--intra-node-gbps", args.intra_node_gbps,
                 "GB/s per GPU per direction inside a node (default: the GPU's NVLink)");
  app.add_option("--inter-node-gbps", args.inter_node_gbps,
                 "GB/s per GPU per direction between nodes (InfiniBand / RoCE)")
      ->capture_default_str();
  app.add_option("--calibration", args.calibration,
                 "Measured op times (`projection calibrate`); default: the cache file of --gpu when present");
  app.add_flag("--no-calibration", args.no_calibration, "Ignore measured op times: the roofline only");
  app.add_flag("--json", args.json, "Print JSON instead of the table");
  app.add_option("--output,-o", args.output, "Also write an HTML page with stacked bar charts");
  app.allow_extras();
}

ProjectionContext projection_context(const ModelProjectionArgs& given, const std::string& command) {
  ModelProjectionArgs args = given;
  if (args.target_nodes > 0) {
    if (args.nnodes > 0 && args.nnodes != args.target_nodes)
      throw ConfigError(fmt::format("--target-nodes {} and --nnodes {} disagree: give one", args.target_nodes,
                                    args.nnodes));
    args.nnodes = args.target_nodes;
    if (args.nproc_per_node == 0) args.nproc_per_node = 8;
  }
  if ((args.nnodes > 0) != (args.nproc_per_node > 0) || args.nnodes < 0 || args.nproc_per_node < 0)
    throw ConfigError(fmt::format("--nnodes {} --nproc-per-node {}: give both, each >= 1", args.nnodes,
                                  args.nproc_per_node));
  if (args.backend != "gpu" && args.backend != "cpu")
    throw ConfigError(fmt::format("--backend {}: expected gpu or cpu", args.backend));
  if (args.gpu_memory_gb < 0)
    throw ConfigError(fmt::format("--gpu-memory-gb {} must be > 0", args.gpu_memory_gb));
  ProjectionContext pc;
  // An unknown name is fine with --gpu-memory-gb (H100 speeds assumed); without it, an error listing the
  // names.
  if (!projection::find_gpu_spec(args.gpu, &pc.gpu)) {
    if (args.gpu_memory_gb <= 0) pc.gpu = projection::gpu_spec(args.gpu);  // throws
    pc.gpu = projection::gpu_spec("H100-SXM");
    pc.gpu.name = args.gpu;
    pc.gpu.measured = false;
    pc.gpu.source = "unnamed GPU: H100 SXM speeds assumed";
  }
  if (args.gpu_memory_gb > 0) pc.gpu.memory_gb = args.gpu_memory_gb;
  const int64_t world = int64_t{args.nnodes} * args.nproc_per_node;
  pc.rc =
      load_for_projection(args.config, args.overrides, {.data_parallel = 1, .world_size = world}, command);
  const int w = static_cast<int>(pc.rc.world_size);
  pc.setup = projection::make_setup(pc.rc, w, args.nproc_per_node > 0 ? args.nproc_per_node : std::min(w, 8),
                                    args.backend == "gpu");
  if (args.intra_node_gbps < 0 || args.inter_node_gbps <= 0)
    throw ConfigError(fmt::format("--intra-node-gbps {} / --inter-node-gbps {}: bandwidths must be > 0",
                                  args.intra_node_gbps, args.inter_node_gbps));
  pc.links.intra_node_gbps = args.intra_node_gbps;
  pc.links.inter_node_gbps = args.inter_node_gbps;
  if (!args.no_calibration) {
    const std::string path =
        args.calibration.empty() ? projection::calibration_path(pc.gpu.name) : args.calibration;
    std::error_code ec;
    if (!args.calibration.empty() || std::filesystem::exists(path, ec))
      pc.calibration = projection::read_calibration(path);  // an explicit file must exist
  }
  pc.title = fmt::format("{} projection: {} ({})", command, pc.rc.info.exp_name, pc.rc.info.path);
  return pc;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) throw Error(ErrorKind::kRuntime, "projection: cannot write " + path);
}

}  // namespace primus::cli
