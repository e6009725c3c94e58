// `primus projection calibrate --config X [overrides]`: times the bf16 GEMMs and the attention of the
// config's training step on this machine's GPU (`benchmark gemm`'s and `benchmark attention`'s timing) and
// caches them for that GPU, so that `projection performance` and `plan` use measured op times instead of the
// roofline (projection/calibration.h).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>

#include "bench/attention_bench.h"
#include "bench/gemm_bench.h"
#include "cli/projection_commands.h"
#include "cli/projection_load.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "projection/perf_report.h"

namespace primus::cli {
namespace {

struct CalibrateArgs : ModelProjectionArgs {
  double seconds = 0.3;  // per GEMM shape
};

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

int run_calibrate(CalibrateArgs args) {
  if (args.seconds <= 0) throw ConfigError(fmt::format("--seconds {} must be > 0", args.seconds));
  if (!cuda_available())
    throw ConfigError("projection calibrate times kernels on this machine's GPU, and none is visible",
                      "run it on a GPU node; `projection performance` uses the roofline meanwhile");
  const std::string device = bench::gpu_device_name(0);
  projection::GpuSpec spec;
  args.gpu = projection::find_gpu_spec(device, &spec) ? spec.name : device;
  args.no_calibration = true;
  const ProjectionContext pc = projection_context(args, "calibrate");
  projection::OpShapes shapes;
  const projection::PerformanceProjection before =
      projection::project_performance(pc.setup, pc.gpu, pc.links, nullptr, &shapes);

  projection::Calibration cal;
  cal.gpu = pc.gpu.name;
  cal.device = device;
  cal.date = utc_now();
  const size_t total = shapes.gemms.size() + shapes.attention.size();
  size_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto progress = [&](const std::string& what) {
    ++done;
    const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "calibrate: %zu/%zu %s | ETA %.0fs\n", done, total, what.c_str(),
                 spent / static_cast<double>(done) * static_cast<double>(total - done));
  };
  for (const projection::GemmShape& g : shapes.gemms) {
    const double ms = bench::time_bf16_gemm_ms(g.m, g.n, g.k, args.seconds, 0);
    cal.gemm_s[g] = ms / 1e3;
    progress(fmt::format("GEMM {}x{}x{}: {:.4f} ms, {:.0f} TFLOP/s", g.m, g.n, g.k, ms,
                         2.0 * g.m * g.n * g.k / (ms / 1e3) / 1e12));
  }
  for (const projection::AttentionShapeKey& a : shapes.attention) {
    bench::AttentionBenchOptions o;
    o.batch = a.batch;
    o.heads = a.heads;
    o.kv_heads = a.kv_heads;
    o.seq = a.seq;
    o.head_dim = a.head_dim;
    o.causal = true;
    const std::vector<bench::AttentionBenchResult> r = bench::run_attention_benchmark(o);
    if (r.empty())
      throw Error(ErrorKind::kRuntime, "projection calibrate: the attention benchmark returned nothing");
    cal.attention_s[a] = {r.front().fwd_ms / 1e3, r.front().bwd_ms / 1e3};
    progress(fmt::format("attention B{} H{}/{} T{} D{}: {:.3f} / {:.3f} ms", a.batch, a.heads, a.kv_heads,
                         a.seq, a.head_dim, r.front().fwd_ms, r.front().bwd_ms));
  }
  // Merged into the GPU's cache (other configs' shapes stay), or written to --output.
  const std::string path = args.output.empty() ? projection::calibration_path(cal.gpu) : args.output;
  std::error_code ec;
  projection::Calibration merged;
  if (std::filesystem::exists(path, ec)) merged = projection::read_calibration(path);
  merged.gpu = cal.gpu;
  merged.merge(cal);
  projection::write_calibration(path, merged);
  merged.source = path;
  const projection::PerformanceProjection after =
      projection::project_performance(pc.setup, pc.gpu, pc.links, &merged);
  std::printf("calibrated %zu GEMM and %zu attention shapes on %s into %s\n", shapes.gemms.size(),
              shapes.attention.size(), device.c_str(), path.c_str());
  std::printf("projected step: %.1f ms from the roofline, %.1f ms with the measured op times\n",
              before.step_time_s * 1e3, after.step_time_s * 1e3);
  return 0;
}

}  // namespace

void attach_calibrate(CLI::App& projection, CliContext& ctx) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* app = projection.add_subcommand(
      "calibrate",
      "Time the config's GEMMs and attention on this GPU and cache them for `performance` / `plan`");
  app->add_option("--config,--exp", args->config, "Experiment YAML (Primus format)");
  app->add_option("--nnodes", args->nnodes, "Nodes of the world whose per-rank shapes to time");
  app->add_option("--nproc-per-node", args->nproc_per_node, "GPUs per node (with --nnodes)");
  app->add_option("--target-nodes", args->target_nodes, "--nnodes N with 8 GPUs per node");
  app->add_option("--seconds", args->seconds, "Sustained timing per GEMM shape")->capture_default_str();
  app->add_option("--output,-o", args->output, "Write here instead of this GPU's cache file");
  app->allow_extras();
  app->footer(
      "The cache: $PRIMUS_PROJECTION_CACHE, $XDG_CACHE_HOME/primus/projection or "
      "~/.cache/primus/projection, one <GPU>.json per GPU (docs/projection.md).");
  app->callback([app, args, &ctx] {
    args->overrides = app->remaining();
    check_mistyped_options(args->overrides, *app);
    ctx.action = [args] { return run_calibrate(*args); };
  });
}

}  // namespace primus::cli
