// Forced MoE load balancing ops (ops/moe_router.h) on the CPU reference: the portable normal against libm's
// Box-Muller and the exact functions, the random router logits (keyed by the data: a batch split differently
// draws the same values; near-uniform loads when routed), the round-robin ids (hand-computed, exact balance,
// distinct per token), the descending reordering of "even" and the router probabilities of given experts
// (the forward's own for its ids; their gradient is moe_router_backward's, by finite differences).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/philox.h"
#include "core/portable_normal.h"
#include "moe_test_util.h"
#include "op_test_util.h"
#include "ops/moe_router.h"

namespace primus::test {
namespace {

using ops::MoeRandomLogitsKey;
using ops::MoeRouterConfig;
using ops::MoeScoreFunction;

std::vector<int32_t> round_robin(int64_t t, int64_t k, int64_t e, int64_t seqs) {
  Tensor ids = Tensor::empty({t, k}, DType::kI32);
  ops::moe_round_robin_ids(e, seqs, ids, Stream::cpu());
  return ids.to_vector<int32_t>();
}

TEST(MoeForceBalance, PortableMathMatchesLibm) {
  Rng rng;
  std::vector<uint64_t> vs = {1, 2, 3, 1u << 16, (1ull << 32) - 1, 1ull << 32, 3037000499ull, 2147483648ull};
  for (int i = 0; i < 20000; ++i) vs.push_back(static_cast<uint64_t>(rng.integer(1, int64_t{1} << 32)));
  for (uint64_t v : vs) {
    const double want = std::log(static_cast<double>(v) / 4294967296.0);
    const double got = portable_math::log_fraction_u32(v);
    EXPECT_LE(std::abs(got - want), 4e-16 * std::max(1.0, std::abs(want))) << v;
  }
  EXPECT_EQ(portable_math::log_fraction_u32(1ull << 32), 0.0);
  std::vector<uint32_t> rs = {0u,       1u,       1u << 29, (1u << 29) + 1, 1u << 30,
                              3u << 29, 1u << 31, 3u << 30, 0xFFFFFFFFu};
  for (int i = 0; i < 20000; ++i) rs.push_back(static_cast<uint32_t>(rng.integer(0, 0xFFFFFFFFll)));
  for (uint32_t r : rs) {
    const double want = std::cos(6.283185307179586 * (static_cast<double>(r) / 4294967296.0));
    EXPECT_LE(std::abs(portable_math::cos_fraction_u32(r) - want), 1e-15) << r;
  }
  EXPECT_EQ(portable_math::cos_fraction_u32(0), 1.0);
  EXPECT_EQ(portable_math::cos_fraction_u32(1u << 31), -1.0);
}

TEST(MoeForceBalance, PortableNormalIsLibmBoxMullerToTheLastBitOrOne) {
  // The same draws as philox_normal: equal, or one f32 ulp apart where the two doubles round differently.
  Rng rng;
  const uint64_t key = static_cast<uint64_t>(rng.integer(0, std::numeric_limits<int64_t>::max()));
  int64_t equal = 0;
  double sum = 0, sum2 = 0;
  const int64_t n = 200000;
  for (int64_t i = 0; i < n; ++i) {
    const float a = portable_normal(key, static_cast<uint64_t>(i), 0), b = philox_normal(key, i);
    ASSERT_LE(std::abs(a - b), std::nextafter(std::abs(b), INFINITY) - std::abs(b)) << i;
    equal += a == b;
    sum += a;
    sum2 += static_cast<double>(a) * a;
    ASSERT_LE(std::abs(a), 6.67f);
  }
  EXPECT_GT(equal, n * 99 / 100);
  EXPECT_NEAR(sum / n, 0.0, 0.02);  // standard error 0.0022
  EXPECT_NEAR(sum2 / n, 1.0, 0.03);
  // The upper counter words select other streams.
  EXPECT_NE(portable_normal(key, 5, 1), portable_normal(key, 5, 0));
}

TEST(MoeForceBalance, RandomLogitsAreKeyedByTheData) {
  Rng rng;
  const int64_t seq = 7, e = 13;
  MoeRandomLogitsKey key;
  key.stream = static_cast<uint64_t>(rng.integer(0, std::numeric_limits<int64_t>::max()));
  key.first_sample = rng.integer(0, 1000);
  key.seq_len = seq;
  key.pos_offset = 3;
  // Four sequences at once (f64 and f32) ...
  Tensor all = filled({4 * seq, e}, DType::kF64, NAN);
  ops::moe_random_logits(key, all, Stream::cpu());
  Tensor all32 = filled({4 * seq, e}, DType::kF32, NAN);
  ops::moe_random_logits(key, all32, Stream::cpu());
  EXPECT_EQ(host(all), host(all32));  // f64: the f32 values widened
  const std::vector<double> v = host(all);
  for (int64_t t = 0; t < 4 * seq; ++t)
    for (int64_t x = 0; x < e; ++x) {
      const uint64_t pos = static_cast<uint64_t>(3 + t % seq);
      ASSERT_EQ(v[t * e + x], portable_normal(key.stream, static_cast<uint64_t>(key.first_sample + t / seq),
                                              (pos << 32) | static_cast<uint64_t>(x)));
    }
  // ... equal two micro-batches of two (another split of the same samples) ...
  std::vector<double> split;
  for (int64_t half = 0; half < 2; ++half) {
    MoeRandomLogitsKey k2 = key;
    k2.first_sample = key.first_sample + 2 * half;
    Tensor part = filled({2 * seq, e}, DType::kF64, NAN);
    ops::moe_random_logits(k2, part, Stream::cpu());
    for (double x : host(part)) split.push_back(x);
  }
  EXPECT_EQ(split, v);
  // ... and another sample, position or stream draws other values.
  for (int which = 0; which < 3; ++which) {
    MoeRandomLogitsKey k3 = key;
    if (which == 0) k3.first_sample += 4;
    if (which == 1) k3.pos_offset += 1;
    if (which == 2) k3.stream ^= 1;
    Tensor other = filled({4 * seq, e}, DType::kF64, NAN);
    ops::moe_random_logits(k3, other, Stream::cpu());
    int64_t same = 0;
    const std::vector<double> o = host(other);
    for (size_t i = 0; i < o.size(); ++i) same += o[i] == v[i];
    EXPECT_EQ(same, 0) << which;
  }
  expect_thread_count_invariant([&] {
    Tensor x = filled({64 * seq, 257}, DType::kF32, NAN);
    ops::moe_random_logits(key, x, Stream::cpu());
    return host(x);
  });
}

TEST(MoeForceBalance, RoutingRandomLogitsGivesNearUniformLoads) {
  // Megatron's "uniform": i.i.d. logits make every k-subset equally likely, whatever the score function.
  Rng rng;
  const int64_t t = 8191, e = 13, k = 3;
  MoeRandomLogitsKey key;
  key.stream = static_cast<uint64_t>(rng.integer(0, std::numeric_limits<int64_t>::max()));
  key.seq_len = t;
  Tensor logits = Tensor::empty({t, e}, DType::kF32);
  ops::moe_random_logits(key, logits, Stream::cpu());
  for (auto score : {MoeScoreFunction::kSoftmax, MoeScoreFunction::kSigmoid}) {
    MoeRouterConfig cfg = make_cfg(k, score);
    Tensor ids = Tensor::empty({t, k}, DType::kI32), probs = Tensor::empty({t, k}, DType::kF32);
    ops::moe_router_forward(logits, nullptr, cfg, ids, probs, Stream::cpu());
    Tensor counts = Tensor::empty({e}, DType::kI32);
    ops::moe_expert_load(ids, e, counts, false, Stream::cpu());
    const double mean = static_cast<double>(t * k) / e, sd = std::sqrt(mean * (1.0 - 1.0 / e));
    for (int32_t c : counts.to_vector<int32_t>())
      EXPECT_LT(std::abs(c - mean), 5 * sd) << c << " vs " << mean;
    // The first choice alone is uniform too.
    std::vector<int64_t> first(static_cast<size_t>(e), 0);
    const std::vector<int32_t> iv = ids.to_vector<int32_t>();
    for (int64_t r = 0; r < t; ++r) ++first[iv[r * k]];
    const double m1 = static_cast<double>(t) / e, sd1 = std::sqrt(m1 * (1.0 - 1.0 / e));
    for (int64_t c : first) EXPECT_LT(std::abs(c - m1), 5 * sd1);
  }
}

TEST(MoeForceBalance, RoundRobinHandComputed) {
  // 2 sequences of 3 (batch-major rows t = b * 3 + i), numbered sequence-major n = i * 2 + b, k 2 of E 5:
  // row t gets (2n, 2n + 1) mod 5.
  const std::vector<int32_t> got = round_robin(6, 2, 5, 2);
  const std::vector<int32_t> want = {0, 1,   // t0: b0 i0 -> n0
                                     4, 0,   // t1: b0 i1 -> n2
                                     3, 4,   // t2: b0 i2 -> n4
                                     2, 3,   // t3: b1 i0 -> n1
                                     1, 2,   // t4: b1 i1 -> n3
                                     0, 1};  // t5: b1 i2 -> n5
  EXPECT_EQ(got, want);
  // One sequence (TorchTitan's batch-major arange): (t k + j) % E.
  const std::vector<int32_t> flat = round_robin(6, 2, 5, 1);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(flat[i], i % 5);
}

TEST(MoeForceBalance, RoundRobinBalancesExactly) {
  for (int64_t t : {31, 33, 127, 128}) {
    for (int64_t k : {1, 2, 3, 8}) {
      for (int64_t e : {8, 13, 60}) {
        for (int64_t seqs : {int64_t{1}, t % 2 == 0 ? int64_t{4} : int64_t{1}, t}) {
          SCOPED_TRACE(fmt::format("T={} k={} E={} seqs={}", t, k, e, seqs));
          const std::vector<int32_t> ids = round_robin(t, k, e, seqs);
          std::vector<int64_t> count(static_cast<size_t>(e), 0);
          for (int64_t r = 0; r < t; ++r)
            for (int64_t j = 0; j < k; ++j) {
              const int32_t x = ids[r * k + j];
              ASSERT_TRUE(x >= 0 && x < e);
              ++count[x];
              for (int64_t i = 0; i < j; ++i) ASSERT_NE(ids[r * k + i], x);  // distinct per token
            }
          const int64_t lo = t * k / e, hi = (t * k + e - 1) / e;
          for (int64_t c : count) EXPECT_TRUE(c == lo || c == hi) << c;
          EXPECT_EQ(std::accumulate(count.begin(), count.end(), int64_t{0}), t * k);
        }
      }
    }
  }
}

TEST(MoeForceBalance, SortByProbIsAStableDescendingReordering) {
  Rng rng;
  for (DType dt : float_types()) {
    for (int64_t k : {1, 2, 5, 8}) {
      const int64_t t = 33;
      std::vector<double> pv(static_cast<size_t>(t * k));
      std::vector<int32_t> iv(static_cast<size_t>(t * k));
      for (int64_t r = 0; r < t; ++r)
        for (int64_t j = 0; j < k; ++j) {
          // Some rows with ties: values drawn from a few levels.
          pv[r * k + j] = r % 3 == 0 ? static_cast<double>(rng.integer(0, 2)) / 4 : rng.uniform(0, 1);
          iv[r * k + j] = static_cast<int32_t>(r * 100 + j);
        }
      Tensor ids = Tensor::from_vector(iv, {t, k}), probs = tensor_of(pv, {t, k}, dt);
      Tensor sid = Tensor::empty({t, k}, DType::kI32), sp = filled({t, k}, dt, NAN);
      ops::moe_sort_by_prob(ids, probs, sid, sp, Stream::cpu());
      const std::vector<double> pr = host(probs);  // the values as stored in dt
      std::vector<int32_t> want_ids;
      std::vector<double> want_p;
      for (int64_t r = 0; r < t; ++r) {
        std::vector<int64_t> order(static_cast<size_t>(k));
        std::iota(order.begin(), order.end(), int64_t{0});
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t a, int64_t b) { return pr[r * k + a] > pr[r * k + b]; });
        for (int64_t j : order) {
          want_ids.push_back(iv[r * k + j]);
          want_p.push_back(pr[r * k + j]);
        }
      }
      EXPECT_EQ(sid.to_vector<int32_t>(), want_ids);
      EXPECT_EQ(host(sp), want_p);
      // In place gives the same.
      ops::moe_sort_by_prob(ids, probs, ids, probs, Stream::cpu());
      EXPECT_EQ(ids.to_vector<int32_t>(), want_ids);
      EXPECT_EQ(host(probs), want_p);
    }
  }
}

TEST(MoeForceBalance, RouterProbsAreTheForwardsForItsIds) {
  Rng rng;
  for (int variant = 0; variant < 5; ++variant) {
    for (int64_t k : {1, 3, 8}) {
      for (DType dt : float_types()) {
        const int64_t t = 31, e = 11;
        MoeRouterConfig cfg = variant == 0   ? make_cfg(k, MoeScoreFunction::kSoftmax)
                              : variant == 1 ? make_cfg(k, MoeScoreFunction::kSoftmax, true, false)
                              : variant == 2 ? make_cfg(k, MoeScoreFunction::kSigmoid)
                              : variant == 3 ? make_cfg(k, MoeScoreFunction::kSigmoid, false, false)
                                             : make_cfg(k, MoeScoreFunction::kSoftmax, true, true);
        cfg.scaling_factor = 2.5f;
        SCOPED_TRACE(fmt::format("variant={} k={} {}", variant, k, dtype_name(dt)));
        Tensor logits = rand_tensor(rng, {t, e}, dt, -3, 3);
        Tensor bias = rand_tensor(rng, {e}, dt, -0.5, 0.5);
        Tensor ids = Tensor::empty({t, k}, DType::kI32), probs = filled({t, k}, dt, NAN);
        ops::moe_router_forward(logits, &bias, cfg, ids, probs, Stream::cpu());
        Tensor again = filled({t, k}, dt, NAN);
        ops::moe_router_probs(logits, ids, cfg, again, Stream::cpu());
        EXPECT_EQ(host(again), host(probs));
      }
    }
  }
}

TEST(MoeForceBalance, RouterProbsOfRoundRobinIdsBackwardIsTheRoutersBackward) {
  // TorchTitan's forced balancing: probabilities at the round-robin experts, differentiated by
  // moe_router_backward with the same ids (checked against central differences in f64).
  Rng rng;
  for (int variant = 0; variant < 5; ++variant) {
    for (int64_t k : {1, 3, 4}) {
      const int64_t t = 9, e = 7;
      MoeRouterConfig cfg = variant == 0   ? make_cfg(k, MoeScoreFunction::kSoftmax)
                            : variant == 1 ? make_cfg(k, MoeScoreFunction::kSoftmax, true, false)
                            : variant == 2 ? make_cfg(k, MoeScoreFunction::kSigmoid)
                            : variant == 3 ? make_cfg(k, MoeScoreFunction::kSigmoid, false, false)
                                           : make_cfg(k, MoeScoreFunction::kSoftmax, true, true);
      cfg.scaling_factor = 1.3f;
      SCOPED_TRACE(fmt::format("variant={} k={}", variant, k));
      Tensor logits = rand_tensor(rng, {t, e}, DType::kF64, -2, 2);
      Tensor ids = Tensor::empty({t, k}, DType::kI32);
      ops::moe_round_robin_ids(e, 1, ids, Stream::cpu());
      const std::vector<double> w = host(rand_tensor(rng, {t, k}, DType::kF64));
      Tensor dl = filled({t, e}, DType::kF64, NAN);
      ops::moe_router_backward(logits, ids, tensor_of(w, {t, k}, DType::kF64), cfg, dl, Stream::cpu());
      auto forward = [&] {
        Tensor p = filled({t, k}, DType::kF64, NAN);
        ops::moe_router_probs(logits, ids, cfg, p, Stream::cpu());
        return host(p);
      };
      EXPECT_LT(fd_rel_error(rng, logits, host(dl), forward, w), kGradTol);
    }
  }
}

TEST(MoeForceBalance, RejectsBadInputs) {
  Tensor logits = Tensor::empty({10, 4}, DType::kF32);
  MoeRandomLogitsKey key;
  key.seq_len = 3;
  EXPECT_PRIMUS_ERROR(ops::moe_random_logits(key, logits, Stream::cpu()),
                      "seq_len 3 must be >= 1 and divide");
  key.seq_len = 5;
  key.first_sample = -1;
  EXPECT_PRIMUS_ERROR(ops::moe_random_logits(key, logits, Stream::cpu()), "first_sample must be >= 0");
  key.first_sample = 0;
  key.pos_offset = (int64_t{1} << 32) - 2;
  EXPECT_PRIMUS_ERROR(ops::moe_random_logits(key, logits, Stream::cpu()), "positions pos_offset");
  Tensor bf = Tensor::empty({10, 4}, DType::kBF16);
  key.pos_offset = 0;
  EXPECT_PRIMUS_ERROR(ops::moe_random_logits(key, bf, Stream::cpu()), "must be f32 or f64");

  Tensor ids = Tensor::empty({6, 3}, DType::kI32);
  EXPECT_PRIMUS_ERROR(ops::moe_round_robin_ids(2, 1, ids, Stream::cpu()),
                      "topk (ids' columns) must be in [1, ");
  EXPECT_PRIMUS_ERROR(ops::moe_round_robin_ids(8, 4, ids, Stream::cpu()),
                      "num_seqs 4 must be >= 1 and divide");

  Tensor p = Tensor::empty({6, 3}, DType::kF32), sp = Tensor::empty({6, 2}, DType::kF32);
  Tensor sid = Tensor::empty({6, 3}, DType::kI32);
  EXPECT_PRIMUS_ERROR(ops::moe_sort_by_prob(ids, p, sid, sp, Stream::cpu()), "sorted_probs must be [6, 3]");

  MoeRouterConfig cfg = make_cfg(2, MoeScoreFunction::kSoftmax);
  Tensor l = Tensor::zeros({2, 4}, DType::kF32),
         rid = Tensor::from_vector(std::vector<int32_t>{0, 0, 1, 2}, {2, 2});
  Tensor rp = Tensor::empty({2, 2}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::moe_router_probs(l, rid, cfg, rp, Stream::cpu()), "names expert 0 twice");
  Tensor far = Tensor::from_vector(std::vector<int32_t>{0, 4, 1, 2}, {2, 2});
  EXPECT_PRIMUS_ERROR(ops::moe_router_probs(l, far, cfg, rp, Stream::cpu()), "out of range");
}

}  // namespace
}  // namespace primus::test
