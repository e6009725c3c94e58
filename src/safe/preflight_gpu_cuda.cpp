// Preflight's per-GPU work: each runs in its own child process on device 0 (CUDA_VISIBLE_DEVICES picks the
// GPU), so a hung or broken GPU only kills its own check.
#include <cuda_runtime.h>

#include <cmath>

#include "bench/event_timing.h"
#include "bench/gemm_timing.h"
#include "core/cuda_check.h"
#include "ops/gemm.h"
#include "safe/preflight_gpu.h"

namespace primus::safe {

namespace {

struct GemmRun {
  double tflops = 0;
  bool finite = true;
};

GemmRun time_gemm(int64_t n, int iters, const Stream& s, bool check) {
  Tensor a = Tensor::empty({n, n}, DType::kBF16, s), b = Tensor::empty({n, n}, DType::kBF16, s);
  Tensor c = Tensor::empty({n, n}, DType::kBF16, s);
  bench::fill_random(a.data_ptr(), static_cast<size_t>(n * n), DType::kBF16, 1, s);
  bench::fill_random(b.data_ptr(), static_cast<size_t>(n * n), DType::kBF16, 2, s);
  GemmRun r;
  const bench::TimingStats st =
      bench::time_runs([&](int) { ops::gemm(a, false, b, true, c, 1.0f, 0.0f, s); }, 3, iters, s);
  r.tflops = 2.0 * static_cast<double>(n) * n * n / (st.median_ms * 1e-3) / 1e12;
  if (check) {
    const std::vector<float> out =
        bench::download_as_float(c.data_ptr(), static_cast<size_t>(n * n), DType::kBF16, s);
    for (float v : out)
      if (!std::isfinite(v)) {
        r.finite = false;
        break;
      }
  }
  return r;
}

}  // namespace

nlohmann::json gpu_smoke_test() {
  const Stream s = cuda_compute_stream(0);
  void* p = device_alloc(256 << 20, s);
  device_memset(p, 0, 256 << 20, s);
  stream_sync(s);
  device_free(p, s);
  const GemmRun g = time_gemm(2048, 3, s, true);
  stream_sync(s);
  return {{"finite", g.finite}, {"gemm_tflops_2048", g.tflops}};
}

nlohmann::json gpu_perf_test(bool quick) {
  const Stream s = cuda_compute_stream(0);
  nlohmann::json j;
  const GemmRun big = time_gemm(8192, quick ? 10 : 30, s, true);
  j["gemm_tflops"] = big.tflops;
  j["finite"] = big.finite;
  if (!quick) {
    nlohmann::json by = nlohmann::json::object();
    for (int64_t n : {1024, 2048, 4096, 10240})
      by[std::to_string(n)] = std::round(time_gemm(n, 20, s, false).tflops);
    by["8192"] = std::round(big.tflops);
    j["gemm_by_size"] = by;
  }
  const size_t bytes = size_t{1} << 30;
  void* src = device_alloc(bytes, s);
  void* dst = device_alloc(bytes, s);
  device_memset(src, 1, bytes, s);
  cudaStream_t cs = cuda_stream(s);
  const bench::TimingStats st = bench::time_runs(
      [&](int) { PRIMUS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cs)); }, 2,
      quick ? 10 : 30, s);
  j["copy_gbps"] = 2.0 * static_cast<double>(bytes) / (st.median_ms * 1e-3) / 1e9;
  device_free(src, s);
  device_free(dst, s);
  stream_sync(s);
  return j;
}

}  // namespace primus::safe
