#include "ops/gemm.h"

#include <limits>

#include "op_test_util.h"
#include "ops/elementwise.h"

namespace primus::test {
namespace {

using ops::gemm;

// c = alpha * op(a) @ op(b) + beta * c_in, element by element in double.
std::vector<double> naive_gemm(const std::vector<double>& a, bool ta, const std::vector<double>& b, bool tb,
                               const std::vector<double>& c_in, int64_t m, int64_t n, int64_t k, double alpha,
                               double beta) {
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[p * m + i] : a[i * k + p];
        const double bv = tb ? b[j * k + p] : b[p * n + j];
        acc += av * bv;
      }
      c[i * n + j] = alpha * acc + (beta != 0.0 ? beta * c_in[i * n + j] : 0.0);
    }
  }
  return c;
}

// y = x @ w^T + bias + residual.
std::vector<double> naive_linear(const std::vector<double>& x, const std::vector<double>& w,
                                 const std::vector<double>* bias, const std::vector<double>* res, int64_t m,
                                 int64_t n, int64_t k) {
  std::vector<double> y = naive_gemm(x, false, w, true, {}, m, n, k, 1.0, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      y[i * n + j] += (bias ? (*bias)[j] : 0.0) + (res ? (*res)[i * n + j] : 0.0);
  return y;
}

struct Mnk {
  int64_t m, n, k;
};
// The last three are large enough to be split over threads (by rows, and by columns when n > m).
const Mnk kGemmSizes[] = {{1, 1, 1},    {3, 1, 5},     {1, 7, 3},     {31, 33, 127}, {33, 31, 1},
                          {64, 32, 16}, {128, 64, 96}, {40, 300, 64}, {300, 40, 33}};

TEST(Gemm, AllTransposeCombosMatchNaive) {
  Rng rng;
  for (DType dt : float_types()) {
    for (const Mnk& z : kGemmSizes) {
      for (int combo = 0; combo < 4; ++combo) {
        const bool ta = combo & 1, tb = combo & 2;
        SCOPED_TRACE(fmt::format("{} m={} n={} k={} ta={} tb={}", dtype_name(dt), z.m, z.n, z.k, ta, tb));
        Tensor a = rand_tensor(rng, ta ? Shape{z.k, z.m} : Shape{z.m, z.k}, dt);
        Tensor b = rand_tensor(rng, tb ? Shape{z.n, z.k} : Shape{z.k, z.n}, dt);
        Tensor c = rand_tensor(rng, {z.m, z.n}, dt);
        const std::vector<double> c0 = host(c);
        const float alpha = static_cast<float>(rng.uniform(0.5, 2.0));
        const float beta = combo == 3 ? 0.0f : static_cast<float>(rng.uniform(-1.0, 1.0));
        gemm(a, ta, b, tb, c, alpha, beta, Stream::cpu());
        const auto ref = naive_gemm(host(a), ta, host(b), tb, c0, z.m, z.n, z.k, alpha, beta);
        EXPECT_LT(rel_err(c, ref), fwd_tol(dt));
      }
    }
  }
}

TEST(Gemm, SeparateCInIsReadAndLeftUnchanged) {
  Rng rng;
  for (DType dt : float_types()) {
    const int64_t m = 5, n = 7, k = 9;
    Tensor a = rand_tensor(rng, {m, k}, dt), b = rand_tensor(rng, {k, n}, dt);
    Tensor c_in = rand_tensor(rng, {m, n}, dt);
    Tensor c = filled({m, n}, dt, 1e30);  // must be ignored: c_in replaces it
    const auto cin0 = host(c_in);
    gemm(a, false, b, false, c, 1.5f, 0.75f, Stream::cpu(), &c_in);
    EXPECT_LT(rel_err(c, naive_gemm(host(a), false, host(b), false, cin0, m, n, k, 1.5, 0.75)), fwd_tol(dt));
    EXPECT_EQ(host(c_in), cin0);
  }
}

TEST(Gemm, BetaZeroIgnoresGarbageInC) {
  Rng rng;
  for (DType dt : float_types()) {
    for (int64_t k : {0, 4}) {
      Tensor a = rand_tensor(rng, {3, k}, dt), b = rand_tensor(rng, {k, 5}, dt);
      Tensor c = filled({3, 5}, dt, std::numeric_limits<double>::quiet_NaN());
      gemm(a, false, b, false, c, 1.0f, 0.0f, Stream::cpu());
      EXPECT_LT(rel_err(c, naive_gemm(host(a), false, host(b), false, {}, 3, 5, k, 1.0, 0.0)), fwd_tol(dt));
      if (k == 0) EXPECT_EQ(host(c), std::vector<double>(15, 0.0));
    }
  }
}

TEST(Gemm, RejectsBadInputs) {
  Rng rng;
  const Stream s = Stream::cpu();
  Tensor a = rand_tensor(rng, {4, 6}, DType::kF32), b = rand_tensor(rng, {6, 5}, DType::kF32);
  Tensor c = Tensor::zeros({4, 5}, DType::kF32);
  EXPECT_PRIMUS_ERROR(gemm(a, true, b, false, c, 1, 0, s), "gemm: inner dimensions differ");
  Tensor c_bad = Tensor::zeros({5, 4}, DType::kF32);
  EXPECT_PRIMUS_ERROR(gemm(a, false, b, false, c_bad, 1, 0, s),
                      "gemm: c must be [4, 5], got f32[5, 4] on cpu");
  Tensor b64 = rand_tensor(rng, {6, 5}, DType::kF64);
  EXPECT_PRIMUS_ERROR(gemm(a, false, b64, false, c, 1, 0, s), "gemm: b must be f32");
  Tensor wide = rand_tensor(rng, {4, 12}, DType::kF32);
  Tensor strided = wide.narrow(1, 0, 6);
  EXPECT_PRIMUS_ERROR(gemm(strided, false, b, false, c, 1, 0, s), "contiguous");
  Tensor ai = Tensor::zeros({4, 6}, DType::kI32);
  EXPECT_PRIMUS_ERROR(gemm(ai, false, b, false, c, 1, 0, s), "gemm: a must be f32 or f64");
  EXPECT_PRIMUS_ERROR(gemm(a, false, a, true, a, 1, 0, s), "gemm: c must be [4, 4]");
  Tensor sq = rand_tensor(rng, {4, 4}, DType::kF32);
  EXPECT_PRIMUS_ERROR(gemm(sq, false, sq, false, sq, 1, 0, s), "must not overlap");
}

TEST(Linear, ForwardWithBiasAndResidualMatchesNaive) {
  Rng rng;
  const Mnk sizes[] = {{1, 1, 1}, {3, 5, 7}, {31, 33, 127}, {64, 48, 32}, {400, 200, 16}};
  for (DType dt : float_types()) {
    for (const Mnk& z : sizes) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool with_bias = variant & 1, with_res = variant & 2;
        SCOPED_TRACE(fmt::format("{} m={} n={} k={} bias={} res={}", dtype_name(dt), z.m, z.n, z.k, with_bias,
                                 with_res));
        Tensor x = rand_tensor(rng, {z.m, z.k}, dt), w = rand_tensor(rng, {z.n, z.k}, dt);
        Tensor bias = rand_tensor(rng, {z.n}, dt), res = rand_tensor(rng, {z.m, z.n}, dt);
        Tensor y = filled({z.m, z.n}, dt, std::numeric_limits<double>::quiet_NaN());
        const auto hb = host(bias), hr = host(res);
        ops::linear_forward(x, w, with_bias ? &bias : nullptr, y, Stream::cpu(), with_res ? &res : nullptr);
        const auto ref = naive_linear(host(x), host(w), with_bias ? &hb : nullptr, with_res ? &hr : nullptr,
                                      z.m, z.n, z.k);
        EXPECT_LT(rel_err(y, ref), fwd_tol(dt));
        EXPECT_EQ(host(res), hr);
        // In place: the residual is y itself (the residual stream add).
        Tensor y2 = clone(res);
        ops::linear_forward(x, w, with_bias ? &bias : nullptr, y2, Stream::cpu(), &y2);
        EXPECT_LT(rel_err(y2, naive_linear(host(x), host(w), with_bias ? &hb : nullptr, &hr, z.m, z.n, z.k)),
                  fwd_tol(dt));
      }
    }
  }
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  Rng rng;
  const Mnk sizes[] = {{1, 1, 1}, {3, 5, 7}, {7, 3, 5}, {9, 11, 13}};
  const DType dt = DType::kF64;
  for (const Mnk& z : sizes) {
    SCOPED_TRACE(fmt::format("m={} n={} k={}", z.m, z.n, z.k));
    Tensor x = rand_tensor(rng, {z.m, z.k}, dt), w = rand_tensor(rng, {z.n, z.k}, dt);
    Tensor bias = rand_tensor(rng, {z.n}, dt), res = rand_tensor(rng, {z.m, z.n}, dt);
    Tensor y = Tensor::empty({z.m, z.n}, dt);
    Tensor gw = rand_tensor(rng, {z.m, z.n}, dt);  // dL/dy for L = sum(y * gw)
    const auto wts = host(gw);
    auto forward = [&] {
      ops::linear_forward(x, w, &bias, y, Stream::cpu(), &res);
      return host(y);
    };
    Tensor dx = filled({z.m, z.k}, dt, 1e30);  // overwritten
    Tensor dw = Tensor::zeros({z.n, z.k}, dt), db = Tensor::zeros({z.n}, dt);
    ops::linear_backward_input(gw, w, dx, false, Stream::cpu());
    ops::linear_backward_weight(gw, x, dw, &db, Stream::cpu());
    EXPECT_LT(fd_rel_error(rng, x, host(dx), forward, wts), kGradTol);
    EXPECT_LT(fd_rel_error(rng, w, host(dw), forward, wts), kGradTol);
    EXPECT_LT(fd_rel_error(rng, bias, host(db), forward, wts), kGradTol);
    EXPECT_LT(fd_rel_error(rng, res, wts, forward, wts), kGradTol);  // the residual's gradient is dy itself
  }
}

TEST(Linear, BackwardAccumulationContract) {
  Rng rng;
  for (DType dt : float_types()) {
    const int64_t m = 6, n = 5, k = 4;
    Tensor x = rand_tensor(rng, {m, k}, dt), w = rand_tensor(rng, {n, k}, dt),
           dy = rand_tensor(rng, {m, n}, dt);
    // dx: overwrite, then accumulate onto a known start.
    Tensor dx = rand_tensor(rng, {m, k}, dt);
    ops::linear_backward_input(dy, w, dx, false, Stream::cpu());
    const auto once = host(dx);
    EXPECT_LT(rel_err(once, naive_gemm(host(dy), false, host(w), false, {}, m, k, n, 1.0, 0.0)), fwd_tol(dt));
    Tensor start = rand_tensor(rng, {m, k}, dt);
    Tensor dx2 = clone(start);
    ops::linear_backward_input(dy, w, dx2, true, Stream::cpu());
    std::vector<double> expect = host(start);
    for (size_t i = 0; i < expect.size(); ++i) expect[i] += once[i];
    EXPECT_LT(rel_err(dx2, expect), fwd_tol(dt));
    // dw and dbias accumulate by default.
    Tensor dw0 = rand_tensor(rng, {n, k}, dt), db0 = rand_tensor(rng, {n}, dt);
    Tensor dw = clone(dw0), db = clone(db0);
    ops::linear_backward_weight(dy, x, dw, &db, Stream::cpu());
    ops::linear_backward_weight(dy, x, dw, &db, Stream::cpu());
    std::vector<double> dw_ref = naive_gemm(host(dy), true, host(x), false, host(dw0), n, k, m, 2.0, 1.0);
    EXPECT_LT(rel_err(dw, dw_ref), fwd_tol(dt));
    std::vector<double> db_ref = host(db0);
    const auto hdy = host(dy);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) db_ref[j] += 2.0 * hdy[i * n + j];
    EXPECT_LT(rel_err(db, db_ref), fwd_tol(dt));
    // accumulate = false overwrites dw and dbias whatever they held (NaN here).
    Tensor dw_nan = clone(dw0), db_nan = clone(db0);
    ops::fill_(dw_nan, std::numeric_limits<float>::quiet_NaN(), Stream::cpu());
    ops::fill_(db_nan, std::numeric_limits<float>::quiet_NaN(), Stream::cpu());
    ops::linear_backward_weight(dy, x, dw_nan, &db_nan, Stream::cpu(), /*accumulate=*/false);
    EXPECT_LT(rel_err(dw_nan, naive_gemm(host(dy), true, host(x), false, {}, n, k, m, 1.0, 0.0)),
              fwd_tol(dt));
    std::vector<double> db_once(n, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) db_once[j] += hdy[i * n + j];
    EXPECT_LT(rel_err(db_nan, db_once), fwd_tol(dt));
  }
}

TEST(Linear, RejectsBadInputs) {
  Rng rng;
  const Stream s = Stream::cpu();
  Tensor x = rand_tensor(rng, {4, 6}, DType::kF32), w = rand_tensor(rng, {5, 6}, DType::kF32);
  Tensor y = Tensor::zeros({4, 5}, DType::kF32);
  Tensor w_bad = rand_tensor(rng, {5, 7}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::linear_forward(x, w_bad, nullptr, y, s), "linear_forward: w must be [5, 6]");
  Tensor bias_bad = rand_tensor(rng, {4}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::linear_forward(x, w, &bias_bad, y, s), "linear_forward: bias must be [5]");
  Tensor res64 = rand_tensor(rng, {4, 5}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::linear_forward(x, w, nullptr, y, s, &res64),
                      "linear_forward: residual must be f32");
  Tensor x3 = rand_tensor(rng, {2, 2, 6}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::linear_forward(x3, w, nullptr, y, s), "linear_forward: x must have 2 dimensions");
  Tensor dx = Tensor::zeros({4, 7}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::linear_backward_input(y, w, dx, false, s),
                      "linear_backward_input: dx must be [4, 6]");
  Tensor dw = Tensor::zeros({5, 6}, DType::kF32), db = Tensor::zeros({6}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::linear_backward_weight(y, x, dw, &db, s),
                      "linear_backward_weight: dbias must be [5]");
  Tensor undefined;
  EXPECT_PRIMUS_ERROR(ops::linear_forward(x, undefined, nullptr, y, s), "undefined");
}

TEST(Linear, ThreadCountDoesNotChangeResults) {
  Rng rng;
  const int64_t m = 400, n = 200, k = 48;
  Tensor x = rand_tensor(rng, {m, k}, DType::kF32), w = rand_tensor(rng, {n, k}, DType::kF32);
  Tensor bias = rand_tensor(rng, {n}, DType::kF32), res = rand_tensor(rng, {m, n}, DType::kF32);
  Tensor dy = rand_tensor(rng, {m, n}, DType::kF32);
  expect_thread_count_invariant([&] {
    Tensor y = Tensor::empty({m, n}, DType::kF32), dx = Tensor::empty({m, k}, DType::kF32);
    Tensor dw = Tensor::zeros({n, k}, DType::kF32), db = Tensor::zeros({n}, DType::kF32);
    ops::linear_forward(x, w, &bias, y, Stream::cpu(), &res);
    ops::linear_backward_input(dy, w, dx, false, Stream::cpu());
    ops::linear_backward_weight(dy, x, dw, &db, Stream::cpu());
    std::vector<double> all;
    for (const Tensor* t : {&y, &dx, &dw, &db}) {
      const auto v = host(*t);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  });
}

}  // namespace
}  // namespace primus::test
