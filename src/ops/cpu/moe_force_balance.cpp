// CPU reference of forced MoE load balancing (ops/moe_router.h): the random router logits of Megatron's
// "uniform", the round-robin dispatch of Primus's "even" and TorchTitan's debug balancing, and the
// descending-probability reordering "even" carries the router's weights with. moe_router_probs, which needs
// the router's probability kinds, is in moe_router.cpp.
#include <algorithm>
#include <vector>

#include "core/portable_normal.h"
#include "ops/cpu/cpu_common.h"
#include "ops/cpu/moe_router_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

void moe_random_logits(const MoeRandomLogitsKey& key, Tensor& logits, const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_random_logits";
  const DType dt = check_float(op, "logits", logits);
  check_ndim(op, "logits", logits, 2);
  const int64_t rows = logits.size(0), e_count = logits.size(1);
  validate_moe_random_logits(key, rows, e_count);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    T* x = logits.data<T>();
#pragma omp parallel for schedule(static) if (rows * e_count > kParallelGrain / 16)
    for (int64_t t = 0; t < rows; ++t) {
      const uint64_t sample = static_cast<uint64_t>(key.first_sample + t / key.seq_len);
      const uint64_t pos = static_cast<uint64_t>(key.pos_offset + t % key.seq_len);
      for (int64_t e = 0; e < e_count; ++e)
        x[t * e_count + e] =
            static_cast<T>(portable_normal(key.stream, sample, (pos << 32) | static_cast<uint64_t>(e)));
    }
  });
}

void moe_round_robin_ids(int64_t num_experts, int64_t num_seqs, Tensor& ids, const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_round_robin_ids";
  check_host(op, "ids", ids);
  check_dtype(op, "ids", ids, DType::kI32);
  check_ndim(op, "ids", ids, 2);
  const int64_t rows = ids.size(0), k = ids.size(1);
  validate_moe_round_robin(num_experts, num_seqs, rows, k);
  const int64_t seq = rows / num_seqs;
  int32_t* out = ids.data<int32_t>();
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t n = (t % seq) * num_seqs + t / seq;  // sequence-major number of batch-major row t
    for (int64_t j = 0; j < k; ++j) out[t * k + j] = static_cast<int32_t>((n * k + j) % num_experts);
  }
}

void moe_sort_by_prob(const Tensor& ids, const Tensor& probs, Tensor& sorted_ids, Tensor& sorted_probs,
                      const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_sort_by_prob";
  const DType dt = check_float(op, "probs", probs);
  check_ndim(op, "probs", probs, 2);
  const int64_t rows = probs.size(0), k = probs.size(1);
  check_tensor(op, "ids", ids, DType::kI32, {rows, k});
  check_tensor(op, "sorted_ids", sorted_ids, DType::kI32, {rows, k});
  check_tensor(op, "sorted_probs", sorted_probs, dt, {rows, k});
  // In place, or apart: each row is read whole before it is written.
  PRIMUS_CHECK(same_data(ids, sorted_ids) || !overlaps(ids, sorted_ids),
               "{}: sorted_ids must be ids itself or not overlap it", op);
  PRIMUS_CHECK(same_data(probs, sorted_probs) || !overlaps(probs, sorted_probs),
               "{}: sorted_probs must be probs itself or not overlap it", op);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const int32_t* id = ids.data<int32_t>();
    const T* p = probs.data<T>();
    int32_t* sid = sorted_ids.data<int32_t>();
    T* sp = sorted_probs.data<T>();
    std::vector<int32_t> rid(static_cast<size_t>(k));
    std::vector<T> rp(static_cast<size_t>(k));
    for (int64_t t = 0; t < rows; ++t) {
      // Insertion sort, as the GPU's: an entry moves before another only if strictly larger (stable, and
      // a NaN stays where it is on both devices).
      for (int64_t j = 0; j < k; ++j) {
        const int32_t xi = id[t * k + j];
        const T xp = p[t * k + j];
        int64_t i = j;
        for (; i > 0 && xp > rp[i - 1]; --i) {
          rp[i] = rp[i - 1];
          rid[i] = rid[i - 1];
        }
        rp[i] = xp;
        rid[i] = xi;
      }
      std::copy(rid.begin(), rid.end(), sid + t * k);
      std::copy(rp.begin(), rp.end(), sp + t * k);
    }
  });
}

}  // namespace primus::ops::cpu
