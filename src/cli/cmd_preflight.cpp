// `primus preflight`: node fitness checks (safe/preflight.h), and the hang-watchdog drill
// (safe/hang_drill.h).
//   primus preflight                          info checks; Markdown + JSON report under output/preflight
//   primus preflight --perf-test --quick      + per-GPU GEMM / HBM copy and intra-node collectives, < 60 s
//   primus preflight --smoke                  + each GPU in its own process (alloc, GEMM, finite), 15 s
//   timeout primus launch --nproc-per-node 4 -- preflight --hang-drill     (PRIMUS_INJECT_STALL=1:5 to stall
//   rank 1)
// Exit codes: 0 pass, 3 any check failed (docs/stability.md), 5 the drill's watchdog fired.
#include <memory>

#include "cli/cli_context.h"
#include "safe/hang_drill.h"
#include "safe/preflight.h"

namespace primus::cli {

void attach_preflight(CLI::App& root, CliContext& ctx) {
  auto o = std::make_shared<safe::PreflightOptions>();
  auto d = std::make_shared<safe::HangDrillOptions>();
  auto worker = std::make_shared<std::string>();
  auto drill = std::make_shared<bool>(false);
  CLI::App* app =
      root.add_subcommand("preflight", "Check that this node is fit to train (exit 3 on any failure)");
  app->add_flag("--perf-test", o->perf, "Measure GEMM, HBM copy and intra-node collective bandwidth");
  app->add_flag("--quick", o->quick, "Shorter perf tests (under 60 s)");
  app->add_flag("--smoke", o->smoke,
                "Each GPU in its own process: alloc, GEMM, finite result, with a timeout");
  app->add_option("--smoke-timeout", o->smoke_timeout_s, "Seconds per GPU smoke process")
      ->capture_default_str();
  app->add_option("--thresholds", o->thresholds_file, "YAML file of pass thresholds (see docs/stability.md)");
  app->add_option("--expected-gpus", o->expected_gpus, "Fail unless exactly this many GPUs are visible");
  app->add_flag("--allow-no-gpu", o->allow_no_gpu, "A host without GPUs is a warning, not a failure");
  app->add_flag("--allow-foreign-procs", o->allow_foreign_procs, "Other processes on the GPUs are a warning");
  app->add_option("--output-dir", o->output_dir, "Where the reports go")->capture_default_str();
  app->add_flag("--hang-drill", *drill, "Run the hang-watchdog drill under a launcher instead of the checks");
  app->add_option("--drill-steps", d->steps, "Drill: steps")->capture_default_str();
  app->add_option("--drill-timeout", d->hang_timeout_s, "Drill: hang timeout in seconds")
      ->capture_default_str();
  app->add_option("--drill-backend", d->backend, "Drill: communicator backend")->capture_default_str();
  app->add_option("--drill-dir", d->dir, "Drill: heartbeat directory shared by the ranks")
      ->capture_default_str();
  app->add_option("--worker", *worker, "Internal: per-GPU worker (smoke | perf | perf-quick)")->group("");
  app->callback([o, d, worker, drill, &ctx] {
    if (!worker->empty()) {
      ctx.action = [worker] { return safe::run_preflight_worker(*worker); };
    } else if (*drill) {
      ctx.action = [d] { return safe::run_hang_drill(*d); };
    } else {
      ctx.action = [o] { return safe::run_preflight(*o); };
    }
  });
}

}  // namespace primus::cli
