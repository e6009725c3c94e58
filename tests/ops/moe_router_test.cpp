#include "ops/moe_router.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "moe_test_util.h"
#include "op_test_util.h"

namespace primus::test {
namespace {

using ops::MoeRouterConfig;
using ops::MoeScoreFunction;

struct Routed {
  std::vector<int32_t> ids;
  std::vector<double> probs;
};

Routed route(const Tensor& logits, const Tensor* bias, const MoeRouterConfig& cfg) {
  const int64_t t = logits.size(0);
  Tensor ids = Tensor::empty({t, cfg.topk}, DType::kI32);
  Tensor probs = filled({t, cfg.topk}, logits.dtype(), NAN);
  ops::moe_router_forward(logits, bias, cfg, ids, probs, Stream::cpu());
  return {ids.to_vector<int32_t>(), host(probs)};
}

double sig(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

TEST(MoeRouter, SoftmaxOfChosenLogitsHandComputed) {
  // Mixtral / Qwen3 (norm_topk_prob): top-2 of the logits, softmax over the two, x scaling 2.
  for (DType dt : float_types()) {
    Tensor logits = tensor_of({1, 3, 2, 0, /**/ -1, -2, 5, 4}, {2, 4}, dt);
    MoeRouterConfig cfg = make_cfg(2, MoeScoreFunction::kSoftmax);
    cfg.scaling_factor = 2.0f;
    const Routed r = route(logits, nullptr, cfg);
    EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2, 2, 3}));
    const double a = std::exp(1.0) / (std::exp(1.0) + 1.0);
    const std::vector<double> want{2 * a, 2 * (1 - a), 2 * a, 2 * (1 - a)};
    EXPECT_LT(rel_err(r.probs, want), fwd_tol(dt));
    // Pre-softmax with renormalisation gives the same result.
    cfg.pre_softmax = true;
    const Routed r2 = route(logits, nullptr, cfg);
    EXPECT_EQ(r2.ids, r.ids);
    EXPECT_LT(rel_err(r2.probs, want), fwd_tol(dt));
  }
}

TEST(MoeRouter, PreSoftmaxWithoutNormalisationKeepsFullSoftmax) {
  // DeepSeek-V2 / Qwen norm_topk_prob = false: softmax over all experts, top-k, no renormalisation.
  for (DType dt : float_types()) {
    Tensor logits = tensor_of({1, 3, 2, 0}, {1, 4}, dt);
    MoeRouterConfig cfg = make_cfg(2, MoeScoreFunction::kSoftmax, true, false);
    const Routed r = route(logits, nullptr, cfg);
    EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2}));
    const double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1.0;
    EXPECT_LT(rel_err(r.probs, {std::exp(3.0) / z, std::exp(2.0) / z}), fwd_tol(dt));
  }
}

TEST(MoeRouter, SigmoidBiasSelectsButDoesNotWeigh) {
  // DeepSeek-V3: selection by sigmoid + bias, weights from the unbiased sigmoid, renormalised.
  for (DType dt : float_types()) {
    Tensor logits = tensor_of({0, 1, -1, 2}, {1, 4}, dt);
    Tensor bias = tensor_of({0, 0, 5, 0}, {4}, dt);
    MoeRouterConfig cfg = make_cfg(2, MoeScoreFunction::kSigmoid);
    cfg.scaling_factor = 2.5f;
    const Routed r = route(logits, &bias, cfg);
    EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 3}));
    const double s2 = sig(-1.0), s3 = sig(2.0);
    EXPECT_LT(rel_err(r.probs, {2.5 * s2 / (s2 + s3), 2.5 * s3 / (s2 + s3)}), fwd_tol(dt));
    // Without the bias: experts 3 and 1.
    const Routed nb = route(logits, nullptr, cfg);
    EXPECT_EQ(nb.ids, (std::vector<int32_t>{3, 1}));
    // normalize off: the raw sigmoids; topk 1 is never normalised (Megatron).
    cfg.normalize = false;
    EXPECT_LT(rel_err(route(logits, &bias, cfg).probs, {2.5 * s2, 2.5 * s3}), fwd_tol(dt));
    MoeRouterConfig one = make_cfg(1, MoeScoreFunction::kSigmoid);
    EXPECT_LT(rel_err(route(logits, nullptr, one).probs, {s3}), fwd_tol(dt));
  }
}

TEST(MoeRouter, TiesGoToTheLowerExpertId) {
  for (auto score : {MoeScoreFunction::kSoftmax, MoeScoreFunction::kSigmoid}) {
    for (bool pre : {false, true}) {
      if (pre && score == MoeScoreFunction::kSigmoid) continue;
      Tensor logits = tensor_of({0.5, 0.5, 0.5, 0.5, 0.5, /**/ 0, 1, 0, 1, 0}, {2, 5}, DType::kF32);
      const Routed r = route(logits, nullptr, make_cfg(3, score, pre));
      EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1, 2, 1, 3, 0}));
    }
  }
  // Groups tie too: equal group scores keep the lower group.
  Tensor logits = filled({1, 8}, DType::kF32, 0.25);
  MoeRouterConfig cfg = make_cfg(2, MoeScoreFunction::kSigmoid);
  cfg.num_groups = 4;
  cfg.group_topk = 1;
  EXPECT_EQ(route(logits, nullptr, cfg).ids, (std::vector<int32_t>{0, 1}));
}

TEST(MoeRouter, GroupLimitedHandComputed) {
  // 8 experts in 4 groups of 2, keep 2 groups, k = 4: a group's score is the sum of its top 4/2 = 2 scores.
  Tensor logits = tensor_of({0.95, -1, 0.9, 0.8, 0.5, 0.6, 0.85, 0.1}, {1, 8}, DType::kF64);
  MoeRouterConfig cfg = make_cfg(4, MoeScoreFunction::kSoftmax);
  EXPECT_EQ(route(logits, nullptr, cfg).ids, (std::vector<int32_t>{0, 2, 6, 3}));
  cfg.num_groups = 4;
  cfg.group_topk = 2;
  const Routed r = route(logits, nullptr, cfg);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 3, 5, 4}));  // groups 1 (1.7) and 2 (1.1)
  double z = 0;
  for (double v : {0.9, 0.8, 0.6, 0.5}) z += std::exp(v);
  EXPECT_LT(rel_err(r.probs, {std::exp(0.9) / z, std::exp(0.8) / z, std::exp(0.6) / z, std::exp(0.5) / z}),
            1e-12);
  // k = 2 with 2 groups: group score = the group's max (DeepSeek-V2's group_limited_greedy).
  cfg.topk = 2;
  EXPECT_EQ(route(logits, nullptr, cfg).ids, (std::vector<int32_t>{0, 2}));
  // DeepSeek-V3 style: sigmoid + bias + groups; the bias moves group 3 in.
  MoeRouterConfig v3 = make_cfg(4, MoeScoreFunction::kSigmoid);
  v3.num_groups = 4;
  v3.group_topk = 2;
  Tensor bias = tensor_of({0, 0, 0, 0, 0, 0, 0, 1}, {8}, DType::kF64);
  EXPECT_EQ(route(logits, &bias, v3).ids, (std::vector<int32_t>{7, 2, 6, 3}));
}

// Every routing variant on random inputs of odd sizes: ids distinct, in the allowed groups, the best there,
// in rank order; probabilities as the definition says.
TEST(MoeRouter, RandomVariantsSatisfyTheDefinition) {
  Rng rng;
  struct Shape3 {
    int64_t t, e, g, gk;
  };
  const Shape3 shapes[] = {{31, 6, 0, 0}, {33, 60, 6, 3}, {127, 13, 0, 0}, {33, 24, 4, 2}, {31, 257, 0, 0}};
  for (const auto& sh : shapes) {
    for (int64_t k : {1, 2, 3, 4, 6, 8}) {
      if (k > sh.e || (sh.g > 0 && (k % sh.gk != 0 || k > sh.gk * (sh.e / sh.g)))) continue;
      for (int variant = 0; variant < 4; ++variant) {
        MoeRouterConfig cfg = variant == 0   ? make_cfg(k, MoeScoreFunction::kSoftmax)
                              : variant == 1 ? make_cfg(k, MoeScoreFunction::kSoftmax, true, false)
                              : variant == 2 ? make_cfg(k, MoeScoreFunction::kSigmoid)
                                             : make_cfg(k, MoeScoreFunction::kSigmoid, false, false);
        cfg.num_groups = sh.g;
        cfg.group_topk = sh.gk;
        cfg.scaling_factor = variant == 2 ? 2.5f : 1.0f;
        const bool with_bias = variant >= 2;
        SCOPED_TRACE(
            fmt::format("T={} E={} k={} groups={}/{} variant={}", sh.t, sh.e, k, sh.g, sh.gk, variant));
        Tensor logits = rand_tensor(rng, {sh.t, sh.e}, DType::kF64, -3, 3);
        Tensor bias = rand_tensor(rng, {sh.e}, DType::kF64, -0.2, 0.2);
        const Routed r = route(logits, with_bias ? &bias : nullptr, cfg);
        const auto x = host(logits), b = host(bias);
        for (int64_t t = 0; t < sh.t; ++t) {
          std::vector<double> sel(sh.e);
          const double mx = *std::max_element(x.begin() + t * sh.e, x.begin() + (t + 1) * sh.e);
          for (int64_t e = 0; e < sh.e; ++e) {
            const double xv = x[t * sh.e + e];
            sel[e] = (variant >= 2   ? sig(xv)
                      : variant == 1 ? std::exp(xv - mx)
                                     : xv) +
                     (with_bias ? b[e] : 0.0);
          }
          std::vector<char> allowed(sh.e, 1);
          if (sh.g > 0) {  // the kept groups, by the definition
            const int64_t gs = sh.e / sh.g, per = k / sh.gk;
            std::vector<std::pair<double, int64_t>> gsc;
            for (int64_t g = 0; g < sh.g; ++g) {
              std::vector<double> v(sel.begin() + g * gs, sel.begin() + (g + 1) * gs);
              std::sort(v.rbegin(), v.rend());
              gsc.push_back({-std::accumulate(v.begin(), v.begin() + per, 0.0), g});
            }
            std::sort(gsc.begin(), gsc.end());
            std::fill(allowed.begin(), allowed.end(), 0);
            for (int64_t i = 0; i < sh.gk; ++i)
              for (int64_t e = 0; e < gs; ++e) allowed[gsc[i].second * gs + e] = 1;
          }
          std::vector<char> chosen(sh.e, 0);
          double prev = INFINITY;
          for (int64_t j = 0; j < k; ++j) {
            const int32_t id = r.ids[t * k + j];
            ASSERT_TRUE(id >= 0 && id < sh.e && !chosen[id] && allowed[id]) << "t=" << t << " j=" << j;
            chosen[id] = 1;
            EXPECT_LE(sel[id], prev);
            prev = sel[id];
          }
          for (int64_t e = 0; e < sh.e; ++e)
            if (allowed[e] && !chosen[e]) EXPECT_LE(sel[e], prev) << "t=" << t << " e=" << e;
          // Probabilities.
          std::vector<double> want(k);
          double den = 0.0;
          for (int64_t j = 0; j < k; ++j) {
            const double xv = x[t * sh.e + r.ids[t * k + j]];
            want[j] = variant >= 2 ? sig(xv) : std::exp(xv - mx);
            den += want[j];
          }
          if (variant == 1) {
            den = 0.0;
            for (int64_t e = 0; e < sh.e; ++e) den += std::exp(x[t * sh.e + e] - mx);
          }
          if (variant == 3 || (variant == 2 && k == 1)) den = 1.0;
          if (variant == 2 && k > 1) den += 1e-20;
          for (int64_t j = 0; j < k; ++j)
            EXPECT_NEAR(r.probs[t * k + j], cfg.scaling_factor * want[j] / den, 1e-12);
        }
      }
    }
  }
}

// d(sum probs * w)/d(logits) against f64 central differences, for every probability kind and k = 1..8.
TEST(MoeRouter, BackwardMatchesFiniteDifferences) {
  Rng rng;
  for (int variant = 0; variant < 5; ++variant) {
    for (int64_t k : {1, 3, 8}) {
      const int64_t t = 5, e = 11;
      MoeRouterConfig cfg = variant == 0   ? make_cfg(k, MoeScoreFunction::kSoftmax)
                            : variant == 1 ? make_cfg(k, MoeScoreFunction::kSoftmax, true, false)
                            : variant == 2 ? make_cfg(k, MoeScoreFunction::kSigmoid)
                            : variant == 3 ? make_cfg(k, MoeScoreFunction::kSigmoid, false, false)
                                           : make_cfg(k, MoeScoreFunction::kSoftmax, true, true);
      cfg.scaling_factor = 1.7f;
      SCOPED_TRACE(fmt::format("variant={} k={}", variant, k));
      Tensor logits = rand_tensor(rng, {t, e}, DType::kF64, -2, 2);
      Tensor bias = rand_tensor(rng, {e}, DType::kF64, -0.3, 0.3);
      const Routed r = route(logits, &bias, cfg);
      Tensor ids = Tensor::from_vector(r.ids, {t, k});
      const std::vector<double> w = host(rand_tensor(rng, {t, k}, DType::kF64));
      Tensor dprobs = tensor_of(w, {t, k}, DType::kF64);
      Tensor dl = filled({t, e}, DType::kF64, NAN);
      ops::moe_router_backward(logits, ids, dprobs, cfg, dl, Stream::cpu());
      // Probabilities with the ids held fixed: recomputed from the logits through a forward whose bias is
      // large enough to pin the selection to `ids`.
      auto forward = [&] {
        std::vector<double> out;
        const std::vector<double> hx = host(logits);
        for (int64_t row = 0; row < t; ++row) {
          Tensor one = tensor_of(std::vector<double>(hx.begin() + row * e, hx.begin() + (row + 1) * e),
                                 {1, e}, DType::kF64);
          std::vector<double> bv(e, 0.0);
          for (int64_t j = 0; j < k; ++j) bv[r.ids[row * k + j]] = 1e6 * (k - j);
          Tensor b = tensor_of(bv, {e}, DType::kF64);
          const Routed rr = route(one, &b, cfg);
          for (int64_t j = 0; j < k; ++j) {
            EXPECT_EQ(rr.ids[j], r.ids[row * k + j]);
            out.push_back(rr.probs[j]);
          }
        }
        return out;
      };
      EXPECT_LT(fd_rel_error(rng, logits, host(dl), forward, w), kGradTol);
    }
  }
}

TEST(MoeAuxLoss, HandComputedSwitchLoss) {
  for (DType dt : float_types()) {
    // Both tokens pick different experts: count 1 each, loss = coeff * E / (k T^2) * sum of all scores =
    // coeff.
    Tensor a = tensor_of({1, 0, 0, 2}, {2, 2}, dt);
    Tensor loss = filled({1}, dt, NAN);
    ops::moe_aux_loss(a, 1, MoeScoreFunction::kSoftmax, 1, 0.01f, 1.0f, loss, nullptr, Stream::cpu());
    EXPECT_NEAR(host(loss)[0], 0.01, 1e-8);
    // Both pick expert 0: loss = coeff * 2 / 4 * 2 * (p00 + p10).
    Tensor b = tensor_of({1, 0, 2, 0}, {2, 2}, dt);
    ops::moe_aux_loss(b, 1, MoeScoreFunction::kSoftmax, 1, 0.01f, 1.0f, loss, nullptr, Stream::cpu());
    EXPECT_NEAR(host(loss)[0], 0.01 * (sig(1.0) + sig(2.0)), 1e-8);
    // Sigmoid scores are normalised over the experts before use.
    ops::moe_aux_loss(b, 1, MoeScoreFunction::kSigmoid, 1, 0.01f, 1.0f, loss, nullptr, Stream::cpu());
    EXPECT_NEAR(host(loss)[0], 0.01 * (sig(1.0) / (sig(1.0) + 0.5) + sig(2.0) / (sig(2.0) + 0.5)), 1e-8);
  }
}

TEST(MoeAuxLoss, SequenceLossIsTheMeanOfPerSequenceSwitchLosses) {
  Rng rng;
  for (auto score : {MoeScoreFunction::kSoftmax, MoeScoreFunction::kSigmoid}) {
    const int64_t b = 3, s = 11, e = 7, k = 2;
    Tensor logits = rand_tensor(rng, {b * s, e}, DType::kF64, -2, 2);
    Tensor loss = Tensor::empty({1}, DType::kF64);
    ops::moe_aux_loss(logits, k, score, b, 0.1f, 1.0f, loss, nullptr, Stream::cpu());
    double mean = 0.0;
    for (int64_t i = 0; i < b; ++i) {
      Tensor part = clone(logits.slice(i * s, (i + 1) * s));
      Tensor l = Tensor::empty({1}, DType::kF64);
      ops::moe_aux_loss(part, k, score, 1, 0.1f, 1.0f, l, nullptr, Stream::cpu());
      mean += host(l)[0] / b;
    }
    EXPECT_NEAR(host(loss)[0], mean, 1e-12);
  }
}

TEST(MoeAuxLoss, GradientsMatchFiniteDifferencesAndAccumulate) {
  Rng rng;
  for (auto score : {MoeScoreFunction::kSoftmax, MoeScoreFunction::kSigmoid}) {
    for (int64_t seqs : {1, 3}) {
      SCOPED_TRACE(fmt::format("score={} seqs={}", static_cast<int>(score), seqs));
      const int64_t t = 9, e = 7, k = 3;
      Tensor logits = rand_tensor(rng, {t, e}, DType::kF64, -2, 2);
      Tensor loss = Tensor::empty({1}, DType::kF64);
      Tensor base = rand_tensor(rng, {t, e}, DType::kF64);
      Tensor dl = clone(base);
      ops::moe_aux_loss(logits, k, score, seqs, 0.3f, 0.5f, loss, &dl, Stream::cpu());
      std::vector<double> g = host(dl);
      const auto b0 = host(base);
      for (size_t i = 0; i < g.size(); ++i) g[i] -= b0[i];  // accumulated on top of `base`
      auto forward = [&] {
        ops::moe_aux_loss(logits, k, score, seqs, 0.3f, 0.5f, loss, nullptr, Stream::cpu());
        return host(loss);
      };
      EXPECT_LT(fd_rel_error(rng, logits, g, forward, {0.5}), kGradTol);
    }
  }
}

TEST(MoeZLoss, ValueAndGradient) {
  Rng rng;
  for (DType dt : float_types()) {
    Tensor logits = tensor_of({0, 0, std::log(3.0), 0}, {2, 2}, dt);  // lse = log 2, log 4
    Tensor loss = filled({1}, dt, NAN);
    ops::moe_z_loss(logits, 0.5f, 0, 1.0f, loss, nullptr, Stream::cpu());
    const double l2 = std::log(2.0), l4 = std::log(4.0);
    EXPECT_NEAR(host(loss)[0], 0.5 * (l2 * l2 + l4 * l4) / 2, 1e-6);
  }
  Tensor logits = rand_tensor(rng, {13, 9}, DType::kF64, -3, 3);
  Tensor loss = Tensor::empty({1}, DType::kF64), dl = Tensor::zeros({13, 9}, DType::kF64);
  ops::moe_z_loss(logits, 1e-3f, 0, 2.0f, loss, &dl, Stream::cpu());
  auto forward = [&] {
    ops::moe_z_loss(logits, 1e-3f, 0, 2.0f, loss, nullptr, Stream::cpu());
    return host(loss);
  };
  EXPECT_LT(fd_rel_error(rng, logits, host(dl), forward, {2.0}), kGradTol);
}

// Context parallelism: B sequences of S tokens split over cp ranks, each holding chunks r and 2 cp - 1 - r of
// every sequence, chunk-major ([2B, C] rows). The ranks' counts summed, their loss shares add up to the one-
// process loss, and each rank's dlogits rows are the one-process rows of its tokens.
TEST(MoeAuxLoss, ContextParallelSharesAddUpToTheWholeLoss) {
  Rng rng;
  const int64_t B = 3, cp = 2, C = 5, S = 2 * cp * C, E = 7, k = 2;
  for (auto score : {MoeScoreFunction::kSoftmax, MoeScoreFunction::kSigmoid}) {
    for (bool per_seq : {false, true}) {
      SCOPED_TRACE(fmt::format("score={} per_seq={}", static_cast<int>(score), per_seq));
      Tensor logits = rand_tensor(rng, {B * S, E}, DType::kF64, -2, 2);
      Tensor loss = Tensor::empty({1}, DType::kF64), dl = Tensor::zeros({B * S, E}, DType::kF64);
      ops::moe_aux_loss(logits, k, score, per_seq ? B : 1, 0.2f, 0.7f, loss, &dl, Stream::cpu());
      const std::vector<double> whole = host(logits), dwhole = host(dl);
      // Rank r's rows: row h B + b = chunk (h ? 2cp-1-r : r) of sequence b; one-process row of its token i.
      auto source_row = [&](int64_t r, int64_t row, int64_t i) {
        const int64_t h = row / B, b = row % B, c = h == 0 ? r : 2 * cp - 1 - r;
        return b * S + c * C + i;
      };
      ops::MoeAuxSeqs seqs;
      seqs.num_seqs = per_seq ? B : 1;
      seqs.chunk = C;
      seqs.seq_tokens = per_seq ? S : B * S;
      std::vector<Tensor> local;
      Tensor counts = Tensor::zeros({seqs.num_seqs, E}, DType::kI32);
      for (int64_t r = 0; r < cp; ++r) {
        std::vector<double> v(static_cast<size_t>(2 * B * C * E));
        for (int64_t row = 0; row < 2 * B; ++row)
          for (int64_t i = 0; i < C; ++i)
            for (int64_t e = 0; e < E; ++e) v[(row * C + i) * E + e] = whole[source_row(r, row, i) * E + e];
        local.push_back(Tensor::from_vector(v, {2 * B * C, E}));
        Tensor c = Tensor::empty({seqs.num_seqs, E}, DType::kI32);
        ops::moe_aux_counts(local.back(), k, seqs, c, Stream::cpu());
        std::vector<int32_t> sum = counts.to_vector<int32_t>(), add = c.to_vector<int32_t>();
        for (size_t j = 0; j < sum.size(); ++j) sum[j] += add[j];
        counts = Tensor::from_vector(sum, {seqs.num_seqs, E});
      }
      double shares = 0;
      for (int64_t r = 0; r < cp; ++r) {
        Tensor l = Tensor::empty({1}, DType::kF64), d = Tensor::zeros({2 * B * C, E}, DType::kF64);
        ops::moe_aux_loss_from_counts(local[r], counts, k, score, seqs, 0.2f, 0.7f, l, &d, Stream::cpu());
        shares += host(l)[0];
        const std::vector<double> dv = host(d);
        for (int64_t row = 0; row < 2 * B; ++row)
          for (int64_t i = 0; i < C; ++i)
            for (int64_t e = 0; e < E; ++e)
              ASSERT_NEAR(dv[(row * C + i) * E + e], dwhole[source_row(r, row, i) * E + e], 1e-15);
      }
      EXPECT_NEAR(shares, host(loss)[0], 1e-12 * std::abs(host(loss)[0]));
    }
  }
}

TEST(MoeZLoss, SharesOverTheWholeTokenCountAddUp) {
  Rng rng;
  Tensor logits = rand_tensor(rng, {12, 5}, DType::kF64, -3, 3);
  Tensor whole = Tensor::empty({1}, DType::kF64), dw = Tensor::zeros({12, 5}, DType::kF64);
  ops::moe_z_loss(logits, 1e-2f, 0, 1.5f, whole, &dw, Stream::cpu());
  double sum = 0;
  for (int64_t part = 0; part < 3; ++part) {
    Tensor l = Tensor::empty({1}, DType::kF64), d = Tensor::zeros({4, 5}, DType::kF64);
    ops::moe_z_loss(clone(logits.slice(4 * part, 4 * part + 4)), 1e-2f, 12, 1.5f, l, &d, Stream::cpu());
    sum += host(l)[0];
    EXPECT_EQ(host(d), host(dw.slice(4 * part, 4 * part + 4)));
  }
  EXPECT_NEAR(sum, host(whole)[0], 1e-15);
  Tensor l = Tensor::empty({1}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::moe_z_loss(logits, 1e-2f, 11, 1.f, l, nullptr, Stream::cpu()),
                      "fewer than the 12");
}

TEST(MoeExpertLoad, HistogramAccumulatesAndSkipsDropped) {
  Tensor ids = Tensor::from_vector(std::vector<int32_t>{0, 2, 2, -1, 4, 2}, {3, 2});
  Tensor counts = Tensor::from_vector(std::vector<int32_t>{9, 9, 9, 9, 9}, {5});
  ops::moe_expert_load(ids, 5, counts, false, Stream::cpu());
  EXPECT_EQ(counts.to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 3, 0, 1}));  // expert 1, 3: zero tokens
  ops::moe_expert_load(ids, 5, counts, true, Stream::cpu());
  EXPECT_EQ(counts.to_vector<int32_t>(), (std::vector<int32_t>{2, 0, 6, 0, 2}));
  Tensor bad = Tensor::from_vector(std::vector<int32_t>{0, 5}, {1, 2});
  EXPECT_PRIMUS_ERROR(ops::moe_expert_load(bad, 5, counts, false, Stream::cpu()),
                      "id 5 at entry 1 is out of range [0, 5)");
}

TEST(MoeExpertBias, SignOfMeanMinusLoad) {
  Tensor counts = Tensor::from_vector(std::vector<int32_t>{3, 1, 2, 0, 4}, {5});  // mean 2
  Tensor bias = tensor_of({0.5, 0.5, 0.5, 0.5, 0.5}, {5}, DType::kF32);
  ops::moe_expert_bias_update(counts, 1e-3f, bias, Stream::cpu());
  const auto b = host(bias);
  const std::vector<double> want{0.5f - 1e-3f, 0.5f + 1e-3f, 0.5f, 0.5f + 1e-3f, 0.5f - 1e-3f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(b[i], want[i]) << i;
}

TEST(MoeCapacity, CapacityFormula) {
  EXPECT_EQ(ops::moe_expert_capacity(4096, 8, 128, 1.0), 256);
  EXPECT_EQ(ops::moe_expert_capacity(31, 2, 7, 1.25), 12);  // ceil(62 / 7 * 1.25) = ceil(11.07)
  EXPECT_EQ(ops::moe_expert_capacity(1, 1, 64, 0.5), 1);    // at least one
  EXPECT_PRIMUS_ERROR(ops::moe_expert_capacity(8, 1, 4, 0.0), "capacity_factor must be > 0");
}

TEST(MoeCapacity, DropByProbsAndByPosition) {
  // Expert 0 gets tokens 0, 1, 2, 3 (j = 0) with probs .3 .9 .5 .9; capacity 2.
  Tensor ids = Tensor::from_vector(std::vector<int32_t>{0, 1, 0, 2, 0, 1, 0, 3}, {4, 2});
  Tensor probs = tensor_of({.3, .7, .9, .1, .5, .5, .9, .1}, {4, 2}, DType::kF64);
  Tensor kid = Tensor::empty({4, 2}, DType::kI32), kp = Tensor::empty({4, 2}, DType::kF64);
  ops::moe_capacity_drop(ids, probs, 4, 2, ops::MoeDropPolicy::kProbs, kid, kp, Stream::cpu());
  EXPECT_EQ(kid.to_vector<int32_t>(), (std::vector<int32_t>{-1, 1, 0, 2, -1, 1, 0, 3}));  // .9 .9 kept
  EXPECT_EQ(host(kp), (std::vector<double>{0, .7, .9, .1, 0, .5, .9, .1}));
  ops::moe_capacity_drop(ids, probs, 4, 2, ops::MoeDropPolicy::kPosition, kid, kp, Stream::cpu());
  EXPECT_EQ(kid.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 0, 2, -1, 1, -1, 3}));  // tokens 0, 1
  EXPECT_EQ(host(kp), (std::vector<double>{.3, .7, .9, .1, 0, .5, 0, .1}));
  // Equal probabilities: the earlier token stays.
  Tensor eq = tensor_of({.5, .5, .5, .5, .5, .5, .5, .5}, {4, 2}, DType::kF64);
  ops::moe_capacity_drop(ids, eq, 4, 3, ops::MoeDropPolicy::kProbs, kid, kp, Stream::cpu());
  EXPECT_EQ(kid.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 0, 2, 0, 1, -1, 3}));
}

TEST(MoeRouter, ThreadCountInvariant) {
  Rng rng;
  Tensor logits = rand_tensor(rng, {257, 300}, DType::kF32, -3, 3);
  MoeRouterConfig cfg = make_cfg(8, MoeScoreFunction::kSigmoid);
  cfg.num_groups = 4;
  cfg.group_topk = 2;
  expect_thread_count_invariant([&] {
    Routed r = route(logits, nullptr, cfg);
    Tensor ids = Tensor::from_vector(r.ids, {257, 8});
    Tensor dl = Tensor::zeros({257, 300}, DType::kF32), loss = Tensor::empty({1}, DType::kF32);
    ops::moe_router_backward(logits, ids, tensor_of(r.probs, {257, 8}, DType::kF32), cfg, dl, Stream::cpu());
    ops::moe_aux_loss(logits, 8, MoeScoreFunction::kSigmoid, 1, 0.1f, 1.0f, loss, &dl, Stream::cpu());
    std::vector<double> out = host(dl);
    out.insert(out.end(), r.probs.begin(), r.probs.end());
    out.push_back(host(loss)[0]);
    return out;
  });
}

TEST(MoeRouter, RejectsBadConfigsAndInputs) {
  Tensor logits = filled({3, 8}, DType::kF32, 0.0);
  Tensor ids = Tensor::empty({3, 2}, DType::kI32), probs = Tensor::empty({3, 2}, DType::kF32);
  const Stream s = Stream::cpu();
  MoeRouterConfig cfg = make_cfg(9, MoeScoreFunction::kSoftmax);
  EXPECT_PRIMUS_ERROR(ops::moe_router_forward(logits, nullptr, cfg, ids, probs, s),
                      "topk must be in [1, 8], got 9");
  cfg = make_cfg(2, MoeScoreFunction::kSoftmax);
  cfg.num_groups = 3;
  cfg.group_topk = 1;
  EXPECT_PRIMUS_ERROR(ops::moe_router_forward(logits, nullptr, cfg, ids, probs, s),
                      "num_groups 3 must divide");
  cfg.num_groups = 4;
  cfg.group_topk = 3;
  EXPECT_PRIMUS_ERROR(ops::moe_router_forward(logits, nullptr, cfg, ids, probs, s),
                      "topk 2 must be a multiple of group_topk 3");
  cfg = make_cfg(2, MoeScoreFunction::kSigmoid, true);
  EXPECT_PRIMUS_ERROR(ops::moe_router_forward(logits, nullptr, cfg, ids, probs, s), "pre_softmax applies");
  cfg = make_cfg(2, MoeScoreFunction::kSoftmax);
  Tensor bias = filled({7}, DType::kF32, 0.0);
  EXPECT_PRIMUS_ERROR(ops::moe_router_forward(logits, &bias, cfg, ids, probs, s), "expert_bias must be [8]");
  Tensor dup = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 2, 3, 4}, {3, 2});
  Tensor dl = Tensor::empty({3, 8}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::moe_router_backward(logits, dup, probs, cfg, dl, s), "names expert 2 twice");
  Tensor loss = Tensor::empty({1}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::moe_aux_loss(logits, 2, MoeScoreFunction::kSoftmax, 2, 1.f, 1.f, loss, nullptr, s),
                      "num_seqs 2 must divide the 3 tokens");
}

}  // namespace
}  // namespace primus::test
