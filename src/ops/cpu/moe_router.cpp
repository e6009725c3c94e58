// CPU reference of the MoE router ops. Selection follows moe_router.h exactly (selection scores rounded to
// the logits' type, ties to the lower expert id) so that the GPU can be compared id for id; probabilities,
// losses and gradients are computed in double and rounded once.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ops/cpu/cpu_common.h"
#include "ops/cpu/moe_router_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

// a (id ia) ranks before b (id ib): the larger value, the lower id among equals.
template <typename T>
bool ranks_before(T a, int64_t ia, T b, int64_t ib) {
  return a > b || (a == b && ia < ib);
}

// The k best entries of v[0..n) among those with allowed(i), in rank order.
template <typename T, typename Allowed>
void topk_indices(const T* v, int64_t n, int64_t k, Allowed allowed, int64_t* out) {
  std::vector<char> taken(static_cast<size_t>(n), 0);
  for (int64_t r = 0; r < k; ++r) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i) {
      if (taken[i] || !allowed(i)) continue;
      if (best < 0 || ranks_before(v[i], i, v[best], best)) best = i;
    }
    PRIMUS_CHECK(best >= 0, "moe router: fewer than {} selectable experts", k);
    taken[best] = 1;
    out[r] = best;
  }
}

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// Selection scores of one row (see moe_router.h).
template <typename T>
void selection_scores(const T* x, const T* bias, int64_t e_count, const MoeRouterConfig& cfg, T* sel) {
  if (cfg.score == MoeScoreFunction::kSigmoid) {
    for (int64_t e = 0; e < e_count; ++e) sel[e] = static_cast<T>(sigmoid(static_cast<double>(x[e])));
  } else if (cfg.pre_softmax) {
    const double m = static_cast<double>(*std::max_element(x, x + e_count));
    for (int64_t e = 0; e < e_count; ++e) sel[e] = static_cast<T>(std::exp(static_cast<double>(x[e]) - m));
  } else {
    for (int64_t e = 0; e < e_count; ++e) sel[e] = x[e];
  }
  if (bias != nullptr)
    for (int64_t e = 0; e < e_count; ++e) sel[e] = sel[e] + bias[e];
}

// Top-k of one row's selection scores, group-limited when cfg asks for it.
template <typename T>
void select_row(const T* sel, int64_t e_count, const MoeRouterConfig& cfg, int64_t* chosen) {
  if (cfg.num_groups == 0) {
    topk_indices(
        sel, e_count, cfg.topk, [](int64_t) { return true; }, chosen);
    return;
  }
  const int64_t groups = cfg.num_groups, gsize = e_count / groups, m = cfg.topk / cfg.group_topk;
  std::vector<T> gscore(static_cast<size_t>(groups));
  std::vector<int64_t> top(static_cast<size_t>(m));
  for (int64_t g = 0; g < groups; ++g) {
    topk_indices(
        sel + g * gsize, gsize, m, [](int64_t) { return true; }, top.data());
    T acc = T(0);  // largest first, the order the GPU adds them in
    for (int64_t r = 0; r < m; ++r) acc = acc + sel[g * gsize + top[r]];
    gscore[g] = acc;
  }
  std::vector<int64_t> kept(static_cast<size_t>(cfg.group_topk));
  topk_indices(
      gscore.data(), groups, cfg.group_topk, [](int64_t) { return true; }, kept.data());
  std::vector<char> allowed(static_cast<size_t>(groups), 0);
  for (int64_t g : kept) allowed[g] = 1;
  topk_indices(
      sel, e_count, cfg.topk, [&](int64_t e) { return allowed[e / gsize] != 0; }, chosen);
}

enum class ProbKind { kSoftmaxOfChosen, kFullSoftmax, kSigmoidNormalized, kSigmoid };

ProbKind prob_kind(const MoeRouterConfig& cfg) {
  if (cfg.score == MoeScoreFunction::kSoftmax)
    return (!cfg.pre_softmax || cfg.normalize) ? ProbKind::kSoftmaxOfChosen : ProbKind::kFullSoftmax;
  return (cfg.normalize && cfg.topk > 1) ? ProbKind::kSigmoidNormalized : ProbKind::kSigmoid;
}

// Unscaled probabilities of the chosen experts of one row, in double; `full` receives the full softmax
// (kFullSoftmax) or the chosen sigmoids (sigmoid kinds) the backward needs.
template <typename T>
void row_probs(const T* x, int64_t e_count, const int32_t* ids, int64_t k, ProbKind kind, double* p,
               std::vector<double>& full) {
  switch (kind) {
    case ProbKind::kSoftmaxOfChosen: {
      double m = -INFINITY;
      for (int64_t j = 0; j < k; ++j) m = std::max(m, static_cast<double>(x[ids[j]]));
      double sum = 0.0;
      for (int64_t j = 0; j < k; ++j) sum += p[j] = std::exp(static_cast<double>(x[ids[j]]) - m);
      for (int64_t j = 0; j < k; ++j) p[j] /= sum;
      return;
    }
    case ProbKind::kFullSoftmax: {
      full.resize(static_cast<size_t>(e_count));
      const double m = static_cast<double>(*std::max_element(x, x + e_count));
      double sum = 0.0;
      for (int64_t e = 0; e < e_count; ++e) sum += full[e] = std::exp(static_cast<double>(x[e]) - m);
      for (int64_t e = 0; e < e_count; ++e) full[e] /= sum;
      for (int64_t j = 0; j < k; ++j) p[j] = full[ids[j]];
      return;
    }
    case ProbKind::kSigmoidNormalized:
    case ProbKind::kSigmoid: {
      full.resize(static_cast<size_t>(k));
      double sum = 0.0;
      for (int64_t j = 0; j < k; ++j) sum += full[j] = sigmoid(static_cast<double>(x[ids[j]]));
      const double den = kind == ProbKind::kSigmoid ? 1.0 : sum + 1e-20;
      for (int64_t j = 0; j < k; ++j) p[j] = full[j] / den;
      return;
    }
  }
}

void check_ids(const char* op, const Tensor& ids, int64_t rows, int64_t k, int64_t e_count) {
  check_tensor(op, "ids", ids, DType::kI32, {rows, k});
  const int32_t* p = ids.data<int32_t>();
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = p[t * k + j];
      PRIMUS_CHECK(e >= 0 && e < e_count, "{}: ids[{}, {}] = {} is out of range [0, {})", op, t, j, e,
                   e_count);
      for (int64_t i = 0; i < j; ++i)
        PRIMUS_CHECK(p[t * k + i] != e, "{}: row {} of ids names expert {} twice", op, t, e);
    }
  }
}

}  // namespace

void moe_router_forward(const Tensor& logits, const Tensor* expert_bias, const MoeRouterConfig& cfg,
                        Tensor& ids, Tensor& probs, const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_router_forward";
  const DType dt = check_float(op, "logits", logits);
  check_ndim(op, "logits", logits, 2);
  const int64_t rows = logits.size(0), e_count = logits.size(1), k = cfg.topk;
  validate_moe_router_config(cfg, e_count);
  if (expert_bias != nullptr) check_tensor(op, "expert_bias", *expert_bias, dt, {e_count});
  check_tensor(op, "ids", ids, DType::kI32, {rows, k});
  check_tensor(op, "probs", probs, dt, {rows, k});
  const ProbKind kind = prob_kind(cfg);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    const T* b = expert_bias != nullptr ? expert_bias->data<T>() : nullptr;
    int32_t* out_ids = ids.data<int32_t>();
    T* out_p = probs.data<T>();
#pragma omp parallel for schedule(static) if (rows * e_count > kParallelGrain)
    for (int64_t t = 0; t < rows; ++t) {
      std::vector<T> sel(static_cast<size_t>(e_count));
      std::vector<int64_t> chosen(static_cast<size_t>(k));
      std::vector<double> p(static_cast<size_t>(k)), full;
      selection_scores(x + t * e_count, b, e_count, cfg, sel.data());
      select_row(sel.data(), e_count, cfg, chosen.data());
      for (int64_t j = 0; j < k; ++j) out_ids[t * k + j] = static_cast<int32_t>(chosen[j]);
      row_probs(x + t * e_count, e_count, out_ids + t * k, k, kind, p.data(), full);
      for (int64_t j = 0; j < k; ++j) out_p[t * k + j] = static_cast<T>(p[j] * cfg.scaling_factor);
    }
  });
}

void moe_router_probs(const Tensor& logits, const Tensor& ids, const MoeRouterConfig& cfg, Tensor& probs,
                      const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_router_probs";
  const DType dt = check_float(op, "logits", logits);
  check_ndim(op, "logits", logits, 2);
  const int64_t rows = logits.size(0), e_count = logits.size(1), k = cfg.topk;
  validate_moe_router_config(cfg, e_count);
  check_ids(op, ids, rows, k, e_count);
  check_tensor(op, "probs", probs, dt, {rows, k});
  const ProbKind kind = prob_kind(cfg);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    const int32_t* id = ids.data<int32_t>();
    T* out_p = probs.data<T>();
#pragma omp parallel for schedule(static) if (rows * e_count > kParallelGrain)
    for (int64_t t = 0; t < rows; ++t) {
      std::vector<double> p(static_cast<size_t>(k)), full;
      row_probs(x + t * e_count, e_count, id + t * k, k, kind, p.data(), full);
      for (int64_t j = 0; j < k; ++j) out_p[t * k + j] = static_cast<T>(p[j] * cfg.scaling_factor);
    }
  });
}

void moe_router_backward(const Tensor& logits, const Tensor& ids, const Tensor& dprobs,
                         const MoeRouterConfig& cfg, Tensor& dlogits, const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_router_backward";
  const DType dt = check_float(op, "logits", logits);
  check_ndim(op, "logits", logits, 2);
  const int64_t rows = logits.size(0), e_count = logits.size(1), k = cfg.topk;
  validate_moe_router_config(cfg, e_count);
  check_ids(op, ids, rows, k, e_count);
  check_tensor(op, "dprobs", dprobs, dt, {rows, k});
  check_tensor(op, "dlogits", dlogits, dt, {rows, e_count});
  const ProbKind kind = prob_kind(cfg);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    const int32_t* id = ids.data<int32_t>();
    const T* dp = dprobs.data<T>();
    T* dx = dlogits.data<T>();
#pragma omp parallel for schedule(static) if (rows * e_count > kParallelGrain)
    for (int64_t t = 0; t < rows; ++t) {
      const T* xr = x + t * e_count;
      const int32_t* ir = id + t * k;
      T* dr = dx + t * e_count;
      std::vector<double> p(static_cast<size_t>(k)), full, g(static_cast<size_t>(k));
      row_probs(xr, e_count, ir, k, kind, p.data(), full);
      for (int64_t j = 0; j < k; ++j) g[j] = static_cast<double>(dp[t * k + j]) * cfg.scaling_factor;
      std::fill(dr, dr + e_count, T(0));
      double pg = 0.0;  // sum_j p_j g_j
      for (int64_t j = 0; j < k; ++j) pg += p[j] * g[j];
      switch (kind) {
        case ProbKind::kSoftmaxOfChosen:
          for (int64_t j = 0; j < k; ++j) dr[ir[j]] = static_cast<T>(p[j] * (g[j] - pg));
          break;
        case ProbKind::kFullSoftmax: {
          std::vector<double> gfull(static_cast<size_t>(e_count), 0.0);
          for (int64_t j = 0; j < k; ++j) gfull[ir[j]] = g[j];
          for (int64_t e = 0; e < e_count; ++e) dr[e] = static_cast<T>(full[e] * (gfull[e] - pg));
          break;
        }
        case ProbKind::kSigmoidNormalized:
        case ProbKind::kSigmoid: {
          double sum = 0.0;
          for (int64_t j = 0; j < k; ++j) sum += full[j];
          for (int64_t j = 0; j < k; ++j) {
            // p_j = s_j / S: ds_j = (g_j - sum_i g_i p_i) / S; unnormalised: ds_j = g_j.
            const double ds = kind == ProbKind::kSigmoid ? g[j] : (g[j] - pg) / (sum + 1e-20);
            dr[ir[j]] = static_cast<T>(ds * full[j] * (1.0 - full[j]));
          }
          break;
        }
      }
    }
  });
}

void moe_aux_counts(const Tensor& logits, int64_t topk, const MoeAuxSeqs& seqs, Tensor& counts,
                    const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_aux_counts";
  const DType dt = check_float(op, "logits", logits);
  check_ndim(op, "logits", logits, 2);
  const int64_t rows = logits.size(0), e_count = logits.size(1);
  PRIMUS_CHECK(topk >= 1 && topk <= e_count, "{}: topk must be in [1, {}], got {}", op, e_count, topk);
  check_tensor(op, "counts", counts, DType::kI32, {seqs.num_seqs, e_count});
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    // Counts per sequence from the plain top-k of the logits (the top-k of the scores: same order).
    int32_t* c = counts.data<int32_t>();
    std::fill(c, c + seqs.num_seqs * e_count, 0);
    std::vector<int64_t> chosen(static_cast<size_t>(topk));
    for (int64_t t = 0; t < rows; ++t) {
      topk_indices(
          x + t * e_count, e_count, topk, [](int64_t) { return true; }, chosen.data());
      for (int64_t e : chosen) ++c[((t / seqs.chunk) % seqs.num_seqs) * e_count + e];
    }
  });
}

void moe_aux_loss_from_counts(const Tensor& logits, const Tensor& counts, int64_t topk,
                              MoeScoreFunction score, const MoeAuxSeqs& seqs, float coeff, float grad_scale,
                              Tensor& loss, Tensor* dlogits, const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_aux_loss_from_counts";
  const DType dt = check_float(op, "logits", logits);
  check_ndim(op, "logits", logits, 2);
  const int64_t rows = logits.size(0), e_count = logits.size(1);
  PRIMUS_CHECK(topk >= 1 && topk <= e_count, "{}: topk must be in [1, {}], got {}", op, e_count, topk);
  check_tensor(op, "counts", counts, DType::kI32, {seqs.num_seqs, e_count});
  check_tensor(op, "loss", loss, dt, {1});
  if (dlogits != nullptr) check_tensor(op, "dlogits", *dlogits, dt, {rows, e_count});
  const int32_t* cnt = counts.data<int32_t>();
  auto count = [&](int64_t t, int64_t e) {
    return static_cast<double>(cnt[((t / seqs.chunk) % seqs.num_seqs) * e_count + e]);
  };
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    const double w = static_cast<double>(coeff) * e_count /
                     (static_cast<double>(topk) * seqs.num_seqs * static_cast<double>(seqs.seq_tokens) *
                      static_cast<double>(seqs.seq_tokens));
    // Scores of row t in double.
    auto scores = [&](int64_t t, std::vector<double>& sc, std::vector<double>& sig) {
      const T* xr = x + t * e_count;
      double sum = 0.0;
      if (score == MoeScoreFunction::kSoftmax) {
        const double m = static_cast<double>(*std::max_element(xr, xr + e_count));
        for (int64_t e = 0; e < e_count; ++e) sum += sc[e] = std::exp(static_cast<double>(xr[e]) - m);
        for (int64_t e = 0; e < e_count; ++e) sc[e] /= sum;
        return 1.0;
      }
      for (int64_t e = 0; e < e_count; ++e) sum += sig[e] = sigmoid(static_cast<double>(xr[e]));
      for (int64_t e = 0; e < e_count; ++e) sc[e] = sig[e] / (sum + 1e-20);
      return sum + 1e-20;
    };
    const double total = deterministic_sum(rows, [&](int64_t t) {
      std::vector<double> sc(static_cast<size_t>(e_count)), sig(static_cast<size_t>(e_count));
      scores(t, sc, sig);
      double acc = 0.0;
      for (int64_t e = 0; e < e_count; ++e) acc += sc[e] * count(t, e);
      return acc;
    });
    loss.data<T>()[0] = static_cast<T>(w * total);
    if (dlogits == nullptr) return;
    T* dx = dlogits->data<T>();
#pragma omp parallel for schedule(static) if (rows * e_count > kParallelGrain)
    for (int64_t t = 0; t < rows; ++t) {
      std::vector<double> sc(static_cast<size_t>(e_count)), sig(static_cast<size_t>(e_count)),
          g(static_cast<size_t>(e_count));
      const double den = scores(t, sc, sig);
      double sg = 0.0;
      for (int64_t e = 0; e < e_count; ++e) {
        g[e] = static_cast<double>(grad_scale) * w * count(t, e);
        sg += sc[e] * g[e];
      }
      T* dr = dx + t * e_count;
      for (int64_t e = 0; e < e_count; ++e) {
        const double d = score == MoeScoreFunction::kSoftmax ? sc[e] * (g[e] - sg)
                                                             : (g[e] - sg) / den * sig[e] * (1.0 - sig[e]);
        dr[e] = static_cast<T>(static_cast<double>(dr[e]) + d);
      }
    }
  });
}

void moe_z_loss(const Tensor& logits, float coeff, int64_t mean_over, float grad_scale, Tensor& loss,
                Tensor* dlogits, const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_z_loss";
  const DType dt = check_float(op, "logits", logits);
  check_ndim(op, "logits", logits, 2);
  const int64_t rows = logits.size(0), e_count = logits.size(1);
  PRIMUS_CHECK(rows >= 1 && e_count >= 1, "{}: logits must be non-empty, got {}", op, logits.describe());
  check_tensor(op, "loss", loss, dt, {1});
  if (dlogits != nullptr) check_tensor(op, "dlogits", *dlogits, dt, {rows, e_count});
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    auto lse = [&](int64_t t) {
      const T* xr = x + t * e_count;
      const double m = static_cast<double>(*std::max_element(xr, xr + e_count));
      double sum = 0.0;
      for (int64_t e = 0; e < e_count; ++e) sum += std::exp(static_cast<double>(xr[e]) - m);
      return m + std::log(sum);
    };
    const double total = deterministic_sum(rows, [&](int64_t t) {
      const double l = lse(t);
      return l * l;
    });
    loss.data<T>()[0] = static_cast<T>(static_cast<double>(coeff) * total / mean_over);
    if (dlogits == nullptr) return;
    T* dx = dlogits->data<T>();
#pragma omp parallel for schedule(static) if (rows * e_count > kParallelGrain)
    for (int64_t t = 0; t < rows; ++t) {
      const double l = lse(t);
      const double f = static_cast<double>(grad_scale) * coeff * 2.0 * l / mean_over;
      const T* xr = x + t * e_count;
      T* dr = dx + t * e_count;
      for (int64_t e = 0; e < e_count; ++e)
        dr[e] = static_cast<T>(static_cast<double>(dr[e]) + f * std::exp(static_cast<double>(xr[e]) - l));
    }
  });
}

void moe_expert_load(const Tensor& ids, int64_t num_experts, Tensor& counts, bool accumulate,
                     const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_expert_load";
  check_host(op, "ids", ids);
  check_dtype(op, "ids", ids, DType::kI32);
  PRIMUS_CHECK(num_experts >= 1, "{}: num_experts must be >= 1, got {}", op, num_experts);
  check_tensor(op, "counts", counts, DType::kI32, {num_experts});
  const int32_t* p = ids.data<int32_t>();
  int32_t* c = counts.data<int32_t>();
  if (!accumulate) std::fill(c, c + num_experts, 0);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    PRIMUS_CHECK(p[i] < num_experts, "{}: id {} at entry {} is out of range [0, {})", op, p[i], i,
                 num_experts);
    if (p[i] >= 0) ++c[p[i]];
  }
}

void moe_expert_bias_update(const Tensor& counts, float rate, Tensor& bias, const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_expert_bias_update";
  check_host(op, "counts", counts);
  check_dtype(op, "counts", counts, DType::kI32);
  PRIMUS_CHECK(counts.ndim() == 1 && counts.numel() >= 1, "{}: counts must be [E], got {}", op,
               counts.describe());
  const int64_t e_count = counts.numel();
  const DType dt = check_float(op, "bias", bias);
  check_shape(op, "bias", bias, {e_count});
  const int32_t* c = counts.data<int32_t>();
  int64_t sum = 0;
  for (int64_t e = 0; e < e_count; ++e) sum += c[e];
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    T* b = bias.data<T>();
    for (int64_t e = 0; e < e_count; ++e) {
      const int64_t diff = sum - e_count * static_cast<int64_t>(c[e]);  // E * (mean - count)
      const T sign = diff > 0 ? T(1) : diff < 0 ? T(-1) : T(0);
      b[e] = b[e] + sign * static_cast<T>(rate);
    }
  });
}

void moe_capacity_drop(const Tensor& ids, const Tensor& probs, int64_t num_experts, int64_t capacity,
                       MoeDropPolicy policy, Tensor& kept_ids, Tensor& kept_probs, const Stream& s) {
  (void)s;
  constexpr const char* op = "moe_capacity_drop";
  const DType dt = check_float(op, "probs", probs);
  check_ndim(op, "probs", probs, 2);
  const int64_t rows = probs.size(0), k = probs.size(1);
  PRIMUS_CHECK(capacity >= 1, "{}: capacity must be >= 1, got {}", op, capacity);
  check_ids(op, ids, rows, k, num_experts);
  check_tensor(op, "kept_ids", kept_ids, DType::kI32, {rows, k});
  check_tensor(op, "kept_probs", kept_probs, dt, {rows, k});
  const int32_t* id = ids.data<int32_t>();
  int32_t* kid = kept_ids.data<int32_t>();
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* p = probs.data<T>();
    T* kp = kept_probs.data<T>();
    std::vector<std::vector<int64_t>> slots(static_cast<size_t>(num_experts));  // token order
    for (int64_t sl = 0; sl < rows * k; ++sl) slots[id[sl]].push_back(sl);
    std::copy(id, id + rows * k, kid);
    std::copy(p, p + rows * k, kp);
    for (auto& list : slots) {
      if (static_cast<int64_t>(list.size()) <= capacity) continue;
      if (policy == MoeDropPolicy::kProbs)  // larger probability first, then the earlier token
        std::stable_sort(list.begin(), list.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
      for (size_t i = static_cast<size_t>(capacity); i < list.size(); ++i) {
        kid[list[i]] = -1;
        kp[list[i]] = T(0);
      }
    }
  });
}

}  // namespace primus::ops::cpu
