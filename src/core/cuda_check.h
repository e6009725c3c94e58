#pragma once
// Checked CUDA calls for sources built with CUDA. Every runtime / cuBLASLt / cuDNN / NCCL call goes through
// one of these so that a failure names the call's file:line and the library's own error string.
#include <cuda_runtime.h>

#include "core/device.h"
#include "core/error.h"

namespace primus::detail {
[[noreturn]] void throw_cuda_error(cudaError_t e, const char* expr, const char* file, int line);
}  // namespace primus::detail

#define PRIMUS_CUDA_CHECK(expr)                                                        \
  do {                                                                                 \
    cudaError_t primus_cuda_err_ = (expr);                                             \
    if (primus_cuda_err_ != cudaSuccess)                                               \
      ::primus::detail::throw_cuda_error(primus_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: catches bad launch configurations immediately (asynchronous faults surface later).
#define PRIMUS_CUDA_CHECK_LAUNCH() PRIMUS_CUDA_CHECK(cudaGetLastError())

namespace primus {
inline cudaStream_t cuda_stream(const Stream& s) {
  return static_cast<cudaStream_t>(s.handle);
}
template <typename T>
constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}
}  // namespace primus
