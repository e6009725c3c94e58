// Position-keyed dropout (LoRA's input dropout): one thread per element, the Philox draw of its place in the
// whole tensor (ops/dropout_mask.h, the CPU reference's test bit for bit). Memory-bound: 4 bytes per element;
// the 10 Philox rounds are ~100 integer operations, under the memory time on Hopper.
#include "ops/cuda/kernel_utils.cuh"

#include "ops/cuda/dropout_cuda.h"
#include "ops/dropout_mask.h"

namespace primus::ops::cuda {
namespace {

using detail::bf16;

constexpr int kBlock = 256;

__global__ void dropout_kernel(const bf16* __restrict__ x, bf16* out, int64_t rows, int64_t cols,
                               uint64_t key, int64_t col_begin, int64_t whole_cols, float p, float scale) {
  const int64_t n = rows * cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / cols, j = e - i * cols;
    const uint64_t index = static_cast<uint64_t>(i * whole_cols + col_begin + j);
    out[e] = dropout_keeps(key, index, p) ? __float2bfloat16_rn(__bfloat162float(x[e]) * scale)
                                          : __float2bfloat16_rn(0.f);
  }
}

}  // namespace

void dropout_apply(const Tensor& x, float p, uint64_t key, int64_t col_begin, int64_t whole_cols, Tensor& out,
                   const Stream& s) {
  constexpr const char* op = "dropout_apply";
  detail::check_cuda_tensor(op, "x", x, DType::kBF16);
  detail::check_cuda_tensor(op, "out", out, DType::kBF16);
  detail::check_same_cuda_device(op, x, out);
  PRIMUS_CHECK(out.data_ptr() == x.data_ptr() || !detail::overlaps(out, x),
               "{}: out must be x itself or not overlap it", op);
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + kBlock - 1) / kBlock, int64_t{1} << 16);
  dropout_kernel<<<static_cast<unsigned>(blocks), kBlock, 0, cuda_stream(s)>>>(
      static_cast<const bf16*>(x.data_ptr()), static_cast<bf16*>(out.data_ptr()), x.size(0), x.size(1), key,
      col_begin, whole_cols, p, 1.0f / (1.0f - p));
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace primus::ops::cuda
