// Host halves of the helpers in kernel_utils.cuh.
#include "ops/cuda/kernel_utils.cuh"

namespace primus::ops::cuda::detail {

int sm_count() {
  static const int n = [] {
    int dev = 0, count = 0;
    PRIMUS_CUDA_CHECK(cudaGetDevice(&dev));
    PRIMUS_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev));
    return count;
  }();
  return n;
}

int* mapped_words(int count) {
  int* p = nullptr;
  PRIMUS_CUDA_CHECK(cudaHostAlloc(&p, static_cast<size_t>(count) * sizeof(int),
                                  cudaHostAllocMapped | cudaHostAllocPortable));
  for (int i = 0; i < count; ++i) p[i] = 0;
  return p;
}

int* mapped_words_device(int* host) {
  int* dev = nullptr;
  PRIMUS_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), host, 0));
  return dev;
}

void check_cuda_tensor(const char* op, const char* name, const Tensor& t, DType dtype) {
  PRIMUS_CHECK(t.defined(), "{}: {} is undefined", op, name);
  PRIMUS_CHECK(t.device().is_cuda(), "{}: {} must be on a CUDA device, got {}", op, name, t.describe());
  PRIMUS_CHECK(t.dtype() == dtype, "{}: {} must be {}, got {}", op, name, dtype_name(dtype), t.describe());
  PRIMUS_CHECK(t.is_contiguous(), "{}: {} must be contiguous, got {}", op, name, t.describe());
}

void check_same_cuda_device(const char* op, const Tensor& a, const Tensor& b) {
  PRIMUS_CHECK(a.device() == b.device(), "{}: tensors on different devices: {} vs {}", op, a.describe(),
               b.describe());
}

}  // namespace primus::ops::cuda::detail
