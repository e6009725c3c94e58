// Softmax cross-entropy over the vocabulary: bf16 logits, f32 math and losses, bf16 gradients (in place
// allowed).
//
// Main path (V a multiple of 8, V <= 262144): a thread-block cluster of C <= 8 CTAs owns one row. Each CTA
// pulls its slice of the row (<= 64 KB, 32 KB at V = 128256) into shared memory with bulk copies (TMA,
// completed on an mbarrier: no registers held while the bytes are in flight, so 6 CTAs per SM keep ~190 KB
// per SM loading while others compute), the CTAs exchange their (max, sum of exp) through distributed shared
// memory, and each writes the gradient of its slice. Logits are read once and dlogits written once: 4 bytes
// per logit, the floor. The cluster reduction combines the C partials in rank order in every CTA, so all CTAs
// see the same bitwise lse. Fallback (odd V, unaligned, or longer rows): one block per row, an online max/sum
// pass and a gradient pass that reads the row again (6 bytes per logit; the second read often hits L2).
//
// Vocabulary-parallel variant (a rank's V_local columns of each row): two plain block-per-row kernels around
// the caller's all-gather. Stats reads the row once (an online max/sum, 2 bytes per logit); finish merges the
// P ranks' statistics in rank order (thread 0, the same float operations in the same order on every rank, so
// the lse and the loss are bitwise the same everywhere) and writes the gradient (read + write, 4 bytes per
// logit). 16-byte accesses when V_local % 8 == 0 and the rows are aligned, else one element at a time.
#include "ops/cuda/kernel_utils.cuh"

#include <cooperative_groups.h>

#include <algorithm>

#include "ops/cuda/loss_cuda.h"

namespace primus::ops::cuda {
namespace {

namespace cg = cooperative_groups;
using detail::bf16;

constexpr int kClusterBlock = 256;       // threads per CTA of the cluster kernel
constexpr int64_t kSliceTarget = 16384;  // logits per CTA the cluster size aims at
constexpr int64_t kSliceMax = 32768;     // logits per CTA at most (64 KB of shared memory)
constexpr int kFallbackBlock = 512;
constexpr float kNegInf = -INFINITY;

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = detail::warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? scratch[lane] : kNegInf;
  t = detail::warp_max(t);
  __syncthreads();
  return t;
}

// Online softmax state (max m, sum s of exp(x - m)) merge.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  if (mm == kNegInf) return;  // both empty
  s = s * __expf(m - mm) + s2 * __expf(m2 - mm);
  m = mm;
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// One thread: announce `bytes` of transfer on the barrier, then start the bulk copies global -> shared.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
  constexpr uint32_t kChunk = 16384;
  for (uint32_t off = 0; off < bytes; off += kChunk) {
    const uint32_t n = bytes - off < kChunk ? bytes - off : kChunk;
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_u32(static_cast<char*>(dst) + off)),
        "l"(static_cast<const char*>(src) + off), "r"(n), "r"(smem_u32(bar))
        : "memory");
  }
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t phase) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(phase)
        : "memory");
  } while (!done);
}

constexpr float kLog2e = 1.4426950408889634f;

// Dynamic shared memory: this CTA's slice of the row, `per` packs of 8 logits.
__global__ void __launch_bounds__(kClusterBlock, 6)
    ce_cluster_kernel(const bf16* logits, const int32_t* __restrict__ targets, float* __restrict__ losses,
                      bf16* dlogits, int64_t v, int64_t per, float grad_scale) {
  extern __shared__ __align__(128) unsigned char slice_raw[];
  __shared__ uint64_t bar;
  __shared__ float scratch[32];
  __shared__ float2 part;  // this CTA's (max, sum), read by the whole cluster
  const bf16* slice = reinterpret_cast<const bf16*>(slice_raw);
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int c = static_cast<int>(cluster.num_blocks());
  const int64_t row = blockIdx.x / c;
  const int64_t nvec = v / 8;
  const int64_t lo = rank * per;
  const int n_local = static_cast<int>(detail::min64(nvec, lo + per) - detail::min64(nvec, lo));
  const bf16* x = logits + row * v;
  const int t = targets[row];
  const bool ignored = t < 0;
  const bool load = !ignored && n_local > 0;

  if (threadIdx.x == 0) mbar_init(&bar);
  __syncthreads();
  if (threadIdx.x == 0 && load) bulk_load(slice_raw, x + lo * 8, static_cast<uint32_t>(n_local) * 16, &bar);
  // The target logit is read before any CTA of the cluster can overwrite the row (in-place dlogits).
  float target_logit = 0.f;
  if (rank == 0 && threadIdx.x == 0 && !ignored && t < v) target_logit = __bfloat162float(x[t]);

  float m = kNegInf;
  if (load) {
    mbar_wait(&bar, 0);
    __nv_bfloat162 m2 = __bfloat162bfloat162(__float2bfloat16_rn(kNegInf));
    for (int vi = threadIdx.x; vi < n_local; vi += kClusterBlock) {
      const detail::Pack<bf16> p = detail::load_pack(slice + vi * 8);
      const auto* h = reinterpret_cast<const __nv_bfloat162*>(p.v);
#pragma unroll
      for (int e = 0; e < 4; ++e) m2 = __hmax2(m2, h[e]);
    }
    m = fmaxf(__low2float(m2), __high2float(m2));
  }
  m = block_max(m, scratch);
  float s = 0.f;
  if (load && m != kNegInf) {
    const float mb = m * kLog2e;
    for (int vi = threadIdx.x; vi < n_local; vi += kClusterBlock) {
      const detail::Pack<bf16> p = detail::load_pack(slice + vi * 8);
#pragma unroll
      for (int e = 0; e < 8; ++e) s += exp2f(fmaf(__bfloat162float(p.v[e]), kLog2e, -mb));
    }
  }
  s = detail::block_sum(s, scratch);
  if (threadIdx.x == 0) part = make_float2(m, s);
  cluster.sync();
  float gm = kNegInf, gs = 0.f;
  for (int r = 0; r < c; ++r) {
    const float2 p = *cluster.map_shared_rank(&part, r);
    merge(gm, gs, p.x, p.y);
  }
  cluster.sync();  // no CTA may exit while another still reads its `part`
  const float lse = gm + __logf(gs);
  if (rank == 0 && threadIdx.x == 0) losses[row] = ignored ? 0.f : (t < v ? lse - target_logit : NAN);
  if (dlogits == nullptr) return;
  bf16* dx = dlogits + row * v + lo * 8;
  const float lb = lse * kLog2e;
  const int64_t t_local = ignored ? -1 : t - lo * 8;
  for (int vi = threadIdx.x; vi < n_local; vi += kClusterBlock) {
    detail::Pack<bf16> out;
    if (ignored) {
#pragma unroll
      for (int e = 0; e < 8; ++e) out.v[e] = __float2bfloat16_rn(0.f);
    } else {
      const detail::Pack<bf16> p = detail::load_pack(slice + vi * 8);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float g = exp2f(fmaf(__bfloat162float(p.v[e]), kLog2e, -lb));
        if (vi * 8 + e == t_local) g -= 1.f;
        out.v[e] = __float2bfloat16_rn(g * grad_scale);
      }
    }
    detail::store_pack_stream(dx + vi * 8, out);
  }
}

// Block per row; E elements per access (8 when the row allows 16-byte access, else 1).
template <int E>
__global__ void __launch_bounds__(kFallbackBlock)
    ce_fallback_kernel(const bf16* logits, const int32_t* __restrict__ targets, float* __restrict__ losses,
                       bf16* dlogits, int64_t v, float grad_scale) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t nvec = v / E;
  const bf16* x = logits + row * v;
  const int t = targets[row];
  const bool ignored = t < 0;
  float m = kNegInf, s = 0.f;
  if (!ignored) {
    for (int64_t vi = threadIdx.x; vi < nvec; vi += kFallbackBlock) {
      const detail::Vec<bf16, E> xv = detail::load_vec<bf16, E>(x + vi * E);
      float lm = kNegInf;
#pragma unroll
      for (int e = 0; e < E; ++e) lm = fmaxf(lm, __bfloat162float(xv.v[e]));
      float ls = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) ls += __expf(__bfloat162float(xv.v[e]) - lm);
      merge(m, s, lm, ls);
    }
  }
  const float target_logit = !ignored && t < v ? __bfloat162float(x[t]) : 0.f;
  const float bm = block_max(m, scratch);
  s = m == kNegInf ? 0.f : s * __expf(m - bm);
  s = detail::block_sum(s, scratch);
  const float lse = bm + __logf(s);
  if (threadIdx.x == 0) losses[row] = ignored ? 0.f : (t < v ? lse - target_logit : NAN);
  if (dlogits == nullptr) return;
  bf16* dx = dlogits + row * v;
  for (int64_t vi = threadIdx.x; vi < nvec; vi += kFallbackBlock) {
    detail::Vec<bf16, E> out;
    detail::Vec<bf16, E> xv;
    if (!ignored) xv = detail::load_vec<bf16, E>(x + vi * E);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      float g = 0.f;
      if (!ignored) {
        g = __expf(__bfloat162float(xv.v[e]) - lse);
        if (vi * E + e == t) g -= 1.f;
        g *= grad_scale;
      }
      out.v[e] = __float2bfloat16_rn(g);
    }
    detail::store_vec<bf16, E>(dx + vi * E, out);
  }
}

void launch_cluster(int64_t rows, int c, int64_t per, const bf16* x, const int32_t* t, float* l, bf16* dx,
                    int64_t v, float gs, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(per) * 16;
  static const bool attr_set = [] {
    PRIMUS_CUDA_CHECK(cudaFuncSetAttribute(ce_cluster_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(kSliceMax * 2)));
    return true;
  }();
  (void)attr_set;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(rows * c));
  cfg.blockDim = dim3(kClusterBlock);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = c;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  PRIMUS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, ce_cluster_kernel, x, t, l, dx, v, per, gs));
}

constexpr int kVpBlock = 256;  // threads per row of the vocabulary-parallel kernels

// Per row over this rank's columns: (max, sum of exp(x - max), the target's logit or 0); (0, 0, 0) for an
// ignored row. A target >= vocab_total gets a NaN target logit, so that the finished loss is NaN.
template <int E>
__global__ void __launch_bounds__(kVpBlock)
    vp_stats_kernel(const bf16* __restrict__ logits, const int32_t* __restrict__ targets,
                    float* __restrict__ stats, int64_t v, int64_t vocab_begin, int64_t vocab_total) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int32_t t = targets[row];
  float* out = stats + row * 3;
  if (t < 0) {  // the whole block leaves together
    if (threadIdx.x == 0) out[0] = out[1] = out[2] = 0.f;
    return;
  }
  const bf16* x = logits + row * v;
  const int64_t nvec = v / E;
  // Online max and sum: the sum is rescaled only when an access brings a larger max.
  float m = kNegInf, s = 0.f;
  for (int64_t vi = threadIdx.x; vi < nvec; vi += kVpBlock) {
    const detail::Vec<bf16, E> xv = detail::load_vec<bf16, E>(x + vi * E);
    float f[E];
    float lm = kNegInf;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      f[e] = __bfloat162float(xv.v[e]);
      lm = fmaxf(lm, f[e]);
    }
    if (lm > m) {
      s *= exp2f((m - lm) * kLog2e);  // m = -inf at first: s stays 0
      m = lm;
    }
    const float mb = m * kLog2e;
#pragma unroll
    for (int e = 0; e < E; ++e) s += exp2f(fmaf(f[e], kLog2e, -mb));
  }
  const float bm = block_max(m, scratch);
  s = m == kNegInf ? 0.f : s * exp2f((m - bm) * kLog2e);
  s = detail::block_sum(s, scratch);
  if (threadIdx.x == 0) {
    const int64_t c = static_cast<int64_t>(t) - vocab_begin;
    out[0] = bm;
    out[1] = s;
    out[2] = t >= vocab_total ? NAN : (c >= 0 && c < v ? __bfloat162float(x[c]) : 0.f);
  }
}

// One row's statistics from all ranks, merged in rank order: (lse, target logit).
__device__ __forceinline__ float2 vp_merge_ranks(const float* __restrict__ all_stats, int64_t row,
                                                 int64_t rows, int ranks) {
  float mx = kNegInf;
  for (int p = 0; p < ranks; ++p) mx = fmaxf(mx, all_stats[(p * rows + row) * 3]);
  float sum = 0.f, target_logit = 0.f;
  for (int p = 0; p < ranks; ++p) {
    const float* sp = all_stats + (p * rows + row) * 3;
    sum += sp[1] * __expf(sp[0] - mx);
    target_logit += sp[2];
  }
  return make_float2(mx + __logf(sum), target_logit);
}

// Losses only: one thread per row.
__global__ void vp_loss_kernel(const int32_t* __restrict__ targets, const float* __restrict__ all_stats,
                               float* __restrict__ losses, int64_t rows, int ranks) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  if (targets[row] < 0) {
    losses[row] = 0.f;
    return;
  }
  const float2 r = vp_merge_ranks(all_stats, row, rows, ranks);
  losses[row] = r.x - r.y;
}

// Losses and this rank's gradient columns: one block per row (dlogits may be logits itself: every element is
// read and then written by the same thread).
template <int E>
__global__ void __launch_bounds__(kVpBlock)
    vp_finish_kernel(const bf16* logits, const int32_t* __restrict__ targets,
                     const float* __restrict__ all_stats, float* __restrict__ losses, bf16* dlogits,
                     int64_t rows, int64_t v, int64_t vocab_begin, int ranks, float grad_scale) {
  __shared__ float lse;
  const int64_t row = blockIdx.x;
  const int32_t t = targets[row];
  const bool ignored = t < 0;
  if (threadIdx.x == 0) {
    if (ignored) {
      losses[row] = 0.f;
    } else {
      const float2 r = vp_merge_ranks(all_stats, row, rows, ranks);
      lse = r.x;
      losses[row] = r.x - r.y;
    }
  }
  __syncthreads();
  const float lb = ignored ? 0.f : lse * kLog2e;
  const int64_t t_local = ignored ? -1 : static_cast<int64_t>(t) - vocab_begin;  // outside [0, v): elsewhere
  const bf16* x = logits + row * v;
  bf16* dx = dlogits + row * v;
  const int64_t nvec = v / E;
  for (int64_t vi = threadIdx.x; vi < nvec; vi += kVpBlock) {
    detail::Vec<bf16, E> out;
    if (ignored) {
#pragma unroll
      for (int e = 0; e < E; ++e) out.v[e] = __float2bfloat16_rn(0.f);
    } else {
      const detail::Vec<bf16, E> xv = detail::load_vec<bf16, E>(x + vi * E);
#pragma unroll
      for (int e = 0; e < E; ++e) {
        float g = exp2f(fmaf(__bfloat162float(xv.v[e]), kLog2e, -lb));
        if (vi * E + e == t_local) g -= 1.f;
        out.v[e] = __float2bfloat16_rn(g * grad_scale);
      }
    }
    detail::store_vec<bf16, E>(dx + vi * E, out);
  }
}

// The checked gradient buffer of a loss op (bf16, logits' shape and device, logits itself or apart), or null.
bf16* dlogits_ptr(const char* op, const Tensor& logits, Tensor* dlogits) {
  if (dlogits == nullptr) return nullptr;
  detail::check_cuda_tensor(op, "dlogits", *dlogits, DType::kBF16);
  detail::check_same_cuda_device(op, logits, *dlogits);
  PRIMUS_CHECK(dlogits->shape() == logits.shape(), "{}: dlogits {} must have logits' shape {}", op,
               dlogits->describe(), logits.describe());
  PRIMUS_CHECK(dlogits->data_ptr() == logits.data_ptr() || !detail::overlaps(*dlogits, logits),
               "{}: dlogits must be logits itself or not overlap it", op);
  return static_cast<bf16*>(dlogits->data_ptr());
}

}  // namespace

void softmax_cross_entropy(const Tensor& logits, const Tensor& targets, float grad_scale, Tensor& losses,
                           Tensor* dlogits, const Stream& s) {
  constexpr const char* op = "softmax_cross_entropy";
  detail::check_cuda_tensor(op, "logits", logits, DType::kBF16);
  detail::check_cuda_tensor(op, "targets", targets, DType::kI32);
  detail::check_cuda_tensor(op, "losses", losses, DType::kF32);
  detail::check_same_cuda_device(op, logits, targets);
  detail::check_same_cuda_device(op, logits, losses);
  PRIMUS_CHECK(logits.ndim() == 2 && logits.size(1) >= 1, "{}: logits must be [R, V] with V >= 1, got {}", op,
               logits.describe());
  const int64_t rows = logits.size(0), v = logits.size(1);
  PRIMUS_CHECK(targets.numel() == rows && losses.numel() == rows,
               "{}: targets {} and losses {} must have {} rows", op, targets.describe(), losses.describe(),
               rows);
  bf16* dx = dlogits_ptr(op, logits, dlogits);
  if (rows == 0) return;
  PRIMUS_CHECK(rows < (int64_t{1} << 28), "{}: too many rows ({})", op, rows);
  const auto* x = static_cast<const bf16*>(logits.data_ptr());
  const int32_t* t = targets.data<int32_t>();
  float* l = losses.data<float>();
  cudaStream_t cs = cuda_stream(s);

  const bool vec = v % 8 == 0 && detail::aligned16(x) && (dx == nullptr || detail::aligned16(dx));
  // C CTAs per row, each holding about kSliceTarget logits (32 KB of shared memory: 6 CTAs per SM); at most
  // 8 CTAs (the portable cluster size) of at most kSliceMax logits.
  if (vec && v <= 8 * kSliceMax) {
    const int c = static_cast<int>(std::clamp<int64_t>(ceil_div<int64_t>(v, kSliceTarget), 1, 8));
    const int64_t per = ceil_div<int64_t>(v / 8, c);
    launch_cluster(rows, c, per, x, t, l, dx, v, grad_scale, cs);
  } else if (vec) {
    ce_fallback_kernel<8><<<static_cast<unsigned>(rows), kFallbackBlock, 0, cs>>>(x, t, l, dx, v, grad_scale);
  } else {
    ce_fallback_kernel<1><<<static_cast<unsigned>(rows), kFallbackBlock, 0, cs>>>(x, t, l, dx, v, grad_scale);
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void vocab_parallel_ce_stats(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                             int64_t vocab_total, Tensor& stats, const Stream& s) {
  constexpr const char* op = "vocab_parallel_ce_stats";
  detail::check_cuda_tensor(op, "logits", logits, DType::kBF16);
  detail::check_cuda_tensor(op, "targets", targets, DType::kI32);
  detail::check_cuda_tensor(op, "stats", stats, DType::kF32);
  detail::check_same_cuda_device(op, logits, targets);
  detail::check_same_cuda_device(op, logits, stats);
  PRIMUS_CHECK(logits.ndim() == 2 && logits.size(1) >= 1,
               "{}: logits must be [R, V_local] with V_local >= 1, got {}", op, logits.describe());
  const int64_t rows = logits.size(0), v = logits.size(1);
  PRIMUS_CHECK(vocab_begin >= 0 && vocab_begin + v <= vocab_total,
               "{}: this rank's columns [{}, {}) must lie in the vocabulary [0, {})", op, vocab_begin,
               vocab_begin + v, vocab_total);
  PRIMUS_CHECK(targets.numel() == rows, "{}: targets {} must have {} rows", op, targets.describe(), rows);
  PRIMUS_CHECK(stats.ndim() == 2 && stats.size(0) == rows && stats.size(1) == 3,
               "{}: stats must be [{}, 3], got {}", op, rows, stats.describe());
  PRIMUS_CHECK(!detail::overlaps(stats, logits), "{}: stats must not overlap logits", op);
  if (rows == 0) return;
  PRIMUS_CHECK(rows < (int64_t{1} << 31), "{}: too many rows ({})", op, rows);
  const auto* x = static_cast<const bf16*>(logits.data_ptr());
  const int32_t* t = targets.data<int32_t>();
  float* st = stats.data<float>();
  const auto grid = static_cast<unsigned>(rows);
  cudaStream_t cs = cuda_stream(s);
  if (v % 8 == 0 && detail::aligned16(x)) {
    vp_stats_kernel<8><<<grid, kVpBlock, 0, cs>>>(x, t, st, v, vocab_begin, vocab_total);
  } else {
    vp_stats_kernel<1><<<grid, kVpBlock, 0, cs>>>(x, t, st, v, vocab_begin, vocab_total);
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void vocab_parallel_ce_finish(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                              const Tensor& all_stats, float grad_scale, Tensor& losses, Tensor* dlogits,
                              const Stream& s) {
  constexpr const char* op = "vocab_parallel_ce_finish";
  detail::check_cuda_tensor(op, "logits", logits, DType::kBF16);
  detail::check_cuda_tensor(op, "targets", targets, DType::kI32);
  detail::check_cuda_tensor(op, "all_stats", all_stats, DType::kF32);
  detail::check_cuda_tensor(op, "losses", losses, DType::kF32);
  detail::check_same_cuda_device(op, logits, targets);
  detail::check_same_cuda_device(op, logits, all_stats);
  detail::check_same_cuda_device(op, logits, losses);
  PRIMUS_CHECK(logits.ndim() == 2 && logits.size(1) >= 1,
               "{}: logits must be [R, V_local] with V_local >= 1, got {}", op, logits.describe());
  const int64_t rows = logits.size(0), v = logits.size(1);
  PRIMUS_CHECK(vocab_begin >= 0, "{}: vocab_begin must be >= 0, got {}", op, vocab_begin);
  PRIMUS_CHECK(targets.numel() == rows && losses.numel() == rows,
               "{}: targets {} and losses {} must have {} rows", op, targets.describe(), losses.describe(),
               rows);
  PRIMUS_CHECK(
      all_stats.ndim() == 3 && all_stats.size(0) >= 1 && all_stats.size(1) == rows && all_stats.size(2) == 3,
      "{}: all_stats must be [P, {}, 3] with P >= 1, got {}", op, rows, all_stats.describe());
  const int64_t ranks = all_stats.size(0);
  PRIMUS_CHECK(ranks < (int64_t{1} << 20), "{}: too many ranks ({})", op, ranks);
  PRIMUS_CHECK(!detail::overlaps(losses, logits) && !detail::overlaps(losses, all_stats),
               "{}: losses must not overlap logits or all_stats", op);
  bf16* dx = dlogits_ptr(op, logits, dlogits);
  PRIMUS_CHECK(dlogits == nullptr || !detail::overlaps(*dlogits, all_stats),
               "{}: dlogits must not overlap all_stats", op);
  if (rows == 0) return;
  PRIMUS_CHECK(rows < (int64_t{1} << 31), "{}: too many rows ({})", op, rows);
  const auto* x = static_cast<const bf16*>(logits.data_ptr());
  const int32_t* t = targets.data<int32_t>();
  const float* st = all_stats.data<float>();
  float* l = losses.data<float>();
  const int p = static_cast<int>(ranks);
  cudaStream_t cs = cuda_stream(s);
  if (dx == nullptr) {
    vp_loss_kernel<<<static_cast<unsigned>(ceil_div<int64_t>(rows, 256)), 256, 0, cs>>>(t, st, l, rows, p);
  } else if (v % 8 == 0 && detail::aligned16(x) && detail::aligned16(dx)) {
    vp_finish_kernel<8><<<static_cast<unsigned>(rows), kVpBlock, 0, cs>>>(x, t, st, l, dx, rows, v,
                                                                          vocab_begin, p, grad_scale);
  } else {
    vp_finish_kernel<1><<<static_cast<unsigned>(rows), kVpBlock, 0, cs>>>(x, t, st, l, dx, rows, v,
                                                                          vocab_begin, p, grad_scale);
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace primus::ops::cuda
