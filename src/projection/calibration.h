#pragma once
// Measured op times for the performance model (`primus projection calibrate`): the bf16 GEMMs and the
// attention of a config's step timed on this machine's GPU, cached per GPU in a JSON file that `projection
// performance` and `plan` read for that GPU. Shapes without a measurement fall back to the roofline model.
//
//   ~/.cache/primus/projection/H100-SXM.json   {"gpu": ..., "device": ..., "date": ..., "gemm": [...],
//                                                "attention": [...]}
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace primus::projection {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  auto operator<=>(const GemmShape&) const = default;
};
struct AttentionShapeKey {
  int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
  auto operator<=>(const AttentionShapeKey&) const = default;
};

struct Calibration {
  std::string gpu;     // the catalog name it was measured for ("H100-SXM")
  std::string device;  // the CUDA device name ("NVIDIA H100 80GB HBM3")
  std::string date;
  std::map<GemmShape, double> gemm_s;                                  // seconds per call
  std::map<AttentionShapeKey, std::pair<double, double>> attention_s;  // forward, backward seconds
  std::string source;                                                  // the file it was read from

  std::optional<double> gemm(int64_t m, int64_t n, int64_t k) const;
  std::optional<std::pair<double, double>> attention(const AttentionShapeKey& key) const;
  // Merges `other` in (its entries win).
  void merge(const Calibration& other);
};

// $PRIMUS_PROJECTION_CACHE, else $XDG_CACHE_HOME/primus/projection, else ~/.cache/primus/projection:
// <gpu>.json.
std::string calibration_path(const std::string& gpu_name);
// Reads a calibration file; ConfigError naming the file and what is wrong.
Calibration read_calibration(const std::string& path);
void write_calibration(const std::string& path, const Calibration& c);

}  // namespace primus::projection
