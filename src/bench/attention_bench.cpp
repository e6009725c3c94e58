// Host half of the attention benchmark: FLOP convention and output formats (both builds).
#include "bench/attention_bench.h"

#include <fmt/format.h>

#include <fstream>

#include "core/error.h"
#include "core/log.h"

namespace primus::bench {

#ifdef PRIMUS_WITH_CUDA
std::vector<AttentionBenchResult> run_attention_benchmark_cuda(const AttentionBenchOptions& opt);
#endif

double attention_fwd_flops(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, bool causal) {
  const double full = 4.0 * static_cast<double>(batch) * heads * static_cast<double>(seq) * seq * head_dim;
  return causal ? full / 2 : full;
}

std::vector<AttentionBenchResult> run_attention_benchmark(const AttentionBenchOptions& opt) {
  if (opt.batch < 1 || opt.heads < 1 || opt.kv_heads < 1 || opt.seq < 1 || opt.head_dim < 1)
    throw ConfigError(
        fmt::format("benchmark attention: sizes must be >= 1 (batch {}, heads {}, kv-heads {}, seq {}, "
                    "head-dim {})",
                    opt.batch, opt.heads, opt.kv_heads, opt.seq, opt.head_dim));
  if (opt.heads % opt.kv_heads != 0)
    throw ConfigError(fmt::format("benchmark attention: heads ({}) must be a multiple of kv-heads ({})",
                                  opt.heads, opt.kv_heads));
  if (opt.backend != "auto" && opt.backend != "cudnn" && opt.backend != "flash" && opt.backend != "all")
    throw ConfigError(fmt::format("benchmark attention: unknown backend '{}'", opt.backend),
                      "expected auto, cudnn, flash or all");
  if (opt.iters < 1 || opt.warmup < 0)
    throw ConfigError(fmt::format("benchmark attention: iters ({}) must be >= 1 and warmup ({}) >= 0",
                                  opt.iters, opt.warmup));
#ifdef PRIMUS_WITH_CUDA
  return run_attention_benchmark_cuda(opt);
#else
  throw Error(ErrorKind::kRuntime, "benchmark attention needs a CUDA build of primus", {},
              "rebuild with -DPRIMUS_CUDA=ON");
#endif
}

std::string format_attention_results(const std::vector<AttentionBenchResult>& rows,
                                     const std::string& format) {
  std::string s;
  if (format == "md") {
    s += "| B | H | KV | S | D | causal | backend | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s |\n";
    s += "|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& r : rows)
      s += fmt::format(
          "| {} | {} | {} | {} | {} | {} | {} (fwd {}, bwd {}) | {:.3f} | {:.1f} | {:.3f} | {:.1f} |\n",
          r.batch, r.heads, r.kv_heads, r.seq, r.head_dim, r.causal ? "yes" : "no", r.backend, r.fwd_backend,
          r.bwd_backend, r.fwd_ms, r.fwd_tflops, r.bwd_ms, r.bwd_tflops);
  } else if (format == "csv") {
    s += "batch,heads,kv_heads,seq,head_dim,causal,backend,fwd_backend,bwd_backend,fwd_ms,fwd_tflops,bwd_ms,"
         "bwd_tflops,device\n";
    for (const auto& r : rows)
      s += fmt::format("{},{},{},{},{},{},{},{},{},{:.4f},{:.2f},{:.4f},{:.2f},\"{}\"\n", r.batch, r.heads,
                       r.kv_heads, r.seq, r.head_dim, r.causal ? 1 : 0, r.backend, r.fwd_backend,
                       r.bwd_backend, r.fwd_ms, r.fwd_tflops, r.bwd_ms, r.bwd_tflops, r.device_name);
  } else if (format == "jsonl") {
    for (const auto& r : rows)
      s += fmt::format(
          "{{\"bench\":\"attention\",\"batch\":{},\"heads\":{},\"kv_heads\":{},\"seq\":{},\"head_dim\":{},"
          "\"causal\":{},\"backend\":\"{}\",\"fwd_backend\":\"{}\",\"bwd_backend\":\"{}\",\"fwd_ms\":{:.4f},"
          "\"fwd_tflops\":{:.2f},\"bwd_ms\":{:.4f},\"bwd_tflops\":{:.2f},\"device\":\"{}\"}}\n",
          r.batch, r.heads, r.kv_heads, r.seq, r.head_dim, r.causal ? "true" : "false", r.backend,
          r.fwd_backend, r.bwd_backend, r.fwd_ms, r.fwd_tflops, r.bwd_ms, r.bwd_tflops, r.device_name);
  } else {
    throw ConfigError(fmt::format("benchmark attention: unknown output format '{}'", format),
                      "expected md, csv or jsonl");
  }
  return s;
}

int run_attention_bench(const AttentionBenchOptions& opt) {
  std::string format;
  if (!opt.output_file.empty()) {
    const auto dot = opt.output_file.rfind('.');
    const std::string ext = dot == std::string::npos ? "" : opt.output_file.substr(dot + 1);
    if (ext != "md" && ext != "csv" && ext != "jsonl")
      throw ConfigError(fmt::format("--output-file '{}': use .md, .csv or .jsonl", opt.output_file));
    format = ext;
  }
  const auto rows = run_attention_benchmark(opt);
  fmt::print("{}", format_attention_results(rows, "md"));
  if (!format.empty()) {
    std::ofstream f(opt.output_file);
    if (!f) throw Error(ErrorKind::kRuntime, fmt::format("cannot write {}", opt.output_file));
    f << format_attention_results(rows, format);
    log::info("benchmark attention: report {}", opt.output_file);
  }
  return 0;
}

}  // namespace primus::bench
