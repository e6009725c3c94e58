// Forced MoE load balancing on the GPU (ops/moe_router.h): the random router logits (one thread per logit;
// core/portable_normal.h makes each value bitwise the CPU reference's), the round-robin ids, and the
// per-token descending reordering of Primus's "even" (one thread per token, the CPU's insertion sort, so
// ties and NaNs land where they land on the CPU). moe_router_probs is in moe_router.cu (it shares the
// router's warp machinery).
#include "ops/cuda/kernel_utils.cuh"

#include <algorithm>

#include "core/portable_normal.h"
#include "ops/cuda/moe_router_cuda.h"

namespace primus::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTopk = 32;  // as the router kernels

int grid_for(int64_t n) {
  // Grid-stride loops: at most 2^16 blocks, enough to fill the GPU many times over.
  return static_cast<int>(std::min<int64_t>(ceil_div<int64_t>(n, kThreads), int64_t{1} << 16));
}

__global__ void random_logits_kernel(uint64_t stream, int64_t first_sample, int64_t seq_len,
                                     int64_t pos_offset, int64_t rows, int64_t e, float* __restrict__ x) {
  const int64_t n = rows * e;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / e, ex = i % e;
    const uint64_t sample = static_cast<uint64_t>(first_sample + t / seq_len);
    const uint64_t pos = static_cast<uint64_t>(pos_offset + t % seq_len);
    x[i] = portable_normal(stream, sample, (pos << 32) | static_cast<uint64_t>(ex));
  }
}

__global__ void round_robin_kernel(int64_t rows, int64_t k, int64_t e, int64_t num_seqs,
                                   int32_t* __restrict__ ids) {
  const int64_t total = rows * k, seq = rows / num_seqs;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / k, j = i % k;
    const int64_t n = (t % seq) * num_seqs + t / seq;  // sequence-major number of batch-major row t
    ids[i] = static_cast<int32_t>((n * k + j) % e);
  }
}

__global__ void sort_by_prob_kernel(const int32_t* ids, const float* probs, int64_t rows, int k,
                                    int32_t* sorted_ids, float* sorted_probs) {
  // Not __restrict__: the outputs may be the inputs (each row is read whole before it is written).
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < rows;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int32_t rid[kMaxTopk];
    float rp[kMaxTopk];
    for (int j = 0; j < k; ++j) {
      const int32_t xi = ids[t * k + j];
      const float xp = probs[t * k + j];
      int i = j;
      for (; i > 0 && xp > rp[i - 1]; --i) {
        rp[i] = rp[i - 1];
        rid[i] = rid[i - 1];
      }
      rp[i] = xp;
      rid[i] = xi;
    }
    for (int j = 0; j < k; ++j) {
      sorted_ids[t * k + j] = rid[j];
      sorted_probs[t * k + j] = rp[j];
    }
  }
}

using detail::check_cuda_tensor;

void check_shape(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  PRIMUS_CHECK(t.shape() == shape, "{}: {} must be {}, got {}", op, name, shape_str(shape), t.describe());
}

bool overlaps(const Tensor& a, const Tensor& b) {
  const char* a0 = static_cast<const char*>(a.data_ptr());
  const char* b0 = static_cast<const char*>(b.data_ptr());
  return a.nbytes() > 0 && b.nbytes() > 0 && a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

}  // namespace

void moe_random_logits(const MoeRandomLogitsKey& key, Tensor& logits, const Stream& s) {
  constexpr const char* op = "moe_random_logits";
  check_cuda_tensor(op, "logits", logits, DType::kF32);
  PRIMUS_CHECK(logits.ndim() == 2, "{}: logits must be [T, E], got {}", op, logits.describe());
  const int64_t rows = logits.size(0), e = logits.size(1);
  validate_moe_random_logits(key, rows, e);
  if (rows == 0) return;
  random_logits_kernel<<<grid_for(rows * e), kThreads, 0, cuda_stream(s)>>>(
      key.stream, key.first_sample, key.seq_len, key.pos_offset, rows, e, logits.data<float>());
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void moe_round_robin_ids(int64_t num_experts, int64_t num_seqs, Tensor& ids, const Stream& s) {
  constexpr const char* op = "moe_round_robin_ids";
  check_cuda_tensor(op, "ids", ids, DType::kI32);
  PRIMUS_CHECK(ids.ndim() == 2, "{}: ids must be [T, k], got {}", op, ids.describe());
  const int64_t rows = ids.size(0), k = ids.size(1);
  validate_moe_round_robin(num_experts, num_seqs, rows, k);
  if (rows == 0) return;
  round_robin_kernel<<<grid_for(rows * k), kThreads, 0, cuda_stream(s)>>>(rows, k, num_experts, num_seqs,
                                                                          ids.data<int32_t>());
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void moe_sort_by_prob(const Tensor& ids, const Tensor& probs, Tensor& sorted_ids, Tensor& sorted_probs,
                      const Stream& s) {
  constexpr const char* op = "moe_sort_by_prob";
  check_cuda_tensor(op, "probs", probs, DType::kF32);
  PRIMUS_CHECK(probs.ndim() == 2, "{}: probs must be [T, k], got {}", op, probs.describe());
  const int64_t rows = probs.size(0), k = probs.size(1);
  PRIMUS_CHECK(k >= 1 && k <= kMaxTopk, "{}: the CUDA sort takes 1 <= k <= {}, got {}", op, kMaxTopk, k);
  check_cuda_tensor(op, "ids", ids, DType::kI32);
  check_shape(op, "ids", ids, {rows, k});
  check_cuda_tensor(op, "sorted_ids", sorted_ids, DType::kI32);
  check_shape(op, "sorted_ids", sorted_ids, {rows, k});
  check_cuda_tensor(op, "sorted_probs", sorted_probs, DType::kF32);
  check_shape(op, "sorted_probs", sorted_probs, {rows, k});
  PRIMUS_CHECK(ids.data_ptr() == sorted_ids.data_ptr() || !overlaps(ids, sorted_ids),
               "{}: sorted_ids must be ids itself or not overlap it", op);
  PRIMUS_CHECK(probs.data_ptr() == sorted_probs.data_ptr() || !overlaps(probs, sorted_probs),
               "{}: sorted_probs must be probs itself or not overlap it", op);
  if (rows == 0) return;
  sort_by_prob_kernel<<<grid_for(rows), kThreads, 0, cuda_stream(s)>>>(
      ids.data<int32_t>(), probs.data<float>(), rows, static_cast<int>(k), sorted_ids.data<int32_t>(),
      sorted_probs.data<float>());
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace primus::ops::cuda
