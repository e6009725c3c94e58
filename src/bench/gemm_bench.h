#pragma once
// `primus benchmark gemm` and `primus benchmark gemm-dense` (Primus's micro-benchmark suite, reference.md
// §4.8).
//
// gemm: one GEMM shape, c[M, N] = op(a) @ op(b) in the row-major terms of ops/gemm.h, timed through the same
// cuBLASLt path training uses (cached plan; tuned algorithm when a tuning file is loaded), L2-cold (rotating
// operand sets covering >= 512 MB), median and mean of CUDA-event timings over --duration seconds. With
// --dtype fp8 the shape runs through ops::cuda::fp8_gemm (ops/fp8.h): e4m3 x e4m3 -> bf16 in the TN layout
// (a [M, K], b stored [N, K]) with the --scaling pair's multipliers, on the same rotating L2-cold sets, and
// the bf16 GEMM of the same shape and layout is timed after it as the baseline row. gemm-dense: every GEMM of
// one Llama training step as our model issues them (fused QKV, attention output with the residual fused,
// fused gate+up, down with the residual fused, and the chunked lm head; each with its dgrad and its
// f32-accumulating wgrad), optionally tuned (--tune), which writes the tuning file training loads.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/gemm_tuning.h"

namespace primus::bench {

struct GemmBenchOptions {
  int64_t m = 4096, n = 4096, k = 4096;
  bool trans_a = false, trans_b = false;
  std::string dtype = "bf16";  // bf16 | fp16 | fp32 (fp32: plain f32 FMA, no TF32) | fp8 (e4m3, TN, bf16 out)
  // --dtype fp8 only: tensorwise (default) | rowwise | blockwise (1x128 activations a x 128x128 weights b).
  std::string scaling;
  bool fast_accum = false;  // --dtype fp8 --scaling tensorwise: cuBLASLt's fast FP8 accumulation
  double duration_s = 10.0;
  std::string output_file = "gemm_report.md";  // .md | .csv | .jsonl
  bool tune = false;
  std::string tuning_file;  // --tune: winners merged into it (when set); otherwise loaded before timing
  TuneOptions tune_options;
  int device = 0;
};

// Sizes of a dense decoder (Llama family) that fix its GEMM shapes.
struct DenseModelDims {
  std::string name;
  int64_t hidden = 0, ffn = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  std::string str() const;
};
// Built-in presets with the dims of Primus's model presets: llama3.1_8B, llama3.1_70B, llama3.2_1B,
// llama3.2_3B, llama3_8B, llama2_7B. nullopt for an unknown name.
std::optional<DenseModelDims> dense_model_preset(const std::string& name);
std::vector<std::string> dense_model_preset_names();

struct GemmDenseOptions {
  std::string model = "llama3.1_8B";  // a preset name; explicit dims below override its fields (0 = keep)
  DenseModelDims dims;
  int64_t micro_batch_size = 1;
  int64_t seq_length = 8192;
  std::string dtype = "bf16";
  double duration_s = 1.0;  // per shape
  std::string output_file = "gemm_dense_report.md";
  bool tune = false;
  std::string tuning_file =
      "gemm_tuning.json";  // --tune writes it (merging existing entries); else loaded if set
  TuneOptions tune_options;
  int device = 0;
};

// One GEMM of a training step as the model issues it.
struct StepGemm {
  std::string name;  // "qkv.fwd", "attn_out.dgrad", "lm_head[4160].wgrad", ...
  GemmKey key;
  GemmCMode c_mode = GemmCMode::kNone;
  int64_t per_step = 1;  // launches per training step (layers, or lm-head chunks of this size)
};
// The step's GEMMs for `tokens` = micro_batch_size * seq_length rows (lm head chunked as model/lm_head.cpp
// does).
std::vector<StepGemm> dense_step_gemms(const DenseModelDims& d, int64_t tokens, DType dtype);

struct GemmBenchRow {
  std::string name;
  GemmKey key;
  GemmCMode c_mode = GemmCMode::kNone;
  int64_t per_step = 1;
  double avg_ms = 0, median_ms = 0, min_ms = 0;
  int runs = 0;
  double tflop = 0, tflops = 0, bandwidth_gbps = 0, arith_intensity = 0;
  std::string algo;         // cuBLASLt algorithm that ran
  bool tuned = false;       // the algorithm came from the tuning table
  double heuristic_ms = 0;  // the heuristic's first choice, sustained, alternating with the tuned one
  double tuned_ms = 0;      // what ran (= median_ms); equals heuristic_ms when the shape is not tuned
  double uplift_pct = 0;    // heuristic_ms / tuned_ms - 1, in percent
  std::string note;         // --tune: the tuner's own sweep numbers and why a faster candidate was rejected
};
// Fills tflop, tflops, bandwidth_gbps and arith_intensity from the key and median_ms (Primus's definitions).
void fill_rates(GemmBenchRow& r);
// Writes rows as a markdown table (.md), CSV (.csv) or JSON lines (.jsonl), chosen by the file's extension.
void write_gemm_report(const std::string& path, const std::vector<GemmBenchRow>& rows,
                       const std::string& title);

// Entry points (return the process exit code; throw primus::Error on bad options or GPU failures).
// Throws ConfigError on options `benchmark gemm` refuses (any build, before touching a GPU): non-positive
// sizes or duration; --scaling or --fast-accum without --dtype fp8; for fp8 --trans_a, --tune /
// --tuning-file, an unknown scaling, fast accumulation with a scaling other than tensorwise, and sizes the
// FP8 GEMM refuses (M, N multiples of 16; K of 16, of 128 for blockwise).
void validate_gemm_bench_options(const GemmBenchOptions& opt);
// True for --dtype fp8 (fp8 / e4m3 / fp8e4m3).
bool gemm_bench_is_fp8(const GemmBenchOptions& opt);
int run_gemm_bench(const GemmBenchOptions& opt);
// One bf16 GEMM c[M, N] = a[M, K] b[N, K]^T (the projections' layout) timed as `benchmark gemm` times it
// (training's cuBLASLt path, L2-cold rotating operands, sustained for `seconds`): the median in milliseconds.
// For `primus projection calibrate`. Throws a runtime Error without a CUDA build or GPU.
double time_bf16_gemm_ms(int64_t m, int64_t n, int64_t k, double seconds, int device);
// The CUDA device's name ("NVIDIA H100 80GB HBM3"); throws without a CUDA build or GPU.
std::string gpu_device_name(int device);
int run_gemm_dense_bench(const GemmDenseOptions& opt);

}  // namespace primus::bench
