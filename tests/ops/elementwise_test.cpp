#include "ops/elementwise.h"

#include <cmath>
#include <limits>

#include "op_test_util.h"

namespace primus::test {
namespace {

const double kInf = std::numeric_limits<double>::infinity();

TEST(Elementwise, AddScaleFill) {
  Rng rng;
  for (DType dt : float_types()) {
    for (int64_t n : {1L, 3L, 127L, 100000L}) {
      Tensor a = rand_tensor(rng, {n}, dt), b = rand_tensor(rng, {n}, dt), out = Tensor::empty({n}, dt);
      const auto ha = host(a), hb = host(b);
      std::vector<double> sum(n);
      for (int64_t i = 0; i < n; ++i) sum[i] = ha[i] + hb[i];
      ops::add(a, b, out, Stream::cpu());
      EXPECT_LT(rel_err(out, sum), fwd_tol(dt));
      ops::add(a, b, a, Stream::cpu());  // out aliases a
      EXPECT_EQ(host(a), host(out));
      ops::scale_(a, -0.5f, Stream::cpu());
      std::vector<double> scaled = host(out);
      for (double& e : scaled) e *= -0.5;
      EXPECT_LT(rel_err(a, scaled), fwd_tol(dt));
      ops::fill_(a, 2.5f, Stream::cpu());
      EXPECT_EQ(host(a), std::vector<double>(n, 2.5));
    }
  }
  // Multi-dimensional shapes must match exactly, not just in element count.
  Tensor a = Tensor::zeros({2, 3}, DType::kF32), b = Tensor::zeros({3, 2}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::add(a, b, a, Stream::cpu()), "add: b must be [2, 3]");
}

TEST(Elementwise, CastRoundTrips) {
  Rng rng;
  const int64_t n = 1001;
  // f32 -> f64 -> f32 is exact.
  Tensor x = rand_tensor(rng, {n}, DType::kF32, -100, 100);
  Tensor x64 = Tensor::empty({n}, DType::kF64), back = Tensor::empty({n}, DType::kF32);
  ops::cast(x, x64, Stream::cpu());
  ops::cast(x64, back, Stream::cpu());
  EXPECT_EQ(back.to_vector<float>(), x.to_vector<float>());
  // f32 -> bf16 rounds to nearest even (as float_to_bf16), and bf16 -> f32 -> bf16 is exact.
  Tensor h = Tensor::empty({n}, DType::kBF16);
  ops::cast(x, h, Stream::cpu());
  const auto xv = x.to_vector<float>();
  const auto hv = h.to_vector<bf16_t>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hv[i].bits, float_to_bf16(xv[i]).bits) << i;
  Tensor hf = Tensor::empty({n}, DType::kF32), h2 = Tensor::empty({n}, DType::kBF16);
  ops::cast(h, hf, Stream::cpu());
  ops::cast(hf, h2, Stream::cpu());
  const auto h2v = h2.to_vector<bf16_t>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h2v[i].bits, hv[i].bits) << i;
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(hf.to_vector<float>()[i], xv[i], std::fabs(xv[i]) * (1.0 / 256));
  // f64 -> bf16 rounds once, directly: 1 + 2^-8 + 2^-30 is just above the tie between 1 and 1 + 2^-7, so it
  // rounds up (a double rounding through f32 would land on the tie and round down to 1).
  Tensor d = tensor_of({1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30), 1.0 + std::ldexp(1.0, -8), -3.0},
                       {3}, DType::kF64);
  Tensor db = Tensor::empty({3}, DType::kBF16);
  ops::cast(d, db, Stream::cpu());
  EXPECT_EQ(host(db), (std::vector<double>{1.0 + std::ldexp(1.0, -7), 1.0, -3.0}));
  // Shapes may differ, element counts may not.
  Tensor flat = Tensor::empty({6}, DType::kF32), grid = Tensor::zeros({2, 3}, DType::kF64);
  ops::cast(grid, flat, Stream::cpu());
  Tensor wrong = Tensor::empty({5}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::cast(grid, wrong, Stream::cpu()), "cast: dst must have 6 elements");
  Tensor ints = Tensor::zeros({6}, DType::kI32);
  EXPECT_PRIMUS_ERROR(ops::cast(ints, flat, Stream::cpu()), "cast: src must be f32, f64 or bf16");
}

TEST(Elementwise, CountNonfinite) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
    std::vector<double> v(50001, 1.0);
    v[0] = kNaN;
    v[17] = kInf;
    v[40000] = -kInf;
    v[50000] = kNaN;
    v[3] = 3e38;  // finite in f32 and f64, overflows bf16's range? no: bf16 has f32's exponent range
    Tensor x = tensor_of(v, {50001}, dt);
    EXPECT_EQ(ops::count_nonfinite(x, Stream::cpu()), 4) << dtype_name(dt);
    EXPECT_EQ(ops::count_nonfinite(Tensor::zeros({3, 3}, dt), Stream::cpu()), 0);
  }
  EXPECT_PRIMUS_ERROR(ops::count_nonfinite(Tensor::zeros({3}, DType::kI32), Stream::cpu()),
                      "count_nonfinite");
}

}  // namespace
}  // namespace primus::test

namespace primus::test {
namespace {

TEST(Elementwise, ConcatAndSplitColumnsRoundTrip) {
  Rng rng;
  for (DType dt : float_types()) {
    Tensor a = rand_tensor(rng, {7, 3}, dt), b = rand_tensor(rng, {7, 5}, dt);
    Tensor out = filled({7, 8}, dt, NAN);
    ops::concat_columns(a, b, out, Stream::cpu());
    const auto av = host(a), bv = host(b), ov = host(out);
    for (int r = 0; r < 7; ++r)
      for (int c = 0; c < 8; ++c) EXPECT_EQ(ov[r * 8 + c], c < 3 ? av[r * 3 + c] : bv[r * 5 + c - 3]);
    Tensor a2 = filled({7, 3}, dt, NAN), b2 = filled({7, 5}, dt, NAN);
    ops::split_columns(out, a2, b2, Stream::cpu());
    EXPECT_EQ(host(a2), av);
    EXPECT_EQ(host(b2), bv);
  }
  Tensor a = rand_tensor(rng, {7, 3}, DType::kF32), b = rand_tensor(rng, {6, 5}, DType::kF32);
  Tensor out = Tensor::empty({7, 8}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::concat_columns(a, b, out, Stream::cpu()), "concat_columns: b must be [7, 5]");
}

}  // namespace
}  // namespace primus::test
