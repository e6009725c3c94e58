#pragma once
// `primus comm selftest`: every collective of a backend end to end, from the launch
// environment (primus launch, mpirun, srun, torchrun).
//
// selftest: each rank fills its inputs from a hash of (rank, element), so every rank can compute every
// expected result locally; host backends must match the fixed-order reference bitwise, NCCL within the dtype
// tolerance (f32 1e-5, bf16 1e-2 relative to the sum of magnitudes). Checks all_reduce (sum, avg, max, min),
// reduce_scatter, all_gather, all_to_all, all_to_all_v, broadcast, send/recv, barrier, split groups and
// bitwise repeatability, and every named process group (process_groups.h) of a layout fitting the world.
// Fault injection for the failure tests: --fault die|hang --fault-rank R makes rank R SIGKILL itself or stop
// answering just before a collective.
//
// The bandwidth benchmark (`primus comm bench` = `primus benchmark comm`) is bench/comm_bench.h.
#include <string>
#include <vector>

namespace primus::parallel {

struct SelftestOptions {
  std::string backend = "auto";
  std::vector<int64_t> sizes = {1, 31, 1000, 65537};  // elements per rank chunk
  std::vector<std::string> dtypes = {"f32", "bf16", "i32"};
  std::string fault;  // "" | die | hang
  int fault_rank = -1;
  double timeout_s = 600;
};
int run_comm_selftest(const SelftestOptions& o);

}  // namespace primus::parallel
