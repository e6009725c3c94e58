#include "projection/calibration.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace primus::projection {

std::optional<double> Calibration::gemm(int64_t m, int64_t n, int64_t k) const {
  auto it = gemm_s.find(GemmShape{m, n, k});
  if (it == gemm_s.end()) return std::nullopt;
  return it->second;
}

std::optional<std::pair<double, double>> Calibration::attention(const AttentionShapeKey& key) const {
  auto it = attention_s.find(key);
  if (it == attention_s.end()) return std::nullopt;
  return it->second;
}

void Calibration::merge(const Calibration& other) {
  for (const auto& [k, v] : other.gemm_s) gemm_s[k] = v;
  for (const auto& [k, v] : other.attention_s) attention_s[k] = v;
  if (!other.device.empty()) device = other.device;
  if (!other.date.empty()) date = other.date;
}

std::string calibration_path(const std::string& gpu_name) {
  namespace fs = std::filesystem;
  fs::path dir;
  if (const char* d = std::getenv("PRIMUS_PROJECTION_CACHE"); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = fs::path(x) / "primus" / "projection";
  } else {
    const char* home = std::getenv("HOME");
    dir = fs::path(home && *home ? home : ".") / ".cache" / "primus" / "projection";
  }
  return (dir / (gpu_name + ".json")).string();
}

Calibration read_calibration(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ConfigError(fmt::format("calibration file {}: cannot read it", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw ConfigError(fmt::format("calibration file {}: not JSON ({})", path, e.what()));
  }
  Calibration c;
  c.source = path;
  try {
    c.gpu = j.value("gpu", "");
    c.device = j.value("device", "");
    c.date = j.value("date", "");
    for (const auto& g : j.value("gemm", nlohmann::json::array()))
      c.gemm_s[GemmShape{g.at("m").get<int64_t>(), g.at("n").get<int64_t>(), g.at("k").get<int64_t>()}] =
          g.at("seconds").get<double>();
    for (const auto& a : j.value("attention", nlohmann::json::array()))
      c.attention_s[AttentionShapeKey{a.at("batch").get<int64_t>(), a.at("heads").get<int64_t>(),
                                      a.at("kv_heads").get<int64_t>(), a.at("seq").get<int64_t>(),
                                      a.at("head_dim").get<int64_t>()}] = {a.at("forward_s").get<double>(),
                                                                           a.at("backward_s").get<double>()};
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(
        fmt::format("calibration file {}: {} (expected gemm [{{m, n, k, seconds}}] and attention "
                    "[{{batch, heads, kv_heads, seq, head_dim, forward_s, backward_s}}])",
                    path, e.what()));
  }
  for (const auto& [k, v] : c.gemm_s)
    if (!(v > 0))
      throw ConfigError(fmt::format("calibration file {}: GEMM {}x{}x{} takes {} s", path, k.m, k.n, k.k, v));
  return c;
}

void write_calibration(const std::string& path, const Calibration& c) {
  nlohmann::ordered_json j;
  j["gpu"] = c.gpu;
  j["device"] = c.device;
  j["date"] = c.date;
  nlohmann::ordered_json g = nlohmann::ordered_json::array();
  for (const auto& [k, v] : c.gemm_s) g.push_back({{"m", k.m}, {"n", k.n}, {"k", k.k}, {"seconds", v}});
  j["gemm"] = g;
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const auto& [k, v] : c.attention_s)
    a.push_back({{"batch", k.batch},
                 {"heads", k.heads},
                 {"kv_heads", k.kv_heads},
                 {"seq", k.seq},
                 {"head_dim", k.head_dim},
                 {"forward_s", v.first},
                 {"backward_s", v.second}});
  j["attention"] = a;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << j.dump(1) << "\n";
    if (!f) throw Error(ErrorKind::kRuntime, "projection calibrate: cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    throw Error(ErrorKind::kRuntime,
                fmt::format("projection calibrate: cannot write {}: {}", path, ec.message()));
}

}  // namespace primus::projection
