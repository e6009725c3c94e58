#pragma once
// What a projection assumes about a GPU: its memory, its peaks, and the ceilings our own kernels reach on it.
// Facts from the vendors' data sheets; the "reached" columns are our measurements where we have them (H100:
// docs/performance.md) and a stated fraction of the peak elsewhere, so a projection for a GPU we never ran on
// says which numbers are guesses.
//
//   GpuSpec g = gpu_spec("h100");            // or the CUDA name "NVIDIA H100 80GB HBM3"
//   GpuSpec m = gpu_spec_with_memory(96.0);  // --gpu-memory-gb: an unnamed GPU, H100 ceilings
#include <string>
#include <vector>

namespace primus::projection {

struct GpuSpec {
  std::string name;        // "H100-SXM"
  std::string aliases;     // lower-case names that select it, '|'-separated
  double memory_gb = 0;    // usable device memory (cudaMemGetInfo's total), 1e9 bytes
  double bf16_tflops = 0;  // dense peak
  double fp8_tflops = 0;   // dense peak (0: no FP8 tensor cores)
  double hbm_tbps = 0;     // peak memory bandwidth, TB/s
  // What our kernels reach: large-GEMM TFLOP/s (bf16, fp8) and streaming bandwidth.
  double gemm_bf16_tflops = 0, gemm_fp8_tflops = 0, stream_tbps = 0;
  bool measured = false;   // true when the three above come from our runs on this GPU
  double nvlink_gbps = 0;  // per GPU, per direction, GB/s (intra-node collectives)
  int sms = 0;
  std::string source;  // where the numbers come from
};

const std::vector<GpuSpec>& gpu_catalog();
// By catalog name, alias or CUDA device name (case-insensitive; "H100", "h200", "NVIDIA H100 80GB HBM3").
// Throws ConfigError listing the known names.
GpuSpec gpu_spec(const std::string& name);
// Like gpu_spec but nullptr-free: false when unknown.
bool find_gpu_spec(const std::string& name, GpuSpec* out);

}  // namespace primus::projection
