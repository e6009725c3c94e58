// `primus projection memory --config X [--nnodes N --nproc-per-node G] [--gpu NAME | --gpu-memory-gb M]`:
// per-rank peak bytes of a training run of the config, by what holds them (projection/memory_model.h).
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "cli/projection_commands.h"
#include "cli/projection_load.h"
#include "core/error.h"
#include "projection/memory_report.h"
#include "projection/projection_page.h"

namespace primus::cli {
namespace {

int run_memory(ModelProjectionArgs args) {
  const ProjectionContext pc = projection_context(args, "memory");
  const projection::MemoryProjection m = projection::project_memory(pc.setup, pc.gpu);
  const std::string out = args.json ? projection::memory_json(m, pc.setup) + "\n"
                                    : projection::memory_text(m, pc.setup, pc.title);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (!args.output.empty()) {
    write_file(args.output, projection::projection_page(pc.title, pc.setup, &m, nullptr));
    std::fprintf(stderr, "projection: wrote %s\n", args.output.c_str());
  }
  return m.fits() ? 0 : 3;
}

}  // namespace

void attach_memory(CLI::App& projection, CliContext& ctx) {
  auto args = std::make_shared<ModelProjectionArgs>();
  CLI::App* app = projection.add_subcommand(
      "memory",
      "Per-rank peak memory of a training run: parameters, gradients, optimizer state, activations, "
      "buffers, per pipeline stage, with the headroom on the GPU");
  add_model_projection_options(*app, *args);
  app->footer(
      "Overrides as `train pretrain` takes them (key=value, --key=value, --key value). Example:\n"
      "  primus projection memory --config exp.yaml --nnodes 4 --nproc-per-node 8 --gpu h200\n"
      "Exit code 3 when the peak does not fit the GPU. The model is described in docs/projection.md.");
  app->callback([app, args, &ctx] {
    args->overrides = app->remaining();
    check_mistyped_options(args->overrides, *app);
    ctx.action = [args] { return run_memory(*args); };
  });
}

}  // namespace primus::cli
