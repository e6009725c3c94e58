#pragma once
// `primus benchmark attention`: times ops::cuda::attention_forward and attention_backward (each alone, CUDA
// events, median) on random bf16 inputs and reports TFLOP/s with the FlashAttention convention: fwd = 4 B H
// S^2 D, halved when causal; bwd = 2.5 x fwd.
#include <cstdint>
#include <string>
#include <vector>

namespace primus::bench {

struct AttentionBenchOptions {
  int64_t batch = 4;
  int64_t heads = 32;
  int64_t kv_heads = 8;
  int64_t seq = 4096;
  int64_t head_dim = 128;
  bool causal = true;
  std::string backend = "auto";  // auto | cudnn | flash | all (each of cudnn and flash in turn)
  int warmup = 5;
  int iters = 20;
  int device = 0;
  std::string output_file = "attention_report.md";  // .md | .csv | .jsonl ("" = stdout only)
};

struct AttentionBenchResult {
  int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
  bool causal = true;
  std::string backend;      // requested: auto | cudnn | flash
  std::string fwd_backend;  // what ran: cudnn | flash
  std::string bwd_backend;
  double fwd_ms = 0, bwd_ms = 0;
  double fwd_tflops = 0, bwd_tflops = 0;
  std::string device_name;
};

double attention_fwd_flops(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, bool causal);

// Runs the benchmark on the GPU (CUDA builds; a CPU build throws). One result per backend run.
std::vector<AttentionBenchResult> run_attention_benchmark(const AttentionBenchOptions& opt);

// "md" (a Markdown table), "csv" (header + rows) or "jsonl" (one object per line).
std::string format_attention_results(const std::vector<AttentionBenchResult>& rows,
                                     const std::string& format);

// The CLI entry: runs the benchmark, prints the Markdown table, writes output_file in the format its
// extension names. Returns the process exit code.
int run_attention_bench(const AttentionBenchOptions& opt);

}  // namespace primus::bench
