#pragma once
// `primus benchmark comm` (and its older name `primus comm bench`): collective bandwidth as nccl-tests
// defines it, run under a launcher (primus launch, mpirun, srun, torchrun) on any communicator backend.
//
// For each op and message size S (bytes per rank buffer as nccl-tests counts it: the all_reduce buffer, the
// all_gather/reduce_scatter full buffer, the all_to_all send buffer, the send/recv message; all_to_all_v: the
// elements this rank sends in an uneven, MoE-dispatch-like split where each pair's count differs and one
// chunk per rank is empty), after --warmup
// untimed runs, --iters runs are timed together (host clock around the loop, synchronised at both ends):
//   time = elapsed / iters;  algbw = S / time;  busbw = algbw x factor
//   factor: all_reduce 2(n-1)/n; reduce_scatter, all_gather, all_to_all (n-1)/n; broadcast, sendrecv 1;
//   all_to_all_v: the share of S sent to other ranks (S minus this rank's own chunk, over S).
// --check fills every input with small integers (exact in bf16 and in any summation order) and verifies
// every result element on every rank; a mismatch fails the run (exit 1).
// Sizes: --min-bytes 1K to --max-bytes 1G by powers of two (or an explicit --bytes list). Output: a
// console table on rank 0, and --output-file as .md, .csv or .jsonl.
#include <cstdint>
#include <string>
#include <vector>

namespace primus::bench {

struct CommBenchOptions {
  std::string backend = "auto";
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather",
                                  "all_to_all", "all_to_all_v",   "sendrecv"};
  int64_t min_bytes = 1 << 10;
  int64_t max_bytes = int64_t{1} << 30;
  std::vector<int64_t> bytes;  // explicit sizes (overrides min/max)
  std::string dtype = "bf16";
  int warmup = 5;
  int iters = 20;
  bool check = false;
  std::string output_file;  // "" = console only
  double timeout_s = 600;
};

struct CommBenchRow {
  std::string op, dtype;
  int ranks = 1;
  int64_t bytes = 0, count = 0;
  double time_us = 0, algbw_gbps = 0, busbw_gbps = 0;
  std::string check = "-";  // ok | FAIL | -
};

// nccl-tests' bus-bandwidth factor of `op` on n ranks.
double bus_factor(const std::string& op, int n);
// The sizes from min to max by powers of two.
std::vector<int64_t> power_of_two_sizes(int64_t min_bytes, int64_t max_bytes);
// Parses "64M", "1G", "4096", "1K" (powers of 1024).
int64_t parse_bytes(const std::string& text);
void write_comm_report(const std::string& path, const std::vector<CommBenchRow>& rows);

int run_comm_benchmark(const CommBenchOptions& o);

}  // namespace primus::bench
