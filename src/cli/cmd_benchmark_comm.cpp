// `primus benchmark comm`: collective bandwidth (bench/comm_bench.h). Run it under a launcher:
//   primus launch --nproc-per-node 8 -- benchmark comm --backend nccl --check --output-file comm.md
//   mpirun -np 4 primus benchmark comm --backend mpi --max-bytes 16M
#include "cli/cmd_benchmark_comm.h"

#include <memory>

#include "bench/comm_bench.h"

namespace primus::cli {

void attach_benchmark_comm(CLI::App* parent, CliContext& ctx, const std::string& name) {
  auto o = std::make_shared<bench::CommBenchOptions>();
  auto min_b = std::make_shared<std::string>("1K"), max_b = std::make_shared<std::string>("1G");
  auto sizes = std::make_shared<std::vector<std::string>>();
  CLI::App* app = parent->add_subcommand(
      name, "Collective bandwidth: algbw and busbw as nccl-tests defines them (run under a launcher)");
  app->add_option("--backend", o->backend, "auto | tcp | mpi | nccl")->capture_default_str();
  app->add_option("--ops", o->ops,
                  "all_reduce, reduce_scatter, all_gather, all_to_all, all_to_all_v, sendrecv, broadcast")
      ->delimiter(',')
      ->capture_default_str();
  app->add_option("--min-bytes", *min_b, "Smallest message (powers of two up to --max-bytes)")
      ->capture_default_str();
  app->add_option("--max-bytes", *max_b, "Largest message")->capture_default_str();
  app->add_option("--bytes,--sizes", *sizes, "Explicit message sizes (e.g. 64M,1G), instead of the range")
      ->delimiter(',');
  app->add_option("--dtype", o->dtype, "bf16 | f32 | i32")->capture_default_str();
  app->add_option("--warmup", o->warmup, "Untimed runs per size")->capture_default_str();
  app->add_option("--iters", o->iters, "Timed runs per size")->capture_default_str();
  app->add_flag("--check", o->check, "Verify every result element on every rank (exit 1 on a mismatch)");
  app->add_option("--output-file", o->output_file, "Report on rank 0: .md, .csv or .jsonl");
  app->add_option("--timeout", o->timeout_s, "Collective timeout in seconds")->capture_default_str();
  app->callback([o, min_b, max_b, sizes, &ctx] {
    o->min_bytes = bench::parse_bytes(*min_b);
    o->max_bytes = bench::parse_bytes(*max_b);
    o->bytes.clear();
    for (const std::string& s : *sizes) o->bytes.push_back(bench::parse_bytes(s));
    ctx.action = [o] { return bench::run_comm_benchmark(*o); };
  });
}

}  // namespace primus::cli
