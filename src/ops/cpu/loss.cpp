// CPU reference for softmax cross-entropy. Per row: the max, then one exp per logit (kept in dlogits when it
// is wanted, so the gradient needs no second exp), with the normaliser accumulated in double.
//
// The vocabulary-parallel variant splits the same computation at the logsumexp: each rank's (max, sum of exp,
// target logit) per row, merged in double in rank order; the gradient is then exp(x - lse) elementwise, in
// double (the row's normaliser is no longer a local sum the exps could be divided by).
#include <cmath>
#include <limits>

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

namespace {

// The target's column on this rank, or -1 when another rank holds it (or the row is ignored).
int64_t local_target(int32_t t, int64_t vocab_begin, int64_t v_local) {
  const int64_t c = static_cast<int64_t>(t) - vocab_begin;
  return t >= 0 && c >= 0 && c < v_local ? c : -1;
}

}  // namespace

void vocab_parallel_ce_stats(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                             int64_t vocab_total, Tensor& stats, const Stream& s) {
  constexpr const char* op = "vocab_parallel_ce_stats";
  const DType dt = check_float(op, "logits", logits);
  check_ndim(op, "logits", logits, 2);
  const int64_t rows = logits.size(0), v_local = logits.size(1);
  PRIMUS_CHECK(v_local >= 1, "{}: logits need at least one column, got {}", op, logits.describe());
  PRIMUS_CHECK(vocab_begin >= 0 && vocab_begin + v_local <= vocab_total,
               "{}: this rank's columns [{}, {}) must lie in the vocabulary [0, {})", op, vocab_begin,
               vocab_begin + v_local, vocab_total);
  check_tensor(op, "targets", targets, DType::kI32, {rows});
  check_tensor(op, "stats", stats, dt, {rows, 3});
  PRIMUS_CHECK(!overlaps(stats, logits), "{}: stats must not overlap logits", op);
  const int32_t* tgt = targets.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    PRIMUS_CHECK(tgt[r] < vocab_total, "{}: target {} at row {} is out of range [0, {})", op, tgt[r], r,
                 vocab_total);
  }
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    T* st = stats.data<T>();
#pragma omp parallel for schedule(static) if (rows * v_local > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * v_local;
      T* out = st + r * 3;
      if (tgt[r] < 0) {  // ignored row: no statistics (finish never reads them)
        out[0] = out[1] = out[2] = T(0);
        continue;
      }
      T mx = xr[0];
      for (int64_t j = 1; j < v_local; ++j) mx = std::max(mx, xr[j]);
      double sum = 0.0;
      for (int64_t j = 0; j < v_local; ++j) sum += static_cast<double>(std::exp(xr[j] - mx));
      const int64_t c = local_target(tgt[r], vocab_begin, v_local);
      out[0] = mx;
      out[1] = static_cast<T>(sum);
      out[2] = c >= 0 ? xr[c] : T(0);
    }
  });
}

void vocab_parallel_ce_finish(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                              const Tensor& all_stats, float grad_scale, Tensor& losses, Tensor* dlogits,
                              const Stream& s) {
  constexpr const char* op = "vocab_parallel_ce_finish";
  const DType dt = check_float(op, "logits", logits);
  check_ndim(op, "logits", logits, 2);
  const int64_t rows = logits.size(0), v_local = logits.size(1);
  PRIMUS_CHECK(v_local >= 1, "{}: logits need at least one column, got {}", op, logits.describe());
  PRIMUS_CHECK(vocab_begin >= 0, "{}: vocab_begin must be >= 0, got {}", op, vocab_begin);
  check_tensor(op, "targets", targets, DType::kI32, {rows});
  check_host(op, "all_stats", all_stats);
  check_ndim(op, "all_stats", all_stats, 3);
  const int64_t ranks = all_stats.size(0);
  PRIMUS_CHECK(ranks >= 1, "{}: all_stats needs at least one rank, got {}", op, all_stats.describe());
  check_tensor(op, "all_stats", all_stats, dt, {ranks, rows, 3});
  check_tensor(op, "losses", losses, dt, {rows});
  PRIMUS_CHECK(!overlaps(losses, logits) && !overlaps(losses, all_stats),
               "{}: losses must not overlap logits or all_stats", op);
  if (dlogits != nullptr) {
    check_tensor(op, "dlogits", *dlogits, dt, {rows, v_local});
    PRIMUS_CHECK(same_data(*dlogits, logits) || !overlaps(*dlogits, logits),
                 "{}: dlogits must be logits itself or not overlap it", op);
    PRIMUS_CHECK(!overlaps(*dlogits, losses) && !overlaps(*dlogits, all_stats),
                 "{}: dlogits must not overlap losses or all_stats", op);
  }
  const int32_t* tgt = targets.data<int32_t>();
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    const T* st = all_stats.data<T>();
    T* loss = losses.data<T>();
    T* dx = dlogits != nullptr ? dlogits->data<T>() : nullptr;
    const double gs = static_cast<double>(static_cast<T>(grad_scale));
#pragma omp parallel for schedule(static) if (rows * v_local > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * v_local;
      T* dr = dx != nullptr ? dx + r * v_local : nullptr;
      if (tgt[r] < 0) {  // ignored row
        loss[r] = T(0);
        if (dr != nullptr)
          for (int64_t j = 0; j < v_local; ++j) dr[j] = T(0);
        continue;
      }
      // Merge the ranks' statistics in rank order: the same numbers in the same order on every rank.
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t p = 0; p < ranks; ++p) mx = std::max(mx, static_cast<double>(st[(p * rows + r) * 3]));
      double sum = 0.0, target_logit = 0.0;
      for (int64_t p = 0; p < ranks; ++p) {
        const T* sp = st + (p * rows + r) * 3;
        sum += static_cast<double>(sp[1]) * std::exp(static_cast<double>(sp[0]) - mx);
        target_logit += static_cast<double>(sp[2]);
      }
      const double lse = mx + std::log(sum);
      loss[r] = static_cast<T>(lse - target_logit);
      if (dr == nullptr) continue;
      const int64_t c = local_target(tgt[r], vocab_begin, v_local);
      const double x_t = c >= 0 ? static_cast<double>(xr[c]) : 0.0;  // read before an in-place dlogits
#pragma omp simd
      for (int64_t j = 0; j < v_local; ++j)
        dr[j] = static_cast<T>(gs * std::exp(static_cast<double>(xr[j]) - lse));
      // p_t - 1 in double: when the target dominates, p_t rounds near 1 and the difference would keep only a
      // few correct bits.
      if (c >= 0) dr[c] = static_cast<T>(gs * (std::exp(x_t - lse) - 1.0));
    }
  });
}

}  // namespace primus::ops::cpu
