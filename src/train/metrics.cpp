#include "train/metrics.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/log.h"
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
  if (!m.mtp_losses.empty()) {
    double mean = 0;
    for (double x : m.mtp_losses) mean += x;
    s += fmt::format(" | mtp {:.4f}", mean / static_cast<double>(m.mtp_losses.size()));
  }
  if (m.moe.present) {
    s += fmt::format(" | aux {:.3e} | load max/mean {:.2f}", m.moe.aux_loss, m.moe.max_load_ratio);
    if (m.moe.z_loss > 0) s += fmt::format(" | z {:.3e}", m.moe.z_loss);
    if (m.moe.dropped_fraction > 0) s += fmt::format(" | dropped {:.2f}%", 100.0 * m.moe.dropped_fraction);
  }
  if (!m.fp8_recipe.empty()) s += fmt::format(" | fp8 {} {:.0f}%", m.fp8_recipe, 100.0 * m.fp8_share);
  if (m.eta_s >= 0) s += " | ETA " + format_duration(m.eta_s);
  if (m.moe.present && m.moe.per_layer_logging)
    for (const MoeStepMetrics::Layer& l : m.moe.layers)
      s += fmt::format(
          "\n  moe layer {:>3} | aux {:.3e} | z {:.3e} | tokens per expert max {} mean {:.1f} | dropped {}",
          l.layer, l.aux_loss, l.z_loss, l.max_load, l.mean_load, l.dropped);
  return s;
}

JsonlSink::JsonlSink(const std::string& path, bool append) : path_(path) {
  // O_APPEND: every write lands at the end, whole, even if another process truncated or repaired the file.
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC), 0644);
  if (fd_ < 0)
    throw Error(ErrorKind::kRuntime,
                fmt::format("cannot open metrics file {}: {}", path, std::strerror(errno)));
}

JsonlSink::~JsonlSink() {
  if (fd_ >= 0) ::close(fd_);
}

void JsonlSink::write_line(const nlohmann::json& j) {
  std::string line = j.dump();
  line += '\n';
  write_whole(fd_, line, path_);
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
  if (!m.fp8_recipe.empty()) {
    j["fp8_recipe"] = m.fp8_recipe;
    j["fp8_gemm_share"] = m.fp8_share;
  }
  if (!m.mtp_losses.empty()) {
    double mean = 0;
    for (double x : m.mtp_losses) mean += x;
    j["mtp_loss"] = mean / static_cast<double>(m.mtp_losses.size());  // mean over depths, unscaled
    j["mtp_losses"] = m.mtp_losses;
  }
  if (m.moe.present) {
    j["moe_aux_loss"] = m.moe.aux_loss;
    j["moe_z_loss"] = m.moe.z_loss;
    j["moe_max_load_ratio"] = m.moe.max_load_ratio;
    j["moe_dropped_fraction"] = m.moe.dropped_fraction;
    nlohmann::json layers = nlohmann::json::array();
    for (const MoeStepMetrics::Layer& l : m.moe.layers)
      layers.push_back({{"layer", l.layer},
                        {"aux_loss", l.aux_loss},
                        {"z_loss", l.z_loss},
                        {"max_load", l.max_load},
                        {"mean_load", l.mean_load},
                        {"dropped", l.dropped}});
    j["moe_layers"] = layers;
  }
  write_line(j);
}

void JsonlSink::write_scalar(int64_t step, const std::string& name, double value) {
  nlohmann::json j;
  j["step"] = step;
  j[name] = value;
  write_line(j);
}

void write_whole(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorKind::kRuntime, fmt::format("cannot write {}: {}", path, std::strerror(errno)));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

std::vector<nlohmann::json> read_jsonl_records(const std::string& path, std::vector<std::string>* skipped) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int64_t line_no = 0;
  for (size_t pos = 0, nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    ++line_no;
    const std::string_view line(text.data() + pos, nl - pos);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      std::string what = fmt::format("{} line {}: not a JSON object: {:.80}", path, line_no, line);
      if (skipped == nullptr) throw Error(ErrorKind::kRuntime, what);
      skipped->push_back(std::move(what));
      continue;
    }
    out.push_back(std::move(j));
  }
  return out;  // text after the last '\n' is a line still being written (or torn): not a record yet
}

int64_t repair_torn_tail(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size == 0) return 0;
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t last_nl = text.rfind('\n');
  const size_t keep = last_nl == std::string::npos ? 0 : last_nl + 1;
  if (keep == text.size()) return 0;
  if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0)
    throw Error(ErrorKind::kRuntime,
                fmt::format("cannot cut the torn last line of {}: {}", path, std::strerror(errno)));
  return static_cast<int64_t>(text.size() - keep);
}

int64_t truncate_metrics_after(const std::string& path, int64_t iteration) {
  const int64_t torn = repair_torn_tail(path) > 0 ? 1 : 0;
  std::ifstream in(path);
  if (!in) return 0;
  // Kept lines are copied as they are (byte-identical).
  std::string line, kept;
  int64_t dropped = 0, line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      // Not a record (a torn line that an older writer continued): dropped, so the resumed file is clean.
      log::warn("{}:{}: dropped a line that is not a JSON record: {:.80}", path, line_no, line);
      ++dropped;
      continue;
    }
    if (j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() > iteration) {
      ++dropped;
    } else {
      kept += line;
      kept += '\n';
    }
  }
  in.close();
  if (dropped == 0) return torn;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    if (!out) throw Error(ErrorKind::kRuntime, fmt::format("cannot write {}", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(ErrorKind::kRuntime, fmt::format("cannot replace {}", path));
  return dropped + torn;
}

}  // namespace primus
