#pragma once
// `primus benchmark grouped-gemm`: the MoE expert GEMMs (ops/grouped_gemm.h) on the six expert shapes of
// the PyTorch anchor (/work/shared/perf/torch_moe_baseline.py: Qwen3-30B-A3B, DeepSeek-V3 at EP8, Mixtral
// 8x7B), forward, dgrad and wgrad, for each requested CUDA path and token load, next to a dense GEMM of the
// same FLOPs. Inputs are random; before timing, sampled output rows / gradient rows of three experts are
// checked against an f64 loop on the host (a failed check fails the benchmark: zeros are never timed).
#include <cstdint>
#include <string>
#include <vector>

namespace primus::bench {

struct GroupedGemmShape {
  std::string name;  // "qwen3-30b-a3b gate+up"
  int64_t experts = 0, tokens_per_expert = 0, k = 0, n = 0;
};
// The six shapes of the PyTorch anchor, in its order.
const std::vector<GroupedGemmShape>& grouped_gemm_anchor_shapes();

struct GroupedGemmBenchOptions {
  // Empty: the six anchor shapes. Else one shape from --experts/--tokens-per-expert/--K/--N.
  int64_t experts = 0, tokens_per_expert = 0, k = 0, n = 0;
  std::string paths = "auto";   // comma list of auto | grouped | batched | loop | streams, or "all"
  std::string loads = "equal";  // equal | uneven | both (uneven: skewed random counts, one empty expert)
  std::string ops = "fwd,dgrad,wgrad";
  int warmup = 3;
  int iters = 10;
  uint64_t seed = 1234;
  int device = 0;
  std::string output_file = "grouped_gemm_report.md";  // .md | .jsonl ("" = stdout only)
};

struct GroupedGemmBenchRow {
  GroupedGemmShape shape;
  std::string load;      // equal | uneven
  std::string op;        // fwd | dgrad | wgrad
  std::string path;      // requested
  std::string path_ran;  // what ran
  double ms = 0, tflops = 0;
  double dense_tflops = 0;  // a dense GEMM of the same FLOPs and the same op layout
  double check_rel_err = 0;
};

// Token counts per expert for a load: equal, or skewed (random shares, expert `experts / 2` empty) summing to
// experts * tokens_per_expert.
std::vector<int64_t> grouped_gemm_counts(const GroupedGemmShape& s, const std::string& load, uint64_t seed);

std::string format_grouped_gemm_rows(const std::vector<GroupedGemmBenchRow>& rows, const std::string& format,
                                     const std::string& title);

// Runs on the GPU (CUDA builds; a CPU build throws).
std::vector<GroupedGemmBenchRow> run_grouped_gemm_benchmark(const GroupedGemmBenchOptions& opt);
// The CLI entry: runs, prints the Markdown table, writes output_file. Returns the process exit code.
int run_grouped_gemm_bench(const GroupedGemmBenchOptions& opt);

}  // namespace primus::bench
