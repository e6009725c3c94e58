#include "train/metrics.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/timer.h"

namespace primus {

std::string human_count(double v) {
  if (v >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.1f}", v);
}

std::string format_log_line(const StepMetrics& m, bool on_gpu) {
  std::string s = fmt::format("iter {}/{} | loss {:.4f} | lr {:.3e} | grad-norm {:.3f} | {:.0f} ms", m.step,
                              m.total_steps, m.loss, m.lr, m.grad_norm, m.iter_ms);
  if (on_gpu) {
    s += fmt::format(" | {} tok/s/GPU | {:.1f} TFLOP/s/GPU", human_count(m.tokens_per_s_gpu),
                     m.tflops_per_gpu);
    if (m.mfu >= 0) s += fmt::format(" | MFU {:.1f}%", 100.0 * m.mfu);
    s += fmt::format(" | mem {:.1f}/{:.0f} GB", m.mem_gb, m.mem_total_gb);
  } else {
    s += fmt::format(" | {} tok/s | {:.1f} GFLOP/s (cpu)", human_count(m.tokens_per_s),
                     m.tflops_per_gpu * 1e3);
    s += fmt::format(" | mem {:.2f} GB", m.mem_gb);
  }
  if (m.eta_s >= 0) s += " | ETA " + format_duration(m.eta_s);
  return s;
}

JsonlSink::JsonlSink(const std::string& path, bool append)
    : out_(path, append ? std::ios::app : std::ios::trunc), path_(path) {
  if (!out_) throw Error(ErrorKind::kRuntime, fmt::format("cannot open metrics file {}", path));
}

void JsonlSink::write_step(const StepMetrics& m) {
  nlohmann::json j;
  j["step"] = m.step;
  j["loss"] = m.loss;
  j["lr"] = m.lr;
  j["grad_norm"] = m.grad_norm;
  j["iter_ms"] = m.iter_ms;
  j["tokens_per_s"] = m.tokens_per_s;
  j["tok_s_gpu"] = m.tokens_per_s_gpu;
  j["tflops_gpu"] = m.tflops_per_gpu;
  if (m.mfu >= 0) j["mfu"] = m.mfu;
  j["mem_gb"] = m.mem_gb;
  j["consumed_samples"] = m.consumed_samples;
  if (m.skipped) j["skipped"] = true;
  out_ << j.dump() << '\n';
  out_.flush();
}

void JsonlSink::write_scalar(int64_t step, const std::string& name, double value) {
  nlohmann::json j;
  j["step"] = step;
  j[name] = value;
  out_ << j.dump() << '\n';
  out_.flush();
}

int64_t truncate_metrics_after(const std::string& path, int64_t iteration) {
  std::ifstream in(path);
  if (!in) return 0;
  std::string line, kept;
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    bool keep = true;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      keep = !j.contains("step") || j["step"].get<int64_t>() <= iteration;
    } catch (const nlohmann::json::exception&) {
      keep = false;  // a torn last line of a killed run
    }
    if (keep) {
      kept += line;
      kept += '\n';
    } else {
      ++dropped;
    }
  }
  in.close();
  if (dropped == 0) return 0;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    if (!out) throw Error(ErrorKind::kRuntime, fmt::format("cannot write {}", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(ErrorKind::kRuntime, fmt::format("cannot replace {}", path));
  return dropped;
}

}  // namespace primus
