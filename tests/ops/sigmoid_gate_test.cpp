// Sigmoid-gated row sum (ops/sigmoid_gate.h, Qwen2-MoE's shared-expert gate): forward against a naive
// double loop, backward against f64 central differences for both inputs, thread-count invariance, argument
// checks.
#include "ops/sigmoid_gate.h"

#include <cmath>
#include <limits>

#include "op_test_util.h"

namespace primus::test {
namespace {

std::vector<double> naive(const std::vector<double>& g, const std::vector<double>& x, std::vector<double> y,
                          int64_t n, int64_t d) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < d; ++j) y[t * d + j] += x[t * d + j] / (1.0 + std::exp(-g[t]));
  return y;
}

const std::pair<int64_t, int64_t> kGateSizes[] = {{1, 1}, {3, 5}, {31, 33}, {7, 127}, {300, 64}};

TEST(SigmoidGate, ForwardAddsTheGatedRows) {
  Rng rng;
  for (DType dt : float_types()) {
    for (auto [n, d] : kGateSizes) {
      SCOPED_TRACE(fmt::format("{} n={} d={}", dtype_name(dt), n, d));
      Tensor g = rand_tensor(rng, {n}, dt, -6, 6), x = rand_tensor(rng, {n, d}, dt);
      Tensor y = rand_tensor(rng, {n, d}, dt);
      const auto ref = naive(host(g), host(x), host(y), n, d);
      ops::sigmoid_gate_forward(g, x, y, Stream::cpu());
      EXPECT_LT(rel_err(y, ref), fwd_tol(dt));
    }
  }
}

TEST(SigmoidGate, ExtremeLogitsStayFinite) {
  for (DType dt : float_types()) {
    Tensor g = tensor_of({-1000.0, 1000.0}, {2}, dt), x = tensor_of({1, 2, 3, 4}, {2, 2}, dt);
    Tensor y = filled({2, 2}, dt, 0.0);
    ops::sigmoid_gate_forward(g, x, y, Stream::cpu());
    EXPECT_EQ(host(y), (std::vector<double>{0, 0, 3, 4}));
    Tensor dx = Tensor::empty({2, 2}, dt), dg = Tensor::empty({2}, dt);
    ops::sigmoid_gate_backward(g, x, filled({2, 2}, dt, 1.0), dx, dg, Stream::cpu());
    for (double v : host(dg)) EXPECT_EQ(v, 0.0);
    EXPECT_EQ(host(dx), (std::vector<double>{0, 0, 1, 1}));
  }
}

TEST(SigmoidGate, BackwardMatchesFiniteDifferences) {
  Rng rng;
  const DType dt = DType::kF64;
  for (auto [n, d] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {6, 33}}) {
    SCOPED_TRACE(fmt::format("n={} d={}", n, d));
    Tensor g = rand_tensor(rng, {n}, dt, -3, 3), x = rand_tensor(rng, {n, d}, dt);
    const Tensor y0 = rand_tensor(rng, {n, d}, dt);
    Tensor dy = rand_tensor(rng, {n, d}, dt);
    const auto w = host(dy);
    auto forward = [&] {
      Tensor y = clone(y0);
      ops::sigmoid_gate_forward(g, x, y, Stream::cpu());
      return host(y);
    };
    const double nan = std::numeric_limits<double>::quiet_NaN();
    Tensor dx = filled({n, d}, dt, nan), dg = filled({n}, dt, nan);  // overwritten
    ops::sigmoid_gate_backward(g, x, dy, dx, dg, Stream::cpu());
    EXPECT_LT(fd_rel_error(rng, g, host(dg), forward, w), kGradTol);
    EXPECT_LT(fd_rel_error(rng, x, host(dx), forward, w), kGradTol);
  }
}

TEST(SigmoidGate, ThreadCountDoesNotChangeResults) {
  Rng rng;
  const int64_t n = 700, d = 96;
  Tensor g = rand_tensor(rng, {n}, DType::kF32, -4, 4), x = rand_tensor(rng, {n, d}, DType::kF32);
  Tensor dy = rand_tensor(rng, {n, d}, DType::kF32);
  expect_thread_count_invariant([&] {
    Tensor y = filled({n, d}, DType::kF32, 0.5), dx = Tensor::empty({n, d}, DType::kF32);
    Tensor dg = Tensor::empty({n}, DType::kF32);
    ops::sigmoid_gate_forward(g, x, y, Stream::cpu());
    ops::sigmoid_gate_backward(g, x, dy, dx, dg, Stream::cpu());
    std::vector<double> all = host(y), a = host(dx), b = host(dg);
    all.insert(all.end(), a.begin(), a.end());
    all.insert(all.end(), b.begin(), b.end());
    return all;
  });
}

TEST(SigmoidGate, RejectsBadInputs) {
  Rng rng;
  const Stream s = Stream::cpu();
  Tensor x = rand_tensor(rng, {4, 8}, DType::kF32), y = Tensor::empty({4, 8}, DType::kF32);
  Tensor g3 = rand_tensor(rng, {3}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::sigmoid_gate_forward(g3, x, y, s), "sigmoid_gate_forward: g must be [4]");
  Tensor g = rand_tensor(rng, {4}, DType::kF32), y2 = Tensor::empty({4, 7}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::sigmoid_gate_forward(g, x, y2, s), "sigmoid_gate_forward: y must be [4, 8]");
  Tensor dx = Tensor::empty({4, 8}, DType::kF32), dg64 = Tensor::empty({4}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::sigmoid_gate_backward(g, x, x, dx, dg64, s),
                      "sigmoid_gate_backward: dg must be f32");
}

}  // namespace
}  // namespace primus::test
