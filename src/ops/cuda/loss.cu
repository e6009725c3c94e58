// Softmax cross-entropy over the vocabulary: bf16 logits, f32 math and losses, bf16 gradients (in place
// allowed).
//
// Main path (V a multiple of 8, V <= 262144): a thread-block cluster of C CTAs owns one row; each CTA loads
// its slice of the row into registers once (16-byte loads), the CTAs exchange their (max, sum of exp) through
// distributed shared memory, and each writes the gradient of its slice from registers. So logits are read
// once and dlogits written once: 4 bytes per logit, the floor. The cluster reduction combines the C partials
// in rank order in every CTA, so all CTAs see the same bitwise lse. Fallback (odd V, unaligned, or longer
// rows): one block per row, an online max/sum pass and a gradient pass that reads the row again (6 bytes per
// logit; the second read often hits L2).
#include "ops/cuda/kernel_utils.cuh"

#include <cooperative_groups.h>

#include "ops/cuda/loss_cuda.h"

namespace primus::ops::cuda {
namespace {

namespace cg = cooperative_groups;
using detail::bf16;

constexpr int kClusterBlock = 512;  // threads per CTA of the cluster kernel
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

template <int VPT>
__global__ void __launch_bounds__(kClusterBlock, 2)
    ce_cluster_kernel(const bf16* logits, const int32_t* __restrict__ targets, float* __restrict__ losses,
                      bf16* dlogits, int64_t v, float grad_scale) {
  __shared__ float scratch[32];
  __shared__ float2 part;  // this CTA's (max, sum), read by the whole cluster
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int c = static_cast<int>(cluster.num_blocks());
  const int64_t row = blockIdx.x / c;
  const int64_t nvec = v / 8;
  const int64_t per = (nvec + c - 1) / c;
  const int64_t lo = rank * per, hi = detail::min64(nvec, lo + per);
  const bf16* x = logits + row * v;
  const int t = targets[row];
  const bool ignored = t < 0;

  detail::Pack<bf16> xv[VPT];
  float m = kNegInf;
  if (!ignored) {
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int64_t vi = lo + k * kClusterBlock + threadIdx.x;
      if (vi < hi) {
        xv[k] = detail::load_pack_stream(x + vi * 8);
#pragma unroll
        for (int e = 0; e < 8; ++e) m = fmaxf(m, __bfloat162float(xv[k].v[e]));
      }
    }
  }
  // The target logit is read before any CTA of the cluster can overwrite the row (in-place dlogits).
  float target_logit = 0.f;
  if (rank == 0 && threadIdx.x == 0 && !ignored && t < v) target_logit = __bfloat162float(x[t]);
  m = block_max(m, scratch);
  float s = 0.f;
  if (!ignored && m != kNegInf) {
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int64_t vi = lo + k * kClusterBlock + threadIdx.x;
      if (vi < hi) {
#pragma unroll
        for (int e = 0; e < 8; ++e) s += __expf(__bfloat162float(xv[k].v[e]) - m);
      }
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
  bf16* dx = dlogits + row * v;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int64_t vi = lo + k * kClusterBlock + threadIdx.x;
    if (vi < hi) {
      detail::Pack<bf16> out;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float g = 0.f;
        if (!ignored) {
          g = __expf(__bfloat162float(xv[k].v[e]) - lse);
          if (vi * 8 + e == t) g -= 1.f;
          g *= grad_scale;
        }
        out.v[e] = __float2bfloat16_rn(g);
      }
      detail::store_pack_stream(dx + vi * 8, out);
    }
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

template <int VPT>
void launch_cluster(int64_t rows, int c, const bf16* x, const int32_t* t, float* l, bf16* dx, int64_t v,
                    float gs, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(rows * c));
  cfg.blockDim = dim3(kClusterBlock);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = c;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  PRIMUS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, ce_cluster_kernel<VPT>, x, t, l, dx, v, gs));
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
  bf16* dx = nullptr;
  if (dlogits != nullptr) {
    detail::check_cuda_tensor(op, "dlogits", *dlogits, DType::kBF16);
    detail::check_same_cuda_device(op, logits, *dlogits);
    PRIMUS_CHECK(dlogits->shape() == logits.shape(), "{}: dlogits {} must have logits' shape {}", op,
                 dlogits->describe(), logits.describe());
    PRIMUS_CHECK(dlogits->data_ptr() == logits.data_ptr() || !detail::overlaps(*dlogits, logits),
                 "{}: dlogits must be logits itself or not overlap it", op);
    dx = static_cast<bf16*>(dlogits->data_ptr());
  }
  if (rows == 0) return;
  PRIMUS_CHECK(rows < (int64_t{1} << 28), "{}: too many rows ({})", op, rows);
  const auto* x = static_cast<const bf16*>(logits.data_ptr());
  const int32_t* t = targets.data<int32_t>();
  float* l = losses.data<float>();
  cudaStream_t cs = cuda_stream(s);

  const bool vec = v % 8 == 0 && detail::aligned16(x) && (dx == nullptr || detail::aligned16(dx));
  // C CTAs per row so that each thread holds at most 4 packs (62 registers: two CTAs per SM); past 8 x 16384
  // logits the clusters stay at 8 (the portable maximum) and hold 8 packs per thread.
  constexpr int64_t kPerCta = int64_t{kClusterBlock} * 4 * 8;
  if (vec && v <= 2 * 8 * kPerCta) {
    int c = 1;
    while (c < 8 && int64_t{c} * kPerCta < v) c *= 2;
    const int64_t per_cta_vec = ceil_div<int64_t>(v / 8, c);
    int vpt = 1;
    while (int64_t{vpt} * kClusterBlock < per_cta_vec) vpt *= 2;
    switch (vpt) {
      case 1:
        launch_cluster<1>(rows, c, x, t, l, dx, v, grad_scale, cs);
        break;
      case 2:
        launch_cluster<2>(rows, c, x, t, l, dx, v, grad_scale, cs);
        break;
      case 4:
        launch_cluster<4>(rows, c, x, t, l, dx, v, grad_scale, cs);
        break;
      default:
        launch_cluster<8>(rows, c, x, t, l, dx, v, grad_scale, cs);
        break;
    }
  } else if (vec) {
    ce_fallback_kernel<8><<<static_cast<unsigned>(rows), kFallbackBlock, 0, cs>>>(x, t, l, dx, v, grad_scale);
  } else {
    ce_fallback_kernel<1><<<static_cast<unsigned>(rows), kFallbackBlock, 0, cs>>>(x, t, l, dx, v, grad_scale);
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace primus::ops::cuda
