// GEMM benchmark host side: model presets, the training step's GEMM list, report writers. The timing is in
// gemm_bench_cuda.cpp.
#include "bench/gemm_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/lm_head.h"

namespace primus::bench {

namespace {

// The lm head computes its logits in chunks of rows holding about this many bytes (model/lm_head.cpp's
// kLogitsBudget), so its GEMMs have M = the chunk's rows, not all tokens.
constexpr size_t kLmHeadLogitsBudget = size_t(1) << 30;

const std::vector<DenseModelDims>& presets() {
  // Dims of Primus's megatron model presets (primus/configs/models/megatron/*.yaml); vocab is the
  // tokenizer's, already a multiple of 128 (make_vocab_size_divisible_by).
  static const std::vector<DenseModelDims> p = {
      {"llama3.1_8B", 4096, 14336, 32, 32, 8, 128, 128256},
      {"llama3_8B", 4096, 14336, 32, 32, 8, 128, 128256},
      {"llama3.1_70B", 8192, 28672, 80, 64, 8, 128, 128256},
      {"llama3_70B", 8192, 28672, 80, 64, 8, 128, 128256},
      {"llama3.2_1B", 2048, 8192, 16, 32, 8, 64, 128256},
      {"llama3.2_3B", 3072, 8192, 28, 24, 8, 128, 128256},
      {"llama2_7B", 4096, 11008, 32, 32, 32, 128, 32000},
  };
  return p;
}

std::string trans_str(const GemmKey& k) {
  return fmt::format("{}{}", k.trans_a ? 'T' : 'N', k.trans_b ? 'T' : 'N');
}

const char* c_mode_name(GemmCMode c) {
  switch (c) {
    case GemmCMode::kNone:
      return "none";
    case GemmCMode::kInPlace:
      return "accumulate";
    case GemmCMode::kSeparate:
      return "residual";
  }
  return "?";
}

std::string extension_of(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

}  // namespace

std::string DenseModelDims::str() const {
  return fmt::format("{} (hidden {}, ffn {}, layers {}, heads {}/{} kv, head_dim {}, vocab {})", name, hidden,
                     ffn, layers, heads, kv_heads, head_dim, vocab);
}

std::optional<DenseModelDims> dense_model_preset(const std::string& name) {
  for (const auto& p : presets())
    if (p.name == name) return p;
  return std::nullopt;
}

std::vector<std::string> dense_model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

std::vector<StepGemm> dense_step_gemms(const DenseModelDims& d, int64_t tokens, DType dtype) {
  PRIMUS_CHECK(d.hidden > 0 && d.ffn > 0 && d.layers > 0 && d.heads > 0 && d.kv_heads > 0 && d.head_dim > 0 &&
                   d.vocab > 0 && tokens > 0,
               "gemm-dense: every model dim and the token count must be positive: {}, tokens {}", d.str(),
               tokens);
  std::vector<StepGemm> out;
  // A linear layer x[T, in] -> y[T, out] with weight [out, in] issues three GEMMs (ops/gemm.h):
  //   fwd   y = x w^T          c[T, out]  = a[T, in]   * b[out, in]^T
  //   dgrad dx = dy w          c[T, in]   = a[T, out]  * b[out, in]
  //   wgrad dw += dy^T x (f32) c[out, in] = a[T, out]^T * b[T, in]
  auto linear = [&](const std::string& name, int64_t rows, int64_t in, int64_t outf, bool residual,
                    int64_t count) {
    StepGemm f{name + ".fwd",
               {rows, outf, in, false, true, dtype, dtype, dtype, "none"},
               residual ? GemmCMode::kSeparate : GemmCMode::kNone,
               count};
    StepGemm g{name + ".dgrad",
               {rows, in, outf, false, false, dtype, dtype, dtype, "none"},
               GemmCMode::kNone,
               count};
    StepGemm w{name + ".wgrad",
               {outf, in, rows, true, false, dtype, dtype, DType::kF32, "none"},
               GemmCMode::kInPlace,
               count};
    out.push_back(f);
    out.push_back(g);
    out.push_back(w);
  };
  const int64_t q_dim = d.heads * d.head_dim, qkv_dim = q_dim + 2 * d.kv_heads * d.head_dim;
  linear("qkv", tokens, d.hidden, qkv_dim, false, d.layers);
  linear("attn_out", tokens, q_dim, d.hidden, true, d.layers);  // residual fused: x_mid = attn w_o^T + x_in
  linear("gate_up", tokens, d.hidden, 2 * d.ffn, false, d.layers);
  linear("down", tokens, d.ffn, d.hidden, true, d.layers);  // residual fused: x_out = act w_down^T + x_mid
  const int64_t rows = LmHead::chunk_rows(tokens, d.vocab, dtype_size(dtype), kLmHeadLogitsBudget);
  const int64_t full = tokens / rows, rest = tokens % rows;
  linear(fmt::format("lm_head[{}]", rows), rows, d.hidden, d.vocab, false, full);
  if (rest) linear(fmt::format("lm_head[{}]", rest), rest, d.hidden, d.vocab, false, 1);
  return out;
}

void fill_rates(GemmBenchRow& r) {
  const GemmKey& k = r.key;
  const double flop = 2.0 * k.m * k.n * k.k;
  // Bytes as Primus counts them ((MK + KN + MN) * itemsize), with the output at its own size and read again
  // when the call reads C.
  const double bytes = double(k.m) * k.k * dtype_size(k.a_type) + double(k.k) * k.n * dtype_size(k.b_type) +
                       double(k.m) * k.n * dtype_size(k.c_type) * (r.c_mode == GemmCMode::kNone ? 1 : 2);
  r.tflop = flop / 1e12;
  r.tflops = r.median_ms > 0 ? flop / (r.median_ms * 1e-3) / 1e12 : 0;
  r.bandwidth_gbps = r.median_ms > 0 ? bytes / (r.median_ms * 1e-3) / 1e9 : 0;
  r.arith_intensity = flop / bytes;
}

void write_gemm_report(const std::string& path, const std::vector<GemmBenchRow>& rows,
                       const std::string& title) {
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream out(path);
  if (!out) throw Error(ErrorKind::kRuntime, fmt::format("cannot write benchmark report '{}'", path));
  const std::string ext = extension_of(path);
  if (ext == ".jsonl") {
    for (const auto& r : rows) {
      nlohmann::json j;
      j["name"] = r.name;
      j["m"] = r.key.m;
      j["n"] = r.key.n;
      j["k"] = r.key.k;
      j["trans"] = trans_str(r.key);
      j["trans_a"] = r.key.trans_a;
      j["trans_b"] = r.key.trans_b;
      j["dtype"] = dtype_name(r.key.a_type);
      j["out_dtype"] = dtype_name(r.key.c_type);
      j["c_mode"] = c_mode_name(r.c_mode);
      j["per_step"] = r.per_step;
      j["avg_time_ms"] = r.avg_ms;
      j["median_time_ms"] = r.median_ms;
      j["min_time_ms"] = r.min_ms;
      j["runs"] = r.runs;
      j["tflop"] = r.tflop;
      j["tflops"] = r.tflops;
      j["bandwidth_gbps"] = r.bandwidth_gbps;
      j["arith_intensity"] = r.arith_intensity;
      j["algo"] = r.algo;
      j["tuned"] = r.tuned;
      if (r.heuristic_ms > 0) {
        j["heuristic_ms"] = r.heuristic_ms;
        j["tuned_ms"] = r.tuned_ms;
        j["uplift_pct"] = r.uplift_pct;
      }
      if (!r.note.empty()) j["note"] = r.note;
      out << j.dump() << "\n";
    }
    return;
  }
  if (ext == ".csv" || ext == ".tsv") {
    const char sep = ext == ".csv" ? ',' : '\t';
    out << fmt::format(
        "name{0}m{0}n{0}k{0}trans{0}dtype{0}out_dtype{0}c_mode{0}per_step{0}avg_time_ms{0}median_time_ms{0}"
        "tflop{0}"
        "tflops{0}bandwidth_gbps{0}arith_intensity{0}tuned{0}heuristic_ms{0}tuned_ms{0}uplift_pct\n",
        sep);
    for (const auto& r : rows) {
      out << fmt::format(
          "{1}{0}{2}{0}{3}{0}{4}{0}{5}{0}{6}{0}{7}{0}{8}{0}{9}{0}{10:.4f}{0}{11:.4f}{0}{12:.4f}{0}"
          "{13:.1f}{0}{14:.1f}{0}{15:.1f}{0}{16}{0}{17:.4f}{0}{18:.4f}{0}{19:.2f}\n",
          sep, r.name, r.key.m, r.key.n, r.key.k, trans_str(r.key), dtype_name(r.key.a_type),
          dtype_name(r.key.c_type), c_mode_name(r.c_mode), r.per_step, r.avg_ms, r.median_ms, r.tflop,
          r.tflops, r.bandwidth_gbps, r.arith_intensity, r.tuned ? 1 : 0, r.heuristic_ms, r.tuned_ms,
          r.uplift_pct);
    }
    return;
  }
  if (ext != ".md") throw ConfigError(fmt::format("--output-file '{}': use .md, .csv, .tsv or .jsonl", path));
  const bool tuned_cols =
      std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.heuristic_ms > 0; });
  out << "# " << title << "\n\n";
  out << "| name | m | n | k | trans | dtype | out | C | per step | avg_time_ms | median_ms | tflop | tflops "
         "| "
         "bandwidth_gbps | arith_intensity |"
      << (tuned_cols ? " heuristic_ms | tuned_ms | uplift |" : "") << " algo |\n";
  out << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" << (tuned_cols ? "---|---|---|" : "")
      << "---|\n";
  double total = 0, total_heur = 0;
  for (const auto& r : rows) {
    out << fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.4f} | {:.4f} | {:.3f} | {:.1f} | {:.1f} | "
        "{:.1f} |",
        r.name, r.key.m, r.key.n, r.key.k, trans_str(r.key), dtype_name(r.key.a_type),
        dtype_name(r.key.c_type), c_mode_name(r.c_mode), r.per_step, r.avg_ms, r.median_ms, r.tflop, r.tflops,
        r.bandwidth_gbps, r.arith_intensity);
    if (tuned_cols)
      out << fmt::format(" {:.4f} | {:.4f} | {:+.1f}% |", r.heuristic_ms, r.tuned_ms, r.uplift_pct);
    out << " " << (r.tuned ? "tuned: " : "") << r.algo << " |\n";
    total += r.median_ms * r.per_step;
    total_heur += (r.heuristic_ms > 0 ? r.heuristic_ms : r.median_ms) * r.per_step;
  }
  if (rows.size() > 1) {
    out << fmt::format("\nGEMM time per training step (sum of median x per step): {:.2f} ms", total);
    if (tuned_cols) out << fmt::format(" (heuristic only: {:.2f} ms)", total_heur);
    out << "\n";
  }
}

bool gemm_bench_is_fp8(const GemmBenchOptions& opt) {
  return opt.dtype == "fp8" || opt.dtype == "e4m3" || opt.dtype == "fp8e4m3";
}

void validate_gemm_bench_options(const GemmBenchOptions& opt) {
  if (opt.m <= 0 || opt.n <= 0 || opt.k <= 0)
    throw ConfigError(
        fmt::format("benchmark gemm: --M --N --K must be positive (got {} {} {})", opt.m, opt.n, opt.k));
  if (opt.duration_s <= 0) throw ConfigError("benchmark gemm: --duration must be positive");
  if (!gemm_bench_is_fp8(opt)) {
    if (opt.dtype == "e5m2" || opt.dtype == "fp8e5m2")
      throw ConfigError(fmt::format(
          "benchmark gemm: --dtype {}: the FP8 benchmark is e4m3 x e4m3; use --dtype fp8", opt.dtype));
    if (!opt.scaling.empty())
      throw ConfigError(
          fmt::format("benchmark gemm: --scaling {} applies to --dtype fp8 only (got --dtype {})",
                      opt.scaling, opt.dtype));
    if (opt.fast_accum)
      throw ConfigError(fmt::format(
          "benchmark gemm: --fast-accum applies to --dtype fp8 only (got --dtype {})", opt.dtype));
    return;
  }
  const std::string scaling = opt.scaling.empty() ? "tensorwise" : opt.scaling;
  if (scaling != "tensorwise" && scaling != "rowwise" && scaling != "blockwise")
    throw ConfigError(
        fmt::format("benchmark gemm: --scaling {}: expected tensorwise, rowwise or blockwise", scaling));
  if (opt.trans_a)
    throw ConfigError(
        "benchmark gemm: --dtype fp8 runs the TN layout only (a [M, K], b stored [N, K] as with --trans_b, K "
        "contiguous in both: the layout Hopper's FP8 tensor cores take); --trans_a is not supported");
  if (opt.tune || !opt.tuning_file.empty())
    throw ConfigError(
        "benchmark gemm: --tune / --tuning-file are for the bf16, fp16 and fp32 GEMMs; FP8 plans use "
        "cuBLASLt's heuristic");
  if (opt.fast_accum && scaling != "tensorwise")
    throw ConfigError(fmt::format(
        "benchmark gemm: --fast-accum applies to --scaling tensorwise only (got --scaling {})", scaling));
  const int64_t k_mult = scaling == "blockwise" ? 128 : 16;
  if (opt.k % k_mult != 0)
    throw ConfigError(fmt::format("benchmark gemm: --dtype fp8 --scaling {}: --K {} must be a multiple of {}",
                                  scaling, opt.k, k_mult));
  if (opt.m % 16 != 0 || opt.n % 16 != 0)
    throw ConfigError(
        fmt::format("benchmark gemm: --dtype fp8: --M {} and --N {} must be multiples of 16", opt.m, opt.n));
}

#ifndef PRIMUS_WITH_CUDA
int run_gemm_bench(const GemmBenchOptions& opt) {
  validate_gemm_bench_options(opt);
  throw Error(ErrorKind::kRuntime, "benchmark gemm needs a CUDA build (PRIMUS_CUDA=ON) and a GPU");
}
int run_gemm_dense_bench(const GemmDenseOptions&) {
  throw Error(ErrorKind::kRuntime, "benchmark gemm-dense needs a CUDA build (PRIMUS_CUDA=ON) and a GPU");
}
double time_bf16_gemm_ms(int64_t, int64_t, int64_t, double, int) {
  throw Error(ErrorKind::kRuntime, "timing a GEMM needs a CUDA build (PRIMUS_CUDA=ON) and a GPU");
}
std::string gpu_device_name(int) {
  throw Error(ErrorKind::kRuntime, "this build has no CUDA backend (PRIMUS_CUDA=ON) to name a GPU");
}
#endif

}  // namespace primus::bench
