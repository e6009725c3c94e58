// CPU reference of the grouped GEMM (ops/grouped_gemm.h) against naive per-expert triple loops, f64 finite
// differences for dgrad and wgrad, zero-token experts, padding rows and odd sizes.
#include "ops/grouped_gemm.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "bench/grouped_gemm_bench.h"
#include "op_test_util.h"

namespace primus::test {
namespace {

struct Case {
  std::vector<int64_t> counts;
  int64_t padding = 0;  // rows past the experts' rows
  int64_t n = 0, k = 0;
  int64_t rows() const {
    int64_t r = padding;
    for (int64_t c : counts) r += c;
    return r;
  }
  int64_t experts() const { return static_cast<int64_t>(counts.size()); }
  std::string str() const {
    return fmt::format("counts=[{}] padding={} N={} K={}", fmt::join(counts, ","), padding, n, k);
  }
};

// Odd sizes, zero-token experts (first, middle, last, all), padding rows.
const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {{1}, 0, 1, 1},    {{5, 0, 7}, 2, 33, 31},    {{0, 31, 33, 0}, 0, 31, 33}, {{127, 3, 0, 1}, 5, 17, 127},
      {{0, 0}, 3, 8, 4}, {{16, 16, 16}, 0, 64, 32},
  };
  return c;
}

// Row ranges of the experts: expert e owns rows [first[e], first[e] + counts[e]).
std::vector<int64_t> first_rows(const std::vector<int64_t>& counts) {
  std::vector<int64_t> f(counts.size());
  int64_t r = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    f[e] = r;
    r += counts[e];
  }
  return f;
}

std::vector<double> naive_forward(const Case& c, const std::vector<double>& x, const std::vector<double>& w) {
  std::vector<double> y(static_cast<size_t>(c.rows() * c.n), 0.0);
  const auto first = first_rows(c.counts);
  for (int64_t e = 0; e < c.experts(); ++e)
    for (int64_t r = first[e]; r < first[e] + c.counts[e]; ++r)
      for (int64_t j = 0; j < c.n; ++j) {
        double acc = 0.0;
        for (int64_t i = 0; i < c.k; ++i) acc += x[r * c.k + i] * w[(e * c.n + j) * c.k + i];
        y[r * c.n + j] = acc;
      }
  return y;
}

std::vector<double> naive_dgrad(const Case& c, const std::vector<double>& dy, const std::vector<double>& w) {
  std::vector<double> dx(static_cast<size_t>(c.rows() * c.k), 0.0);
  const auto first = first_rows(c.counts);
  for (int64_t e = 0; e < c.experts(); ++e)
    for (int64_t r = first[e]; r < first[e] + c.counts[e]; ++r)
      for (int64_t i = 0; i < c.k; ++i) {
        double acc = 0.0;
        for (int64_t j = 0; j < c.n; ++j) acc += dy[r * c.n + j] * w[(e * c.n + j) * c.k + i];
        dx[r * c.k + i] = acc;
      }
  return dx;
}

std::vector<double> naive_wgrad(const Case& c, const std::vector<double>& dy, const std::vector<double>& x) {
  std::vector<double> dw(static_cast<size_t>(c.experts() * c.n * c.k), 0.0);
  const auto first = first_rows(c.counts);
  for (int64_t e = 0; e < c.experts(); ++e)
    for (int64_t j = 0; j < c.n; ++j)
      for (int64_t i = 0; i < c.k; ++i) {
        double acc = 0.0;
        for (int64_t r = first[e]; r < first[e] + c.counts[e]; ++r) acc += dy[r * c.n + j] * x[r * c.k + i];
        dw[(e * c.n + j) * c.k + i] = acc;
      }
  return dw;
}

TEST(GroupedGemm, ForwardAndDgradMatchNaiveLoops) {
  Rng rng;
  for (DType dt : float_types()) {
    for (const Case& c : cases()) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dt), c.str()));
      Tensor x = rand_tensor(rng, {c.rows(), c.k}, dt), w = rand_tensor(rng, {c.experts(), c.n, c.k}, dt);
      Tensor dy = rand_tensor(rng, {c.rows(), c.n}, dt);
      // Poisoned outputs: every row, padding included, must be written.
      Tensor y = filled({c.rows(), c.n}, dt, kNaN), dx = filled({c.rows(), c.k}, dt, kNaN);
      ops::grouped_gemm_forward(x, w, c.counts, y, Stream::cpu());
      ops::grouped_gemm_backward_input(dy, w, c.counts, dx, Stream::cpu());
      EXPECT_LT(rel_err(y, naive_forward(c, host(x), host(w))), fwd_tol(dt));
      EXPECT_LT(rel_err(dx, naive_dgrad(c, host(dy), host(w))), fwd_tol(dt));
      const auto yh = host(y), dxh = host(dx);
      const int64_t first_pad = c.rows() - c.padding;
      for (int64_t i = first_pad * c.n; i < c.rows() * c.n; ++i) EXPECT_EQ(yh[i], 0.0) << "y padding " << i;
      for (int64_t i = first_pad * c.k; i < c.rows() * c.k; ++i) EXPECT_EQ(dxh[i], 0.0) << "dx padding " << i;
    }
  }
}

TEST(GroupedGemm, WgradOverwritesOrAccumulatesAndLeavesEmptyExperts) {
  Rng rng;
  for (DType dt : float_types()) {
    for (const Case& c : cases()) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dt), c.str()));
      Tensor x = rand_tensor(rng, {c.rows(), c.k}, dt), dy = rand_tensor(rng, {c.rows(), c.n}, dt);
      const auto ref = naive_wgrad(c, host(dy), host(x));
      // Overwrite: a NaN-poisoned dw comes back fully defined, empty experts zero.
      Tensor dw = filled({c.experts(), c.n, c.k}, dt, kNaN);
      ops::grouped_gemm_backward_weight(dy, x, c.counts, dw, Stream::cpu(), /*accumulate=*/false);
      EXPECT_LT(rel_err(dw, ref), fwd_tol(dt));
      // Accumulate onto a known gradient: empty experts keep it bit for bit.
      Tensor prior = rand_tensor(rng, {c.experts(), c.n, c.k}, dt);
      Tensor acc = clone(prior);
      ops::grouped_gemm_backward_weight(dy, x, c.counts, acc, Stream::cpu(), /*accumulate=*/true);
      std::vector<double> want = host(prior);
      for (size_t i = 0; i < want.size(); ++i) want[i] += ref[i];
      EXPECT_LT(rel_err(acc, want), fwd_tol(dt));
      const auto acch = host(acc), priorh = host(prior);
      const int64_t block = c.n * c.k;
      for (int64_t e = 0; e < c.experts(); ++e) {
        if (c.counts[e] != 0) continue;
        for (int64_t i = e * block; i < (e + 1) * block; ++i) EXPECT_EQ(acch[i], priorh[i]) << "expert " << e;
      }
    }
  }
}

TEST(GroupedGemm, GradientsMatchFiniteDifferences) {
  Rng rng;
  const DType dt = DType::kF64;
  const std::vector<Case> fd_cases = {{{3, 0, 4}, 1, 5, 6}, {{2, 7}, 0, 9, 3}, {{0, 5, 0}, 2, 4, 7}};
  for (const Case& c : fd_cases) {
    SCOPED_TRACE(c.str());
    Tensor x = rand_tensor(rng, {c.rows(), c.k}, dt), w = rand_tensor(rng, {c.experts(), c.n, c.k}, dt);
    Tensor y = Tensor::empty({c.rows(), c.n}, dt);
    Tensor dy = rand_tensor(rng, {c.rows(), c.n}, dt);  // L = sum(y * dy)
    const auto weights = host(dy);
    auto forward = [&] {
      ops::grouped_gemm_forward(x, w, c.counts, y, Stream::cpu());
      return host(y);
    };
    Tensor dx = filled({c.rows(), c.k}, dt, kNaN), dw = filled({c.experts(), c.n, c.k}, dt, kNaN);
    ops::grouped_gemm_backward_input(dy, w, c.counts, dx, Stream::cpu());
    ops::grouped_gemm_backward_weight(dy, x, c.counts, dw, Stream::cpu(), false);
    EXPECT_LT(fd_rel_error(rng, x, host(dx), forward, weights, 200), kGradTol);
    EXPECT_LT(fd_rel_error(rng, w, host(dw), forward, weights, 200), kGradTol);
  }
}

TEST(GroupedGemm, RejectsBadCountsAndShapes) {
  Rng rng;
  const Stream s = Stream::cpu();
  Tensor x = rand_tensor(rng, {6, 4}, DType::kF32), w = rand_tensor(rng, {2, 3, 4}, DType::kF32);
  Tensor y = Tensor::empty({6, 3}, DType::kF32);
  const std::vector<int64_t> three = {1, 2, 3}, negative = {7, -1}, too_many = {4, 3};
  EXPECT_PRIMUS_ERROR(ops::grouped_gemm_forward(x, w, three, y, s), "3 token counts given for 2 experts");
  EXPECT_PRIMUS_ERROR(ops::grouped_gemm_forward(x, w, negative, y, s), "expert 1 has a negative token count");
  EXPECT_PRIMUS_ERROR(ops::grouped_gemm_forward(x, w, too_many, y, s), "sum to 7 but the inputs hold only 6");
  const std::vector<int64_t> ok = {2, 4};
  Tensor w2 = rand_tensor(rng, {3, 4}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::grouped_gemm_forward(x, w2, ok, y, s), "w must be [experts, out, in]");
  Tensor y_bad = Tensor::empty({6, 4}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::grouped_gemm_forward(x, w, ok, y_bad, s), "y must be [6, 3]");
  Tensor w64 = rand_tensor(rng, {2, 3, 4}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::grouped_gemm_forward(x, w64, ok, y, s), "w must be f32");
  Tensor dw = Tensor::empty({2, 3, 5}, DType::kF32), dy = rand_tensor(rng, {6, 3}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::grouped_gemm_backward_weight(dy, x, ok, dw, s), "x must be [6, 5]");
}

// The benchmark's token loads: the same total as E x m, equal or skewed with an empty expert.
TEST(GroupedGemm, BenchmarkLoadsKeepTheTokenTotal) {
  for (const auto& shape : bench::grouped_gemm_anchor_shapes()) {
    SCOPED_TRACE(shape.name);
    const int64_t total = shape.experts * shape.tokens_per_expert;
    const auto equal = bench::grouped_gemm_counts(shape, "equal", 7);
    EXPECT_EQ(std::count(equal.begin(), equal.end(), shape.tokens_per_expert), shape.experts);
    const auto uneven = bench::grouped_gemm_counts(shape, "uneven", 7);
    EXPECT_EQ(std::accumulate(uneven.begin(), uneven.end(), int64_t{0}), total);
    EXPECT_EQ(uneven[static_cast<size_t>(shape.experts / 2)], 0);  // the designated empty expert
    EXPECT_GT(*std::max_element(uneven.begin(), uneven.end()), shape.tokens_per_expert);
  }
  EXPECT_PRIMUS_ERROR(bench::grouped_gemm_counts(bench::grouped_gemm_anchor_shapes()[0], "skewed", 1),
                      "load 'skewed'");
}

}  // namespace
}  // namespace primus::test
