#include "projection/gpu_catalog.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "core/error.h"

namespace primus::projection {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Unmeasured GPUs: our kernels are assumed to reach these shares of the peaks (what they reach on the H100).
constexpr double kGemmShare = 0.74, kFp8GemmShare = 0.64, kStreamShare = 0.87;

GpuSpec unmeasured(GpuSpec g) {
  g.gemm_bf16_tflops = g.bf16_tflops * kGemmShare;
  g.gemm_fp8_tflops = g.fp8_tflops * kFp8GemmShare;
  g.stream_tbps = g.hbm_tbps * kStreamShare;
  g.source += fmt::format("; ceilings assumed {:.0f}% / {:.0f}% / {:.0f}% of the peaks (our H100 shares)",
                          kGemmShare * 100, kFp8GemmShare * 100, kStreamShare * 100);
  return g;
}

std::vector<GpuSpec> build() {
  std::vector<GpuSpec> v;
  // H100 SXM: our measurements (docs/performance.md): cuBLASLt bf16 GEMMs 690-760 TF on Llama-8B shapes
  // (L2-cold 8192^3: 688), FP8 tensorwise 1258 TF, AdamW streaming at ~2.9 TB/s.
  v.push_back({"H100-SXM", "h100|h100-sxm|h100 sxm|h100 80gb", 85.0, 989, 1979, 3.35, 730, 1250, 2.9, true,
               450, 132,
               "NVIDIA H100 SXM data sheet; ceilings measured by Primus-C++ (docs/performance.md)"});
  v.push_back(unmeasured({"H100-PCIe", "h100-pcie|h100 pcie", 85.0, 756, 1513, 2.0, 0, 0, 0, false, 300, 114,
                          "NVIDIA H100 PCIe data sheet"}));
  // H200: the H100's SMs and clocks with 141 GB of HBM3e at 4.8 TB/s; GEMM ceilings as measured on the H100.
  v.push_back({"H200", "h200|h200-sxm|h200 nvl", 143.7, 989, 1979, 4.8, 730, 1250, 4.1, false, 450, 132,
               "NVIDIA H200 data sheet; GEMM ceilings of the H100 (same SMs), bandwidth 87% of the peak"});
  v.push_back(unmeasured({"A100-80GB", "a100|a100-80gb|a100-sxm4-80gb|a100 80gb", 85.1, 312, 0, 2.04, 0, 0, 0,
                          false, 300, 108, "NVIDIA A100 data sheet"}));
  v.push_back(unmeasured({"A100-40GB", "a100-40gb|a100-sxm4-40gb|a100 40gb", 42.5, 312, 0, 1.56, 0, 0, 0,
                          false, 300, 108, "NVIDIA A100 data sheet"}));
  v.push_back(unmeasured({"B200", "b200", 191.5, 2250, 4500, 8.0, 0, 0, 0, false, 900, 148,
                          "NVIDIA B200 (HGX) data sheet, dense"}));
  v.push_back(unmeasured({"MI300X", "mi300x", 205.8, 1307, 2615, 5.3, 0, 0, 0, false, 384, 304,
                          "AMD Instinct MI300X data sheet, dense; 7 Infinity Fabric links"}));
  v.push_back(unmeasured({"MI325X", "mi325x", 274.9, 1307, 2615, 6.0, 0, 0, 0, false, 384, 304,
                          "AMD Instinct MI325X data sheet, dense"}));
  v.push_back(unmeasured({"MI355X", "mi355x", 309.2, 2300, 4600, 8.0, 0, 0, 0, false, 512, 256,
                          "AMD Instinct MI355X data sheet, dense"}));
  return v;
}

}  // namespace

const std::vector<GpuSpec>& gpu_catalog() {
  static const std::vector<GpuSpec> catalog = build();
  return catalog;
}

bool find_gpu_spec(const std::string& name, GpuSpec* out) {
  const std::string want = lower(name);
  for (const GpuSpec& g : gpu_catalog()) {
    if (lower(g.name) == want) return *out = g, true;
  }
  // Aliases: whole-name matches first, then the longest alias word contained in a CUDA device name.
  const GpuSpec* best = nullptr;
  size_t best_len = 0;
  for (const GpuSpec& g : gpu_catalog()) {
    std::istringstream words(g.aliases);
    for (std::string w; std::getline(words, w, '|');) {
      if (w == want) return *out = g, true;
      if (want.find(w) != std::string::npos && w.size() > best_len) best = &g, best_len = w.size();
    }
  }
  if (best == nullptr || best_len < 4) return false;
  *out = *best;
  return true;
}

GpuSpec gpu_spec(const std::string& name) {
  GpuSpec g;
  if (find_gpu_spec(name, &g)) return g;
  std::string known;
  for (const GpuSpec& s : gpu_catalog()) known += (known.empty() ? "" : ", ") + s.name;
  throw ConfigError(
      fmt::format("--gpu {}: unknown GPU (known: {})", name, known),
      "name one of them, or give --gpu-memory-gb N for another GPU (H100 speeds are then assumed)");
}

}  // namespace primus::projection
