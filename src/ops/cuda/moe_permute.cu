// MoE token permutation on the GPU.
//
// Plan (a stable counting sort of the T*k slots by expert, no float math, no sort library):
//   1. one warp per chunk of kChunk consecutive slots walks them 32 at a time; __match_any_sync groups the
//      lanes of one expert, so each slot gets its rank among the chunk's slots of that expert in slot order,
//      and the chunk's per-expert counts;
//   2. one block turns the [chunks, E] counts into per-chunk bases (a scan over chunks per expert), the
//      per-expert counts (clamped to the capacity when padding) and the offsets (a scan over experts);
//   3. one thread per slot: row = offsets[e] + base[chunk][e] + rank (or dropped past the capacity).
// Every step is order-free or has a fixed order, so the plan is identical run to run and equals the CPU's.
//
// Data movement: one thread per 16-byte pack (8 bf16) of a row when d % 8 == 0, else one per element. The
// k-term sums (unpermute, permute backward) accumulate in f32 in j order; dprobs is one warp per slot with a
// fixed-tree warp sum.
#include "ops/cuda/kernel_utils.cuh"

#include "ops/cuda/moe_permute_cuda.h"
#include "ops/cuda/moe_router_cuda.h"

namespace primus::ops::cuda {
namespace {

using detail::bf16;
using detail::load_vec;
using detail::store_vec;
using detail::Vec;

constexpr int kChunk = 256;  // slots per warp in plan step 1
constexpr unsigned kFull = 0xffffffffu;

__global__ void plan_chunk_kernel(const int32_t* __restrict__ ids, int64_t slots, int e,
                                  int* __restrict__ chunk_counts, int* __restrict__ local_rank) {
  extern __shared__ int hist[];  // [E]
  const int lane = threadIdx.x;
  for (int i = lane; i < e; i += 32) hist[i] = 0;
  __syncwarp();
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunk;
  for (int64_t base = begin; base < begin + kChunk && base < slots; base += 32) {
    const int64_t sl = base + lane;
    int v = sl < slots ? ids[sl] : -1;
    if (v >= e || v < -1) v = -1;  // out of range: treated as dropped
    const unsigned peers = __match_any_sync(kFull, v);
    const int before = __popc(peers & ((1u << lane) - 1u));
    int rank = -1;
    if (v >= 0) rank = hist[v] + before;
    __syncwarp();
    if (v >= 0 && lane == 31 - __clz(peers)) hist[v] += __popc(peers);  // the highest lane of the group
    __syncwarp();
    if (sl < slots) local_rank[sl] = rank;
  }
  for (int i = lane; i < e; i += 32) chunk_counts[static_cast<int64_t>(blockIdx.x) * e + i] = hist[i];
}

__global__ void __launch_bounds__(1024)
    plan_scan_kernel(int* __restrict__ chunk_counts, int64_t chunks, int e, int64_t capacity,
                     int32_t* __restrict__ counts, int32_t* __restrict__ offsets) {
  for (int x = threadIdx.x; x < e; x += blockDim.x) {
    int run = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      int* p = chunk_counts + c * e + x;
      const int n = *p;
      *p = run;  // now the chunk's base
      run += n;
    }
    counts[x] = capacity > 0 ? static_cast<int32_t>(run < capacity ? run : capacity) : run;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t acc = 0;
    offsets[0] = 0;
    for (int x = 0; x < e; ++x) {
      acc += capacity > 0 ? static_cast<int32_t>(capacity) : counts[x];
      offsets[x + 1] = acc;
    }
  }
}

__global__ void plan_scatter_kernel(const int32_t* __restrict__ ids, int64_t slots, int e, int64_t capacity,
                                    const int* __restrict__ chunk_base, const int* __restrict__ local_rank,
                                    const int32_t* __restrict__ offsets, int32_t* __restrict__ row_src,
                                    int32_t* __restrict__ slot_row) {
  const int64_t sl = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (sl >= slots) return;
  const int v = ids[sl];
  if (v < 0 || v >= e) {
    slot_row[sl] = -1;
    return;
  }
  const int rank = chunk_base[(sl / kChunk) * e + v] + local_rank[sl];
  if (capacity > 0 && rank >= capacity) {
    slot_row[sl] = -1;
    return;
  }
  const int32_t r = offsets[v] + rank;
  slot_row[sl] = r;
  row_src[r] = static_cast<int32_t>(sl);
}

// Capacity drop: one block per expert over its block of the dropless plan (slots in token order). Rank by
// policy: position = index in the block; probs = entries with a larger probability, or an equal one earlier.
__global__ void capacity_drop_kernel(const int32_t* __restrict__ offsets, const int32_t* __restrict__ row_src,
                                     const float* __restrict__ probs, int64_t capacity, int by_probs,
                                     int32_t* __restrict__ kept_ids, float* __restrict__ kept_probs) {
  const int x = blockIdx.x;
  const int lo = offsets[x], hi = offsets[x + 1];
  if (hi - lo <= capacity) return;  // nothing dropped: the copies stand
  for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const int si = row_src[i];
    int64_t rank = i - lo;
    if (by_probs) {
      const float pi = probs[si];
      rank = 0;
      for (int j = lo; j < hi; ++j) {
        const float pj = probs[row_src[j]];
        rank += (pj > pi || (pj == pi && j < i)) ? 1 : 0;
      }
    }
    if (rank >= capacity) {
      kept_ids[si] = -1;
      kept_probs[si] = 0.f;
    }
  }
}

template <int V>
__global__ void permute_kernel(const bf16* __restrict__ x, const int32_t* __restrict__ row_src, int64_t rows,
                               int64_t d, int k, bf16* __restrict__ out) {
  const int64_t per_row = d / V;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * per_row) return;
  const int64_t r = idx / per_row, c = (idx % per_row) * V;
  const int32_t src = row_src[r];
  Vec<bf16, V> v;
  if (src >= 0) {
    v = load_vec<bf16, V>(x + (src / k) * d + c);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) v.v[i] = __float2bfloat16_rn(0.f);
  }
  store_vec<bf16, V>(out + r * d + c, v);
}

// out[t] = sum_j w_j * in[slot_row[t, j]] (w = probs or 1), f32 in j order.
template <int V>
__global__ void combine_kernel(const bf16* __restrict__ in, const int32_t* __restrict__ slot_row,
                               const float* __restrict__ probs, int64_t tokens, int64_t d, int k,
                               bf16* __restrict__ out) {
  const int64_t per_row = d / V;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= tokens * per_row) return;
  const int64_t t = idx / per_row, c = (idx % per_row) * V;
  float acc[V];
#pragma unroll
  for (int i = 0; i < V; ++i) acc[i] = 0.f;
  for (int j = 0; j < k; ++j) {
    const int32_t r = slot_row[t * k + j];
    if (r < 0) continue;
    const float w = probs != nullptr ? probs[t * k + j] : 1.f;
    const Vec<bf16, V> v = load_vec<bf16, V>(in + r * d + c);
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = fmaf(w, __bfloat162float(v.v[i]), acc[i]);
  }
  Vec<bf16, V> o;
#pragma unroll
  for (int i = 0; i < V; ++i) o.v[i] = __float2bfloat16_rn(acc[i]);
  store_vec<bf16, V>(out + t * d + c, o);
}

// dy_perm[r] = probs[src] * dout[src / k], zero for padding rows.
template <int V>
__global__ void unpermute_dy_kernel(const bf16* __restrict__ dout, const int32_t* __restrict__ row_src,
                                    const float* __restrict__ probs, int64_t rows, int64_t d, int k,
                                    bf16* __restrict__ dy) {
  const int64_t per_row = d / V;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * per_row) return;
  const int64_t r = idx / per_row, c = (idx % per_row) * V;
  const int32_t src = row_src[r];
  Vec<bf16, V> o;
  if (src >= 0) {
    const float w = probs[src];
    const Vec<bf16, V> g = load_vec<bf16, V>(dout + (src / k) * d + c);
#pragma unroll
    for (int i = 0; i < V; ++i) o.v[i] = __float2bfloat16_rn(w * __bfloat162float(g.v[i]));
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) o.v[i] = __float2bfloat16_rn(0.f);
  }
  store_vec<bf16, V>(dy + r * d + c, o);
}

// dprobs[slot] = <dout[slot / k], y_perm[slot_row[slot]]>: one warp per slot.
template <int V>
__global__ void dprobs_kernel(const bf16* __restrict__ dout, const bf16* __restrict__ y,
                              const int32_t* __restrict__ slot_row, int64_t slots, int64_t d, int k,
                              float* __restrict__ dprobs) {
  const int64_t sl = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (sl >= slots) return;
  const int32_t r = slot_row[sl];
  float acc = 0.f;
  if (r >= 0) {
    const bf16* g = dout + (sl / k) * d;
    const bf16* yr = y + static_cast<int64_t>(r) * d;
    for (int64_t c = static_cast<int64_t>(lane) * V; c < d; c += 32 * V) {
      const Vec<bf16, V> a = load_vec<bf16, V>(g + c), b = load_vec<bf16, V>(yr + c);
#pragma unroll
      for (int i = 0; i < V; ++i) acc = fmaf(__bfloat162float(a.v[i]), __bfloat162float(b.v[i]), acc);
    }
  }
  acc = detail::warp_sum(acc);
  if (lane == 0) dprobs[sl] = acc;
}

// ---------------------------------------------------------------------------------------------------------------
// Host side

using detail::check_cuda_tensor;

void check_rows(const char* op, const char* name, const Tensor& t, int64_t rows, int64_t d) {
  check_cuda_tensor(op, name, t, DType::kBF16);
  PRIMUS_CHECK(t.ndim() == 2 && t.size(0) == rows && t.size(1) == d, "{}: {} must be [{}, {}], got {}", op,
               name, rows, d, t.describe());
}

void check_plan(const char* op, const MoePermutePlan& plan) {
  const auto one = [&](const char* name, const Tensor& t, int64_t n) {
    check_cuda_tensor(op, name, t, DType::kI32);
    PRIMUS_CHECK(t.numel() == n, "{}: {} must have {} entries, got {}", op, name, n, t.describe());
  };
  one("plan.counts", plan.counts, plan.num_experts);
  one("plan.offsets", plan.offsets, plan.num_experts + 1);
  one("plan.row_src", plan.row_src, plan.num_rows);
  one("plan.slot_row", plan.slot_row, plan.num_tokens * plan.topk);
}

bool vec8(int64_t d, std::initializer_list<const Tensor*> ts) {
  if (d % 8 != 0) return false;
  for (const Tensor* t : ts)
    if (!detail::aligned16(t->data_ptr())) return false;
  return true;
}

constexpr int kThreads = 256;

bf16* bf16p(const Tensor& t) {
  return static_cast<bf16*>(t.data_ptr());
}

int grid_for(int64_t n) {
  return static_cast<int>(ceil_div<int64_t>(n, kThreads));
}

}  // namespace

MoePermutePlan moe_permute_plan(const Tensor& ids, int64_t num_experts, int64_t capacity, const Stream& s) {
  constexpr const char* op = "moe_permute_plan";
  check_cuda_tensor(op, "ids", ids, DType::kI32);
  PRIMUS_CHECK(ids.ndim() == 2, "{}: ids must be [T, k], got {}", op, ids.describe());
  PRIMUS_CHECK(num_experts >= 1 && num_experts <= 12288, "{}: num_experts must be in [1, 12288], got {}", op,
               num_experts);
  PRIMUS_CHECK(capacity >= 0, "{}: capacity must be >= 0, got {}", op, capacity);
  MoePermutePlan plan;
  plan.num_tokens = ids.size(0);
  plan.topk = ids.size(1);
  plan.num_experts = num_experts;
  plan.capacity = capacity;
  const int64_t slots = plan.num_tokens * plan.topk;
  plan.num_rows = capacity > 0 ? num_experts * capacity : slots;
  PRIMUS_CHECK(plan.num_rows < (int64_t{1} << 31), "{}: {} permuted rows do not fit i32 indices", op,
               plan.num_rows);
  const int e = static_cast<int>(num_experts);
  plan.counts = Tensor::empty({num_experts}, DType::kI32, s);
  plan.offsets = Tensor::empty({num_experts + 1}, DType::kI32, s);
  plan.row_src = Tensor::empty({plan.num_rows}, DType::kI32, s);
  plan.slot_row = Tensor::empty({slots}, DType::kI32, s);
  device_memset(plan.row_src.data_ptr(), 0xFF, plan.row_src.nbytes(), s);  // -1: padding until written
  const int64_t chunks = std::max<int64_t>(1, ceil_div<int64_t>(slots, kChunk));
  Tensor chunk_counts = Tensor::empty({chunks, num_experts}, DType::kI32, s);
  Tensor local_rank = Tensor::empty({std::max<int64_t>(slots, 1)}, DType::kI32, s);
  const cudaStream_t st = cuda_stream(s);
  if (slots == 0)
    chunk_counts.zero_(s);
  else
    plan_chunk_kernel<<<static_cast<int>(chunks), 32, e * sizeof(int), st>>>(
        ids.data<int32_t>(), slots, e, chunk_counts.data<int32_t>(), local_rank.data<int32_t>());
  PRIMUS_CUDA_CHECK_LAUNCH();
  plan_scan_kernel<<<1, 1024, 0, st>>>(chunk_counts.data<int32_t>(), chunks, e, capacity,
                                       plan.counts.data<int32_t>(), plan.offsets.data<int32_t>());
  PRIMUS_CUDA_CHECK_LAUNCH();
  if (slots > 0) {
    plan_scatter_kernel<<<grid_for(slots), kThreads, 0, st>>>(
        ids.data<int32_t>(), slots, e, capacity, chunk_counts.data<int32_t>(), local_rank.data<int32_t>(),
        plan.offsets.data<int32_t>(), plan.row_src.data<int32_t>(), plan.slot_row.data<int32_t>());
    PRIMUS_CUDA_CHECK_LAUNCH();
  }
  return plan;
}

void moe_permute(const Tensor& x, const MoePermutePlan& plan, Tensor& x_perm, const Stream& s) {
  constexpr const char* op = "moe_permute";
  check_cuda_tensor(op, "x", x, DType::kBF16);
  PRIMUS_CHECK(x.ndim() == 2, "{}: x must be [T, d], got {}", op, x.describe());
  check_plan(op, plan);
  const int64_t d = x.size(1);
  check_rows(op, "x", x, plan.num_tokens, d);
  check_rows(op, "x_perm", x_perm, plan.num_rows, d);
  if (plan.num_rows == 0 || d == 0) return;
  const int k = static_cast<int>(plan.topk);
  if (vec8(d, {&x, &x_perm})) {
    permute_kernel<8><<<grid_for(plan.num_rows * d / 8), kThreads, 0, cuda_stream(s)>>>(
        bf16p(x), plan.row_src.data<int32_t>(), plan.num_rows, d, k, bf16p(x_perm));
  } else {
    permute_kernel<1><<<grid_for(plan.num_rows * d), kThreads, 0, cuda_stream(s)>>>(
        bf16p(x), plan.row_src.data<int32_t>(), plan.num_rows, d, k, bf16p(x_perm));
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

namespace {
void combine(const char* op, const Tensor& in, const MoePermutePlan& plan, const float* probs, Tensor& out,
             const Stream& s) {
  const int64_t d = in.size(1);
  if (plan.num_tokens == 0 || d == 0) return;
  const int k = static_cast<int>(plan.topk);
  (void)op;
  if (vec8(d, {&in, &out})) {
    combine_kernel<8><<<grid_for(plan.num_tokens * d / 8), kThreads, 0, cuda_stream(s)>>>(
        bf16p(in), plan.slot_row.data<int32_t>(), probs, plan.num_tokens, d, k, bf16p(out));
  } else {
    combine_kernel<1><<<grid_for(plan.num_tokens * d), kThreads, 0, cuda_stream(s)>>>(
        bf16p(in), plan.slot_row.data<int32_t>(), probs, plan.num_tokens, d, k, bf16p(out));
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}
}  // namespace

void moe_permute_backward(const Tensor& dx_perm, const MoePermutePlan& plan, Tensor& dx, const Stream& s) {
  constexpr const char* op = "moe_permute_backward";
  check_cuda_tensor(op, "dx_perm", dx_perm, DType::kBF16);
  PRIMUS_CHECK(dx_perm.ndim() == 2, "{}: dx_perm must be [N, d], got {}", op, dx_perm.describe());
  check_plan(op, plan);
  const int64_t d = dx_perm.size(1);
  check_rows(op, "dx_perm", dx_perm, plan.num_rows, d);
  check_rows(op, "dx", dx, plan.num_tokens, d);
  combine(op, dx_perm, plan, nullptr, dx, s);
}

void moe_unpermute(const Tensor& y_perm, const MoePermutePlan& plan, const Tensor& probs, Tensor& out,
                   const Stream& s) {
  constexpr const char* op = "moe_unpermute";
  check_cuda_tensor(op, "y_perm", y_perm, DType::kBF16);
  PRIMUS_CHECK(y_perm.ndim() == 2, "{}: y_perm must be [N, d], got {}", op, y_perm.describe());
  check_plan(op, plan);
  const int64_t d = y_perm.size(1);
  check_rows(op, "y_perm", y_perm, plan.num_rows, d);
  check_rows(op, "out", out, plan.num_tokens, d);
  check_cuda_tensor(op, "probs", probs, DType::kF32);
  PRIMUS_CHECK(probs.shape() == Shape({plan.num_tokens, plan.topk}), "{}: probs must be [{}, {}], got {}", op,
               plan.num_tokens, plan.topk, probs.describe());
  combine(op, y_perm, plan, probs.data<float>(), out, s);
}

void moe_unpermute_backward(const Tensor& dout, const Tensor& y_perm, const MoePermutePlan& plan,
                            const Tensor& probs, Tensor& dy_perm, Tensor& dprobs, const Stream& s) {
  constexpr const char* op = "moe_unpermute_backward";
  check_cuda_tensor(op, "dout", dout, DType::kBF16);
  PRIMUS_CHECK(dout.ndim() == 2, "{}: dout must be [T, d], got {}", op, dout.describe());
  check_plan(op, plan);
  const int64_t d = dout.size(1), slots = plan.num_tokens * plan.topk;
  check_rows(op, "dout", dout, plan.num_tokens, d);
  check_rows(op, "y_perm", y_perm, plan.num_rows, d);
  check_rows(op, "dy_perm", dy_perm, plan.num_rows, d);
  const Shape pk{plan.num_tokens, plan.topk};
  check_cuda_tensor(op, "probs", probs, DType::kF32);
  PRIMUS_CHECK(probs.shape() == pk, "{}: probs must be {}, got {}", op, shape_str(pk), probs.describe());
  check_cuda_tensor(op, "dprobs", dprobs, DType::kF32);
  PRIMUS_CHECK(dprobs.shape() == pk, "{}: dprobs must be {}, got {}", op, shape_str(pk), dprobs.describe());
  const int k = static_cast<int>(plan.topk);
  const cudaStream_t st = cuda_stream(s);
  if (d == 0) {
    dprobs.zero_(s);
    return;
  }
  const bool v8 = vec8(d, {&dout, &y_perm, &dy_perm});
  if (plan.num_rows > 0) {
    if (v8)
      unpermute_dy_kernel<8><<<grid_for(plan.num_rows * d / 8), kThreads, 0, st>>>(
          bf16p(dout), plan.row_src.data<int32_t>(), probs.data<float>(), plan.num_rows, d, k,
          bf16p(dy_perm));
    else
      unpermute_dy_kernel<1><<<grid_for(plan.num_rows * d), kThreads, 0, st>>>(
          bf16p(dout), plan.row_src.data<int32_t>(), probs.data<float>(), plan.num_rows, d, k,
          bf16p(dy_perm));
    PRIMUS_CUDA_CHECK_LAUNCH();
  }
  if (slots > 0) {
    const int warps = kThreads / 32;
    const int grid = static_cast<int>(ceil_div<int64_t>(slots, warps));
    if (v8)
      dprobs_kernel<8><<<grid, kThreads, 0, st>>>(bf16p(dout), bf16p(y_perm), plan.slot_row.data<int32_t>(),
                                                  slots, d, k, dprobs.data<float>());
    else
      dprobs_kernel<1><<<grid, kThreads, 0, st>>>(bf16p(dout), bf16p(y_perm), plan.slot_row.data<int32_t>(),
                                                  slots, d, k, dprobs.data<float>());
    PRIMUS_CUDA_CHECK_LAUNCH();
  }
}

void moe_capacity_drop(const Tensor& ids, const Tensor& probs, int64_t num_experts, int64_t capacity,
                       MoeDropPolicy policy, Tensor& kept_ids, Tensor& kept_probs, const Stream& s) {
  constexpr const char* op = "moe_capacity_drop";
  check_cuda_tensor(op, "ids", ids, DType::kI32);
  check_cuda_tensor(op, "probs", probs, DType::kF32);
  PRIMUS_CHECK(ids.ndim() == 2 && probs.shape() == ids.shape(),
               "{}: ids and probs must both be [T, k], got {} and {}", op, ids.describe(), probs.describe());
  PRIMUS_CHECK(capacity >= 1, "{}: capacity must be >= 1, got {}", op, capacity);
  check_cuda_tensor(op, "kept_ids", kept_ids, DType::kI32);
  check_cuda_tensor(op, "kept_probs", kept_probs, DType::kF32);
  PRIMUS_CHECK(kept_ids.shape() == ids.shape() && kept_probs.shape() == ids.shape(),
               "{}: kept_ids and kept_probs must be {}, got {} and {}", op, shape_str(ids.shape()),
               kept_ids.describe(), kept_probs.describe());
  kept_ids.copy_from(ids, s);
  kept_probs.copy_from(probs, s);
  if (ids.numel() == 0) return;
  const MoePermutePlan plan = moe_permute_plan(ids, num_experts, 0, s);
  capacity_drop_kernel<<<static_cast<int>(num_experts), kThreads, 0, cuda_stream(s)>>>(
      plan.offsets.data<int32_t>(), plan.row_src.data<int32_t>(), probs.data<float>(), capacity,
      policy == MoeDropPolicy::kProbs ? 1 : 0, kept_ids.data<int32_t>(), kept_probs.data<float>());
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace primus::ops::cuda
