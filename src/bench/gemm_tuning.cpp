// Tuning-file I/O and loading (host code; the tuner itself is in gemm_tuning_cuda.cpp).
#include "bench/gemm_tuning.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace primus::bench {

namespace {

constexpr const char* kFormat = "primus-gemm-tuning/1";

std::string hex_u64(uint64_t v) {
  return fmt::format("0x{:016x}", v);
}

uint64_t parse_hex_u64(const std::string& s, const std::string& where) {
  if (s.size() < 3 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
    throw ConfigError(fmt::format("{}: algo word '{}' is not a 0x-prefixed hex string", where, s));
  char* end = nullptr;
  uint64_t v = std::strtoull(s.c_str() + 2, &end, 16);
  if (!end || *end != '\0') throw ConfigError(fmt::format("{}: algo word '{}' is not hex", where, s));
  return v;
}

DType gemm_dtype(const std::string& name, const std::string& where) {
  DType t = dtype_from_name(name);
  if (t != DType::kBF16 && t != DType::kF16 && t != DType::kF32)
    throw ConfigError(fmt::format("{}: GEMM dtype must be bf16, f16 or f32, got '{}'", where, name));
  return t;
}

bool same_slot(const TuningEntry& a, const TuningEntry& b) {
  return a.gpu == b.gpu && a.cublaslt_version == b.cublaslt_version && a.key == b.key;
}

}  // namespace

#ifdef PRIMUS_WITH_CUDA
// gemm_tuning_cuda.cpp: the GPU's name and cuBLASLt's version, the identity tuned entries must match.
std::string tuning_gpu_name(int device);
uint64_t tuning_cublaslt_version();
#endif

std::string GemmKey::str() const {
  return fmt::format("{}x{}x{} a={} b={} {}*{}->{}{}", m, n, k, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N',
                     dtype_name(a_type), dtype_name(b_type), dtype_name(c_type),
                     epilogue == "none" ? "" : " " + epilogue);
}

void TuningFile::upsert(const TuningEntry& e) {
  for (auto& x : entries) {
    if (same_slot(x, e)) {
      x = e;
      return;
    }
  }
  entries.push_back(e);
}

TuningFile read_tuning_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("gemm tuning file '{}' cannot be opened", path));
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("gemm tuning file '{}': invalid JSON: {}", path, e.what()));
  }
  if (!j.is_object() || j.value("format", "") != kFormat)
    throw ConfigError(
        fmt::format("gemm tuning file '{}': expected an object with \"format\": \"{}\"", path, kFormat));
  if (!j.contains("entries") || !j["entries"].is_array())
    throw ConfigError(fmt::format("gemm tuning file '{}': missing \"entries\" array", path));
  TuningFile f;
  size_t idx = 0;
  for (const auto& je : j["entries"]) {
    const std::string where = fmt::format("gemm tuning file '{}' entry {}", path, idx++);
    try {
      TuningEntry e;
      e.gpu = je.at("gpu").get<std::string>();
      e.cublaslt_version = je.at("cublaslt_version").get<uint64_t>();
      e.key.m = je.at("m").get<int64_t>();
      e.key.n = je.at("n").get<int64_t>();
      e.key.k = je.at("k").get<int64_t>();
      e.key.trans_a = je.at("trans_a").get<bool>();
      e.key.trans_b = je.at("trans_b").get<bool>();
      e.key.a_type = gemm_dtype(je.at("a").get<std::string>(), where);
      e.key.b_type = gemm_dtype(je.at("b").get<std::string>(), where);
      e.key.c_type = gemm_dtype(je.at("c").get<std::string>(), where);
      e.key.epilogue = je.value("epilogue", "none");
      if (e.key.epilogue != "none" && e.key.epilogue != "bias" && e.key.epilogue != "bgrad")
        throw ConfigError(
            fmt::format("{}: epilogue must be none, bias or bgrad, got '{}'", where, e.key.epilogue));
      if (e.key.m <= 0 || e.key.n <= 0 || e.key.k <= 0)
        throw ConfigError(fmt::format("{}: m, n, k must be positive", where));
      const auto& words = je.at("algo");
      if (!words.is_array() || words.size() != 8)
        throw ConfigError(fmt::format("{}: \"algo\" must hold 8 hex strings", where));
      for (size_t i = 0; i < 8; ++i) e.algo[i] = parse_hex_u64(words[i].get<std::string>(), where);
      e.algo_desc = je.value("algo_desc", "");
      e.time_ms = je.value("time_ms", 0.0);
      e.heuristic_time_ms = je.value("heuristic_time_ms", 0.0);
      e.name = je.value("name", "");
      f.entries.push_back(std::move(e));
    } catch (const nlohmann::json::exception& ex) {
      throw ConfigError(fmt::format("{}: {}", where, ex.what()));
    }
  }
  return f;
}

void write_tuning_file(const std::string& path, const TuningFile& f) {
  nlohmann::json j;
  j["format"] = kFormat;
  j["entries"] = nlohmann::json::array();
  for (const auto& e : f.entries) {
    nlohmann::json je;
    je["gpu"] = e.gpu;
    je["cublaslt_version"] = e.cublaslt_version;
    je["m"] = e.key.m;
    je["n"] = e.key.n;
    je["k"] = e.key.k;
    je["trans_a"] = e.key.trans_a;
    je["trans_b"] = e.key.trans_b;
    je["a"] = dtype_name(e.key.a_type);
    je["b"] = dtype_name(e.key.b_type);
    je["c"] = dtype_name(e.key.c_type);
    je["epilogue"] = e.key.epilogue;
    auto words = nlohmann::json::array();
    for (uint64_t w : e.algo) words.push_back(hex_u64(w));
    je["algo"] = words;
    je["algo_desc"] = e.algo_desc;
    je["time_ms"] = e.time_ms;
    je["heuristic_time_ms"] = e.heuristic_time_ms;
    if (!e.name.empty()) je["name"] = e.name;
    j["entries"].push_back(je);
  }
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw Error(ErrorKind::kRuntime, fmt::format("cannot write gemm tuning file '{}'", tmp));
    out << j.dump(1) << "\n";
    if (!out) throw Error(ErrorKind::kRuntime, fmt::format("error writing gemm tuning file '{}'", tmp));
  }
  std::filesystem::rename(tmp, path);
}

int load_gemm_tuning(const std::string& path_in, int device) {
  std::string path = path_in;
  if (path.empty()) {
    const char* env = std::getenv("PRIMUS_GEMM_TUNING_FILE");
    if (env && *env) path = env;
  }
  if (path.empty()) return 0;
  TuningFile f = read_tuning_file(path);
#ifdef PRIMUS_WITH_CUDA
  const std::string gpu = tuning_gpu_name(device);
  const uint64_t version = tuning_cublaslt_version();
  int installed = 0, foreign = 0;
  const TuningEntry* first_foreign = nullptr;
  for (const auto& e : f.entries) {
    if (install_tuning_entry(e, device)) {
      ++installed;
    } else {
      ++foreign;
      if (!first_foreign) first_foreign = &e;
    }
  }
  if (foreign) {
    // Opaque cuBLASLt algorithm data is only meaningful for the GPU and library build that produced it.
    log::warn(
        "gemm tuning: {} of {} entries in {} ignored: recorded for another GPU or cuBLASLt (e.g. '{}' "
        "cuBLASLt "
        "{}; this process: '{}' cuBLASLt {}). Re-run `primus benchmark gemm-dense --tune` here.",
        foreign, f.entries.size(), path, first_foreign->gpu, first_foreign->cublaslt_version, gpu, version);
  }
  log::info("gemm tuning: {} of {} entries from {} installed for '{}' (cuBLASLt {})", installed,
            f.entries.size(), path, gpu, version);
  return installed;
#else
  log::warn("gemm tuning file {} ({} entries) ignored: this build has no CUDA backend", path,
            f.entries.size());
  return 0;
#endif
}

#ifndef PRIMUS_WITH_CUDA
TuneResult tune_gemm(const GemmKey&, const TuneOptions&, const Stream&) {
  throw Error(ErrorKind::kRuntime, "GEMM tuning needs a CUDA build (PRIMUS_CUDA=ON)");
}
TuningEntry to_tuning_entry(const TuneResult&, int, const std::string&) {
  throw Error(ErrorKind::kRuntime, "GEMM tuning needs a CUDA build (PRIMUS_CUDA=ON)");
}
bool install_tuning_entry(const TuningEntry&, int) {
  return false;
}
#endif

}  // namespace primus::bench
