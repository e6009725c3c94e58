// CPU reference for softmax cross-entropy. Per row: the max, then one exp per logit (kept in dlogits when it
// is wanted, so the gradient needs no second exp), with the normaliser accumulated in double.
#include <cmath>

#include "ops/cpu/cpu_common.h"
#include "ops/cpu/loss_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

void softmax_cross_entropy(const Tensor& logits, const Tensor& targets, float grad_scale, Tensor& losses,
                           Tensor* dlogits, const Stream& s) {
  constexpr const char* op = "softmax_cross_entropy";
  const DType dt = check_float(op, "logits", logits);
  check_ndim(op, "logits", logits, 2);
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  PRIMUS_CHECK(vocab >= 1, "softmax_cross_entropy: logits need at least one column, got {}",
               logits.describe());
  check_tensor(op, "targets", targets, DType::kI32, {rows});
  check_tensor(op, "losses", losses, dt, {rows});
  PRIMUS_CHECK(!overlaps(losses, logits), "softmax_cross_entropy: losses must not overlap logits");
  if (dlogits != nullptr) {
    check_tensor(op, "dlogits", *dlogits, dt, {rows, vocab});
    PRIMUS_CHECK(same_data(*dlogits, logits) || !overlaps(*dlogits, logits),
                 "softmax_cross_entropy: dlogits must be logits itself or not overlap it");
    PRIMUS_CHECK(!overlaps(*dlogits, losses), "softmax_cross_entropy: dlogits must not overlap losses");
  }
  const int32_t* tgt = targets.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    PRIMUS_CHECK(tgt[r] < vocab, "softmax_cross_entropy: target {} at row {} is out of range [0, {})", tgt[r],
                 r, vocab);
  }
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    T* loss = losses.data<T>();
    T* dx = dlogits != nullptr ? dlogits->data<T>() : nullptr;
    const T gs = static_cast<T>(grad_scale);
#pragma omp parallel for schedule(static) if (rows * vocab > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * vocab;
      T* dr = dx != nullptr ? dx + r * vocab : nullptr;
      const int32_t t = tgt[r];
      if (t < 0) {  // ignored row
        loss[r] = T(0);
        if (dr != nullptr)
          for (int64_t j = 0; j < vocab; ++j) dr[j] = T(0);
        continue;
      }
      const T target_logit = xr[t];  // read before an in-place dlogits overwrites the row
      T mx = xr[0];
      for (int64_t j = 1; j < vocab; ++j) mx = std::max(mx, xr[j]);
      double sum = 0.0;
      if (dr != nullptr) {
        for (int64_t j = 0; j < vocab; ++j) {
          const T e = std::exp(xr[j] - mx);
          dr[j] = e;
          sum += static_cast<double>(e);
        }
      } else {
        for (int64_t j = 0; j < vocab; ++j) sum += static_cast<double>(std::exp(xr[j] - mx));
      }
      const double lse = static_cast<double>(mx) + std::log(sum);
      loss[r] = static_cast<T>(lse - static_cast<double>(target_logit));
      if (dr != nullptr) {
        const double e_t = static_cast<double>(dr[t]);
        const T k = static_cast<T>(static_cast<double>(gs) / sum);
#pragma omp simd
        for (int64_t j = 0; j < vocab; ++j) dr[j] *= k;
        // p_t - 1 in double: when the target dominates, p_t rounds near 1 and the f32 difference would keep
        // only a few correct bits.
        dr[t] = static_cast<T>(static_cast<double>(gs) * (e_t / sum - 1.0));
      }
    }
  });
}

}  // namespace primus::ops::cpu
