// AdamW over flat f32 regions (master weights, gradients, moments), with the bf16 compute copy of the
// parameters written in the same pass; its variant on masters stored as (bf16, i16 remainder) pairs; the
// master split / join; and a deterministic sum of squares for the gradient norm.
//
// adamw_step: one pass, 4 elements per thread (16-byte f32 accesses, 8-byte bf16 stores). Bytes per
// parameter: read master, grad, m, v (16) + write master, m, v (12) + bf16 copy (2) = 30; with bf16 moments
// (the precision-aware optimizer) 22. adamw_step_split:
// read hi, rem, grad, m, v (16) + write hi, rem, m, v (12) = 28, and 2 bytes less memory. sum_squares: a
// fixed grid (a function of n only) of per-thread f64 accumulators and fixed-order block trees, then one
// block sums the per-block partials in block order: bitwise reproducible, no float atomics. f64 costs nothing
// here (the kernel is bound by reading x) and keeps 1e9-element sums accurate to f32 rounding.
#include "ops/cuda/adam_kernels.cuh"
#include "ops/cuda/adam_math.cuh"
#include "ops/cuda/kernel_utils.cuh"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/optimizer_cuda.h"

namespace primus::ops::cuda {
namespace {

using detail::bf16;
using detail::load_vec;
using detail::store_vec;
using detail::Vec;

using detail::adam_coeffs;
using detail::adam_update;
using detail::AdamCoeffs;

// master -> (hi, rem); without rem (null) only hi. N elements per thread as above.
template <int N, bool kRem>
__global__ void master_split_kernel(const float* __restrict__ master, uint16_t* __restrict__ hi,
                                    int16_t* __restrict__ rem, int64_t n) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (i0 >= n) return;
  if (i0 + N <= n) {
    const Vec<float, N> w = load_vec<float, N>(master + i0);
    Vec<uint16_t, N> h;
    Vec<int16_t, N> r;
#pragma unroll
    for (int e = 0; e < N; ++e) detail::split_master(w.v[e], h.v[e], r.v[e]);
    store_vec<uint16_t, N>(hi + i0, h);
    if constexpr (kRem) store_vec<int16_t, N>(rem + i0, r);
  } else {
    for (int64_t i = i0; i < n; ++i) {
      uint16_t h;
      int16_t r;
      detail::split_master(master[i], h, r);
      hi[i] = h;
      if constexpr (kRem) rem[i] = r;
    }
  }
}

template <int N>
__global__ void master_join_kernel(const uint16_t* __restrict__ hi, const int16_t* __restrict__ rem,
                                   float* __restrict__ master, int64_t n) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * N;
  if (i0 >= n) return;
  if (i0 + N <= n) {
    const Vec<uint16_t, N> h = load_vec<uint16_t, N>(hi + i0);
    const Vec<int16_t, N> r = load_vec<int16_t, N>(rem + i0);
    Vec<float, N> w;
#pragma unroll
    for (int e = 0; e < N; ++e) w.v[e] = detail::join_master(h.v[e], r.v[e]);
    store_vec<float, N>(master + i0, w);
  } else {
    for (int64_t i = i0; i < n; ++i) master[i] = detail::join_master(hi[i], rem[i]);
  }
}

// Grid of a one-pass elementwise kernel with `per_thread` elements per thread.
dim3 elementwise_grid(const char* op, int64_t n, int per_thread, int block) {
  const int64_t grid = ceil_div<int64_t>(ceil_div<int64_t>(n, per_thread), block);
  PRIMUS_CHECK(grid < (int64_t{1} << 31), "{}: too large ({} elements)", op, n);
  return dim3(static_cast<unsigned>(grid));
}

bool aligned8(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 7u) == 0;
}

constexpr int kSumBlock = 256;
constexpr int64_t kSumMaxBlocks = 1024;

__device__ __forceinline__ double block_sum_f64(double v, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double t = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : 0.0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

// Block b of `blocks`: the f64 sum of squares of its grid-stride share of x[0, len), N elements per thread.
// sum_squares and sum_squares_chunks both reduce through it, so a chunk summed alone or among others gives
// the same bits.
template <int N>
__device__ __forceinline__ double sum_squares_block(const float* __restrict__ x, int64_t len, int64_t blocks,
                                                    int64_t b, double* scratch) {
  double acc = 0.0;
  const int64_t stride = blocks * blockDim.x * N;
  for (int64_t i = (b * blockDim.x + threadIdx.x) * N; i < len; i += stride) {
    if (i + N <= len) {
      const Vec<float, N> xv = load_vec<float, N>(x + i);
#pragma unroll
      for (int e = 0; e < N; ++e) acc += static_cast<double>(xv.v[e]) * xv.v[e];
    } else {
      for (int64_t j = i; j < len; ++j) acc += static_cast<double>(x[j]) * x[j];
    }
  }
  return block_sum_f64(acc, scratch);
}

template <int N>
__global__ void __launch_bounds__(kSumBlock)
    sum_squares_partial_kernel(const float* __restrict__ x, int64_t n, double* __restrict__ partial) {
  __shared__ double scratch[32];
  const double acc = sum_squares_block<N>(x, n, gridDim.x, blockIdx.x, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// The blocks sum_squares launches for n elements with N per thread (its grid depends on n only).
template <int N>
__device__ __forceinline__ int64_t sum_squares_blocks(int64_t n) {
  const int64_t b = (n + int64_t{kSumBlock} * N - 1) / (int64_t{kSumBlock} * N);
  return b < 1 ? 1 : (b > kSumMaxBlocks ? kSumMaxBlocks : b);
}

// sum_squares_partial_kernel for every chunk of a tensor at once: blockIdx.y is the chunk, and a chunk uses
// the grid sum_squares would give it alone (sum_squares_blocks), so its partials are the same bits.
template <int N>
__global__ void __launch_bounds__(kSumBlock)
    sum_squares_chunks_partial_kernel(const float* __restrict__ x, int64_t n, int64_t chunk,
                                      double* __restrict__ partial) {
  __shared__ double scratch[32];
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t len = chunk < n - begin ? chunk : n - begin;
  const int64_t blocks = sum_squares_blocks<N>(len);
  if (blockIdx.x >= blocks) return;  // uniform per block: the reduction's barriers are not split
  const double acc = sum_squares_block<N>(x + begin, len, blocks, blockIdx.x, scratch);
  if (threadIdx.x == 0) partial[static_cast<int64_t>(blockIdx.y) * kSumMaxBlocks + blockIdx.x] = acc;
}

// One block per chunk: out[c] = the sum of chunk c's partials in block order (sum_squares_final_kernel's).
template <int N>
__global__ void __launch_bounds__(kSumMaxBlocks)
    sum_squares_chunks_final_kernel(const double* __restrict__ partial, int64_t n, int64_t chunk,
                                    float* out) {
  __shared__ double scratch[32];
  const int64_t rest = n - static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t len = chunk < rest ? chunk : rest;
  const int64_t blocks = sum_squares_blocks<N>(len);
  double t =
      threadIdx.x < blocks ? partial[static_cast<int64_t>(blockIdx.x) * kSumMaxBlocks + threadIdx.x] : 0.0;
  t = block_sum_f64(t, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<float>(t);
}

// One block of kSumMaxBlocks threads: out = (accumulate ? out : 0) + sum of partials in block order.
__global__ void __launch_bounds__(kSumMaxBlocks)
    sum_squares_final_kernel(const double* __restrict__ partial, int nparts, float* out, bool accumulate) {
  __shared__ double scratch[32];
  double t = threadIdx.x < nparts ? partial[threadIdx.x] : 0.0;
  t = block_sum_f64(t, scratch);
  if (threadIdx.x == 0) out[0] = static_cast<float>(accumulate ? static_cast<double>(out[0]) + t : t);
}

}  // namespace

void adamw_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                Tensor* param_copy, const Stream& s) {
  constexpr const char* op = "adamw_step";
  detail::check_cuda_tensor(op, "master", master, DType::kF32);
  detail::check_cuda_tensor(op, "grad", grad, DType::kF32);
  detail::check_cuda_tensor(op, "m", m, m.dtype());
  detail::check_cuda_tensor(op, "v", v, v.dtype());
  const int64_t n = master.numel();
  for (const Tensor* t : std::initializer_list<const Tensor*>{&grad, &m, &v}) {
    detail::check_same_cuda_device(op, master, *t);
    PRIMUS_CHECK(t->numel() == n, "{}: {} must have {} elements like master", op, t->describe(), n);
  }
  PRIMUS_CHECK(!detail::overlaps(master, grad) && !detail::overlaps(master, m) &&
                   !detail::overlaps(master, v) && !detail::overlaps(m, v) && !detail::overlaps(m, grad) &&
                   !detail::overlaps(v, grad),
               "{}: master, grad, m and v must not overlap", op);
  PRIMUS_CHECK(p.step >= 1, "{}: step is 1-based, got {}", op, p.step);
  PRIMUS_CHECK(p.beta1 >= 0.0f && p.beta1 < 1.0f && p.beta2 >= 0.0f && p.beta2 < 1.0f,
               "{}: betas must be in [0, 1), got {} and {}", op, p.beta1, p.beta2);
  const bool write_copy = detail::adamw_writes_copy(op, master, param_copy, {&grad, &m, &v});
  if (n == 0) return;
  const AdamCoeffs c = adam_coeffs(p);
  bool vec = detail::aligned16(master.data_ptr()) && detail::aligned16(grad.data_ptr()) &&
             detail::moments_aligned4(m, v);
  if (write_copy)
    vec = vec &&
          (reinterpret_cast<uintptr_t>(param_copy->data_ptr()) % (4 * dtype_size(param_copy->dtype())) == 0);
  constexpr int kBlock = 256;
  const int per_thread = vec ? 4 : 1;
  const int64_t grid = ceil_div<int64_t>(ceil_div<int64_t>(n, per_thread), kBlock);
  PRIMUS_CHECK(grid < (int64_t{1} << 31), "{}: too large ({} elements)", op, n);
  const dim3 g(static_cast<unsigned>(grid));
  cudaStream_t cs = cuda_stream(s);
  float* w = master.data<float>();
  const detail::DenseGrad gp{grad.data<float>()};
  detail::with_moments(op, m, v, [&]<typename MM, typename MV>(MM* mp, MV* vp) {
    auto run = [&]<int N>() {
      if (!write_copy) {
        detail::adamw_kernel<N, void><<<g, kBlock, 0, cs>>>(w, gp, mp, vp, nullptr, n, c);
      } else if (param_copy->dtype() == DType::kBF16) {
        detail::adamw_kernel<N, bf16>
            <<<g, kBlock, 0, cs>>>(w, gp, mp, vp, static_cast<bf16*>(param_copy->data_ptr()), n, c);
      } else {
        detail::adamw_kernel<N, float><<<g, kBlock, 0, cs>>>(w, gp, mp, vp, param_copy->data<float>(), n, c);
      }
      PRIMUS_CUDA_CHECK_LAUNCH();
    };
    if (vec) {
      run.template operator()<4>();
    } else {
      run.template operator()<1>();
    }
  });
}

void adamw_step_split(Tensor& hi, Tensor& rem, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                      const Stream& s) {
  constexpr const char* op = "adamw_step_split";
  detail::check_cuda_tensor(op, "hi", hi, DType::kBF16);
  detail::check_cuda_tensor(op, "rem", rem, DType::kI16);
  detail::check_cuda_tensor(op, "grad", grad, DType::kF32);
  detail::check_cuda_tensor(op, "m", m, m.dtype());
  detail::check_cuda_tensor(op, "v", v, v.dtype());
  const int64_t n = hi.numel();
  for (const Tensor* t : std::initializer_list<const Tensor*>{&rem, &grad, &m, &v}) {
    detail::check_same_cuda_device(op, hi, *t);
    PRIMUS_CHECK(t->numel() == n, "{}: {} must have {} elements like hi", op, t->describe(), n);
  }
  const Tensor* all[5] = {&hi, &rem, &grad, &m, &v};
  for (int a = 0; a < 5; ++a)
    for (int b = a + 1; b < 5; ++b)
      PRIMUS_CHECK(!detail::overlaps(*all[a], *all[b]),
                   "{}: hi, rem, grad, m and v must not overlap ({} and {})", op, all[a]->describe(),
                   all[b]->describe());
  PRIMUS_CHECK(p.step >= 1, "{}: step is 1-based, got {}", op, p.step);
  PRIMUS_CHECK(p.beta1 >= 0.0f && p.beta1 < 1.0f && p.beta2 >= 0.0f && p.beta2 < 1.0f,
               "{}: betas must be in [0, 1), got {} and {}", op, p.beta1, p.beta2);
  if (n == 0) return;
  const AdamCoeffs c = adam_coeffs(p);
  const bool vec = aligned8(hi.data_ptr()) && aligned8(rem.data_ptr()) &&
                   detail::aligned16(grad.data_ptr()) && detail::moments_aligned4(m, v);
  constexpr int kBlock = 256;
  const dim3 g = elementwise_grid(op, n, vec ? 4 : 1, kBlock);
  cudaStream_t cs = cuda_stream(s);
  auto* h = static_cast<uint16_t*>(hi.data_ptr());
  int16_t* r = rem.data<int16_t>();
  const detail::DenseGrad gp{grad.data<float>()};
  detail::with_moments(op, m, v, [&]<typename MM, typename MV>(MM* mp, MV* vp) {
    if (vec) {
      detail::adamw_split_kernel<4><<<g, kBlock, 0, cs>>>(h, r, gp, mp, vp, n, c);
    } else {
      detail::adamw_split_kernel<1><<<g, kBlock, 0, cs>>>(h, r, gp, mp, vp, n, c);
    }
    PRIMUS_CUDA_CHECK_LAUNCH();
  });
}

void master_split(const Tensor& master, Tensor& hi, Tensor* rem, const Stream& s) {
  constexpr const char* op = "master_split";
  detail::check_cuda_tensor(op, "master", master, DType::kF32);
  detail::check_cuda_tensor(op, "hi", hi, DType::kBF16);
  detail::check_same_cuda_device(op, master, hi);
  const int64_t n = master.numel();
  PRIMUS_CHECK(hi.numel() == n, "{}: hi must have {} elements like master, got {}", op, n, hi.describe());
  PRIMUS_CHECK(!detail::overlaps(hi, master), "{}: hi must not overlap master", op);
  const bool with_rem = rem != nullptr && rem->defined();
  if (with_rem) {
    detail::check_cuda_tensor(op, "rem", *rem, DType::kI16);
    detail::check_same_cuda_device(op, master, *rem);
    PRIMUS_CHECK(rem->numel() == n, "{}: rem must have {} elements like master, got {}", op, n,
                 rem->describe());
    PRIMUS_CHECK(!detail::overlaps(*rem, master) && !detail::overlaps(*rem, hi),
                 "{}: rem must not overlap master or hi", op);
  }
  if (n == 0) return;
  const bool vec = detail::aligned16(master.data_ptr()) && aligned8(hi.data_ptr()) &&
                   (!with_rem || aligned8(rem->data_ptr()));
  constexpr int kBlock = 256;
  const dim3 g = elementwise_grid(op, n, vec ? 4 : 1, kBlock);
  cudaStream_t cs = cuda_stream(s);
  const float* w = master.data<float>();
  auto* h = static_cast<uint16_t*>(hi.data_ptr());
  int16_t* r = with_rem ? rem->data<int16_t>() : nullptr;
  if (vec && with_rem) {
    master_split_kernel<4, true><<<g, kBlock, 0, cs>>>(w, h, r, n);
  } else if (vec) {
    master_split_kernel<4, false><<<g, kBlock, 0, cs>>>(w, h, r, n);
  } else if (with_rem) {
    master_split_kernel<1, true><<<g, kBlock, 0, cs>>>(w, h, r, n);
  } else {
    master_split_kernel<1, false><<<g, kBlock, 0, cs>>>(w, h, r, n);
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void master_join(const Tensor& hi, const Tensor& rem, Tensor& master, const Stream& s) {
  constexpr const char* op = "master_join";
  detail::check_cuda_tensor(op, "hi", hi, DType::kBF16);
  detail::check_cuda_tensor(op, "rem", rem, DType::kI16);
  detail::check_cuda_tensor(op, "master", master, DType::kF32);
  detail::check_same_cuda_device(op, master, hi);
  detail::check_same_cuda_device(op, master, rem);
  const int64_t n = master.numel();
  PRIMUS_CHECK(hi.numel() == n && rem.numel() == n,
               "{}: hi ({}) and rem ({}) must have {} elements like master", op, hi.describe(),
               rem.describe(), n);
  PRIMUS_CHECK(!detail::overlaps(master, hi) && !detail::overlaps(master, rem),
               "{}: master must not overlap hi or rem", op);
  if (n == 0) return;
  const bool vec =
      detail::aligned16(master.data_ptr()) && aligned8(hi.data_ptr()) && aligned8(rem.data_ptr());
  constexpr int kBlock = 256;
  const dim3 g = elementwise_grid(op, n, vec ? 4 : 1, kBlock);
  const auto* h = static_cast<const uint16_t*>(hi.data_ptr());
  if (vec) {
    master_join_kernel<4><<<g, kBlock, 0, cuda_stream(s)>>>(h, rem.data<int16_t>(), master.data<float>(), n);
  } else {
    master_join_kernel<1><<<g, kBlock, 0, cuda_stream(s)>>>(h, rem.data<int16_t>(), master.data<float>(), n);
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void sum_squares_chunks(const Tensor& x, int64_t chunk, Tensor& out, const Stream& s, Tensor* scratch) {
  constexpr const char* op = "sum_squares_chunks";
  detail::check_cuda_tensor(op, "x", x, DType::kF32);
  detail::check_cuda_tensor(op, "out", out, DType::kF32);
  detail::check_same_cuda_device(op, x, out);
  PRIMUS_CHECK(chunk > 0, "{}: chunk must be positive, got {}", op, chunk);
  const int64_t n = x.numel(), chunks = std::max<int64_t>(1, ceil_div<int64_t>(n, chunk));
  PRIMUS_CHECK(out.numel() == chunks, "{}: out must be f32[{}] (one per chunk of {}), got {}", op, chunks,
               chunk, out.describe());
  PRIMUS_CHECK(!detail::overlaps(out, x), "{}: out must not overlap x", op);
  PRIMUS_CHECK(chunks <= 65535, "{}: {} chunks (at most 65535 per call)", op, chunks);
  // Every chunk starts a multiple of `chunk` elements after x: vector loads need that to keep 16 bytes.
  const bool vec = detail::aligned16(x.data_ptr()) && chunk % 4 == 0;
  const int64_t need = chunks * kSumMaxBlocks;
  Tensor partial;
  if (scratch) {
    detail::check_cuda_tensor(op, "scratch", *scratch, DType::kF64);
    detail::check_same_cuda_device(op, x, *scratch);
    PRIMUS_CHECK(scratch->numel() >= need, "{}: scratch holds {} partials, {} needed", op, scratch->numel(),
                 need);
    partial = *scratch;
  } else {
    partial = Tensor::empty({need}, DType::kF64, s);
  }
  cudaStream_t cs = cuda_stream(s);
  const int64_t first = std::min(chunk, std::max<int64_t>(n, 1));
  const int per_thread = vec ? 4 : 1;
  const int64_t width =
      std::clamp<int64_t>(ceil_div<int64_t>(first, int64_t{kSumBlock} * per_thread), 1, kSumMaxBlocks);
  const dim3 grid(static_cast<unsigned>(width), static_cast<unsigned>(chunks));
  if (vec) {
    sum_squares_chunks_partial_kernel<4>
        <<<grid, kSumBlock, 0, cs>>>(x.data<float>(), n, chunk, partial.data<double>());
    PRIMUS_CUDA_CHECK_LAUNCH();
    sum_squares_chunks_final_kernel<4><<<static_cast<unsigned>(chunks), kSumMaxBlocks, 0, cs>>>(
        partial.data<double>(), n, chunk, out.data<float>());
  } else {
    sum_squares_chunks_partial_kernel<1>
        <<<grid, kSumBlock, 0, cs>>>(x.data<float>(), n, chunk, partial.data<double>());
    PRIMUS_CUDA_CHECK_LAUNCH();
    sum_squares_chunks_final_kernel<1><<<static_cast<unsigned>(chunks), kSumMaxBlocks, 0, cs>>>(
        partial.data<double>(), n, chunk, out.data<float>());
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void sum_squares(const Tensor& x, Tensor& out, bool accumulate, const Stream& s, Tensor* scratch) {
  constexpr const char* op = "sum_squares";
  detail::check_cuda_tensor(op, "x", x, DType::kF32);
  detail::check_cuda_tensor(op, "out", out, DType::kF32);
  detail::check_same_cuda_device(op, x, out);
  PRIMUS_CHECK(out.numel() == 1, "{}: out must be f32[1], got {}", op, out.describe());
  PRIMUS_CHECK(!detail::overlaps(out, x), "{}: out must not overlap x", op);
  const int64_t n = x.numel();
  cudaStream_t cs = cuda_stream(s);
  const bool vec = detail::aligned16(x.data_ptr());
  const int per_thread = vec ? 4 : 1;
  // The grid depends on n only, so the reduction tree (and the result) is the same on every run.
  const int nblocks = static_cast<int>(
      std::clamp<int64_t>(ceil_div<int64_t>(n, int64_t{kSumBlock} * per_thread), 1, kSumMaxBlocks));
  static_assert(kSumMaxBlocks <= ops::kSumSquaresScratch, "scratch must hold every block's partial");
  Tensor partial;
  if (scratch) {
    detail::check_cuda_tensor(op, "scratch", *scratch, DType::kF64);
    detail::check_same_cuda_device(op, x, *scratch);
    PRIMUS_CHECK(scratch->numel() >= nblocks, "{}: scratch holds {} partials, {} needed", op,
                 scratch->numel(), nblocks);
    partial = *scratch;
  } else {
    partial = Tensor::empty({nblocks}, DType::kF64, s);
  }
  if (vec) {
    sum_squares_partial_kernel<4><<<nblocks, kSumBlock, 0, cs>>>(x.data<float>(), n, partial.data<double>());
  } else {
    sum_squares_partial_kernel<1><<<nblocks, kSumBlock, 0, cs>>>(x.data<float>(), n, partial.data<double>());
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
  sum_squares_final_kernel<<<1, kSumMaxBlocks, 0, cs>>>(partial.data<double>(), nblocks, out.data<float>(),
                                                        accumulate);
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace primus::ops::cuda
