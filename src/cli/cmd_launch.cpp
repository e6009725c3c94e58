// `primus launch --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P] -- CMD ...`:
// one rank per local GPU with torchrun's variables (src/parallel/launcher.h). Defaults come from Primus's
// launcher variables when set: GPUS_PER_NODE, NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT.
#include <cstdlib>
#include <memory>

#include "cli/cli_context.h"
#include "core/device.h"
#include "core/env.h"
#include "core/error.h"
#include "parallel/launcher.h"

namespace primus::cli {

void attach_launch(CLI::App& root, CliContext& ctx) {
  auto o = std::make_shared<parallel::LaunchOptions>();
  CLI::App* app = root.add_subcommand(
      "launch", "Start one rank per local GPU (torchrun-style) and run a primus command in each");
  app->add_option("--nproc-per-node,--nproc_per_node", o->nproc_per_node,
                  "Ranks on this node (default: GPUS_PER_NODE, else the number of GPUs, else 1)");
  app->add_option("--nnodes", o->nnodes, "Nodes in the job (default: NNODES or 1)");
  app->add_option("--node-rank,--node_rank", o->node_rank, "This node's index (default: NODE_RANK or 0)");
  app->add_option("--master-addr,--master_addr", o->master_addr,
                  "Host of rank 0 (default: MASTER_ADDR or 127.0.0.1)");
  app->add_option("--master-port,--master_port", o->master_port,
                  "Rendezvous port on rank 0's host; 0 picks a free one (default: MASTER_PORT or 29500)");
  app->add_option("--grace", o->grace_s, "Seconds between SIGTERM and SIGKILL when stopping ranks")
      ->capture_default_str();
  app->footer(
      "Example: primus launch --nproc-per-node 8 -- train pretrain --config exp.yaml\n"
      "Output lines are prefixed with [rank N]; if a rank fails the others are stopped and the launcher "
      "exits "
      "non-zero naming it.");
  // Defaults from the environment, read at parse time so --help shows the static text above.
  app->preparse_callback([o](size_t) {
    const int gpus = cuda_device_count();
    o->nproc_per_node = env_int("GPUS_PER_NODE", gpus > 0 ? gpus : 1);
    o->nnodes = env_int("NNODES", 1);
    o->node_rank = env_int("NODE_RANK", 0);
    if (const char* a = std::getenv("MASTER_ADDR"); a != nullptr && *a != '\0') o->master_addr = a;
    o->master_port = env_int("MASTER_PORT", 29500);
  });
  // The command after `--` comes verbatim from the command line (CliContext::passthrough, cli/app.cpp).
  app->callback([o, &ctx] {
    o->command = ctx.passthrough;
    ctx.action = [o] { return parallel::run_launcher(*o); };
  });
}

}  // namespace primus::cli
