// `primus projection <what> --config EXP.yaml [overrides...]`: plans for a configuration without training or
// touching a GPU (Primus's `projection`). Each <what> is one attach_* below, sharing the config loading
// (planning mode: values training would refuse are listed, not refused):
//   pipeline   the stage split, every pipeline schedule's bubble, step time and peak activations, and an HTML
//              page with their timelines (parallel/pipeline_projection.h, report/pipeline_page.h)
//   memory       per-rank peak memory (cli/cmd_projection_memory.cpp)
//   performance  step time, tokens/s and MFU from an op-level model (cli/cmd_projection_performance.cpp)
//   plan         every layout of a world, ranked; the best as overrides (cli/cmd_projection_plan.cpp)
//   calibrate    the step's GEMMs and attention timed on this GPU, cached (cli/cmd_projection_calibrate.cpp)
#include <fmt/format.h>

#include <fmt/ranges.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli_context.h"
#include "cli/projection_commands.h"
#include "cli/projection_load.h"
#include "config/did_you_mean.h"
#include "config/load_config.h"
#include "config/not_supported.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/pipeline_projection.h"
#include "report/pipeline_page.h"

namespace primus::cli {
namespace {

struct PipelineArgs {
  std::string config;
  int64_t pp = 0, vpp = 0, dp = 1, microbatches = 0;
  std::string schedule = "all";
  std::string output = "pipeline_projection.html";
  std::string svg_dir;
  bool json = false;
  double p2p = 0;
  double embedding_cost = -1, loss_cost = -1;  // -1: from account_for_*_in_pipeline_split
  std::vector<std::string> overrides;
};

int run_pipeline(PipelineArgs args) {
  // --pp / --vpp are overrides of the Megatron keys, so that errors cite them as the command line's.
  if (args.pp > 0) args.overrides.push_back(fmt::format("pipeline_model_parallel_size={}", args.pp));
  if (args.vpp > 0)
    args.overrides.push_back(fmt::format("virtual_pipeline_model_parallel_size={}", args.vpp));
  if (args.dp < 1) throw ConfigError(fmt::format("--dp {} must be >= 1", args.dp));
  const config::ResolvedConfig rc =
      load_for_projection(args.config, args.overrides, {.data_parallel = args.dp}, "pipeline");

  parallel::ProjectionOptions options;
  if (args.microbatches != 0) options.microbatches = args.microbatches;
  options.p2p = args.p2p;
  if (args.embedding_cost != -1) options.embedding_layers = args.embedding_cost;
  if (args.loss_cost != -1) options.loss_layers = args.loss_cost;
  if (args.schedule != "all") {
    for (size_t pos = 0; pos <= args.schedule.size();) {
      const size_t comma = std::min(args.schedule.find(',', pos), args.schedule.size());
      options.schedules.push_back(parallel::schedule_from_name(args.schedule.substr(pos, comma - pos)));
      pos = comma + 1;
    }
  }
  const parallel::PipelineProjection p =
      parallel::project_pipeline(parallel::pipeline_input_from_config(rc), options);
  const std::string out = args.json ? parallel::projection_json(p) + "\n" : parallel::projection_text(p);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (!args.output.empty()) {
    std::ofstream f(args.output);
    if (!f) throw Error(ErrorKind::kRuntime, "projection pipeline: cannot write " + args.output);
    f << report::pipeline_projection_html(
        p, fmt::format("Pipeline projection: {} ({})", rc.info.exp_name, rc.info.path));
    if (!f) throw Error(ErrorKind::kRuntime, "projection pipeline: cannot write " + args.output);
    std::fprintf(stderr, "projection: wrote %s\n", args.output.c_str());
  }
  if (!args.svg_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(args.svg_dir, ec);
    for (const auto& [name, svg] : report::pipeline_projection_svgs(p)) {
      const std::string path = (std::filesystem::path(args.svg_dir) / (name + ".svg")).string();
      std::ofstream f(path);
      f << svg;
      if (!f) throw Error(ErrorKind::kRuntime, "projection pipeline: cannot write " + path);
      std::fprintf(stderr, "projection: wrote %s\n", path.c_str());
    }
  }
  return 0;
}

void attach_pipeline(CLI::App& projection, CliContext& ctx) {
  auto args = std::make_shared<PipelineArgs>();
  CLI::App* app = projection.add_subcommand(
      "pipeline",
      "Pipeline split and schedules: bubble, step time and peak activations per schedule, with timelines");
  app->add_option("--config,--exp", args->config, "Experiment YAML (Primus format)");
  app->add_option("--pp", args->pp, "Pipeline ranks (overrides pipeline_model_parallel_size)");
  app->add_option("--vpp", args->vpp, "Chunks per rank (overrides virtual_pipeline_model_parallel_size)");
  app->add_option("--dp", args->dp,
                  "Data-parallel replicas (the micro-batch count divides by it; default 1)");
  app->add_option("--micro-batches", args->microbatches,
                  "Micro-batches per step (default: global_batch_size / (micro_batch_size x dp))");
  app->add_option("--schedule", args->schedule,
                  "all, or a comma-separated list of gpipe, 1f1b, interleaved, zb-h1, zb-v");
  app->add_option("--p2p-latency", args->p2p,
                  "Send-to-arrival time of one message, in units of F (default 0)");
  app->add_option("--output,-o", args->output, "HTML page with the timelines ('' for none)")
      ->capture_default_str();
  app->add_option(
      "--embedding-cost", args->embedding_cost,
      "The embedding's cost in decoder layers (default 1 with account_for_embedding_in_pipeline_split, "
      "else 0)");
  app->add_option(
      "--loss-cost", args->loss_cost,
      "The loss's (final norm + output layer + cross-entropy) cost in decoder layers (default 1 with "
      "account_for_loss_in_pipeline_split, else 0)");
  app->add_option("--svg", args->svg_dir, "Also write each schedule's timeline as DIR/<schedule>.svg");
  app->add_flag("--json", args->json, "Print JSON instead of the table");
  app->allow_extras();
  app->footer(
      "Overrides as `train pretrain` takes them (key=value, --key=value, --key value). Example:\n"
      "  primus projection pipeline --config exp.yaml --pp 4 --micro-batches 8 --schedule 1f1b,zb-v\n"
      "The split, schedules and cost model are described in docs/pipeline.md. No GPU is touched.");
  app->callback([app, args, &ctx] {
    args->overrides = app->remaining();
    check_mistyped_options(args->overrides, *app);
    ctx.action = [args] { return run_pipeline(*args); };
  });
}

}  // namespace

void attach_projection(CLI::App& root, CliContext& ctx) {
  CLI::App* projection = root.add_subcommand(
      "projection",
      "Plan a configuration without training: memory, performance, the best layout, pipeline schedules");
  projection->require_subcommand(1);
  attach_pipeline(*projection, ctx);
  attach_memory(*projection, ctx);
  attach_performance(*projection, ctx);
  attach_plan(*projection, ctx);
  attach_calibrate(*projection, ctx);
}

}  // namespace primus::cli
