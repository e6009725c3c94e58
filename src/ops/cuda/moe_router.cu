// MoE router on the GPU: one warp per token with the token's logits, selection scores and marks in shared
// memory. Top-k is k rounds of a warp arg-max under the order of moe_router.h (larger value, then lower id),
// which is a strict total order, so every lane agrees on the winner and the ids equal the CPU reference's.
// Selection scores come from double-precision exp / sigmoid rounded to f32, and every f32 addition that
// decides a selection (bias, group sums) is done in double and rounded once: identical to the CPU's IEEE f32
// additions, and immune to the flush-to-zero of --use_fast_math. Probabilities, losses and gradients use
// double internally too (a few thousand exps per token batch: negligible).
//
// Losses: per-token partials in double, reduced by one block in a fixed order (bitwise reproducible); the
// per-sequence expert counts are integer atomics (order-free).
#include "ops/cuda/kernel_utils.cuh"

#include <algorithm>

#include "ops/cuda/moe_router_cuda.h"

namespace primus::ops::cuda {
namespace {

constexpr int kWarps = 4;  // tokens per block
constexpr int kMaxTopk = 32;
constexpr int kMaxExperts = 1024;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ bool ranks_before(float a, int ia, float b, int ib) {
  return a > b || (a == b && ia < ib);
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

__device__ __forceinline__ float warp_max_f(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

__device__ __forceinline__ float add_rn(float a, float b) {
  return __double2float_rn(static_cast<double>(a) + static_cast<double>(b));
}

__device__ __forceinline__ double sigmoid_d(double x) {
  return 1.0 / (1.0 + exp(-x));
}

// The best unmarked entry of v[0..n) (index -1 if none), the same in every lane; marks it.
__device__ int warp_pick(const float* v, unsigned char* mark, int n) {
  const int lane = threadIdx.x & 31;
  float bv = 0.f;
  int bi = -1;
  for (int i = lane; i < n; i += 32) {
    if (mark[i]) continue;
    if (bi < 0 || ranks_before(v[i], i, bv, bi)) {
      bv = v[i];
      bi = i;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, bv, o);
    const int oi = __shfl_xor_sync(kFull, bi, o);
    if (oi >= 0 && (bi < 0 || ranks_before(ov, oi, bv, bi))) {
      bv = ov;
      bi = oi;
    }
  }
  __syncwarp();
  if (bi >= 0 && lane == (bi & 31)) mark[bi] = 1;
  __syncwarp();
  return bi;
}

// Per-warp shared memory of the router kernels.
struct WarpSmem {
  float* x;              // [E] logits
  float* sel;            // [E] selection scores
  float* gscore;         // [G] group scores
  unsigned char* mark;   // [E] excluded or taken
  unsigned char* gmark;  // [G]
  int* chosen;           // [kMaxTopk]
};

__host__ __device__ inline size_t align4(size_t b) {
  return (b + 3) & ~size_t{3};
}
__host__ __device__ inline size_t warp_smem_bytes(int e, int groups) {
  return align4(4 * static_cast<size_t>(e) * 2 + 4 * static_cast<size_t>(groups) + e + groups) + 4 * kMaxTopk;
}

__device__ WarpSmem carve(unsigned char* base, int e, int groups) {
  const int warp = threadIdx.x >> 5;
  unsigned char* p = base + warp * warp_smem_bytes(e, groups);
  WarpSmem w;
  w.x = reinterpret_cast<float*>(p);
  w.sel = w.x + e;
  w.gscore = w.sel + e;
  w.mark = reinterpret_cast<unsigned char*>(w.gscore + groups);
  w.gmark = w.mark + e;
  unsigned char* tail =
      p + align4(4 * static_cast<size_t>(e) * 2 + 4 * static_cast<size_t>(groups) + e + groups);
  w.chosen = reinterpret_cast<int*>(tail);
  return w;
}

struct RouterArgs {
  int e, k, groups, group_topk;
  int score;  // 0 softmax, 1 sigmoid
  bool pre_softmax;
  int kind;  // ProbKind
  float scale;
};

enum ProbKind { kSoftmaxOfChosen = 0, kFullSoftmax = 1, kSigmoidNormalized = 2, kSigmoid = 3 };

int prob_kind(const MoeRouterConfig& cfg) {
  if (cfg.score == MoeScoreFunction::kSoftmax)
    return (!cfg.pre_softmax || cfg.normalize) ? kSoftmaxOfChosen : kFullSoftmax;
  return (cfg.normalize && cfg.topk > 1) ? kSigmoidNormalized : kSigmoid;
}

// Loads row t of x into w.x and returns its max (every lane).
__device__ float load_row(const float* x, int64_t t, int e, const WarpSmem& w) {
  const int lane = threadIdx.x & 31;
  float m = -INFINITY;
  for (int i = lane; i < e; i += 32) {
    const float v = x[t * e + i];
    w.x[i] = v;
    m = fmaxf(m, v);
  }
  __syncwarp();
  return warp_max_f(m);
}

// Unscaled probability of chosen slot j (lane j < k; 0 elsewhere); m = the row max. Every lane must call it.
// Also returns through `sig` the sigmoid of the chosen logit (sigmoid kinds).
__device__ double chosen_prob(const WarpSmem& w, const RouterArgs& a, float m, double& sig) {
  const int lane = threadIdx.x & 31;
  const bool mine = lane < a.k;
  const float xj = mine ? w.x[w.chosen[lane]] : -INFINITY;
  sig = 0.0;
  if (a.kind == kSoftmaxOfChosen) {
    const float mc = warp_max_f(xj);
    const double ej = mine ? exp(static_cast<double>(xj) - static_cast<double>(mc)) : 0.0;
    return ej / warp_sum_d(ej);
  }
  if (a.kind == kFullSoftmax) {
    double sum = 0.0;
    for (int i = lane; i < a.e; i += 32) sum += exp(static_cast<double>(w.x[i]) - static_cast<double>(m));
    sum = warp_sum_d(sum);
    return mine ? exp(static_cast<double>(xj) - static_cast<double>(m)) / sum : 0.0;
  }
  sig = mine ? sigmoid_d(static_cast<double>(xj)) : 0.0;
  if (a.kind == kSigmoid) return sig;
  return sig / (warp_sum_d(sig) + 1e-20);
}

__global__ void __launch_bounds__(kWarps * 32)
    router_fwd_kernel(const float* __restrict__ logits, const float* __restrict__ bias, int64_t rows,
                      RouterArgs a, int32_t* __restrict__ ids, float* __restrict__ probs) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (t >= rows) return;  // whole warps leave together
  const WarpSmem w = carve(smem, a.e, a.groups);
  const float m = load_row(logits, t, a.e, w);
  for (int i = lane; i < a.e; i += 32) {
    const float xi = w.x[i];
    float s;
    if (a.score == 1)
      s = __double2float_rn(sigmoid_d(static_cast<double>(xi)));
    else if (a.pre_softmax)
      s = __double2float_rn(exp(static_cast<double>(xi) - static_cast<double>(m)));
    else
      s = xi;
    if (bias != nullptr) s = add_rn(s, bias[i]);
    w.sel[i] = s;
    w.mark[i] = 0;
  }
  __syncwarp();
  if (a.groups > 0) {
    const int gsize = a.e / a.groups, per = a.k / a.group_topk;
    for (int g = 0; g < a.groups; ++g) {
      float acc = 0.f;  // largest first, as the CPU adds them
      for (int r = 0; r < per; ++r)
        acc = add_rn(acc, w.sel[g * gsize + warp_pick(w.sel + g * gsize, w.mark + g * gsize, gsize)]);
      if (lane == 0) {
        w.gscore[g] = acc;
        w.gmark[g] = 0;
      }
    }
    __syncwarp();
    for (int i = lane; i < a.e; i += 32) w.mark[i] = 0;
    __syncwarp();
    for (int r = 0; r < a.group_topk; ++r) warp_pick(w.gscore, w.gmark, a.groups);
    // gmark now flags the kept groups; exclude every expert of the others.
    for (int i = lane; i < a.e; i += 32) w.mark[i] = w.gmark[i / gsize] ? 0 : 1;
    __syncwarp();
  }
  for (int r = 0; r < a.k; ++r) {
    const int c = warp_pick(w.sel, w.mark, a.e);
    if (lane == 0) w.chosen[r] = c;
  }
  __syncwarp();
  double sig;
  const double p = chosen_prob(w, a, m, sig);
  if (lane < a.k) {
    ids[t * a.k + lane] = w.chosen[lane];
    probs[t * a.k + lane] = static_cast<float>(p * static_cast<double>(a.scale));
  }
}

__global__ void __launch_bounds__(kWarps * 32)
    router_bwd_kernel(const float* __restrict__ logits, const int32_t* __restrict__ ids,
                      const float* __restrict__ dprobs, int64_t rows, RouterArgs a,
                      float* __restrict__ dlogits) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (t >= rows) return;
  const WarpSmem w = carve(smem, a.e, a.groups);
  const float m = load_row(logits, t, a.e, w);
  if (lane < a.k) w.chosen[lane] = ids[t * a.k + lane];
  __syncwarp();
  double sig;
  const double p = chosen_prob(w, a, m, sig);
  const double g = lane < a.k ? static_cast<double>(dprobs[t * a.k + lane]) * a.scale : 0.0;
  const double pg = warp_sum_d(p * g);
  float* dr = dlogits + t * a.e;
  if (a.kind == kFullSoftmax) {
    double sum = 0.0;
    for (int i = lane; i < a.e; i += 32) sum += exp(static_cast<double>(w.x[i]) - static_cast<double>(m));
    sum = warp_sum_d(sum);
    // g_j of each chosen expert, looked up per expert from the warp's registers through shared memory.
    __shared__ double gsh[kWarps][kMaxTopk];
    if (lane < a.k) gsh[threadIdx.x >> 5][lane] = g;
    __syncwarp();
    for (int i = lane; i < a.e; i += 32) {
      double gi = 0.0;
      for (int j = 0; j < a.k; ++j)
        if (w.chosen[j] == i) gi = gsh[threadIdx.x >> 5][j];
      const double s = exp(static_cast<double>(w.x[i]) - static_cast<double>(m)) / sum;
      dr[i] = static_cast<float>(s * (gi - pg));
    }
    return;
  }
  for (int i = lane; i < a.e; i += 32) dr[i] = 0.f;
  const double ssum = warp_sum_d(sig);  // sigmoid kinds: the sum of the chosen sigmoids
  __syncwarp();
  if (lane < a.k) {
    double d;
    if (a.kind == kSoftmaxOfChosen) {
      d = p * (g - pg);
    } else {
      // p_j = s_j / S: ds_j = (g_j - sum_i g_i p_i) / S; unnormalised: ds_j = g_j.
      const double ds = a.kind == kSigmoid ? g : (g - pg) / (ssum + 1e-20);
      d = ds * sig * (1.0 - sig);
    }
    dr[w.chosen[lane]] = static_cast<float>(d);
  }
}

// The probabilities of given ids: the forward's last step without its selection (bitwise what the forward
// writes for the ids it chose).
__global__ void __launch_bounds__(kWarps * 32)
    router_probs_kernel(const float* __restrict__ logits, const int32_t* __restrict__ ids, int64_t rows,
                        RouterArgs a, float* __restrict__ probs) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (t >= rows) return;
  const WarpSmem w = carve(smem, a.e, a.groups);
  const float m = load_row(logits, t, a.e, w);
  if (lane < a.k) w.chosen[lane] = ids[t * a.k + lane];
  __syncwarp();
  double sig;
  const double p = chosen_prob(w, a, m, sig);
  if (lane < a.k) probs[t * a.k + lane] = static_cast<float>(p * static_cast<double>(a.scale));
}

// Aux loss, pass 1: per-sequence counts of the plain top-k of the logits.
__global__ void __launch_bounds__(kWarps * 32)
    aux_count_kernel(const float* __restrict__ logits, int64_t rows, int e, int k, int64_t chunk,
                     int64_t num_seqs, int* __restrict__ counts) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (t >= rows) return;
  const WarpSmem w = carve(smem, e, 0);
  load_row(logits, t, e, w);
  for (int i = lane; i < e; i += 32) w.mark[i] = 0;
  __syncwarp();
  for (int r = 0; r < k; ++r) {
    const int c = warp_pick(w.x, w.mark, e);
    if (lane == 0) atomicAdd(counts + ((t / chunk) % num_seqs) * e + c, 1);
  }
}

// Aux loss, pass 2: per-token partial sum_e sc * count and (optionally) dlogits += grad_scale * w * ...
__global__ void __launch_bounds__(kWarps * 32)
    aux_grad_kernel(const float* __restrict__ logits, int64_t rows, int e, int64_t chunk, int64_t num_seqs,
                    int score, const int* __restrict__ counts, double w, float grad_scale,
                    double* __restrict__ partial, float* __restrict__ dlogits) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (t >= rows) return;
  const WarpSmem ws = carve(smem, e, 0);
  const float m = load_row(logits, t, e, ws);
  const int* c = counts + ((t / chunk) % num_seqs) * e;
  double sum = 0.0;
  for (int i = lane; i < e; i += 32) {
    const double xi = static_cast<double>(ws.x[i]);
    sum += score == 0 ? exp(xi - static_cast<double>(m)) : sigmoid_d(xi);
  }
  const double den = warp_sum_d(sum) + (score == 0 ? 0.0 : 1e-20);
  double acc = 0.0, sg = 0.0;
  for (int i = lane; i < e; i += 32) {
    const double xi = static_cast<double>(ws.x[i]);
    const double sc = (score == 0 ? exp(xi - static_cast<double>(m)) : sigmoid_d(xi)) / den;
    acc += sc * c[i];
    sg += sc * (static_cast<double>(grad_scale) * w * c[i]);
  }
  acc = warp_sum_d(acc);
  sg = warp_sum_d(sg);
  if (lane == 0) partial[t] = acc;
  if (dlogits == nullptr) return;
  float* dr = dlogits + t * e;
  for (int i = lane; i < e; i += 32) {
    const double xi = static_cast<double>(ws.x[i]);
    const double gi = static_cast<double>(grad_scale) * w * c[i];
    double d;
    if (score == 0) {
      d = exp(xi - static_cast<double>(m)) / den * (gi - sg);
    } else {
      const double s = sigmoid_d(xi);
      d = (gi - sg) / den * s * (1.0 - s);
    }
    dr[i] = static_cast<float>(static_cast<double>(dr[i]) + d);
  }
}

// z-loss: per-token lse^2 partial and dlogits += f * softmax.
__global__ void __launch_bounds__(kWarps * 32)
    zloss_kernel(const float* __restrict__ logits, int64_t rows, int e, double f_per_lse,
                 double* __restrict__ partial, float* __restrict__ dlogits) {
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (t >= rows) return;
  const float* xr = logits + t * e;
  float mf = -INFINITY;
  for (int i = lane; i < e; i += 32) mf = fmaxf(mf, xr[i]);
  const double m = static_cast<double>(warp_max_f(mf));
  double sum = 0.0;
  for (int i = lane; i < e; i += 32) sum += exp(static_cast<double>(xr[i]) - m);
  const double lse = m + log(warp_sum_d(sum));
  if (lane == 0) partial[t] = lse * lse;
  if (dlogits == nullptr) return;
  const double f = f_per_lse * lse;
  float* dr = dlogits + t * e;
  for (int i = lane; i < e; i += 32)
    dr[i] = static_cast<float>(static_cast<double>(dr[i]) + f * exp(static_cast<double>(xr[i]) - lse));
}

// loss[0] = scale * sum(partial) in a fixed order (one block).
__global__ void __launch_bounds__(1024) reduce_loss_kernel(const double* __restrict__ partial, int64_t n,
                                                           double scale, float* __restrict__ loss) {
  __shared__ double sh[1024];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] = static_cast<float>(scale * sh[0]);
}

__global__ void expert_load_kernel(const int32_t* __restrict__ ids, int64_t n, int e,
                                   int* __restrict__ counts) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t v = ids[i];
  if (v >= 0 && v < e) atomicAdd(counts + v, 1);
}

__global__ void bias_update_kernel(const int32_t* __restrict__ counts, int e, float rate,
                                   float* __restrict__ bias) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= e) return;
  long long sum = 0;
  for (int j = 0; j < e; ++j) sum += counts[j];
  const long long diff = sum - static_cast<long long>(e) * counts[i];
  const float sign = diff > 0 ? 1.f : diff < 0 ? -1.f : 0.f;
  bias[i] = bias[i] + sign * rate;
}

// ---------------------------------------------------------------------------------------------------------------
// Host side

using detail::check_cuda_tensor;

void check_logits(const char* op, const Tensor& logits) {
  check_cuda_tensor(op, "logits", logits, DType::kF32);
  PRIMUS_CHECK(logits.ndim() == 2, "{}: logits must be [T, E], got {}", op, logits.describe());
  PRIMUS_CHECK(logits.size(1) <= kMaxExperts, "{}: the CUDA router takes at most {} experts, got {}", op,
               kMaxExperts, logits.size(1));
}

void check_shape(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  PRIMUS_CHECK(t.shape() == shape, "{}: {} must be {}, got {}", op, name, shape_str(shape), t.describe());
}

RouterArgs router_args(const MoeRouterConfig& cfg, int64_t e) {
  RouterArgs a;
  a.e = static_cast<int>(e);
  a.k = static_cast<int>(cfg.topk);
  a.groups = static_cast<int>(cfg.num_groups);
  a.group_topk = static_cast<int>(cfg.group_topk);
  a.score = cfg.score == MoeScoreFunction::kSigmoid ? 1 : 0;
  a.pre_softmax = cfg.pre_softmax;
  a.kind = prob_kind(cfg);
  a.scale = cfg.scaling_factor;
  return a;
}

int blocks_for(int64_t rows) {
  return static_cast<int>(ceil_div<int64_t>(rows, kWarps));
}

template <typename Kernel>
size_t smem_for(Kernel kernel, int e, int groups) {
  const size_t bytes = kWarps * warp_smem_bytes(e, groups);
  if (bytes > 48 * 1024)
    PRIMUS_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  return bytes;
}

}  // namespace

void moe_router_forward(const Tensor& logits, const Tensor* expert_bias, const MoeRouterConfig& cfg,
                        Tensor& ids, Tensor& probs, const Stream& s) {
  constexpr const char* op = "moe_router_forward";
  check_logits(op, logits);
  const int64_t rows = logits.size(0), e = logits.size(1);
  validate_moe_router_config(cfg, e);
  PRIMUS_CHECK(cfg.topk <= kMaxTopk, "{}: the CUDA router takes topk <= {}, got {}", op, kMaxTopk, cfg.topk);
  if (expert_bias != nullptr) {
    check_cuda_tensor(op, "expert_bias", *expert_bias, DType::kF32);
    check_shape(op, "expert_bias", *expert_bias, {e});
  }
  check_cuda_tensor(op, "ids", ids, DType::kI32);
  check_shape(op, "ids", ids, {rows, cfg.topk});
  check_cuda_tensor(op, "probs", probs, DType::kF32);
  check_shape(op, "probs", probs, {rows, cfg.topk});
  if (rows == 0) return;
  const RouterArgs a = router_args(cfg, e);
  const size_t smem = smem_for(router_fwd_kernel, a.e, a.groups);
  router_fwd_kernel<<<blocks_for(rows), kWarps * 32, smem, cuda_stream(s)>>>(
      logits.data<float>(), expert_bias != nullptr ? expert_bias->data<float>() : nullptr, rows, a,
      ids.data<int32_t>(), probs.data<float>());
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void moe_router_backward(const Tensor& logits, const Tensor& ids, const Tensor& dprobs,
                         const MoeRouterConfig& cfg, Tensor& dlogits, const Stream& s) {
  constexpr const char* op = "moe_router_backward";
  check_logits(op, logits);
  const int64_t rows = logits.size(0), e = logits.size(1);
  validate_moe_router_config(cfg, e);
  PRIMUS_CHECK(cfg.topk <= kMaxTopk, "{}: the CUDA router takes topk <= {}, got {}", op, kMaxTopk, cfg.topk);
  check_cuda_tensor(op, "ids", ids, DType::kI32);
  check_shape(op, "ids", ids, {rows, cfg.topk});
  check_cuda_tensor(op, "dprobs", dprobs, DType::kF32);
  check_shape(op, "dprobs", dprobs, {rows, cfg.topk});
  check_cuda_tensor(op, "dlogits", dlogits, DType::kF32);
  check_shape(op, "dlogits", dlogits, {rows, e});
  if (rows == 0) return;
  const RouterArgs a = router_args(cfg, e);
  const size_t smem = smem_for(router_bwd_kernel, a.e, a.groups);
  router_bwd_kernel<<<blocks_for(rows), kWarps * 32, smem, cuda_stream(s)>>>(
      logits.data<float>(), ids.data<int32_t>(), dprobs.data<float>(), rows, a, dlogits.data<float>());
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void moe_router_probs(const Tensor& logits, const Tensor& ids, const MoeRouterConfig& cfg, Tensor& probs,
                      const Stream& s) {
  constexpr const char* op = "moe_router_probs";
  check_logits(op, logits);
  const int64_t rows = logits.size(0), e = logits.size(1);
  validate_moe_router_config(cfg, e);
  PRIMUS_CHECK(cfg.topk <= kMaxTopk, "{}: the CUDA router takes topk <= {}, got {}", op, kMaxTopk, cfg.topk);
  check_cuda_tensor(op, "ids", ids, DType::kI32);
  check_shape(op, "ids", ids, {rows, cfg.topk});
  check_cuda_tensor(op, "probs", probs, DType::kF32);
  check_shape(op, "probs", probs, {rows, cfg.topk});
  if (rows == 0) return;
  const RouterArgs a = router_args(cfg, e);
  const size_t smem = smem_for(router_probs_kernel, a.e, a.groups);
  router_probs_kernel<<<blocks_for(rows), kWarps * 32, smem, cuda_stream(s)>>>(
      logits.data<float>(), ids.data<int32_t>(), rows, a, probs.data<float>());
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void moe_aux_counts(const Tensor& logits, int64_t topk, const MoeAuxSeqs& seqs, Tensor& counts,
                    const Stream& s) {
  constexpr const char* op = "moe_aux_counts";
  check_logits(op, logits);
  const int64_t rows = logits.size(0), e = logits.size(1);
  PRIMUS_CHECK(topk >= 1 && topk <= e, "{}: topk must be in [1, {}], got {}", op, e, topk);
  check_cuda_tensor(op, "counts", counts, DType::kI32);
  check_shape(op, "counts", counts, {seqs.num_seqs, e});
  counts.zero_(s);
  const size_t smem = smem_for(aux_count_kernel, static_cast<int>(e), 0);
  aux_count_kernel<<<blocks_for(rows), kWarps * 32, smem, cuda_stream(s)>>>(
      logits.data<float>(), rows, static_cast<int>(e), static_cast<int>(topk), seqs.chunk, seqs.num_seqs,
      counts.data<int32_t>());
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void moe_aux_loss_from_counts(const Tensor& logits, const Tensor& counts, int64_t topk,
                              MoeScoreFunction score, const MoeAuxSeqs& seqs, float coeff, float grad_scale,
                              Tensor& loss, Tensor* dlogits, const Stream& s) {
  constexpr const char* op = "moe_aux_loss_from_counts";
  check_logits(op, logits);
  const int64_t rows = logits.size(0), e = logits.size(1);
  PRIMUS_CHECK(topk >= 1 && topk <= e, "{}: topk must be in [1, {}], got {}", op, e, topk);
  check_cuda_tensor(op, "counts", counts, DType::kI32);
  check_shape(op, "counts", counts, {seqs.num_seqs, e});
  check_cuda_tensor(op, "loss", loss, DType::kF32);
  check_shape(op, "loss", loss, {1});
  if (dlogits != nullptr) {
    check_cuda_tensor(op, "dlogits", *dlogits, DType::kF32);
    check_shape(op, "dlogits", *dlogits, {rows, e});
  }
  Tensor partial = Tensor::empty({rows}, DType::kF64, s);
  const double w = static_cast<double>(coeff) * e /
                   (static_cast<double>(topk) * seqs.num_seqs * static_cast<double>(seqs.seq_tokens) *
                    static_cast<double>(seqs.seq_tokens));
  const size_t smem = smem_for(aux_grad_kernel, static_cast<int>(e), 0);
  aux_grad_kernel<<<blocks_for(rows), kWarps * 32, smem, cuda_stream(s)>>>(
      logits.data<float>(), rows, static_cast<int>(e), seqs.chunk, seqs.num_seqs,
      score == MoeScoreFunction::kSigmoid ? 1 : 0, counts.data<int32_t>(), w, grad_scale,
      partial.data<double>(), dlogits != nullptr ? dlogits->data<float>() : nullptr);
  PRIMUS_CUDA_CHECK_LAUNCH();
  reduce_loss_kernel<<<1, 1024, 0, cuda_stream(s)>>>(partial.data<double>(), rows, w, loss.data<float>());
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void moe_z_loss(const Tensor& logits, float coeff, int64_t mean_over, float grad_scale, Tensor& loss,
                Tensor* dlogits, const Stream& s) {
  constexpr const char* op = "moe_z_loss";
  check_cuda_tensor(op, "logits", logits, DType::kF32);
  PRIMUS_CHECK(logits.ndim() == 2 && logits.numel() > 0, "{}: logits must be a non-empty [T, E], got {}", op,
               logits.describe());
  const int64_t rows = logits.size(0), e = logits.size(1);
  check_cuda_tensor(op, "loss", loss, DType::kF32);
  check_shape(op, "loss", loss, {1});
  if (dlogits != nullptr) {
    check_cuda_tensor(op, "dlogits", *dlogits, DType::kF32);
    check_shape(op, "dlogits", *dlogits, {rows, e});
  }
  Tensor partial = Tensor::empty({rows}, DType::kF64, s);
  const double f = static_cast<double>(grad_scale) * coeff * 2.0 / mean_over;
  zloss_kernel<<<blocks_for(rows), kWarps * 32, 0, cuda_stream(s)>>>(
      logits.data<float>(), rows, static_cast<int>(e), f, partial.data<double>(),
      dlogits != nullptr ? dlogits->data<float>() : nullptr);
  PRIMUS_CUDA_CHECK_LAUNCH();
  reduce_loss_kernel<<<1, 1024, 0, cuda_stream(s)>>>(
      partial.data<double>(), rows, static_cast<double>(coeff) / mean_over, loss.data<float>());
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void moe_expert_load(const Tensor& ids, int64_t num_experts, Tensor& counts, bool accumulate,
                     const Stream& s) {
  constexpr const char* op = "moe_expert_load";
  check_cuda_tensor(op, "ids", ids, DType::kI32);
  PRIMUS_CHECK(num_experts >= 1, "{}: num_experts must be >= 1, got {}", op, num_experts);
  check_cuda_tensor(op, "counts", counts, DType::kI32);
  check_shape(op, "counts", counts, {num_experts});
  if (!accumulate) counts.zero_(s);
  const int64_t n = ids.numel();
  if (n == 0) return;
  expert_load_kernel<<<static_cast<int>(ceil_div<int64_t>(n, 256)), 256, 0, cuda_stream(s)>>>(
      ids.data<int32_t>(), n, static_cast<int>(num_experts), counts.data<int32_t>());
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void moe_expert_bias_update(const Tensor& counts, float rate, Tensor& bias, const Stream& s) {
  constexpr const char* op = "moe_expert_bias_update";
  check_cuda_tensor(op, "counts", counts, DType::kI32);
  PRIMUS_CHECK(counts.ndim() == 1 && counts.numel() >= 1, "{}: counts must be [E], got {}", op,
               counts.describe());
  const int64_t e = counts.numel();
  check_cuda_tensor(op, "bias", bias, DType::kF32);
  check_shape(op, "bias", bias, {e});
  bias_update_kernel<<<static_cast<int>(ceil_div<int64_t>(e, 256)), 256, 0, cuda_stream(s)>>>(
      counts.data<int32_t>(), static_cast<int>(e), rate, bias.data<float>());
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace primus::ops::cuda
