#include "ops/norm.h"

#include <cmath>
#include <limits>

#include "op_test_util.h"

namespace primus::test {
namespace {

// RMSNorm of segments of length d starting at column `col0` of each row of x [rows, cols]; other columns keep
// `keep`'s values.
struct NaiveNorm {
  std::vector<double> y, rstd;
};
NaiveNorm naive_norm(const std::vector<double>& x, const std::vector<double>& w, double eps, int64_t rows,
                     int64_t cols, int64_t col0, int64_t n_heads, int64_t d,
                     const std::vector<double>& keep) {
  NaiveNorm r{keep, {}};
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t off = i * cols + col0 + h * d;
      double ms = 0.0;
      for (int64_t e = 0; e < d; ++e) ms += x[off + e] * x[off + e];
      ms /= static_cast<double>(d);
      const double rs = 1.0 / std::sqrt(ms + eps);
      r.rstd.push_back(rs);
      for (int64_t e = 0; e < d; ++e) r.y[off + e] = x[off + e] / std::sqrt(ms + eps) * w[e];
    }
  }
  return r;
}

TEST(RmsNorm, ForwardMatchesNaive) {
  Rng rng;
  const std::pair<int64_t, int64_t> sizes[] = {{1, 1},    {3, 5},    {31, 33},  {1, 127},
                                               {33, 128}, {64, 256}, {300, 256}};
  for (DType dt : float_types()) {
    for (auto [rows, d] : sizes) {
      SCOPED_TRACE(fmt::format("{} rows={} d={}", dtype_name(dt), rows, d));
      Tensor x = rand_tensor(rng, {rows, d}, dt, -3, 3), w = rand_tensor(rng, {d}, dt, 0.5, 1.5);
      Tensor y = filled({rows, d}, dt, kNaN), rstd = filled({rows}, dt, kNaN);
      const float eps = 1e-5f;
      ops::rmsnorm_forward(x, w, eps, y, rstd, Stream::cpu());
      const auto ref = naive_norm(host(x), host(w), eps, rows, d, 0, 1, d, host(y));
      EXPECT_LT(rel_err(y, ref.y), fwd_tol(dt));
      EXPECT_LT(rel_err(rstd, ref.rstd), fwd_tol(dt));
      // In place (y is x).
      Tensor xi = clone(x);
      ops::rmsnorm_forward(xi, w, eps, xi, rstd, Stream::cpu());
      EXPECT_LT(rel_err(xi, ref.y), fwd_tol(dt));
    }
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  Rng rng;
  const std::pair<int64_t, int64_t> sizes[] = {{1, 1}, {3, 7}, {5, 33}, {2, 127}};
  const DType dt = DType::kF64;
  for (auto [rows, d] : sizes) {
    SCOPED_TRACE(fmt::format("rows={} d={}", rows, d));
    Tensor x = rand_tensor(rng, {rows, d}, dt), w = rand_tensor(rng, {d}, dt, 0.5, 1.5);
    Tensor y = Tensor::empty({rows, d}, dt), rstd = Tensor::empty({rows}, dt);
    Tensor dy = rand_tensor(rng, {rows, d}, dt);
    const auto wts = host(dy);
    const float eps = 1e-3f;
    auto forward = [&] {
      ops::rmsnorm_forward(x, w, eps, y, rstd, Stream::cpu());
      return host(y);
    };
    forward();
    Tensor dx = filled({rows, d}, dt, kNaN), dw = Tensor::zeros({d}, dt);
    ops::rmsnorm_backward(dy, x, w, rstd, dx, dw, false, Stream::cpu());
    EXPECT_LT(fd_rel_error(rng, x, host(dx), forward, wts), kGradTol);
    EXPECT_LT(fd_rel_error(rng, w, host(dw), forward, wts), kGradTol);
  }
}

TEST(RmsNorm, BackwardAccumulationContract) {
  Rng rng;
  for (DType dt : float_types()) {
    const int64_t rows = 9, d = 31;
    Tensor x = rand_tensor(rng, {rows, d}, dt), w = rand_tensor(rng, {d}, dt);
    Tensor y = Tensor::empty({rows, d}, dt), rstd = Tensor::empty({rows}, dt),
           dy = rand_tensor(rng, {rows, d}, dt);
    ops::rmsnorm_forward(x, w, 1e-6f, y, rstd, Stream::cpu());
    Tensor dx = Tensor::empty({rows, d}, dt), dw = Tensor::zeros({d}, dt);
    ops::rmsnorm_backward(dy, x, w, rstd, dx, dw, false, Stream::cpu());
    const auto dx1 = host(dx), dw1 = host(dw);
    // accumulate_dx adds onto dx; dw always accumulates.
    Tensor start = rand_tensor(rng, {rows, d}, dt), dw_start = rand_tensor(rng, {d}, dt);
    Tensor dx2 = clone(start), dw2 = clone(dw_start);
    ops::rmsnorm_backward(dy, x, w, rstd, dx2, dw2, true, Stream::cpu());
    std::vector<double> e_dx = host(start), e_dw = host(dw_start);
    for (size_t i = 0; i < e_dx.size(); ++i) e_dx[i] += dx1[i];
    for (size_t i = 0; i < e_dw.size(); ++i) e_dw[i] += dw1[i];
    EXPECT_LT(rel_err(dx2, e_dx), fwd_tol(dt));
    EXPECT_LT(rel_err(dw2, e_dw), fwd_tol(dt));
    // dx may be dy itself (overwrite in place).
    Tensor g = clone(dy), dw3 = Tensor::zeros({d}, dt);
    ops::rmsnorm_backward(g, x, w, rstd, g, dw3, false, Stream::cpu());
    EXPECT_LT(rel_err(g, dx1), fwd_tol(dt));
    EXPECT_LT(rel_err(dw3, dw1), fwd_tol(dt));
  }
}

struct HeadCase {
  int64_t rows, total, begin, n, d;
};

TEST(HeadRmsNorm, ForwardTouchesOnlyItsColumns) {
  Rng rng;
  const HeadCase cases[] = {
      {1, 1, 0, 1, 1}, {3, 5, 1, 3, 7}, {31, 4, 2, 2, 16}, {7, 10, 6, 2, 33}, {300, 4, 1, 2, 128}};
  for (DType dt : float_types()) {
    for (const HeadCase& c : cases) {
      SCOPED_TRACE(fmt::format("{} rows={} total={} begin={} n={} d={}", dtype_name(dt), c.rows, c.total,
                               c.begin, c.n, c.d));
      const int64_t cols = c.total * c.d;
      Tensor x = rand_tensor(rng, {c.rows, cols}, dt, -2, 2), w = rand_tensor(rng, {c.d}, dt, 0.5, 1.5);
      Tensor y = rand_tensor(rng, {c.rows, cols}, dt, 10, 20);  // sentinels outside the normalised heads
      Tensor rstd = filled({c.rows, c.n}, dt, kNaN);
      const auto y0 = host(y);
      ops::head_rmsnorm_forward(x, c.begin, c.n, c.d, w, 1e-6f, y, rstd, Stream::cpu());
      const auto ref = naive_norm(host(x), host(w), 1e-6f, c.rows, cols, c.begin * c.d, c.n, c.d, y0);
      EXPECT_LT(rel_err(y, ref.y), fwd_tol(dt));
      EXPECT_LT(rel_err(rstd, ref.rstd), fwd_tol(dt));
      // Columns outside [begin, begin + n) heads still hold the sentinels exactly.
      const auto hy = host(y);
      for (int64_t i = 0; i < c.rows; ++i)
        for (int64_t col = 0; col < cols; ++col)
          if (col < c.begin * c.d || col >= (c.begin + c.n) * c.d)
            ASSERT_EQ(hy[i * cols + col], y0[i * cols + col]);
      // In place on x: the other heads keep x's values.
      Tensor xi = clone(x);
      ops::head_rmsnorm_forward(xi, c.begin, c.n, c.d, w, 1e-6f, xi, rstd, Stream::cpu());
      EXPECT_LT(
          rel_err(xi, naive_norm(host(x), host(w), 1e-6f, c.rows, cols, c.begin * c.d, c.n, c.d, host(x)).y),
          fwd_tol(dt));
    }
  }
}

TEST(HeadRmsNorm, BackwardMatchesFiniteDifferencesAndKeepsOtherColumns) {
  Rng rng;
  const HeadCase cases[] = {{1, 1, 0, 1, 2}, {3, 5, 1, 3, 7}, {4, 4, 2, 2, 5}};
  const DType dt = DType::kF64;
  for (const HeadCase& c : cases) {
    SCOPED_TRACE(fmt::format("rows={} total={} begin={} n={} d={}", c.rows, c.total, c.begin, c.n, c.d));
    const int64_t cols = c.total * c.d;
    Tensor x = rand_tensor(rng, {c.rows, cols}, dt), w = rand_tensor(rng, {c.d}, dt, 0.5, 1.5);
    Tensor y = Tensor::zeros({c.rows, cols}, dt), rstd = Tensor::empty({c.rows, c.n}, dt);
    Tensor dy = rand_tensor(rng, {c.rows, cols}, dt);
    // The loss only sees the normalised columns (y elsewhere is a constant zero).
    const auto wts = host(dy);
    auto forward = [&] {
      ops::head_rmsnorm_forward(x, c.begin, c.n, c.d, w, 1e-4f, y, rstd, Stream::cpu());
      return host(y);
    };
    forward();
    Tensor dx = rand_tensor(rng, {c.rows, cols}, dt, 10, 20), dw = Tensor::zeros({c.d}, dt);
    const auto dx0 = host(dx);
    ops::head_rmsnorm_backward(dy, x, w, rstd, c.begin, c.n, c.d, dx, dw, Stream::cpu());
    // Outside the heads dx keeps its old values; inside it is the gradient (zero elsewhere for the FD check).
    auto g = host(dx);
    for (int64_t i = 0; i < c.rows; ++i) {
      for (int64_t col = 0; col < cols; ++col) {
        if (col < c.begin * c.d || col >= (c.begin + c.n) * c.d) {
          ASSERT_EQ(g[i * cols + col], dx0[i * cols + col]);
          g[i * cols + col] = 0.0;
        }
      }
    }
    EXPECT_LT(fd_rel_error(rng, x, g, forward, wts, 100), kGradTol);
    EXPECT_LT(fd_rel_error(rng, w, host(dw), forward, wts), kGradTol);
    // dw accumulates.
    const auto dw1 = host(dw);
    ops::head_rmsnorm_backward(dy, x, w, rstd, c.begin, c.n, c.d, dx, dw, Stream::cpu());
    std::vector<double> twice = dw1;
    for (double& e : twice) e *= 2.0;
    EXPECT_LT(rel_err(dw, twice), 1e-14);
  }
}

TEST(RmsNorm, RejectsBadInputs) {
  Rng rng;
  const Stream s = Stream::cpu();
  Tensor x = rand_tensor(rng, {4, 64}, DType::kF32), y = Tensor::empty({4, 64}, DType::kF32);
  Tensor rstd = Tensor::empty({4}, DType::kF32);
  Tensor w63 = rand_tensor(rng, {63}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::rmsnorm_forward(x, w63, 1e-5f, y, rstd, s),
                      "rmsnorm_forward: w must be [64], got f32[63] on cpu");
  Tensor w = rand_tensor(rng, {64}, DType::kF32);
  Tensor rstd64 = Tensor::empty({4}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::rmsnorm_forward(x, w, 1e-5f, y, rstd64, s), "rmsnorm_forward: rstd must be f32");
  Tensor wide = rand_tensor(rng, {4, 128}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::rmsnorm_forward(wide.narrow(1, 0, 64), w, 1e-5f, y, rstd, s), "contiguous");
  Tensor dx = Tensor::empty({4, 64}, DType::kF32), dw = Tensor::zeros({65}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::rmsnorm_backward(y, x, w, rstd, dx, dw, false, s),
                      "rmsnorm_backward: dw must be [64]");
  // Heads outside the row, or a width that is not a whole number of heads.
  Tensor hw = rand_tensor(rng, {16}, DType::kF32), hr = Tensor::empty({4, 2}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::head_rmsnorm_forward(x, 3, 2, 16, hw, 1e-6f, y, hr, s), "outside the 4 heads");
  Tensor hw5 = rand_tensor(rng, {5}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::head_rmsnorm_forward(x, 0, 2, 5, hw5, 1e-6f, y, hr, s), "heads * 5");
  Tensor hr_bad = Tensor::empty({4, 3}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::head_rmsnorm_forward(x, 0, 2, 16, hw, 1e-6f, y, hr_bad, s),
                      "head_rmsnorm_forward: rstd must be [4, 2]");
}

TEST(RmsNorm, ThreadCountDoesNotChangeResults) {
  Rng rng;
  const int64_t rows = 300, d = 256, heads = 4, hd = 64;
  Tensor x = rand_tensor(rng, {rows, d}, DType::kF32), w = rand_tensor(rng, {d}, DType::kF32);
  Tensor hw = rand_tensor(rng, {hd}, DType::kF32), dy = rand_tensor(rng, {rows, d}, DType::kF32);
  expect_thread_count_invariant([&] {
    Tensor y = Tensor::empty({rows, d}, DType::kF32), rstd = Tensor::empty({rows}, DType::kF32);
    Tensor dx = Tensor::empty({rows, d}, DType::kF32), dw = Tensor::zeros({d}, DType::kF32);
    ops::rmsnorm_forward(x, w, 1e-5f, y, rstd, Stream::cpu());
    ops::rmsnorm_backward(dy, x, w, rstd, dx, dw, false, Stream::cpu());
    Tensor hy = Tensor::zeros({rows, d}, DType::kF32), hr = Tensor::empty({rows, heads - 1}, DType::kF32);
    Tensor hdx = Tensor::zeros({rows, d}, DType::kF32), hdw = Tensor::zeros({hd}, DType::kF32);
    ops::head_rmsnorm_forward(x, 1, heads - 1, hd, hw, 1e-6f, hy, hr, Stream::cpu());
    ops::head_rmsnorm_backward(dy, x, hw, hr, 1, heads - 1, hd, hdx, hdw, Stream::cpu());
    std::vector<double> all;
    for (const Tensor* t : {&y, &rstd, &dx, &dw, &hy, &hr, &hdx, &hdw}) {
      const auto v = host(*t);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  });
}

}  // namespace
}  // namespace primus::test
