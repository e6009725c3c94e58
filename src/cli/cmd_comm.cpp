// `primus comm selftest` and `primus comm bench`: the communicator backends end to end (src/comm/selftest.h).
// Run them under a launcher:
//   primus launch --nproc-per-node 2 -- comm selftest              (tcp backend)
//   mpirun -np 4 primus comm selftest --backend mpi
//   primus launch --nproc-per-node 2 -- comm bench --backend nccl --check   (= benchmark comm)
#include <memory>

#include "cli/cli_context.h"
#include "cli/cmd_benchmark_comm.h"
#include "parallel/comm_selftest.h"

namespace primus::cli {

void attach_comm(CLI::App& root, CliContext& ctx) {
  CLI::App* comm = root.add_subcommand("comm", "Communicator self-test and bandwidth (run under a launcher)");
  comm->require_subcommand(1);

  auto s = std::make_shared<parallel::SelftestOptions>();
  CLI::App* st =
      comm->add_subcommand("selftest", "Check every collective against a locally computed reference");
  st->add_option("--backend", s->backend, "auto | tcp | mpi | nccl")->capture_default_str();
  st->add_option("--sizes", s->sizes, "Elements per chunk")->delimiter(',')->capture_default_str();
  st->add_option("--dtypes", s->dtypes, "f32, f64, bf16, i32, i64")->delimiter(',')->capture_default_str();
  st->add_option("--fault", s->fault, "Failure test: die | hang (rank --fault-rank)");
  st->add_option("--fault-rank", s->fault_rank, "Rank that dies or hangs");
  st->add_option("--timeout", s->timeout_s, "Collective timeout in seconds (PRIMUS_COMM_TIMEOUT_S overrides)")
      ->capture_default_str();
  st->callback([s, &ctx] { ctx.action = [s] { return parallel::run_comm_selftest(*s); }; });

  attach_benchmark_comm(comm, ctx, "bench");  // the same command as `primus benchmark comm`
}

}  // namespace primus::cli
