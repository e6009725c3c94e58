// attention_merge (ops/attention.h) on CUDA: folds a partial attention result into a running one by their
// log-sum-exp. f32 acc, acc_lse and part_lse; part bf16 (as attention_forward writes it) or f32. A block
// holds whole (batch, token, head) rows: threadIdx.y picks the row, threadIdx.x walks its D elements N at a
// time (bf16 part: N = 8, one 16-byte part load and two 16-byte acc loads and stores per step; f32 part:
// N = 4), or one at a time when D is not a multiple of N or a pointer is not 16-byte aligned. Every thread of
// a row reads the row's two lse values (a broadcast within the warp) before the block barrier and the row's
// thread x = 0 writes the merged lse after it, so no thread can read an lse that is already updated. Memory
// bound: 10 bytes per element with a bf16 part (acc read and written, part read), 6 when acc's lse is -inf
// (acc is then not read).
#include "ops/cuda/kernel_utils.cuh"

#include "ops/cuda/attention_cuda.h"

namespace primus::ops::cuda {
namespace {

using detail::bf16;

constexpr int kMergeThreads = 256;  // per block: blockDim.x * blockDim.y <= this

template <typename P, int N>
__global__ void __launch_bounds__(kMergeThreads)
    merge_kernel(float* __restrict__ acc, float* __restrict__ acc_lse, const P* __restrict__ part,
                 const float* __restrict__ part_lse, int64_t rows, int64_t t, int64_t h, int64_t d) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;  // acc's [B, T, H] order
  const bool live = r < rows;
  int64_t li = 0;  // the row's lse index, [B, H, T] order
  float la = 0.f, lp = 0.f;
  if (live) {
    const int64_t hh = r % h, bt = r / h, tt = bt % t, bb = bt / t;
    li = (bb * h + hh) * t + tt;
    la = acc_lse[li];
    lp = part_lse[li];
  }
  __syncthreads();  // every read of acc_lse in this block comes before the write below
  if (!live) return;
  const float m = la > lp ? la : lp;  // a NaN lse propagates (both comparisons are false)
  const bool use_a = la != -INFINITY, use_p = lp != -INFINITY;
  float ca = 0.f, cp = 0.f;
  if (use_a || use_p) {
    // exp(l - lse') = exp(l - m) / s with s = exp(la - m) + exp(lp - m) in [1, 2].
    const float wa = __expf(la - m), wp = __expf(lp - m);
    const float inv = 1.f / (wa + wp);
    ca = wa * inv;
    cp = wp * inv;
  }
  if (threadIdx.x == 0) acc_lse[li] = use_a || use_p ? m + log1pf(__expf(-fabsf(la - lp))) : -INFINITY;
  // A -inf side is skipped, not multiplied by 0, so that its values (NaN in a fully masked row) cannot leak;
  // both -inf writes 0.
  float* o = acc + r * d;
  const P* p = part + r * d;
  for (int64_t c = threadIdx.x; c < d / N; c += blockDim.x) {
    detail::Vec<float, N> a;
    if (use_a) {
      a = detail::load_vec<float, N>(o + c * N);
#pragma unroll
      for (int e = 0; e < N; ++e) a.v[e] *= ca;
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e) a.v[e] = 0.f;
    }
    if (use_p) {
      const detail::Vec<P, N> pv = detail::load_vec<P, N>(p + c * N);
#pragma unroll
      for (int e = 0; e < N; ++e) a.v[e] = fmaf(detail::to_f32(pv.v[e]), cp, a.v[e]);
    }
    detail::store_vec<float, N>(o + c * N, a);
  }
}

template <typename P, int N>
void launch(float* acc, float* acc_lse, const P* part, const float* part_lse, int64_t rows, int64_t t,
            int64_t h, int64_t d, const Stream& s) {
  const int64_t per_row = d / N;  // steps of N elements per row
  const int bx = static_cast<int>(detail::min64(per_row > 0 ? per_row : 1, kMergeThreads));
  const int by = kMergeThreads / bx;
  const int64_t grid = ceil_div<int64_t>(rows, by);
  PRIMUS_CHECK(grid < (int64_t{1} << 31), "attention_merge: too many rows ({})", rows);
  merge_kernel<P, N>
      <<<static_cast<unsigned>(grid), dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by)), 0,
         cuda_stream(s)>>>(acc, acc_lse, part, part_lse, rows, t, h, d);
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_merge(Tensor& acc, Tensor& acc_lse, const Tensor& part, const Tensor& part_lse,
                     const Stream& s) {
  constexpr const char* op = "attention_merge";
  PRIMUS_CHECK(s.device.is_cuda(), "{}: stream is not a CUDA stream", op);
  detail::check_cuda_tensor(op, "acc", acc, DType::kF32);
  detail::check_cuda_tensor(op, "acc_lse", acc_lse, DType::kF32);
  PRIMUS_CHECK(part.defined() && (part.dtype() == DType::kBF16 || part.dtype() == DType::kF32),
               "{}: part must be bf16 or f32, got {}", op, part.defined() ? part.describe() : "undefined");
  detail::check_cuda_tensor(op, "part", part, part.dtype());
  detail::check_cuda_tensor(op, "part_lse", part_lse, DType::kF32);
  detail::check_same_cuda_device(op, acc, acc_lse);
  detail::check_same_cuda_device(op, acc, part);
  detail::check_same_cuda_device(op, acc, part_lse);
  PRIMUS_CHECK(acc.device() == s.device, "{}: acc is on {}, the stream on {}", op, acc.device().str(),
               s.device.str());
  PRIMUS_CHECK(acc.ndim() == 3, "{}: acc must be [B, T, H*D], got {}", op, acc.describe());
  PRIMUS_CHECK(acc_lse.ndim() == 3, "{}: acc_lse must be [B, H, T], got {}", op, acc_lse.describe());
  const int64_t b = acc.size(0), t = acc.size(1), w = acc.size(2), h = acc_lse.size(1);
  PRIMUS_CHECK(h >= 1 && w % h == 0, "{}: acc {} must be [B, T, H*D] with H = {} from acc_lse {}", op,
               acc.describe(), h, acc_lse.describe());
  const Shape lse_shape{b, h, t};
  PRIMUS_CHECK(acc_lse.shape() == lse_shape, "{}: acc_lse must be {}, got {}", op, shape_str(lse_shape),
               acc_lse.describe());
  PRIMUS_CHECK(part.shape() == acc.shape(), "{}: part must be {}, got {}", op, shape_str(acc.shape()),
               part.describe());
  PRIMUS_CHECK(part_lse.shape() == lse_shape, "{}: part_lse must be {}, got {}", op, shape_str(lse_shape),
               part_lse.describe());
  PRIMUS_CHECK(!detail::overlaps(acc, acc_lse) && !detail::overlaps(acc, part) &&
                   !detail::overlaps(acc, part_lse) && !detail::overlaps(acc_lse, part) &&
                   !detail::overlaps(acc_lse, part_lse),
               "{}: acc and acc_lse must not overlap each other, part or part_lse", op);
  const int64_t rows = b * t * h, d = w / h;
  if (rows == 0) return;
  float* a = acc.data<float>();
  float* al = acc_lse.data<float>();
  const float* pl = part_lse.data<float>();
  const bool aligned = detail::aligned16(a) && detail::aligned16(part.data_ptr());
  if (part.dtype() == DType::kBF16) {
    const auto* p = static_cast<const bf16*>(part.data_ptr());
    if (d % 8 == 0 && aligned)
      launch<bf16, 8>(a, al, p, pl, rows, t, h, d, s);
    else
      launch<bf16, 1>(a, al, p, pl, rows, t, h, d, s);
  } else {
    const float* p = part.data<float>();
    if (d % 4 == 0 && aligned)
      launch<float, 4>(a, al, p, pl, rows, t, h, d, s);
    else
      launch<float, 1>(a, al, p, pl, rows, t, h, d, s);
  }
}

}  // namespace primus::ops::cuda
