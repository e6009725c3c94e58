#include "ops/moe_permute.h"

#include <algorithm>
#include <cmath>

#include "op_test_util.h"

namespace primus::test {
namespace {

using ops::MoePermutePlan;

std::vector<int32_t> v32(const Tensor& t) {
  return t.to_vector<int32_t>();
}

MoePermutePlan plan_of(const std::vector<int32_t>& ids, int64_t t, int64_t k, int64_t e, int64_t cap) {
  return ops::moe_permute_plan(Tensor::from_vector(ids, {t, k}), e, cap, Stream::cpu());
}

TEST(MoePermutePlan, HandComputedDropless) {
  // Token 0 -> experts 1, 0; token 1 -> 1, 3; token 2 -> 0, 1. Expert 2 gets no token.
  const MoePermutePlan p = plan_of({1, 0, 1, 3, 0, 1}, 3, 2, 4, 0);
  EXPECT_EQ(p.num_rows, 6);
  EXPECT_EQ(v32(p.counts), (std::vector<int32_t>{2, 3, 0, 1}));
  EXPECT_EQ(v32(p.offsets), (std::vector<int32_t>{0, 2, 5, 5, 6}));
  EXPECT_EQ(v32(p.row_src), (std::vector<int32_t>{1, 4, 0, 2, 5, 3}));  // token order inside each expert
  EXPECT_EQ(v32(p.slot_row), (std::vector<int32_t>{2, 0, 3, 5, 1, 4}));
}

TEST(MoePermutePlan, HandComputedPaddedToCapacity) {
  // Capacity 2: expert 1's third entry (token 2) is dropped; every block has 2 rows, unused ones padding.
  const MoePermutePlan p = plan_of({1, 0, 1, 3, 0, 1}, 3, 2, 4, 2);
  EXPECT_EQ(p.num_rows, 8);
  EXPECT_EQ(v32(p.counts), (std::vector<int32_t>{2, 2, 0, 1}));
  EXPECT_EQ(v32(p.offsets), (std::vector<int32_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(v32(p.row_src), (std::vector<int32_t>{1, 4, 0, 2, -1, -1, 3, -1}));
  EXPECT_EQ(v32(p.slot_row), (std::vector<int32_t>{2, 0, 3, 6, 1, -1}));
}

TEST(MoePermutePlan, DroppedEntriesLeavePaddingAtTheEnd) {
  const MoePermutePlan p = plan_of({-1, 2, 0, -1}, 2, 2, 3, 0);
  EXPECT_EQ(p.num_rows, 4);
  EXPECT_EQ(v32(p.counts), (std::vector<int32_t>{1, 0, 1}));
  EXPECT_EQ(v32(p.offsets), (std::vector<int32_t>{0, 1, 1, 2}));
  EXPECT_EQ(v32(p.row_src), (std::vector<int32_t>{2, 1, -1, -1}));
  EXPECT_EQ(v32(p.slot_row), (std::vector<int32_t>{-1, 1, 0, -1}));
}

// A random routing of T tokens to k distinct experts each, experts [0, hot) only (the rest get zero tokens),
// a fraction of entries dropped (-1).
std::vector<int32_t> random_ids(Rng& rng, int64_t t, int64_t k, int64_t hot, double dropped) {
  std::vector<int32_t> ids;
  std::vector<int32_t> pool(hot);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t e = 0; e < hot; ++e) pool[e] = static_cast<int32_t>(e);
    std::shuffle(pool.begin(), pool.end(), rng.gen());
    for (int64_t j = 0; j < k; ++j) ids.push_back(rng.uniform(0, 1) < dropped ? -1 : pool[j]);
  }
  return ids;
}

TEST(MoePermutePlan, RandomPlansAreStableAndComplete) {
  Rng rng;
  for (int64_t t : {1, 31, 33, 127}) {
    for (int64_t k : {1, 2, 5, 8}) {
      for (int64_t cap : {0, 3}) {
        const int64_t e = 13, hot = std::max<int64_t>(k, 9);
        SCOPED_TRACE(fmt::format("T={} k={} cap={}", t, k, cap));
        const auto ids = random_ids(rng, t, k, hot, cap > 0 ? 0.0 : 0.1);
        const MoePermutePlan p = plan_of(ids, t, k, e, cap);
        const auto counts = v32(p.counts), offsets = v32(p.offsets), src = v32(p.row_src),
                   row = v32(p.slot_row);
        // The expected layout, built directly.
        std::vector<int32_t> want_src(p.num_rows, -1), want_row(t * k, -1), want_counts(e, 0);
        int64_t next = 0;
        for (int64_t x = 0; x < e; ++x) {
          const int64_t start = cap > 0 ? x * cap : next;
          int64_t n = 0;
          for (int64_t sl = 0; sl < t * k; ++sl) {
            if (ids[sl] != x || (cap > 0 && n == cap)) continue;
            want_src[start + n] = static_cast<int32_t>(sl);
            want_row[sl] = static_cast<int32_t>(start + n);
            ++n;
          }
          want_counts[x] = static_cast<int32_t>(n);
          EXPECT_EQ(offsets[x], start);
          next = start + n;
          if (x >= hot) EXPECT_EQ(n, 0);
        }
        EXPECT_EQ(offsets[e], cap > 0 ? e * cap : next);
        EXPECT_EQ(counts, want_counts);
        EXPECT_EQ(src, want_src);
        EXPECT_EQ(row, want_row);
      }
    }
  }
}

// Naive gathers and sums, written independently of the op.
TEST(MoePermute, ForwardOpsMatchNaiveLoops) {
  Rng rng;
  for (DType dt : float_types()) {
    for (int64_t cap : {0, 4}) {
      const int64_t t = 33, k = 3, e = 7, d = 5;
      const auto ids = random_ids(rng, t, k, 6, cap > 0 ? 0.0 : 0.15);
      const MoePermutePlan p = plan_of(ids, t, k, e, cap);
      Tensor x = rand_tensor(rng, {t, d}, dt);
      Tensor xp = filled({p.num_rows, d}, dt, NAN);
      ops::moe_permute(x, p, xp, Stream::cpu());
      const auto hx = host(x), hxp = host(xp);
      const auto src = v32(p.row_src), row = v32(p.slot_row);
      for (int64_t r = 0; r < p.num_rows; ++r)
        for (int64_t c = 0; c < d; ++c)
          ASSERT_EQ(hxp[r * d + c], src[r] < 0 ? 0.0 : hx[(src[r] / k) * d + c]) << r;
      Tensor y = rand_tensor(rng, {p.num_rows, d}, dt);
      Tensor probs = rand_tensor(rng, {t, k}, dt, 0, 1);
      Tensor out = filled({t, d}, dt, NAN), dx = filled({t, d}, dt, NAN);
      ops::moe_unpermute(y, p, probs, out, Stream::cpu());
      ops::moe_permute_backward(y, p, dx, Stream::cpu());
      const auto hy = host(y), hp = host(probs);
      std::vector<double> want_out(t * d, 0.0), want_dx(t * d, 0.0);
      for (int64_t sl = 0; sl < t * k; ++sl) {
        if (row[sl] < 0) continue;
        for (int64_t c = 0; c < d; ++c) {
          want_out[(sl / k) * d + c] += hp[sl] * hy[row[sl] * d + c];
          want_dx[(sl / k) * d + c] += hy[row[sl] * d + c];
        }
      }
      EXPECT_LT(rel_err(out, want_out), fwd_tol(dt));
      EXPECT_LT(rel_err(dx, want_dx), fwd_tol(dt));
    }
  }
}

// permute_backward and unpermute_backward against f64 finite differences of the forward ops.
TEST(MoePermute, BackwardsMatchFiniteDifferences) {
  Rng rng;
  for (int64_t cap : {0, 3}) {
    const int64_t t = 9, k = 3, e = 5, d = 4;
    SCOPED_TRACE(fmt::format("cap={}", cap));
    const auto ids = random_ids(rng, t, k, 5, cap > 0 ? 0.0 : 0.2);
    const MoePermutePlan p = plan_of(ids, t, k, e, cap);
    const Stream s = Stream::cpu();
    // permute: L = sum(x_perm * w) -> dx = permute_backward(w).
    Tensor x = rand_tensor(rng, {t, d}, DType::kF64);
    const auto w_perm = host(rand_tensor(rng, {p.num_rows, d}, DType::kF64));
    Tensor dx = Tensor::empty({t, d}, DType::kF64);
    ops::moe_permute_backward(tensor_of(w_perm, {p.num_rows, d}, DType::kF64), p, dx, s);
    Tensor xp = Tensor::empty({p.num_rows, d}, DType::kF64);
    auto fwd_perm = [&] {
      ops::moe_permute(x, p, xp, s);
      return host(xp);
    };
    EXPECT_LT(fd_rel_error(rng, x, host(dx), fwd_perm, w_perm), kGradTol);
    // unpermute: L = sum(out * w) -> dy_perm, dprobs.
    Tensor y = rand_tensor(rng, {p.num_rows, d}, DType::kF64);
    Tensor probs = rand_tensor(rng, {t, k}, DType::kF64, 0, 1);
    const auto w_out = host(rand_tensor(rng, {t, d}, DType::kF64));
    Tensor dy = filled({p.num_rows, d}, DType::kF64, NAN), dp = filled({t, k}, DType::kF64, NAN);
    ops::moe_unpermute_backward(tensor_of(w_out, {t, d}, DType::kF64), y, p, probs, dy, dp, s);
    Tensor out = Tensor::empty({t, d}, DType::kF64);
    auto fwd_un = [&] {
      ops::moe_unpermute(y, p, probs, out, s);
      return host(out);
    };
    EXPECT_LT(fd_rel_error(rng, y, host(dy), fwd_un, w_out), kGradTol);
    EXPECT_LT(fd_rel_error(rng, probs, host(dp), fwd_un, w_out), kGradTol);
    // Padding rows of dy_perm are zero, dropped slots get dprobs 0.
    const auto src = v32(p.row_src), row = v32(p.slot_row);
    const auto hdy = host(dy), hdp = host(dp);
    for (int64_t r = 0; r < p.num_rows; ++r)
      if (src[r] < 0)
        for (int64_t c = 0; c < d; ++c) EXPECT_EQ(hdy[r * d + c], 0.0);
    for (int64_t sl = 0; sl < t * k; ++sl)
      if (row[sl] < 0) EXPECT_EQ(hdp[sl], 0.0);
  }
}

TEST(MoePermute, ZeroTokenExpertsAndAllDroppedTokens) {
  // Every entry dropped: empty blocks, out and dx zero.
  const MoePermutePlan p = plan_of({-1, -1, -1, -1}, 2, 2, 3, 0);
  EXPECT_EQ(v32(p.counts), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(v32(p.offsets), (std::vector<int32_t>{0, 0, 0, 0}));
  Tensor y = filled({4, 3}, DType::kF32, 7.0), probs = filled({2, 2}, DType::kF32, 1.0);
  Tensor out = filled({2, 3}, DType::kF32, NAN);
  ops::moe_unpermute(y, p, probs, out, Stream::cpu());
  EXPECT_EQ(host(out), std::vector<double>(6, 0.0));
  Tensor xp = filled({4, 3}, DType::kF32, NAN);
  ops::moe_permute(filled({2, 3}, DType::kF32, 1.0), p, xp, Stream::cpu());
  EXPECT_EQ(host(xp), std::vector<double>(12, 0.0));
}

TEST(MoePermute, ThreadCountInvariant) {
  Rng rng;
  const int64_t t = 127, k = 8, e = 60, d = 96;
  const auto ids = random_ids(rng, t, k, e, 0.0);
  const MoePermutePlan p = plan_of(ids, t, k, e, 0);
  Tensor y = rand_tensor(rng, {t * k, d}, DType::kF32), probs = rand_tensor(rng, {t, k}, DType::kF32, 0, 1);
  Tensor g = rand_tensor(rng, {t, d}, DType::kF32);
  expect_thread_count_invariant([&] {
    Tensor out = Tensor::empty({t, d}, DType::kF32), dy = Tensor::empty({t * k, d}, DType::kF32);
    Tensor dp = Tensor::empty({t, k}, DType::kF32);
    ops::moe_unpermute(y, p, probs, out, Stream::cpu());
    ops::moe_unpermute_backward(g, y, p, probs, dy, dp, Stream::cpu());
    std::vector<double> r = host(out), a = host(dy), b = host(dp);
    r.insert(r.end(), a.begin(), a.end());
    r.insert(r.end(), b.begin(), b.end());
    return r;
  });
}

TEST(MoePermute, RejectsBadInputs) {
  const Stream s = Stream::cpu();
  EXPECT_PRIMUS_ERROR(plan_of({0, 3}, 1, 2, 3, 0), "ids[0, 1] = 3 is outside [-1, 3)");
  EXPECT_PRIMUS_ERROR(plan_of({0, -2}, 1, 2, 3, 0), "ids[0, 1] = -2 is outside [-1, 3)");
  const MoePermutePlan p = plan_of({0, 1, 2, 0}, 2, 2, 3, 0);
  Tensor x = Tensor::empty({3, 4}, DType::kF32), xp = Tensor::empty({4, 4}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::moe_permute(x, p, xp, s), "moe_permute: x must be [2, 4]");
  Tensor x2 = Tensor::empty({2, 4}, DType::kF32), xp_bad = Tensor::empty({5, 4}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::moe_permute(x2, p, xp_bad, s), "moe_permute: x_perm must be [4, 4]");
  Tensor probs = Tensor::empty({2, 3}, DType::kF32), out = Tensor::empty({2, 4}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::moe_unpermute(xp, p, probs, out, s), "moe_unpermute: probs must be [2, 2]");
}

}  // namespace
}  // namespace primus::test
