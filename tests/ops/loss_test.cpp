#include "ops/loss.h"

#include <cmath>
#include <limits>

#include "op_test_util.h"

namespace primus::test {
namespace {

struct NaiveCe {
  std::vector<double> losses, dlogits;
};

NaiveCe naive_ce(const std::vector<double>& x, const std::vector<int32_t>& tgt, int64_t rows, int64_t vocab,
                 double grad_scale) {
  NaiveCe r{std::vector<double>(rows, 0.0), std::vector<double>(rows * vocab, 0.0)};
  for (int64_t i = 0; i < rows; ++i) {
    if (tgt[i] < 0) continue;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < vocab; ++j) mx = std::max(mx, x[i * vocab + j]);
    double sum = 0.0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(x[i * vocab + j] - mx);
    r.losses[i] = mx + std::log(sum) - x[i * vocab + tgt[i]];
    for (int64_t j = 0; j < vocab; ++j)
      r.dlogits[i * vocab + j] =
          grad_scale * (std::exp(x[i * vocab + j] - mx) / sum - (j == tgt[i] ? 1.0 : 0.0));
  }
  return r;
}

// Targets in [0, vocab), about one in four ignored (-1 or -100).
std::vector<int32_t> random_targets(Rng& rng, int64_t rows, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(rows));
  for (auto& e : t) {
    const int64_t r = rng.integer(0, 7);
    e = r == 0 ? -1 : r == 1 ? -100 : static_cast<int32_t>(rng.integer(0, vocab - 1));
  }
  return t;
}

TEST(SoftmaxCrossEntropy, MatchesNaiveWithIgnoredRows) {
  Rng rng;
  const std::pair<int64_t, int64_t> sizes[] = {{1, 1}, {3, 5}, {31, 33}, {17, 127}, {70, 1000}};
  for (DType dt : float_types()) {
    for (auto [rows, vocab] : sizes) {
      SCOPED_TRACE(fmt::format("{} rows={} vocab={}", dtype_name(dt), rows, vocab));
      Tensor logits = rand_tensor(rng, {rows, vocab}, dt, -8, 8);
      auto tv = random_targets(rng, rows, vocab);
      if (rows > 1) tv[0] = -1;  // at least one ignored row
      Tensor targets = Tensor::from_vector(tv, {rows});
      const float gs = static_cast<float>(rng.uniform(0.1, 2.0));
      Tensor losses = filled({rows}, dt, std::numeric_limits<double>::quiet_NaN());
      Tensor dl = filled({rows, vocab}, dt, std::numeric_limits<double>::quiet_NaN());
      ops::softmax_cross_entropy(logits, targets, gs, losses, &dl, Stream::cpu());
      const NaiveCe ref = naive_ce(host(logits), tv, rows, vocab, gs);
      EXPECT_LT(rel_err(losses, ref.losses), fwd_tol(dt));
      EXPECT_LT(rel_err(dl, ref.dlogits), fwd_tol(dt));
      const auto hl = host(losses), hd = host(dl);
      for (int64_t i = 0; i < rows; ++i) {
        if (tv[i] >= 0) continue;
        EXPECT_EQ(hl[i], 0.0) << "row " << i;
        for (int64_t j = 0; j < vocab; ++j) ASSERT_EQ(hd[i * vocab + j], 0.0) << "row " << i;
      }
      // Without dlogits the losses are the same.
      Tensor losses2 = Tensor::empty({rows}, dt);
      ops::softmax_cross_entropy(logits, targets, gs, losses2, nullptr, Stream::cpu());
      EXPECT_EQ(host(losses2), hl);
      // In place: dlogits is the logits tensor itself.
      Tensor inplace = clone(logits);
      ops::softmax_cross_entropy(inplace, targets, gs, losses2, &inplace, Stream::cpu());
      EXPECT_EQ(host(inplace), hd);
      EXPECT_EQ(host(losses2), hl);
    }
  }
}

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  Rng rng;
  const DType dt = DType::kF64;
  for (auto [rows, vocab] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {7, 33}}) {
    SCOPED_TRACE(fmt::format("rows={} vocab={}", rows, vocab));
    Tensor logits = rand_tensor(rng, {rows, vocab}, dt, -3, 3);
    Tensor targets = Tensor::from_vector(random_targets(rng, rows, vocab), {rows});
    const float gs = 0.37f;
    Tensor losses = Tensor::empty({rows}, dt), dl = Tensor::empty({rows, vocab}, dt);
    ops::softmax_cross_entropy(logits, targets, gs, losses, &dl, Stream::cpu());
    // dlogits is the gradient of grad_scale * sum(losses).
    auto forward = [&] {
      ops::softmax_cross_entropy(logits, targets, gs, losses, nullptr, Stream::cpu());
      return host(losses);
    };
    EXPECT_LT(fd_rel_error(rng, logits, host(dl), forward, std::vector<double>(rows, gs)), kGradTol);
  }
}

TEST(SoftmaxCrossEntropy, LargeLogitsAreStable) {
  for (DType dt : float_types()) {
    Tensor logits = tensor_of({1000.0, 990.0, -1000.0, 0.0, 1e4, 1e4 - 1.0}, {2, 3}, dt);
    Tensor targets = Tensor::from_vector(std::vector<int32_t>{1, 2}, {2});
    Tensor losses = Tensor::empty({2}, dt), dl = Tensor::empty({2, 3}, dt);
    ops::softmax_cross_entropy(logits, targets, 1.0f, losses, &dl, Stream::cpu());
    const auto l = host(losses);
    EXPECT_NEAR(l[0], 10.0 + std::log1p(std::exp(-10.0) + std::exp(-2000.0)), 1e-4);
    EXPECT_NEAR(l[1], 1.0 + std::log1p(std::exp(-1.0)), 1e-4);
    for (double v : host(dl)) EXPECT_TRUE(std::isfinite(v));
  }
}

TEST(SoftmaxCrossEntropy, RejectsBadInputs) {
  Rng rng;
  const Stream s = Stream::cpu();
  Tensor logits = rand_tensor(rng, {3, 5}, DType::kF32), losses = Tensor::empty({3}, DType::kF32);
  Tensor bad_t = Tensor::from_vector(std::vector<int32_t>{0, 5, 1}, {3});
  EXPECT_PRIMUS_ERROR(ops::softmax_cross_entropy(logits, bad_t, 1.0f, losses, nullptr, s),
                      "target 5 at row 1 is out of range [0, 5)");
  Tensor t = Tensor::from_vector(std::vector<int32_t>{0, 4, 1}, {3});
  Tensor dl_bad = Tensor::empty({3, 4}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::softmax_cross_entropy(logits, t, 1.0f, losses, &dl_bad, s),
                      "softmax_cross_entropy: dlogits must be [3, 5]");
  Tensor losses64 = Tensor::empty({3}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::softmax_cross_entropy(logits, t, 1.0f, losses64, nullptr, s),
                      "softmax_cross_entropy: losses must be f32");
  Tensor t_short = Tensor::from_vector(std::vector<int32_t>{0, 1}, {2});
  EXPECT_PRIMUS_ERROR(ops::softmax_cross_entropy(logits, t_short, 1.0f, losses, nullptr, s),
                      "softmax_cross_entropy: targets must be [3]");
}

TEST(SoftmaxCrossEntropy, ThreadCountDoesNotChangeResults) {
  Rng rng;
  const int64_t rows = 70, vocab = 1000;
  Tensor logits = rand_tensor(rng, {rows, vocab}, DType::kF32, -5, 5);
  Tensor targets = Tensor::from_vector(random_targets(rng, rows, vocab), {rows});
  expect_thread_count_invariant([&] {
    Tensor losses = Tensor::empty({rows}, DType::kF32), dl = Tensor::empty({rows, vocab}, DType::kF32);
    ops::softmax_cross_entropy(logits, targets, 0.5f, losses, &dl, Stream::cpu());
    std::vector<double> all = host(losses), g = host(dl);
    all.insert(all.end(), g.begin(), g.end());
    return all;
  });
}

}  // namespace
}  // namespace primus::test
