// Writes the operand pointer arrays of a grouped GEMM on the stream (see grouped_gemm_pointers.h).
#include "ops/cuda/grouped_gemm_pointers.h"

namespace primus::ops::cuda {

namespace {

// The parameter struct is ~12 KiB: CUDA 12.1+ takes up to 32 KiB of kernel parameters on Volta and later.
__global__ void fill_group_pointers(const __grid_constant__ PointerParams p, const void** out) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= p.count) return;
  for (int i = 0; i < 3; ++i) {
    const PointerOperand& o = p.op[i];
    out[i * p.count + g] = o.base + p.expert[g] * o.expert_bytes + p.row[g] * o.row_bytes;
  }
}

}  // namespace

cudaError_t launch_fill_group_pointers(const PointerParams& p, const void** out, cudaStream_t stream) {
  if (p.count <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  fill_group_pointers<<<(p.count + kThreads - 1) / kThreads, kThreads, 0, stream>>>(p, out);
  return cudaGetLastError();
}

}  // namespace primus::ops::cuda
