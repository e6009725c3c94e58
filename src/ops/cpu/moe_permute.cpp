// CPU reference of the MoE token permutation: the plan by a counting sort over the slots in token order (so
// the order inside an expert is the token order), gathers and k-term sums in j order in double.
#include <vector>

#include "ops/cpu/cpu_common.h"
#include "ops/cpu/moe_permute_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

void check_plan(const char* op, const MoePermutePlan& plan) {
  const int64_t slots = plan.num_tokens * plan.topk;
  check_tensor(op, "plan.counts", plan.counts, DType::kI32, {plan.num_experts});
  check_tensor(op, "plan.offsets", plan.offsets, DType::kI32, {plan.num_experts + 1});
  check_tensor(op, "plan.row_src", plan.row_src, DType::kI32, {plan.num_rows});
  check_tensor(op, "plan.slot_row", plan.slot_row, DType::kI32, {slots});
}

// rows x d of the float dtype of `like`.
void check_rows(const char* op, const char* name, const Tensor& t, DType dt, int64_t rows, int64_t d) {
  check_tensor(op, name, t, dt, {rows, d});
}

}  // namespace

MoePermutePlan moe_permute_plan(const Tensor& ids, int64_t num_experts, int64_t capacity, const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_permute_plan";
  check_host(op, "ids", ids);
  check_dtype(op, "ids", ids, DType::kI32);
  check_ndim(op, "ids", ids, 2);
  PRIMUS_CHECK(num_experts >= 1, "{}: num_experts must be >= 1, got {}", op, num_experts);
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
  const int32_t* id = ids.data<int32_t>();
  for (int64_t sl = 0; sl < slots; ++sl)
    PRIMUS_CHECK(id[sl] >= -1 && id[sl] < num_experts, "{}: ids[{}, {}] = {} is outside [-1, {})", op,
                 sl / plan.topk, sl % plan.topk, id[sl], num_experts);

  plan.counts = Tensor::zeros({num_experts}, DType::kI32);
  plan.offsets = Tensor::empty({num_experts + 1}, DType::kI32);
  plan.row_src = Tensor::empty({plan.num_rows}, DType::kI32);
  plan.slot_row = Tensor::empty({slots}, DType::kI32);
  int32_t* counts = plan.counts.data<int32_t>();
  int32_t* offsets = plan.offsets.data<int32_t>();
  int32_t* row_src = plan.row_src.data<int32_t>();
  int32_t* slot_row = plan.slot_row.data<int32_t>();
  for (int64_t sl = 0; sl < slots; ++sl)
    if (id[sl] >= 0 && (capacity == 0 || counts[id[sl]] < capacity)) ++counts[id[sl]];
  offsets[0] = 0;
  for (int64_t e = 0; e < num_experts; ++e)
    offsets[e + 1] = static_cast<int32_t>(capacity > 0 ? (e + 1) * capacity : offsets[e] + counts[e]);
  std::fill(row_src, row_src + plan.num_rows, -1);
  std::vector<int32_t> fill(offsets, offsets + num_experts);
  for (int64_t sl = 0; sl < slots; ++sl) {
    const int32_t e = id[sl];
    if (e < 0 || fill[e] == offsets[e] + counts[e]) {  // dropped before, or beyond the capacity
      slot_row[sl] = -1;
      continue;
    }
    slot_row[sl] = fill[e];
    row_src[fill[e]++] = static_cast<int32_t>(sl);
  }
  return plan;
}

void moe_permute(const Tensor& x, const MoePermutePlan& plan, Tensor& x_perm, const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_permute";
  const DType dt = check_float(op, "x", x);
  check_ndim(op, "x", x, 2);
  check_plan(op, plan);
  const int64_t d = x.size(1);
  check_rows(op, "x", x, dt, plan.num_tokens, d);
  check_rows(op, "x_perm", x_perm, dt, plan.num_rows, d);
  const int32_t* src = plan.row_src.data<int32_t>();
  const size_t row_bytes = static_cast<size_t>(d) * dtype_size(dt);
  const char* xp = static_cast<const char*>(x.data_ptr());
  char* out = static_cast<char*>(x_perm.data_ptr());
#pragma omp parallel for schedule(static) if (plan.num_rows * d > kParallelGrain)
  for (int64_t r = 0; r < plan.num_rows; ++r) {
    if (src[r] < 0)
      std::memset(out + r * row_bytes, 0, row_bytes);
    else
      std::memcpy(out + r * row_bytes, xp + (src[r] / plan.topk) * row_bytes, row_bytes);
  }
}

void moe_permute_backward(const Tensor& dx_perm, const MoePermutePlan& plan, Tensor& dx, const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_permute_backward";
  const DType dt = check_float(op, "dx_perm", dx_perm);
  check_ndim(op, "dx_perm", dx_perm, 2);
  check_plan(op, plan);
  const int64_t d = dx_perm.size(1), k = plan.topk;
  check_rows(op, "dx_perm", dx_perm, dt, plan.num_rows, d);
  check_rows(op, "dx", dx, dt, plan.num_tokens, d);
  const int32_t* row = plan.slot_row.data<int32_t>();
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* g = dx_perm.data<T>();
    T* out = dx.data<T>();
#pragma omp parallel for schedule(static) if (plan.num_tokens * d > kParallelGrain)
    for (int64_t t = 0; t < plan.num_tokens; ++t) {
      std::vector<double> acc(static_cast<size_t>(d), 0.0);
      for (int64_t j = 0; j < k; ++j) {
        const int32_t r = row[t * k + j];
        if (r < 0) continue;
        for (int64_t c = 0; c < d; ++c) acc[c] += static_cast<double>(g[r * d + c]);
      }
      for (int64_t c = 0; c < d; ++c) out[t * d + c] = static_cast<T>(acc[c]);
    }
  });
}

void moe_unpermute(const Tensor& y_perm, const MoePermutePlan& plan, const Tensor& probs, Tensor& out,
                   const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_unpermute";
  const DType dt = check_float(op, "y_perm", y_perm);
  check_ndim(op, "y_perm", y_perm, 2);
  check_plan(op, plan);
  const int64_t d = y_perm.size(1), k = plan.topk;
  check_rows(op, "y_perm", y_perm, dt, plan.num_rows, d);
  check_tensor(op, "probs", probs, dt, {plan.num_tokens, k});
  check_rows(op, "out", out, dt, plan.num_tokens, d);
  const int32_t* row = plan.slot_row.data<int32_t>();
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* y = y_perm.data<T>();
    const T* p = probs.data<T>();
    T* o = out.data<T>();
#pragma omp parallel for schedule(static) if (plan.num_tokens * d > kParallelGrain)
    for (int64_t t = 0; t < plan.num_tokens; ++t) {
      std::vector<double> acc(static_cast<size_t>(d), 0.0);
      for (int64_t j = 0; j < k; ++j) {
        const int32_t r = row[t * k + j];
        if (r < 0) continue;
        const double w = static_cast<double>(p[t * k + j]);
        for (int64_t c = 0; c < d; ++c) acc[c] += w * static_cast<double>(y[r * d + c]);
      }
      for (int64_t c = 0; c < d; ++c) o[t * d + c] = static_cast<T>(acc[c]);
    }
  });
}

void moe_unpermute_backward(const Tensor& dout, const Tensor& y_perm, const MoePermutePlan& plan,
                            const Tensor& probs, Tensor& dy_perm, Tensor& dprobs, const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_unpermute_backward";
  const DType dt = check_float(op, "dout", dout);
  check_ndim(op, "dout", dout, 2);
  check_plan(op, plan);
  const int64_t d = dout.size(1), k = plan.topk;
  check_rows(op, "dout", dout, dt, plan.num_tokens, d);
  check_rows(op, "y_perm", y_perm, dt, plan.num_rows, d);
  check_tensor(op, "probs", probs, dt, {plan.num_tokens, k});
  check_rows(op, "dy_perm", dy_perm, dt, plan.num_rows, d);
  check_tensor(op, "dprobs", dprobs, dt, {plan.num_tokens, k});
  const int32_t* row = plan.slot_row.data<int32_t>();
  const int32_t* src = plan.row_src.data<int32_t>();
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* g = dout.data<T>();
    const T* y = y_perm.data<T>();
    const T* p = probs.data<T>();
    T* dy = dy_perm.data<T>();
    T* dp = dprobs.data<T>();
#pragma omp parallel for schedule(static) if (plan.num_rows * d > kParallelGrain)
    for (int64_t r = 0; r < plan.num_rows; ++r) {
      T* out = dy + r * d;
      if (src[r] < 0) {
        std::fill(out, out + d, T(0));
        continue;
      }
      const T* gt = g + (src[r] / k) * d;
      const double w = static_cast<double>(p[src[r]]);
      for (int64_t c = 0; c < d; ++c) out[c] = static_cast<T>(w * static_cast<double>(gt[c]));
    }
#pragma omp parallel for schedule(static) if (plan.num_tokens * k * d > kParallelGrain)
    for (int64_t sl = 0; sl < plan.num_tokens * k; ++sl) {
      const int32_t r = row[sl];
      double acc = 0.0;
      if (r >= 0) {
        const T* gt = g + (sl / k) * d;
        for (int64_t c = 0; c < d; ++c) acc += static_cast<double>(gt[c]) * static_cast<double>(y[r * d + c]);
      }
      dp[sl] = static_cast<T>(acc);
    }
  });
}

}  // namespace primus::ops::cpu
