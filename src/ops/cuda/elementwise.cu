// Elementwise ops on bf16 / f32 / f64 device tensors: add, scale_, cast, fill_, count_nonfinite.
// Each thread handles 8 consecutive elements with 16-byte accesses when every pointer is 16-byte aligned
// (else one element); the thread that owns the last, partial group handles it element by element.
#include "ops/cuda/elementwise_utils.cuh"
#include "ops/cuda/kernel_utils.cuh"

#include "ops/cuda/elementwise_cuda.h"

namespace primus::ops::cuda {
namespace {

using namespace elementwise_detail;

template <typename T>
__device__ __forceinline__ bool is_finite(T x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return (__bfloat16_as_ushort(x) & 0x7f80u) != 0x7f80u;
  } else {
    return isfinite(x);
  }
}

template <typename T, int N>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  const int64_t i0 = thread_first(N);
  if (i0 >= n) return;
  if (i0 + N <= n) {
    const Vec<T, N> av = load_vec<T, N>(a + i0), bv = load_vec<T, N>(b + i0);
    Vec<T, N> o;
#pragma unroll
    for (int e = 0; e < N; ++e) o.v[e] = from_acc<T>(to_acc(av.v[e]) + to_acc(bv.v[e]));
    store_vec<T, N>(out + i0, o);
  } else {
    for (int64_t i = i0; i < n; ++i) out[i] = from_acc<T>(to_acc(a[i]) + to_acc(b[i]));
  }
}

template <typename T, int N>
__global__ void scale_kernel(T* x, int64_t n, Acc<T> factor) {
  const int64_t i0 = thread_first(N);
  if (i0 >= n) return;
  if (i0 + N <= n) {
    Vec<T, N> xv = load_vec<T, N>(x + i0);
#pragma unroll
    for (int e = 0; e < N; ++e) xv.v[e] = from_acc<T>(to_acc(xv.v[e]) * factor);
    store_vec<T, N>(x + i0, xv);
  } else {
    for (int64_t i = i0; i < n; ++i) x[i] = from_acc<T>(to_acc(x[i]) * factor);
  }
}

template <typename T, int N>
__global__ void fill_kernel(T* x, int64_t n, T value) {
  const int64_t i0 = thread_first(N);
  if (i0 >= n) return;
  if (i0 + N <= n) {
    Vec<T, N> xv;
#pragma unroll
    for (int e = 0; e < N; ++e) xv.v[e] = value;
    store_vec<T, N>(x + i0, xv);
  } else {
    for (int64_t i = i0; i < n; ++i) x[i] = value;
  }
}

template <typename S, typename D, int N>
__global__ void cast_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  const int64_t i0 = thread_first(N);
  if (i0 >= n) return;
  if (i0 + N <= n) {
    const Vec<S, N> sv = load_vec<S, N>(src + i0);
    Vec<D, N> o;
#pragma unroll
    for (int e = 0; e < N; ++e) o.v[e] = from_acc<D>(to_acc(sv.v[e]));
    store_vec<D, N>(dst + i0, o);
  } else {
    for (int64_t i = i0; i < n; ++i) dst[i] = from_acc<D>(to_acc(src[i]));
  }
}

// Integer counts: the order of the per-block atomic adds does not change the result.
template <typename T, int N>
__global__ void nonfinite_kernel(const T* __restrict__ x, int64_t n, unsigned long long* count) {
  __shared__ float scratch[32];
  const int64_t i0 = thread_first(N);
  int local = 0;
  if (i0 + N <= n) {
    const Vec<T, N> xv = load_vec<T, N>(x + i0);
#pragma unroll
    for (int e = 0; e < N; ++e) local += !is_finite(xv.v[e]);
  } else {
    for (int64_t i = i0; i < n; ++i) local += !is_finite(x[i]);
  }
  // At most 8 * 1024 per block: exact in f32.
  const float total = detail::block_sum(static_cast<float>(local), scratch);
  if (threadIdx.x == 0 && total > 0.f) atomicAdd(count, static_cast<unsigned long long>(total));
}

}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out, const Stream& s) {
  constexpr const char* op = "add";
  check_float_cuda(op, "a", a);
  check_float_cuda(op, "b", b);
  check_float_cuda(op, "out", out);
  detail::check_same_cuda_device(op, a, b);
  detail::check_same_cuda_device(op, a, out);
  PRIMUS_CHECK(a.shape() == b.shape() && a.shape() == out.shape() && a.dtype() == b.dtype() &&
                   a.dtype() == out.dtype(),
               "{}: a {}, b {} and out {} must have one shape and dtype", op, a.describe(), b.describe(),
               out.describe());
  const int64_t n = a.numel();
  if (n == 0) return;
  const bool vec = all_aligned({a.data_ptr(), b.data_ptr(), out.data_ptr()});
  with_type(op, a, [&](auto tag) {
    using T = decltype(tag);
    const auto* ap = static_cast<const T*>(a.data_ptr());
    const auto* bp = static_cast<const T*>(b.data_ptr());
    auto* op_ = static_cast<T*>(out.data_ptr());
    if (vec) {
      add_kernel<T, 8><<<grid_for(op, n, 8), kBlock, 0, cuda_stream(s)>>>(ap, bp, op_, n);
    } else {
      add_kernel<T, 1><<<grid_for(op, n, 1), kBlock, 0, cuda_stream(s)>>>(ap, bp, op_, n);
    }
    PRIMUS_CUDA_CHECK_LAUNCH();
  });
}

void scale_(Tensor& x, float factor, const Stream& s) {
  constexpr const char* op = "scale_";
  check_float_cuda(op, "x", x);
  const int64_t n = x.numel();
  if (n == 0) return;
  const bool vec = all_aligned({x.data_ptr()});
  with_type(op, x, [&](auto tag) {
    using T = decltype(tag);
    auto* p = static_cast<T*>(x.data_ptr());
    const Acc<T> f = factor;
    if (vec) {
      scale_kernel<T, 8><<<grid_for(op, n, 8), kBlock, 0, cuda_stream(s)>>>(p, n, f);
    } else {
      scale_kernel<T, 1><<<grid_for(op, n, 1), kBlock, 0, cuda_stream(s)>>>(p, n, f);
    }
    PRIMUS_CUDA_CHECK_LAUNCH();
  });
}

void cast(const Tensor& src, Tensor& dst, const Stream& s) {
  constexpr const char* op = "cast";
  check_float_cuda(op, "src", src);
  check_float_cuda(op, "dst", dst);
  detail::check_same_cuda_device(op, src, dst);
  PRIMUS_CHECK(src.numel() == dst.numel(), "{}: src {} and dst {} must have the same number of elements", op,
               src.describe(), dst.describe());
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.dtype() == dst.dtype()) {
    if (src.data_ptr() != dst.data_ptr()) dst.copy_from(src.view(dst.shape()), s);
    return;
  }
  PRIMUS_CHECK(!detail::overlaps(src, dst), "{}: src and dst must not overlap", op);
  const bool vec = all_aligned({src.data_ptr(), dst.data_ptr()});
  with_type(op, src, [&](auto stag) {
    using S = decltype(stag);
    with_type(op, dst, [&](auto dtag) {
      using D = decltype(dtag);
      const auto* sp = static_cast<const S*>(src.data_ptr());
      auto* dp = static_cast<D*>(dst.data_ptr());
      if (vec) {
        cast_kernel<S, D, 8><<<grid_for(op, n, 8), kBlock, 0, cuda_stream(s)>>>(sp, dp, n);
      } else {
        cast_kernel<S, D, 1><<<grid_for(op, n, 1), kBlock, 0, cuda_stream(s)>>>(sp, dp, n);
      }
      PRIMUS_CUDA_CHECK_LAUNCH();
    });
  });
}

void fill_(Tensor& x, float value, const Stream& s) {
  constexpr const char* op = "fill_";
  check_float_cuda(op, "x", x);
  const int64_t n = x.numel();
  if (n == 0) return;
  const bool vec = all_aligned({x.data_ptr()});
  with_type(op, x, [&](auto tag) {
    using T = decltype(tag);
    auto* p = static_cast<T*>(x.data_ptr());
    T v;
    if constexpr (std::is_same_v<T, bf16>) {
      v = __float2bfloat16_rn(value);
    } else {
      v = static_cast<T>(value);
    }
    if (vec) {
      fill_kernel<T, 8><<<grid_for(op, n, 8), kBlock, 0, cuda_stream(s)>>>(p, n, v);
    } else {
      fill_kernel<T, 1><<<grid_for(op, n, 1), kBlock, 0, cuda_stream(s)>>>(p, n, v);
    }
    PRIMUS_CUDA_CHECK_LAUNCH();
  });
}

int64_t count_nonfinite(const Tensor& x, const Stream& s) {
  constexpr const char* op = "count_nonfinite";
  check_float_cuda(op, "x", x);
  const int64_t n = x.numel();
  if (n == 0) return 0;
  Tensor count = Tensor::zeros({1}, DType::kI64, s);
  auto* cp = reinterpret_cast<unsigned long long*>(count.data<int64_t>());
  const bool vec = all_aligned({x.data_ptr()});
  with_type(op, x, [&](auto tag) {
    using T = decltype(tag);
    const auto* p = static_cast<const T*>(x.data_ptr());
    if (vec) {
      nonfinite_kernel<T, 8><<<grid_for(op, n, 8), kBlock, 0, cuda_stream(s)>>>(p, n, cp);
    } else {
      nonfinite_kernel<T, 1><<<grid_for(op, n, 1), kBlock, 0, cuda_stream(s)>>>(p, n, cp);
    }
    PRIMUS_CUDA_CHECK_LAUNCH();
  });
  unsigned long long host = 0;
  PRIMUS_CUDA_CHECK(cudaMemcpyAsync(&host, cp, sizeof(host), cudaMemcpyDeviceToHost, cuda_stream(s)));
  PRIMUS_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(s)));
  return static_cast<int64_t>(host);
}

namespace {
// One thread per element of the wide [R, Ca + Cb] tensor; `into_wide` picks concat (true) or split.
template <typename T>
__global__ void columns_kernel(T* wide, T* a, T* b, int64_t rows, int64_t ca, int64_t cb, bool into_wide) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t w = ca + cb;
  if (i >= rows * w) return;
  const int64_t r = i / w, j = i % w;
  T* part = j < ca ? a + r * ca + j : b + r * cb + (j - ca);
  if (into_wide)
    wide[i] = *part;
  else
    *part = wide[i];
}

void columns(const char* op, const Tensor& wide, const Tensor& a, const Tensor& b, bool into_wide,
             const Stream& s) {
  for (const auto& [name, t] : {std::pair{"wide", &wide}, std::pair{"a", &a}, std::pair{"b", &b}}) {
    check_float_cuda(op, name, *t);
    detail::check_same_cuda_device(op, wide, *t);
  }
  PRIMUS_CHECK(a.ndim() == 2 && b.ndim() == 2 && wide.ndim() == 2 && b.size(0) == a.size(0) &&
                   wide.size(0) == a.size(0) && wide.size(1) == a.size(1) + b.size(1) &&
                   a.dtype() == wide.dtype() && b.dtype() == wide.dtype(),
               "{}: needs [R, Ca + Cb] = [a [R, Ca] | b [R, Cb]] of one dtype, got {} / {} / {}", op,
               wide.describe(), a.describe(), b.describe());
  PRIMUS_CHECK(!detail::overlaps(wide, a) && !detail::overlaps(wide, b),
               "{}: the wide tensor overlaps a or b", op);
  const int64_t n = wide.numel();
  if (n == 0) return;
  with_type(op, wide, [&](auto tag) {
    using T = decltype(tag);
    columns_kernel<T><<<grid_for(op, n, 1), kBlock, 0, cuda_stream(s)>>>(
        static_cast<T*>(wide.data_ptr()), static_cast<T*>(a.data_ptr()), static_cast<T*>(b.data_ptr()),
        a.size(0), a.size(1), b.size(1), into_wide);
    PRIMUS_CUDA_CHECK_LAUNCH();
  });
}
}  // namespace

void concat_columns(const Tensor& a, const Tensor& b, Tensor& out, const Stream& s) {
  columns("concat_columns", out, a, b, true, s);
}

void split_columns(const Tensor& x, Tensor& a, Tensor& b, const Stream& s) {
  columns("split_columns", x, a, b, false, s);
}

}  // namespace primus::ops::cuda
