#pragma once
// `primus launch`: torchrun's job for the common case. Starts one process per local GPU (or CPU rank) with
// the torchrun variables set (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK,
// ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), prefixes every line the ranks print with "[rank N] ", forwards
// SIGINT/SIGTERM to them, and when one rank fails stops the others (SIGTERM, then SIGKILL after the grace
// period) and exits non-zero naming the rank. Peers of a dead rank fail on the broken connection a moment
// later, so the launcher waits half a second after the first failure and names a rank killed by a signal
// before ranks that exited with an error. CUDA_VISIBLE_DEVICES is left alone: rank r uses GPU local_rank.
// PRIMUS_JOB_TOKEN: passed on when set, else generated (getrandom) for a single-node job; a multi-node job
// beyond loopback must set it (the same on every node). The store binds MASTER_ADDR (127.0.0.1 by default).
#include <string>
#include <vector>

namespace primus::parallel {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0: pick a free port (single node only)
  double grace_s = 10;      // SIGTERM -> SIGKILL
  // The child's command: a path (with a '/') runs that program; anything else is a primus subcommand
  // ("train pretrain --config x.yaml") run by this same binary.
  std::vector<std::string> command;
};

// Throws ConfigError for bad options; returns the job's exit code (0 when every rank exited 0; else the
// named rank's code, 128 + signal for a rank killed by a signal).
int run_launcher(const LaunchOptions& options);

}  // namespace primus::parallel
