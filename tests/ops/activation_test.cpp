#include "ops/activation.h"

#include <cmath>
#include <limits>

#include "op_test_util.h"

namespace primus::test {
namespace {

std::vector<double> naive_swiglu(const std::vector<double>& gu, int64_t rows, int64_t f) {
  std::vector<double> out(static_cast<size_t>(rows * f));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < f; ++i) {
      const double g = gu[r * 2 * f + i], u = gu[r * 2 * f + f + i];
      out[r * f + i] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  return out;
}

TEST(SwiGlu, ForwardMatchesNaive) {
  Rng rng;
  const std::pair<int64_t, int64_t> sizes[] = {{1, 1}, {3, 5}, {31, 33}, {7, 127}, {64, 256}, {300, 256}};
  for (DType dt : float_types()) {
    for (auto [rows, f] : sizes) {
      SCOPED_TRACE(fmt::format("{} rows={} f={}", dtype_name(dt), rows, f));
      Tensor gu = rand_tensor(rng, {rows, 2 * f}, dt, -6, 6);
      Tensor out = filled({rows, f}, dt, std::numeric_limits<double>::quiet_NaN());
      ops::swiglu_forward(gu, out, Stream::cpu());
      EXPECT_LT(rel_err(out, naive_swiglu(host(gu), rows, f)), fwd_tol(dt));
    }
  }
}

TEST(SwiGlu, ExtremeGatesStayFinite) {
  for (DType dt : float_types()) {
    Tensor gu = tensor_of({-1000.0, 1000.0, -80.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {1, 8}, dt);
    Tensor out = Tensor::empty({1, 4}, dt);
    ops::swiglu_forward(gu, out, Stream::cpu());
    const auto o = host(out);
    EXPECT_EQ(o[0], 0.0);
    EXPECT_DOUBLE_EQ(o[1], 1000.0 * 4.0);  // silu(1000) = 1000, up = 4
    EXPECT_LT(std::fabs(o[2]), 1e-30);
    Tensor dgu = Tensor::empty({1, 8}, dt);
    ops::swiglu_backward(tensor_of({1, 1, 1, 1}, {1, 4}, dt), gu, dgu, Stream::cpu());
    for (double v : host(dgu)) EXPECT_TRUE(std::isfinite(v));
  }
}

TEST(SwiGlu, BackwardMatchesFiniteDifferences) {
  Rng rng;
  const std::pair<int64_t, int64_t> sizes[] = {{1, 1}, {3, 5}, {5, 33}};
  const DType dt = DType::kF64;
  for (auto [rows, f] : sizes) {
    SCOPED_TRACE(fmt::format("rows={} f={}", rows, f));
    Tensor gu = rand_tensor(rng, {rows, 2 * f}, dt, -4, 4), out = Tensor::empty({rows, f}, dt);
    Tensor dout = rand_tensor(rng, {rows, f}, dt);
    const auto w = host(dout);
    auto forward = [&] {
      ops::swiglu_forward(gu, out, Stream::cpu());
      return host(out);
    };
    Tensor dgu = filled({rows, 2 * f}, dt, std::numeric_limits<double>::quiet_NaN());  // overwritten
    ops::swiglu_backward(dout, gu, dgu, Stream::cpu());
    EXPECT_LT(fd_rel_error(rng, gu, host(dgu), forward, w, 120), kGradTol);
    // In place: dgu is gu itself.
    Tensor gu2 = clone(gu);
    ops::swiglu_backward(dout, gu2, gu2, Stream::cpu());
    EXPECT_EQ(host(gu2), host(dgu));
  }
}

TEST(SwiGlu, RejectsBadInputs) {
  Rng rng;
  const Stream s = Stream::cpu();
  Tensor odd = rand_tensor(rng, {2, 5}, DType::kF32), out = Tensor::empty({2, 2}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::swiglu_forward(odd, out, s), "swiglu_forward: gu must be [R, 2F]");
  Tensor gu = rand_tensor(rng, {2, 8}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::swiglu_forward(gu, out, s), "swiglu_forward: out must be [2, 4]");
  Tensor dout = Tensor::empty({2, 4}, DType::kF64), dgu = Tensor::empty({2, 8}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::swiglu_backward(dout, gu, dgu, s), "swiglu_backward: dout must be f32");
}

TEST(SwiGlu, ThreadCountDoesNotChangeResults) {
  Rng rng;
  const int64_t rows = 300, f = 256;
  Tensor gu = rand_tensor(rng, {rows, 2 * f}, DType::kF32, -4, 4),
         dout = rand_tensor(rng, {rows, f}, DType::kF32);
  expect_thread_count_invariant([&] {
    Tensor out = Tensor::empty({rows, f}, DType::kF32), dgu = Tensor::empty({rows, 2 * f}, DType::kF32);
    ops::swiglu_forward(gu, out, Stream::cpu());
    ops::swiglu_backward(dout, gu, dgu, Stream::cpu());
    std::vector<double> all = host(out), g = host(dgu);
    all.insert(all.end(), g.begin(), g.end());
    return all;
  });
}

}  // namespace
}  // namespace primus::test
