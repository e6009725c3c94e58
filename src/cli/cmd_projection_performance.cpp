// `primus projection performance --config X [--nnodes N --nproc-per-node G] [--gpu NAME]`: the step time,
// tokens/s per GPU and MFU of a training run from an op-level model (projection/perf_model.h).
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "cli/projection_commands.h"
#include "cli/projection_load.h"
#include "projection/perf_report.h"
#include "projection/projection_page.h"

namespace primus::cli {
namespace {

int run_performance(ModelProjectionArgs args) {
  const ProjectionContext pc = projection_context(args, "performance");
  const projection::PerformanceProjection p =
      projection::project_performance(pc.setup, pc.gpu, pc.links, pc.cal());
  const std::string out = args.json ? projection::performance_json(p, pc.setup) + "\n"
                                    : projection::performance_text(p, pc.setup, pc.title);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (!args.output.empty()) {
    const projection::MemoryProjection m = projection::project_memory(pc.setup, pc.gpu);
    write_file(args.output, projection::projection_page(pc.title, pc.setup, &m, &p));
    std::fprintf(stderr, "projection: wrote %s\n", args.output.c_str());
  }
  return 0;
}

}  // namespace

void attach_performance(CLI::App& projection, CliContext& ctx) {
  auto args = std::make_shared<ModelProjectionArgs>();
  CLI::App* app = projection.add_subcommand(
      "performance", "Step time, tokens/s per GPU and MFU from an op-level model, with the time broken down");
  add_model_projection_options(*app, *args);
  app->footer(
      "Overrides as `train pretrain` takes them (key=value, --key=value, --key value). Example:\n"
      "  primus projection performance --config exp.yaml --nnodes 8 --nproc-per-node 8 --gpu h100\n"
      "The model and its check against measured steps are in docs/projection.md.");
  app->callback([app, args, &ctx] {
    args->overrides = app->remaining();
    check_mistyped_options(args->overrides, *app);
    ctx.action = [args] { return run_performance(*args); };
  });
}

}  // namespace primus::cli
