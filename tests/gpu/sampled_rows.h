#pragma once
// Sampled rows of a GPU matrix brought to the host, for the GEMM families' checks of model-size outputs (the
// whole product would take minutes to compare on the CPU): gemm_gpu_test.cpp and fp8_gemm_gpu_test.cpp.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cuda_check.h"
#include "core/device.h"
#include "gpu/gpu_test.h"

namespace primus::gputest {

// Rows `rows` of a GPU [R, C] matrix (bf16, f16 or f32) as a CPU f64 tensor [rows.size(), C].
inline Tensor gather_rows(Context& ctx, const Tensor& g, const std::vector<int64_t>& rows) {
  const int64_t c = g.size(-1);
  const size_t es = dtype_size(g.dtype());
  std::vector<uint8_t> raw(rows.size() * c * es);
  stream_sync(ctx.stream);
  for (size_t i = 0; i < rows.size(); ++i)
    PRIMUS_CUDA_CHECK(cudaMemcpy(raw.data() + i * c * es,
                                 static_cast<const uint8_t*>(g.data_ptr()) + rows[i] * c * es, c * es,
                                 cudaMemcpyDeviceToHost));
  std::vector<double> out(rows.size() * c);
  for (size_t i = 0; i < out.size(); ++i) {
    if (g.dtype() == DType::kF32) {
      float f;
      std::memcpy(&f, raw.data() + 4 * i, 4);
      out[i] = f;
    } else {
      uint16_t bits;
      std::memcpy(&bits, raw.data() + 2 * i, 2);
      if (g.dtype() == DType::kBF16) {
        out[i] = bf16_to_float(bf16_t{bits});
      } else {
        __half_raw hr;
        hr.x = bits;
        out[i] = __half2float(__half(hr));
      }
    }
  }
  return Tensor::from_vector(out, {static_cast<int64_t>(rows.size()), c});
}

inline std::vector<int64_t> all_rows(int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[i] = i;
  return r;
}

}  // namespace primus::gputest
