#pragma once
// The GPU work of preflight's per-GPU workers (preflight_gpu_cuda.cpp; the CPU build throws).
#include <nlohmann/json.hpp>

namespace primus::safe {

// 256 MB allocation, a 2048^3 bf16 GEMM on random inputs, every output element finite. {"finite": bool, ...}
nlohmann::json gpu_smoke_test();
// bf16 GEMM TFLOP/s (8192^3; more shapes unless quick) and device-to-device copy GB/s (read + write).
nlohmann::json gpu_perf_test(bool quick);

}  // namespace primus::safe
