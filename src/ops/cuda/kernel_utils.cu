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
