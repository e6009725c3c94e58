// RMSNorm and per-head RMSNorm (qk-norm) on bf16 activations with f32 statistics and f32 weight gradients.
//
// Both ops are one kernel family: a "row" is D contiguous elements at (q / nh) * ld + (head_begin + q % nh) *
// D (rmsnorm: nh = 1, ld = D). A group of G threads owns a row and keeps it in registers (VPT accesses of E
// elements per thread), so x is read once: the forward reads x and writes y; the backward reads dy and x (and
// dx when accumulating) and writes dx. dw is summed in registers across the rows a block visits, combined
// across the block's groups in a fixed order, written as one partial row per block, and a second small kernel
// adds the partials to dw in block order: no float atomics, bitwise reproducible.
#include "ops/cuda/kernel_utils.cuh"

#include <algorithm>

#include "ops/cuda/norm_cuda.h"

namespace primus::ops::cuda {
namespace {

using detail::bf16;
using detail::load_vec;
using detail::store_vec;
using detail::Vec;

constexpr int block_size(int g) {
  return g > 256 ? g : 256;
}

// Sum over the G threads of a group; every thread of the group gets the same value (fixed order).
template <int G>
__device__ __forceinline__ float group_sum(float v, float* red) {
  if constexpr (G <= 32) {
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  } else {
    v = detail::warp_sum(v);
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) red[warp] = v;
    __syncthreads();
    const int first = (threadIdx.x / G) * (G / 32);
    float t = 0.f;
#pragma unroll
    for (int i = 0; i < G / 32; ++i) t += red[first + i];
    __syncthreads();
    return t;
  }
}

struct RowMap {
  int64_t rows;  // number of rows q
  int nh;        // heads per token row (1 for rmsnorm)
  int64_t ld;    // elements between token rows
  int64_t hb;    // first head
  int d;         // row length
  __device__ __forceinline__ int64_t offset(int64_t q) const { return (q / nh) * ld + (hb + q % nh) * d; }
};

template <int E, int G, int VPT>
__global__ void __launch_bounds__(block_size(G))
    rmsnorm_fwd_kernel(const bf16* x, const bf16* __restrict__ w, bf16* y, float* __restrict__ rstd, RowMap m,
                       float eps) {
  constexpr int kGroups = block_size(G) / G;
  __shared__ float red[block_size(G) / 32];
  const int lg = threadIdx.x % G;
  const int64_t q = static_cast<int64_t>(blockIdx.x) * kGroups + threadIdx.x / G;
  const bool valid = q < m.rows;
  const int64_t off = valid ? m.offset(q) : 0;

  Vec<bf16, E> xv[VPT];
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int col = (k * G + lg) * E;
    if (valid && col < m.d) {
      xv[k] = load_vec<bf16, E>(x + off + col);
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float f = __bfloat162float(xv[k].v[e]);
        ss += f * f;
      }
    }
  }
  ss = group_sum<G>(ss, red);
  const float r = rsqrtf(ss / m.d + eps);
  if (!valid) return;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int col = (k * G + lg) * E;
    if (col < m.d) {
      const Vec<bf16, E> wv = load_vec<bf16, E>(w + col);
      Vec<bf16, E> out;
#pragma unroll
      for (int e = 0; e < E; ++e)
        out.v[e] = __float2bfloat16_rn(__bfloat162float(xv[k].v[e]) * r * __bfloat162float(wv.v[e]));
      store_vec<bf16, E>(y + off + col, out);
    }
  }
  if (lg == 0) rstd[q] = r;
}

// dx = r * (w*dy - xhat * mean(w*dy*xhat)), xhat = x*r; dw partial[block] = sum over visited rows of dy*xhat.
// Bounded to 64 registers (1024 resident threads per SM): the block walks its rows one at a time with a
// barrier per row, so bytes in flight come from resident blocks, not from ILP within one.
template <int E, int G, int VPT>
__global__ void __launch_bounds__(block_size(G), 1024 / block_size(G))
    rmsnorm_bwd_kernel(const bf16* dy, const bf16* __restrict__ x, const bf16* __restrict__ w,
                       const float* __restrict__ rstd, bf16* dx, float* __restrict__ partial, RowMap m,
                       bool accumulate_dx) {
  constexpr int kBlock = block_size(G);
  constexpr int kGroups = kBlock / G;
  __shared__ float red[kBlock / 32];
  const int lg = threadIdx.x % G, group = threadIdx.x / G;

  // w is re-read per row (an L1 hit) rather than held: registers go to the dw accumulators.
  float dw[VPT][E];
#pragma unroll
  for (int k = 0; k < VPT; ++k)
#pragma unroll
    for (int e = 0; e < E; ++e) dw[k][e] = 0.f;

  // The loop bound is uniform over the block (group_sum may hold a barrier); idle groups carry valid = false.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kGroups; base < m.rows;
       base += static_cast<int64_t>(gridDim.x) * kGroups) {
    const int64_t q = base + group;
    const bool valid = q < m.rows;
    const int64_t off = valid ? m.offset(q) : 0;
    const float r = valid ? rstd[q] : 0.f;
    Vec<bf16, E> xv[VPT], gv[VPT];
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int col = (k * G + lg) * E;
      if (valid && col < m.d) {
        xv[k] = load_vec<bf16, E>(x + off + col);
        gv[k] = load_vec<bf16, E>(dy + off + col);
        const Vec<bf16, E> wv = load_vec<bf16, E>(w + col);
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const float xh = __bfloat162float(xv[k].v[e]) * r;
          const float g = __bfloat162float(gv[k].v[e]);
          dot += g * __bfloat162float(wv.v[e]) * xh;
          dw[k][e] += g * xh;
        }
      }
    }
    const float c = group_sum<G>(dot, red) / m.d;
    if (valid) {
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int col = (k * G + lg) * E;
        if (col < m.d) {
          const Vec<bf16, E> wv = load_vec<bf16, E>(w + col);
          Vec<bf16, E> old;
          if (accumulate_dx) old = load_vec<bf16, E>(dx + off + col);
          Vec<bf16, E> out;
#pragma unroll
          for (int e = 0; e < E; ++e) {
            const float xh = __bfloat162float(xv[k].v[e]) * r;
            float v = r * (__bfloat162float(gv[k].v[e]) * __bfloat162float(wv.v[e]) - xh * c);
            if (accumulate_dx) v += __bfloat162float(old.v[e]);
            out.v[e] = __float2bfloat16_rn(v);
          }
          store_vec<bf16, E>(dx + off + col, out);
        }
      }
    }
  }

  float* dst = partial + static_cast<int64_t>(blockIdx.x) * m.d;
  if constexpr (kGroups == 1) {
#pragma unroll
    for (int k = 0; k < VPT; ++k)
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int col = (k * G + lg) * E + e;
        if (col < m.d) dst[col] = dw[k][e];
      }
  } else {
    // Groups hold the same columns: combine them through shared memory in group order.
    __shared__ float acc[kGroups][VPT][G][E];
#pragma unroll
    for (int k = 0; k < VPT; ++k)
#pragma unroll
      for (int e = 0; e < E; ++e) acc[group][k][lg][e] = dw[k][e];
    __syncthreads();
    if (group == 0) {
#pragma unroll
      for (int k = 0; k < VPT; ++k)
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const int col = (k * G + lg) * E + e;
          float t = 0.f;
          for (int gi = 0; gi < kGroups; ++gi) t += acc[gi][k][lg][e];
          if (col < m.d) dst[col] = t;
        }
    }
  }
}

// dw[col] += sum over blocks (in block order) of partial[b, col].
__global__ void dw_finalize_kernel(const float* __restrict__ partial, int nblocks, int d,
                                   float* __restrict__ dw) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= d) return;
  float t = 0.f;
  for (int b = 0; b < nblocks; ++b) t += partial[static_cast<int64_t>(b) * d + col];
  dw[col] += t;
}

// ---------------------------------------------------------------------------------------------------------------
// Launchers

struct Config {
  int e, g, vpt;
};

// E = 8 (16-byte accesses) when rows and pointers allow it, else scalar. One access per thread up to 1024
// threads (D <= 8192 with E = 8): small rows (qk-norm heads) get a group of a few lanes, long rows a whole
// block; fewer live registers per thread keeps the backward at 64 registers without spilling.
Config pick_config(int64_t d, bool vec_ok) {
  const int e = vec_ok ? 8 : 1;
  const int64_t nvec = (d + e - 1) / e;
  int g = 4;
  while (g < nvec && g < 1024) g <<= 1;
  if (nvec <= 1024) return {e, g, 1};
  if (nvec <= 2048) return {e, 1024, 2};
  PRIMUS_CHECK(nvec <= 8192, "rmsnorm: row length {} is too long for the CUDA kernels (max {})", d, 8192 * e);
  return {e, 1024, 8};
}

template <typename F>
void dispatch(const Config& c, F&& f) {
  // clang-format off
#define PRIMUS_NORM_CASE(E, G, VPT) \
  if (c.e == E && c.g == G && c.vpt == VPT) return f.template operator()<E, G, VPT>();
#define PRIMUS_NORM_CASES(E)                                                                           \
  PRIMUS_NORM_CASE(E, 4, 1) PRIMUS_NORM_CASE(E, 8, 1) PRIMUS_NORM_CASE(E, 16, 1)                       \
  PRIMUS_NORM_CASE(E, 32, 1) PRIMUS_NORM_CASE(E, 64, 1) PRIMUS_NORM_CASE(E, 128, 1)                    \
  PRIMUS_NORM_CASE(E, 256, 1) PRIMUS_NORM_CASE(E, 512, 1) PRIMUS_NORM_CASE(E, 1024, 1)                 \
  PRIMUS_NORM_CASE(E, 1024, 2) PRIMUS_NORM_CASE(E, 1024, 8)
  PRIMUS_NORM_CASES(8)
  PRIMUS_NORM_CASES(1)
  // clang-format on
#undef PRIMUS_NORM_CASES
#undef PRIMUS_NORM_CASE
  PRIMUS_FAIL("rmsnorm: no kernel for E={} G={} VPT={}", c.e, c.g, c.vpt);
}

bool vec_ok(const RowMap& m, std::initializer_list<const void*> ptrs) {
  if (m.d % 8 != 0 || m.ld % 8 != 0) return false;
  for (const void* p : ptrs)
    if (p && !detail::aligned16(p)) return false;
  return true;
}

void launch_forward(const char* op, const Tensor& x, const Tensor& w, Tensor& y, Tensor& rstd,
                    const RowMap& m, float eps, const Stream& s) {
  if (m.rows == 0) return;
  const Config c = pick_config(m.d, vec_ok(m, {x.data_ptr(), w.data_ptr(), y.data_ptr()}));
  dispatch(c, [&]<int E, int G, int VPT>() {
    constexpr int kGroups = block_size(G) / G;
    const int64_t grid = ceil_div<int64_t>(m.rows, kGroups);
    PRIMUS_CHECK(grid < (int64_t{1} << 31), "{}: too many rows ({})", op, m.rows);
    rmsnorm_fwd_kernel<E, G, VPT><<<static_cast<unsigned>(grid), block_size(G), 0, cuda_stream(s)>>>(
        static_cast<const bf16*>(x.data_ptr()), static_cast<const bf16*>(w.data_ptr()),
        static_cast<bf16*>(y.data_ptr()), rstd.data<float>(), m, eps);
    PRIMUS_CUDA_CHECK_LAUNCH();
  });
}

void launch_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     Tensor& dx, Tensor& dw, const RowMap& m, bool accumulate_dx, const Stream& s) {
  if (m.rows == 0) return;
  const Config c = pick_config(m.d, vec_ok(m, {dy.data_ptr(), x.data_ptr(), w.data_ptr(), dx.data_ptr()}));
  dispatch(c, [&]<int E, int G, int VPT>() {
    constexpr int kBlock = block_size(G);
    constexpr int kGroups = kBlock / G;
    auto kernel = rmsnorm_bwd_kernel<E, G, VPT>;
    // One wave of resident blocks: enough bytes in flight, and as few dw partial rows as that allows.
    int per_sm = 0;
    PRIMUS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBlock, 0));
    const int64_t want = ceil_div<int64_t>(m.rows, kGroups);
    const int grid =
        static_cast<int>(std::min<int64_t>(want, int64_t{detail::sm_count()} * std::max(per_sm, 1)));
    Tensor partial = Tensor::empty({grid, m.d}, DType::kF32, s);
    kernel<<<grid, kBlock, 0, cuda_stream(s)>>>(
        static_cast<const bf16*>(dy.data_ptr()), static_cast<const bf16*>(x.data_ptr()),
        static_cast<const bf16*>(w.data_ptr()), rstd.data<float>(), static_cast<bf16*>(dx.data_ptr()),
        partial.data<float>(), m, accumulate_dx);
    PRIMUS_CUDA_CHECK_LAUNCH();
    dw_finalize_kernel<<<ceil_div(m.d, 128), 128, 0, cuda_stream(s)>>>(partial.data<float>(), grid, m.d,
                                                                       dw.data<float>());
    PRIMUS_CUDA_CHECK_LAUNCH();
  });
}

int64_t last_dim(const Tensor& t) {
  return t.ndim() == 0 ? 1 : t.size(-1);
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd, const Stream& s) {
  constexpr const char* op = "rmsnorm_forward";
  detail::check_cuda_tensor(op, "x", x, DType::kBF16);
  detail::check_cuda_tensor(op, "w", w, DType::kBF16);
  detail::check_cuda_tensor(op, "y", y, DType::kBF16);
  detail::check_cuda_tensor(op, "rstd", rstd, DType::kF32);
  const int64_t d = last_dim(x);
  PRIMUS_CHECK(d > 0 && w.numel() == d, "{}: w {} does not match x {}", op, w.describe(), x.describe());
  PRIMUS_CHECK(y.shape() == x.shape(), "{}: y {} must have x's shape {}", op, y.describe(), x.describe());
  PRIMUS_CHECK(y.data_ptr() == x.data_ptr() || !detail::overlaps(x, y),
               "{}: y must be x itself or not overlap it", op);
  PRIMUS_CHECK(rstd.numel() == x.numel() / d, "{}: rstd {} must have {} rows", op, rstd.describe(),
               x.numel() / d);
  const RowMap m{x.numel() / d, 1, d, 0, static_cast<int>(d)};
  launch_forward(op, x, w, y, rstd, m, eps, s);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw, bool accumulate_dx, const Stream& s) {
  constexpr const char* op = "rmsnorm_backward";
  detail::check_cuda_tensor(op, "dy", dy, DType::kBF16);
  detail::check_cuda_tensor(op, "x", x, DType::kBF16);
  detail::check_cuda_tensor(op, "w", w, DType::kBF16);
  detail::check_cuda_tensor(op, "rstd", rstd, DType::kF32);
  detail::check_cuda_tensor(op, "dx", dx, DType::kBF16);
  detail::check_cuda_tensor(op, "dw", dw, DType::kF32);
  const int64_t d = last_dim(x);
  PRIMUS_CHECK(d > 0 && w.numel() == d && dw.numel() == d, "{}: w {} / dw {} do not match x {}", op,
               w.describe(), dw.describe(), x.describe());
  PRIMUS_CHECK(dy.shape() == x.shape() && dx.shape() == x.shape(),
               "{}: dy {} and dx {} must have x's shape {}", op, dy.describe(), dx.describe(), x.describe());
  PRIMUS_CHECK(!detail::overlaps(dx, x) && (dx.data_ptr() == dy.data_ptr() || !detail::overlaps(dx, dy)),
               "{}: dx must not overlap x, and must be dy itself or not overlap it", op);
  PRIMUS_CHECK(rstd.numel() == x.numel() / d, "{}: rstd {} must have {} rows", op, rstd.describe(),
               x.numel() / d);
  const RowMap m{x.numel() / d, 1, d, 0, static_cast<int>(d)};
  launch_backward(op, dy, x, w, rstd, dx, dw, m, accumulate_dx, s);
}

namespace {
RowMap head_map(const char* op, const Tensor& x, int64_t head_begin, int64_t n_heads, int64_t head_dim) {
  PRIMUS_CHECK(x.ndim() >= 1 && head_dim > 0 && n_heads >= 0 && head_begin >= 0, "{}: bad head range", op);
  const int64_t ld = x.size(-1);
  PRIMUS_CHECK(ld % head_dim == 0, "{}: row length {} is not a multiple of head_dim {}", op, ld, head_dim);
  PRIMUS_CHECK(head_begin + n_heads <= ld / head_dim, "{}: heads [{}, {}) exceed the {} heads of x {}", op,
               head_begin, head_begin + n_heads, ld / head_dim, x.describe());
  return RowMap{(x.numel() / ld) * n_heads, static_cast<int>(std::max<int64_t>(n_heads, 1)), ld, head_begin,
                static_cast<int>(head_dim)};
}
}  // namespace

void head_rmsnorm_forward(const Tensor& x, int64_t head_begin, int64_t n_heads, int64_t head_dim,
                          const Tensor& w, float eps, Tensor& y, Tensor& rstd, const Stream& s) {
  constexpr const char* op = "head_rmsnorm_forward";
  detail::check_cuda_tensor(op, "x", x, DType::kBF16);
  detail::check_cuda_tensor(op, "w", w, DType::kBF16);
  detail::check_cuda_tensor(op, "y", y, DType::kBF16);
  detail::check_cuda_tensor(op, "rstd", rstd, DType::kF32);
  const RowMap m = head_map(op, x, head_begin, n_heads, head_dim);
  PRIMUS_CHECK(w.numel() == head_dim, "{}: w {} must have head_dim {} elements", op, w.describe(), head_dim);
  PRIMUS_CHECK(y.shape() == x.shape(), "{}: y {} must have x's shape {}", op, y.describe(), x.describe());
  PRIMUS_CHECK(y.data_ptr() == x.data_ptr() || !detail::overlaps(x, y),
               "{}: y must be x itself or not overlap it", op);
  PRIMUS_CHECK(rstd.numel() == m.rows, "{}: rstd {} must have {} elements", op, rstd.describe(), m.rows);
  launch_forward(op, x, w, y, rstd, m, eps, s);
}

void head_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           int64_t head_begin, int64_t n_heads, int64_t head_dim, Tensor& dx, Tensor& dw,
                           const Stream& s) {
  constexpr const char* op = "head_rmsnorm_backward";
  detail::check_cuda_tensor(op, "dy", dy, DType::kBF16);
  detail::check_cuda_tensor(op, "x", x, DType::kBF16);
  detail::check_cuda_tensor(op, "w", w, DType::kBF16);
  detail::check_cuda_tensor(op, "rstd", rstd, DType::kF32);
  detail::check_cuda_tensor(op, "dx", dx, DType::kBF16);
  detail::check_cuda_tensor(op, "dw", dw, DType::kF32);
  const RowMap m = head_map(op, x, head_begin, n_heads, head_dim);
  PRIMUS_CHECK(w.numel() == head_dim && dw.numel() == head_dim, "{}: w {} / dw {} must have {} elements", op,
               w.describe(), dw.describe(), head_dim);
  PRIMUS_CHECK(dy.shape() == x.shape() && dx.shape() == x.shape(),
               "{}: dy {} and dx {} must have x's shape {}", op, dy.describe(), dx.describe(), x.describe());
  PRIMUS_CHECK(!detail::overlaps(dx, x) && (dx.data_ptr() == dy.data_ptr() || !detail::overlaps(dx, dy)),
               "{}: dx must not overlap x, and must be dy itself or not overlap it", op);
  PRIMUS_CHECK(rstd.numel() == m.rows, "{}: rstd {} must have {} elements", op, rstd.describe(), m.rows);
  launch_backward(op, dy, x, w, rstd, dx, dw, m, false, s);
}

}  // namespace primus::ops::cuda
