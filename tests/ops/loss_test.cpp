#include "ops/loss.h"

#include <fmt/ranges.h>

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

// ---------------------------------------------------------------------------------------------------------------
// Vocabulary-parallel cross-entropy: the columns of the logits split over P "ranks", each rank's statistics,
// their all-gather (stacked here), and each rank's finish; the result must be softmax_cross_entropy's.

// Column boundaries of P slices of [0, vocab): equal widths (the last takes the remainder) or random unequal
// ones, every slice at least one column wide.
std::vector<int64_t> split_columns(Rng& rng, int64_t vocab, int64_t p, bool equal) {
  std::vector<int64_t> b{0};
  for (int64_t k = 1; k < p; ++k) {
    const int64_t lo = b.back() + 1, hi = vocab - (p - k);  // leave a column for each slice still to come
    b.push_back(equal ? k * (vocab / p) : rng.integer(lo, hi));
  }
  b.push_back(vocab);
  return b;
}

// Columns [c0, c1) of a 2-D tensor, as a new contiguous tensor of the same dtype.
Tensor columns(const Tensor& t, int64_t c0, int64_t c1) {
  const int64_t rows = t.size(0), cols = t.size(1), w = c1 - c0;
  const std::vector<double> v = host(t);
  std::vector<double> out(static_cast<size_t>(rows * w));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w; ++c) out[r * w + c] = v[r * cols + c0 + c];
  return tensor_of(out, {rows, w}, t.dtype());
}

enum class VpMode { kSeparate, kInPlace, kLossOnly };

struct VpOut {
  std::vector<std::vector<double>> losses;  // per rank
  std::vector<double> dlogits;              // the ranks' gradient columns put back together, [R, V]
};

// The whole vocabulary-parallel computation over the slices `bounds` of logits [R, V].
VpOut vocab_parallel(const Tensor& logits, const Tensor& targets, const std::vector<int64_t>& bounds,
                     float grad_scale, VpMode mode) {
  const Stream s = Stream::cpu();
  const DType dt = logits.dtype();
  const int64_t rows = logits.size(0), vocab = logits.size(1), p = static_cast<int64_t>(bounds.size()) - 1;
  std::vector<Tensor> local(static_cast<size_t>(p));
  std::vector<double> gathered;  // the all-gather of the stats, in rank order
  for (int64_t k = 0; k < p; ++k) {
    local[k] = columns(logits, bounds[k], bounds[k + 1]);
    Tensor stats = filled({rows, 3}, dt, std::numeric_limits<double>::quiet_NaN());
    ops::vocab_parallel_ce_stats(local[k], targets, bounds[k], vocab, stats, s);
    const std::vector<double> h = host(stats);
    gathered.insert(gathered.end(), h.begin(), h.end());
  }
  const Tensor all_stats = tensor_of(gathered, {p, rows, 3}, dt);
  VpOut out{{}, std::vector<double>(static_cast<size_t>(rows * vocab), 0.0)};
  for (int64_t k = 0; k < p; ++k) {
    const int64_t w = bounds[k + 1] - bounds[k];
    Tensor losses = filled({rows}, dt, std::numeric_limits<double>::quiet_NaN());
    Tensor dl;
    if (mode == VpMode::kSeparate) dl = filled({rows, w}, dt, std::numeric_limits<double>::quiet_NaN());
    if (mode == VpMode::kInPlace) dl = local[k];
    ops::vocab_parallel_ce_finish(local[k], targets, bounds[k], all_stats, grad_scale, losses,
                                  mode == VpMode::kLossOnly ? nullptr : &dl, s);
    out.losses.push_back(host(losses));
    if (mode == VpMode::kLossOnly) continue;
    const std::vector<double> h = host(dl);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < w; ++c) out.dlogits[r * vocab + bounds[k] + c] = h[r * w + c];
  }
  return out;
}

// Targets over the whole vocabulary (so every slice holds some), about one in four ignored.
TEST(VocabParallelCrossEntropy, SlicesMatchSoftmaxCrossEntropy) {
  Rng rng;
  const std::pair<int64_t, int64_t> sizes[] = {{1, 1}, {1, 31}, {3, 5}, {31, 33}, {17, 127}, {70, 1000}};
  for (DType dt : float_types()) {
    // f64: both sides are exact to roundoff; f32: the file's forward tolerance.
    const double tol = dt == DType::kF64 ? 1e-12 : fwd_tol(dt);
    for (auto [rows, vocab] : sizes) {
      Tensor logits = rand_tensor(rng, {rows, vocab}, dt, -8, 8);
      auto tv = random_targets(rng, rows, vocab);
      if (rows > 1) tv[0] = -100;  // at least one ignored row
      Tensor targets = Tensor::from_vector(tv, {rows});
      const float gs = static_cast<float>(rng.uniform(0.1, 2.0));
      Tensor ref_l = Tensor::empty({rows}, dt), ref_d = Tensor::empty({rows, vocab}, dt);
      ops::softmax_cross_entropy(logits, targets, gs, ref_l, &ref_d, Stream::cpu());
      const std::vector<double> rl = host(ref_l), rd = host(ref_d);
      for (int64_t p = 1; p <= std::min<int64_t>(3, vocab); ++p) {
        for (bool equal : {true, false}) {
          const std::vector<int64_t> bounds = split_columns(rng, vocab, p, equal);
          SCOPED_TRACE(fmt::format("{} rows={} vocab={} P={} bounds={}", dtype_name(dt), rows, vocab, p,
                                   fmt::join(bounds, ",")));
          const VpOut sep = vocab_parallel(logits, targets, bounds, gs, VpMode::kSeparate);
          for (int64_t k = 0; k < p; ++k) {
            EXPECT_LT(rel_err(sep.losses[k], rl), tol) << "rank " << k;
            EXPECT_EQ(sep.losses[k], sep.losses[0]) << "rank " << k << " differs from rank 0";  // bitwise
          }
          // dlogits = gs (softmax - onehot) / count is near zero in a confident row, where the two
          // computations' roundoff is all there is: a batch of confident rows failed the relative test alone
          // (PRIMUS_TEST_SEED=941369499: f64 rows 3 vocab 5, 5.1e-12). So relative, or absolute against the
          // gradient's scale (probabilities are within [0, 1], their roundoff ~1e-16 in f64).
          double worst = 0;
          for (size_t i = 0; i < rd.size(); ++i) worst = std::max(worst, std::abs(sep.dlogits[i] - rd[i]));
          EXPECT_TRUE(rel_err(sep.dlogits, rd) < tol || worst < (dt == DType::kF64 ? 1e-14 : 1e-6) * gs)
              << "relative " << rel_err(sep.dlogits, rd) << ", largest difference " << worst;
          for (int64_t r = 0; r < rows; ++r) {
            if (tv[r] >= 0) continue;
            EXPECT_EQ(sep.losses[0][r], 0.0) << "row " << r;
            for (int64_t j = 0; j < vocab; ++j) ASSERT_EQ(sep.dlogits[r * vocab + j], 0.0) << "row " << r;
          }
          // In place and loss only give bitwise the same results.
          const VpOut inplace = vocab_parallel(logits, targets, bounds, gs, VpMode::kInPlace);
          EXPECT_EQ(inplace.losses, sep.losses);
          EXPECT_EQ(inplace.dlogits, sep.dlogits);
          const VpOut loss_only = vocab_parallel(logits, targets, bounds, gs, VpMode::kLossOnly);
          EXPECT_EQ(loss_only.losses, sep.losses);
        }
      }
    }
  }
}

// One rank holding the whole vocabulary is softmax_cross_entropy (to roundoff: the gradient is exp(x - lse)
// rather than exp(x - max) / sum).
TEST(VocabParallelCrossEntropy, OneRankEqualsSoftmaxCrossEntropy) {
  Rng rng;
  for (DType dt : float_types()) {
    const int64_t rows = 33, vocab = 127;
    SCOPED_TRACE(dtype_name(dt));
    Tensor logits = rand_tensor(rng, {rows, vocab}, dt, -5, 5);
    const auto tv = random_targets(rng, rows, vocab);
    Tensor targets = Tensor::from_vector(tv, {rows});
    Tensor ref_l = Tensor::empty({rows}, dt), ref_d = Tensor::empty({rows, vocab}, dt);
    ops::softmax_cross_entropy(logits, targets, 0.25f, ref_l, &ref_d, Stream::cpu());
    Tensor stats = Tensor::empty({rows, 3}, dt);
    ops::vocab_parallel_ce_stats(logits, targets, 0, vocab, stats, Stream::cpu());
    Tensor losses = Tensor::empty({rows}, dt), dl = Tensor::empty({rows, vocab}, dt);
    ops::vocab_parallel_ce_finish(logits, targets, 0, stats.view({1, rows, 3}), 0.25f, losses, &dl,
                                  Stream::cpu());
    const double tol = dt == DType::kF64 ? 1e-13 : 1e-6;
    EXPECT_LT(rel_err(losses, host(ref_l)), tol);
    EXPECT_LT(rel_err(dl, host(ref_d)), tol);
    // The stats are the row's max, sum of exp(x - max) and target logit.
    const auto st = host(stats), x = host(logits);
    for (int64_t r = 0; r < rows; ++r) {
      if (tv[r] < 0) {
        EXPECT_EQ(st[r * 3], 0.0);
        EXPECT_EQ(st[r * 3 + 1], 0.0);
        EXPECT_EQ(st[r * 3 + 2], 0.0);
        continue;
      }
      double mx = x[r * vocab];
      for (int64_t j = 1; j < vocab; ++j) mx = std::max(mx, x[r * vocab + j]);
      double sum = 0.0;
      for (int64_t j = 0; j < vocab; ++j) sum += std::exp(x[r * vocab + j] - mx);
      EXPECT_EQ(st[r * 3], mx) << "row " << r;
      EXPECT_NEAR(st[r * 3 + 1], sum, sum * tol) << "row " << r;
      EXPECT_EQ(st[r * 3 + 2], x[r * vocab + tv[r]]) << "row " << r;
    }
  }
}

// A rank whose columns are all far below another rank's max adds exp(m_p - M) = 0 (underflow, not NaN), and
// the other rank's huge logits stay finite.
TEST(VocabParallelCrossEntropy, LargeLogitsAreStable) {
  for (DType dt : float_types()) {
    Tensor logits = tensor_of({1000.0, 990.0, -1000.0, 0.0, 1e4, 1e4 - 1.0}, {2, 3}, dt);
    Tensor targets = Tensor::from_vector(std::vector<int32_t>{1, 2}, {2});
    const VpOut out = vocab_parallel(logits, targets, {0, 2, 3}, 1.0f, VpMode::kSeparate);
    for (const auto& l : out.losses) {
      EXPECT_NEAR(l[0], 10.0 + std::log1p(std::exp(-10.0) + std::exp(-2000.0)), 1e-4);
      EXPECT_NEAR(l[1], 1.0 + std::log1p(std::exp(-1.0)), 1e-4);
    }
    for (double v : out.dlogits) EXPECT_TRUE(std::isfinite(v));
  }
}

// dlogits is the gradient of grad_scale * sum(losses) with respect to the whole logits, through the slices.
TEST(VocabParallelCrossEntropy, GradientMatchesFiniteDifferences) {
  Rng rng;
  const DType dt = DType::kF64;
  for (auto [rows, vocab] : {std::pair<int64_t, int64_t>{1, 3}, {3, 5}, {7, 33}}) {
    SCOPED_TRACE(fmt::format("rows={} vocab={}", rows, vocab));
    Tensor logits = rand_tensor(rng, {rows, vocab}, dt, -3, 3);
    Tensor targets = Tensor::from_vector(random_targets(rng, rows, vocab), {rows});
    const std::vector<int64_t> bounds = split_columns(rng, vocab, 3, false);
    const float gs = 0.37f;
    const VpOut out = vocab_parallel(logits, targets, bounds, gs, VpMode::kSeparate);
    auto forward = [&] { return vocab_parallel(logits, targets, bounds, gs, VpMode::kLossOnly).losses[0]; };
    EXPECT_LT(fd_rel_error(rng, logits, out.dlogits, forward, std::vector<double>(rows, gs)), kGradTol);
  }
}

TEST(VocabParallelCrossEntropy, ThreadCountDoesNotChangeResults) {
  Rng rng;
  const int64_t rows = 70, vocab = 1000;
  Tensor logits = rand_tensor(rng, {rows, vocab}, DType::kF32, -5, 5);
  Tensor targets = Tensor::from_vector(random_targets(rng, rows, vocab), {rows});
  const std::vector<int64_t> bounds = split_columns(rng, vocab, 3, false);
  expect_thread_count_invariant([&] {
    VpOut out = vocab_parallel(logits, targets, bounds, 0.5f, VpMode::kSeparate);
    std::vector<double> all = out.losses[0];
    all.insert(all.end(), out.dlogits.begin(), out.dlogits.end());
    return all;
  });
}

TEST(VocabParallelCrossEntropy, RejectsBadInputs) {
  Rng rng;
  const Stream s = Stream::cpu();
  Tensor logits = rand_tensor(rng, {3, 4}, DType::kF32), stats = Tensor::empty({3, 3}, DType::kF32);
  // Columns [3, 7) of a vocabulary of 7: target 7 is outside the vocabulary, not merely outside this slice.
  Tensor bad_t = Tensor::from_vector(std::vector<int32_t>{0, 7, 1}, {3});
  EXPECT_PRIMUS_ERROR(ops::vocab_parallel_ce_stats(logits, bad_t, 3, 7, stats, s),
                      "vocab_parallel_ce_stats: target 7 at row 1 is out of range [0, 7)");
  Tensor t = Tensor::from_vector(std::vector<int32_t>{0, 6, -100}, {3});
  EXPECT_PRIMUS_ERROR(ops::vocab_parallel_ce_stats(logits, t, 4, 7, stats, s),
                      "this rank's columns [4, 8) must lie in the vocabulary [0, 7)");
  EXPECT_PRIMUS_ERROR(ops::vocab_parallel_ce_stats(logits, t, -1, 7, stats, s),
                      "this rank's columns [-1, 3) must lie in the vocabulary [0, 7)");
  Tensor stats_bad = Tensor::empty({3, 2}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::vocab_parallel_ce_stats(logits, t, 3, 7, stats_bad, s),
                      "vocab_parallel_ce_stats: stats must be [3, 3]");
  Tensor stats64 = Tensor::empty({3, 3}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::vocab_parallel_ce_stats(logits, t, 3, 7, stats64, s),
                      "vocab_parallel_ce_stats: stats must be f32");
  ops::vocab_parallel_ce_stats(logits, t, 3, 7, stats, s);
  Tensor losses = Tensor::empty({3}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::vocab_parallel_ce_finish(logits, t, 3, stats, 1.0f, losses, nullptr, s),
                      "vocab_parallel_ce_finish: all_stats must have 3 dimensions");
  Tensor all_bad = Tensor::empty({2, 4, 3}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::vocab_parallel_ce_finish(logits, t, 3, all_bad, 1.0f, losses, nullptr, s),
                      "vocab_parallel_ce_finish: all_stats must be [2, 3, 3]");
  Tensor all = stats.view({1, 3, 3});
  Tensor dl_bad = Tensor::empty({3, 5}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::vocab_parallel_ce_finish(logits, t, 3, all, 1.0f, losses, &dl_bad, s),
                      "vocab_parallel_ce_finish: dlogits must be [3, 4]");
  Tensor losses64 = Tensor::empty({3}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::vocab_parallel_ce_finish(logits, t, 3, all, 1.0f, losses64, nullptr, s),
                      "vocab_parallel_ce_finish: losses must be f32");
}

}  // namespace
}  // namespace primus::test
