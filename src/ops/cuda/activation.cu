// SwiGLU over the packed [gate | up] layout, bf16 in and out, f32 math. One thread handles 8 adjacent outputs
// of a row (16-byte accesses) when F is a multiple of 8 and the pointers are aligned, else one output. Bytes:
// forward reads 4 and writes 2 per output; backward reads 6 and writes 4.
#include "ops/cuda/kernel_utils.cuh"

#include "ops/cuda/activation_cuda.h"

namespace primus::ops::cuda {
namespace {

using detail::bf16;
using detail::load_vec;
using detail::store_vec;
using detail::Vec;

// 1 / (1 + e^-g): e^-g overflows to inf for very negative g, which still gives the right limit 0.
__device__ __forceinline__ float sigmoid(float g) {
  return 1.f / (1.f + __expf(-g));
}

template <int N>
__global__ void swiglu_fwd_kernel(const bf16* __restrict__ gu, bf16* __restrict__ out, int64_t total,
                                  int64_t f) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx * N >= total) return;
  const int64_t r = (idx * N) / f, c = (idx * N) % f;
  const bf16* g = gu + r * 2 * f + c;
  const Vec<bf16, N> gv = load_vec<bf16, N>(g), uv = load_vec<bf16, N>(g + f);
  Vec<bf16, N> o;
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const float x = __bfloat162float(gv.v[e]);
    o.v[e] = __float2bfloat16_rn(x * sigmoid(x) * __bfloat162float(uv.v[e]));
  }
  store_vec<bf16, N>(out + idx * N, o);
}

// dgate = dout * up * s * (1 + g * (1 - s)), dup = dout * g * s, s = sigmoid(g). dgu may be gu (in place):
// each thread reads its gate/up elements before writing the same ones.
template <int N>
__global__ void swiglu_bwd_kernel(const bf16* __restrict__ dout, const bf16* gu, bf16* dgu, int64_t total,
                                  int64_t f) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx * N >= total) return;
  const int64_t r = (idx * N) / f, c = (idx * N) % f;
  const int64_t off = r * 2 * f + c;
  const Vec<bf16, N> gv = load_vec<bf16, N>(gu + off), uv = load_vec<bf16, N>(gu + off + f);
  const Vec<bf16, N> dv = load_vec<bf16, N>(dout + idx * N);
  Vec<bf16, N> dg, du;
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const float g = __bfloat162float(gv.v[e]), u = __bfloat162float(uv.v[e]), d = __bfloat162float(dv.v[e]);
    const float s = sigmoid(g);
    dg.v[e] = __float2bfloat16_rn(d * u * s * (1.f + g * (1.f - s)));
    du.v[e] = __float2bfloat16_rn(d * g * s);
  }
  store_vec<bf16, N>(dgu + off, dg);
  store_vec<bf16, N>(dgu + off + f, du);
}

int64_t check_gu(const char* op, const char* name, const Tensor& gu) {
  detail::check_cuda_tensor(op, name, gu, DType::kBF16);
  PRIMUS_CHECK(gu.ndim() == 2 && gu.size(1) % 2 == 0 && gu.size(1) >= 2,
               "{}: {} must be [R, 2F] with F >= 1, got {}", op, name, gu.describe());
  return gu.size(1) / 2;
}

}  // namespace

void swiglu_forward(const Tensor& gu, Tensor& out, const Stream& s) {
  constexpr const char* op = "swiglu_forward";
  const int64_t f = check_gu(op, "gu", gu);
  detail::check_cuda_tensor(op, "out", out, DType::kBF16);
  detail::check_same_cuda_device(op, gu, out);
  PRIMUS_CHECK(out.ndim() == 2 && out.size(0) == gu.size(0) && out.size(1) == f,
               "{}: out must be [{}, {}], got {}", op, gu.size(0), f, out.describe());
  PRIMUS_CHECK(!detail::overlaps(out, gu), "{}: out must not overlap gu", op);
  const bool vec = f % 8 == 0 && detail::aligned16(gu.data_ptr()) && detail::aligned16(out.data_ptr());
  const int64_t total = gu.size(0) * f;
  const auto* g = static_cast<const bf16*>(gu.data_ptr());
  auto* o = static_cast<bf16*>(out.data_ptr());
  if (total == 0) return;
  constexpr int kBlock = 256;
  const int64_t grid = ceil_div<int64_t>(total / (vec ? 8 : 1), kBlock);
  PRIMUS_CHECK(grid < (int64_t{1} << 31), "{}: too large ({} elements)", op, total);
  if (vec) {
    swiglu_fwd_kernel<8><<<static_cast<unsigned>(grid), kBlock, 0, cuda_stream(s)>>>(g, o, total, f);
  } else {
    swiglu_fwd_kernel<1><<<static_cast<unsigned>(grid), kBlock, 0, cuda_stream(s)>>>(g, o, total, f);
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(const Tensor& dout, const Tensor& gu, Tensor& dgu, const Stream& s) {
  constexpr const char* op = "swiglu_backward";
  const int64_t f = check_gu(op, "gu", gu);
  detail::check_cuda_tensor(op, "dout", dout, DType::kBF16);
  detail::check_cuda_tensor(op, "dgu", dgu, DType::kBF16);
  detail::check_same_cuda_device(op, gu, dout);
  detail::check_same_cuda_device(op, gu, dgu);
  PRIMUS_CHECK(dout.ndim() == 2 && dout.size(0) == gu.size(0) && dout.size(1) == f,
               "{}: dout must be [{}, {}], got {}", op, gu.size(0), f, dout.describe());
  PRIMUS_CHECK(dgu.shape() == gu.shape(), "{}: dgu must be {}, got {}", op, shape_str(gu.shape()),
               dgu.describe());
  PRIMUS_CHECK(dgu.data_ptr() == gu.data_ptr() || !detail::overlaps(dgu, gu),
               "{}: dgu must be gu itself or not overlap it", op);
  PRIMUS_CHECK(!detail::overlaps(dgu, dout), "{}: dgu must not overlap dout", op);
  const bool vec = f % 8 == 0 && detail::aligned16(gu.data_ptr()) && detail::aligned16(dgu.data_ptr()) &&
                   detail::aligned16(dout.data_ptr());
  const int64_t total = gu.size(0) * f;
  const auto* d = static_cast<const bf16*>(dout.data_ptr());
  const auto* g = static_cast<const bf16*>(gu.data_ptr());
  auto* dg = static_cast<bf16*>(dgu.data_ptr());
  if (total == 0) return;
  constexpr int kBlock = 256;
  const int64_t grid = ceil_div<int64_t>(total / (vec ? 8 : 1), kBlock);
  PRIMUS_CHECK(grid < (int64_t{1} << 31), "{}: too large ({} elements)", op, total);
  if (vec) {
    swiglu_bwd_kernel<8><<<static_cast<unsigned>(grid), kBlock, 0, cuda_stream(s)>>>(d, g, dg, total, f);
  } else {
    swiglu_bwd_kernel<1><<<static_cast<unsigned>(grid), kBlock, 0, cuda_stream(s)>>>(d, g, dg, total, f);
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace primus::ops::cuda
