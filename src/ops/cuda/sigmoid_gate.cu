// Sigmoid-gated row sum (Qwen2-MoE's shared-expert gate): one block per row, f32 math on bf16 rows, the gate
// logit and its gradient in f32. Memory-bound: forward reads 2 and writes 1 bf16 per element (6 bytes),
// backward reads 2 and writes 1 (6 bytes) plus a block reduction per row.
#include "ops/cuda/kernel_utils.cuh"

#include "ops/cuda/sigmoid_gate_cuda.h"

namespace primus::ops::cuda {
namespace {

using detail::bf16;

constexpr int kBlock = 256;

__device__ __forceinline__ float sigmoid(float g) {
  return 1.f / (1.f + expf(-g));  // expf(-g) = inf for very negative g still gives 0
}

__global__ void sigmoid_gate_fwd_kernel(const float* __restrict__ g, const bf16* __restrict__ x,
                                        bf16* __restrict__ y, int64_t d) {
  const int64_t t = blockIdx.x;
  const float s = sigmoid(g[t]);
  const bf16* xr = x + t * d;
  bf16* yr = y + t * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    yr[j] = __float2bfloat16_rn(__bfloat162float(yr[j]) + s * __bfloat162float(xr[j]));
}

__global__ void sigmoid_gate_bwd_kernel(const float* __restrict__ g, const bf16* __restrict__ x,
                                        const bf16* __restrict__ dy, bf16* __restrict__ dx,
                                        float* __restrict__ dg, int64_t d) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const float s = sigmoid(g[t]);
  const bf16* xr = x + t * d;
  const bf16* dyr = dy + t * d;
  bf16* dxr = dx + t * d;
  float acc = 0.f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float gy = __bfloat162float(dyr[j]);
    acc += gy * __bfloat162float(xr[j]);
    dxr[j] = __float2bfloat16_rn(s * gy);
  }
  acc = detail::block_sum(acc, scratch);
  if (threadIdx.x == 0) dg[t] = s * (1.f - s) * acc;
}

int64_t check_rows(const char* op, const Tensor& g, const Tensor& x) {
  detail::check_cuda_tensor(op, "g", g, DType::kF32);
  detail::check_cuda_tensor(op, "x", x, DType::kBF16);
  detail::check_same_cuda_device(op, g, x);
  PRIMUS_CHECK(x.ndim() == 2, "{}: x must be [n, d], got {}", op, x.describe());
  PRIMUS_CHECK(g.ndim() == 1 && g.size(0) == x.size(0), "{}: g must be [{}], got {}", op, x.size(0),
               g.describe());
  PRIMUS_CHECK(x.size(0) < (int64_t{1} << 31), "{}: too many rows ({})", op, x.size(0));
  return x.size(0);
}

}  // namespace

void sigmoid_gate_forward(const Tensor& g, const Tensor& x, Tensor& y, const Stream& s) {
  constexpr const char* op = "sigmoid_gate_forward";
  const int64_t n = check_rows(op, g, x);
  detail::check_cuda_tensor(op, "y", y, DType::kBF16);
  detail::check_same_cuda_device(op, x, y);
  PRIMUS_CHECK(y.shape() == x.shape(), "{}: y must be {}, got {}", op, shape_str(x.shape()), y.describe());
  PRIMUS_CHECK(!detail::overlaps(y, x) && !detail::overlaps(y, g), "{}: y must not overlap x or g", op);
  if (n == 0 || x.size(1) == 0) return;
  sigmoid_gate_fwd_kernel<<<static_cast<unsigned>(n), kBlock, 0, cuda_stream(s)>>>(
      g.data<float>(), static_cast<const bf16*>(x.data_ptr()), static_cast<bf16*>(y.data_ptr()), x.size(1));
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& dg,
                           const Stream& s) {
  constexpr const char* op = "sigmoid_gate_backward";
  const int64_t n = check_rows(op, g, x);
  detail::check_cuda_tensor(op, "dy", dy, DType::kBF16);
  detail::check_cuda_tensor(op, "dx", dx, DType::kBF16);
  detail::check_cuda_tensor(op, "dg", dg, DType::kF32);
  detail::check_same_cuda_device(op, x, dy);
  detail::check_same_cuda_device(op, x, dx);
  detail::check_same_cuda_device(op, x, dg);
  PRIMUS_CHECK(dy.shape() == x.shape() && dx.shape() == x.shape(), "{}: dy and dx must be {}, got {} and {}",
               op, shape_str(x.shape()), dy.describe(), dx.describe());
  PRIMUS_CHECK(dg.shape() == g.shape(), "{}: dg must be [{}], got {}", op, n, dg.describe());
  PRIMUS_CHECK(!detail::overlaps(dx, x) && !detail::overlaps(dx, dy) && !detail::overlaps(dg, g),
               "{}: dx must not overlap x or dy, dg not g", op);
  if (n == 0) return;
  if (x.size(1) == 0) {
    dg.zero_(s);
    return;
  }
  sigmoid_gate_bwd_kernel<<<static_cast<unsigned>(n), kBlock, 0, cuda_stream(s)>>>(
      g.data<float>(), static_cast<const bf16*>(x.data_ptr()), static_cast<const bf16*>(dy.data_ptr()),
      static_cast<bf16*>(dx.data_ptr()), dg.data<float>(), x.size(1));
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace primus::ops::cuda
