// Grouped GEMM benchmark, host side: shapes, token loads, report formats. The timing is in
// grouped_gemm_bench_cuda.cpp.
#include "bench/grouped_gemm_bench.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"

namespace primus::bench {

#ifdef PRIMUS_WITH_CUDA
std::vector<GroupedGemmBenchRow> run_grouped_gemm_benchmark_cuda(const GroupedGemmBenchOptions& opt);
#endif

const std::vector<GroupedGemmShape>& grouped_gemm_anchor_shapes() {
  static const std::vector<GroupedGemmShape> s = {
      {"qwen3-30b-a3b gate+up", 128, 256, 2048, 1536},  // T4096 top-8, 128 experts, moe_I 768 (x2 fused)
      {"qwen3-30b-a3b down", 128, 256, 768, 2048},
      {"deepseek-v3 gate+up (EP8)", 32, 1024, 7168, 4096},  // 256 experts / 8 ranks, moe_I 2048 (x2)
      {"deepseek-v3 down (EP8)", 32, 1024, 2048, 7168},
      {"mixtral-8x7b gate+up", 8, 4096, 4096, 28672},  // T16384 top-2, I 14336 (x2)
      {"mixtral-8x7b down", 8, 4096, 14336, 4096},
  };
  return s;
}

std::vector<int64_t> grouped_gemm_counts(const GroupedGemmShape& s, const std::string& load, uint64_t seed) {
  const int64_t total = s.experts * s.tokens_per_expert;
  std::vector<int64_t> c(static_cast<size_t>(s.experts), s.tokens_per_expert);
  if (load == "equal") return c;
  PRIMUS_CHECK(load == "uneven", "grouped-gemm benchmark: load '{}' (expected equal or uneven)", load);
  // Shares ~ Exp(1) (a flat Dirichlet): the busiest expert gets a few times the mean, as early in training.
  std::mt19937_64 rng(seed ^ static_cast<uint64_t>(s.experts * 1000003 + s.k * 31 + s.n));
  std::exponential_distribution<double> ex(1.0);
  std::vector<double> share(c.size());
  for (double& v : share) v = ex(rng);
  if (s.experts > 1) share[static_cast<size_t>(s.experts / 2)] = 0.0;  // one expert without tokens
  double sum = 0;
  for (double v : share) sum += v;
  int64_t given = 0;
  for (size_t e = 0; e < c.size(); ++e) {
    c[e] = static_cast<int64_t>(std::floor(share[e] / sum * static_cast<double>(total)));
    given += c[e];
  }
  for (size_t e = 0; given < total; e = (e + 1) % c.size())
    if (share[e] > 0) ++c[e], ++given;
  return c;
}

std::string format_grouped_gemm_rows(const std::vector<GroupedGemmBenchRow>& rows, const std::string& format,
                                     const std::string& title) {
  std::string out;
  if (format == "jsonl") {
    for (const auto& r : rows) {
      nlohmann::json j = {{"shape", r.shape.name},
                          {"experts", r.shape.experts},
                          {"tokens_per_expert", r.shape.tokens_per_expert},
                          {"K", r.shape.k},
                          {"N", r.shape.n},
                          {"load", r.load},
                          {"op", r.op},
                          {"path", r.path},
                          {"path_ran", r.path_ran},
                          {"ms", r.ms},
                          {"tflops", r.tflops},
                          {"dense_tflops", r.dense_tflops},
                          {"check_rel_err", r.check_rel_err}};
      out += j.dump() + "\n";
    }
    return out;
  }
  PRIMUS_CHECK(format == "md", "grouped-gemm report format '{}' (expected md or jsonl)", format);
  out += "# " + title + "\n\n";
  out +=
      "| shape | E x m | K -> N | load | op | path (ran) | ms | TFLOP/s | dense TFLOP/s | % of dense | "
      "check err |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    out += fmt::format(
        "| {} | {} x {} | {} -> {} | {} | {} | {} ({}) | {:.3f} | {:.0f} | {:.0f} | {:.0f}% | {:.1e} |\n",
        r.shape.name, r.shape.experts, r.shape.tokens_per_expert, r.shape.k, r.shape.n, r.load, r.op, r.path,
        r.path_ran, r.ms, r.tflops, r.dense_tflops,
        r.dense_tflops > 0 ? 100.0 * r.tflops / r.dense_tflops : 0.0, r.check_rel_err);
  }
  return out;
}

std::vector<GroupedGemmBenchRow> run_grouped_gemm_benchmark(const GroupedGemmBenchOptions& opt) {
#ifdef PRIMUS_WITH_CUDA
  return run_grouped_gemm_benchmark_cuda(opt);
#else
  (void)opt;
  throw Error(ErrorKind::kRuntime, "benchmark grouped-gemm needs a CUDA build (PRIMUS_CUDA=ON) and a GPU");
#endif
}

int run_grouped_gemm_bench(const GroupedGemmBenchOptions& opt) {
  const auto rows = run_grouped_gemm_benchmark(opt);
  const std::string md = format_grouped_gemm_rows(rows, "md", "Grouped GEMM benchmark");
  std::fwrite(md.data(), 1, md.size(), stdout);
  if (!opt.output_file.empty()) {
    const bool jsonl =
        opt.output_file.size() >= 6 && opt.output_file.compare(opt.output_file.size() - 6, 6, ".jsonl") == 0;
    std::ofstream f(opt.output_file);
    PRIMUS_CHECK(f.good(), "benchmark grouped-gemm: cannot write --output-file {}", opt.output_file);
    f << (jsonl ? format_grouped_gemm_rows(rows, "jsonl", "") : md);
  }
  return 0;
}

}  // namespace primus::bench
