// Position-keyed dropout (LoRA's input dropout): the Philox draw of each element's place in the whole tensor
// (ops/dropout_mask.h, the CPU reference's test bit for bit), four elements per thread and per Philox call
// where the widths allow, else one. 4 bytes of traffic per element.
#include "ops/cuda/kernel_utils.cuh"

#include "ops/cuda/dropout_cuda.h"
#include "ops/dropout_mask.h"

namespace primus::ops::cuda {
namespace {

using detail::bf16;

constexpr int kBlock = 256;

__global__ void dropout_kernel(const bf16* __restrict__ x, bf16* out, int64_t rows, int64_t cols,
                               uint64_t key, int64_t col_begin, int64_t whole_cols, float p, float scale,
                               DropoutRows place) {
  const int64_t n = rows * cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / cols, j = e - i * cols;
    const uint64_t index = static_cast<uint64_t>(place.whole_row(i) * whole_cols + col_begin + j);
    out[e] = dropout_keeps(key, index, p) ? __float2bfloat16_rn(__bfloat162float(x[e]) * scale)
                                          : __float2bfloat16_rn(0.f);
  }
}

// Four elements per thread when every row's run of whole-tensor indices starts on a multiple of 4 (cols,
// col_begin and whole_cols divisible by 4, as every model width is): one Philox call and 8-byte loads and
// stores per thread.
__global__ void dropout4_kernel(const bf16* __restrict__ x, bf16* out, int64_t rows, int64_t cols,
                                uint64_t key, int64_t col_begin, int64_t whole_cols, float p, float scale,
                                DropoutRows place) {
  const int64_t n4 = rows * cols / 4, cols4 = cols / 4;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < n4;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = g / cols4, j = (g - i * cols4) * 4;
    bool keep[4];
    dropout_keeps4(key, static_cast<uint64_t>(place.whole_row(i) * whole_cols + col_begin + j) >> 2, p, keep);
    const uint2 raw = reinterpret_cast<const uint2*>(x)[g];
    const bf16* v = reinterpret_cast<const bf16*>(&raw);
    bf16 o[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      o[k] = keep[k] ? __float2bfloat16_rn(__bfloat162float(v[k]) * scale) : __float2bfloat16_rn(0.f);
    reinterpret_cast<uint2*>(out)[g] = *reinterpret_cast<const uint2*>(o);
  }
}

}  // namespace

void dropout_apply(const Tensor& x, float p, uint64_t key, int64_t col_begin, int64_t whole_cols, Tensor& out,
                   const Stream& s, const DropoutRows& rows) {
  constexpr const char* op = "dropout_apply";
  detail::check_cuda_tensor(op, "x", x, DType::kBF16);
  detail::check_cuda_tensor(op, "out", out, DType::kBF16);
  detail::check_same_cuda_device(op, x, out);
  PRIMUS_CHECK(out.data_ptr() == x.data_ptr() || !detail::overlaps(out, x),
               "{}: out must be x itself or not overlap it", op);
  const int64_t n = x.numel();
  if (n == 0) return;
  const bool by4 = x.size(1) % 4 == 0 && col_begin % 4 == 0 && whole_cols % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(x.data_ptr()) % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(out.data_ptr()) % 8 == 0;
  const int64_t work = by4 ? n / 4 : n;
  const int64_t blocks = std::min<int64_t>((work + kBlock - 1) / kBlock, int64_t{1} << 16);
  auto kernel = by4 ? dropout4_kernel : dropout_kernel;
  kernel<<<static_cast<unsigned>(blocks), kBlock, 0, cuda_stream(s)>>>(
      static_cast<const bf16*>(x.data_ptr()), static_cast<bf16*>(out.data_ptr()), x.size(0), x.size(1), key,
      col_begin, whole_cols, p, 1.0f / (1.0f - p), rows);
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace primus::ops::cuda
