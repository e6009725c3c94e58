#include "ops/rope.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "op_test_util.h"

namespace primus::test {
namespace {

using ops::RopeConfig;

RopeConfig llama3_config() {
  RopeConfig c;
  c.theta = 500000.0;
  c.llama3_scaling = true;
  c.factor = 8.0;
  c.low_freq_factor = 1.0;
  c.high_freq_factor = 4.0;
  c.original_max_position = 8192;
  return c;
}

// reference.md §1.5, entirely in double.
std::vector<double> expected_inv_freq(const RopeConfig& c, int64_t d) {
  std::vector<double> f(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) {
    double fi = 1.0 / std::pow(c.theta, static_cast<double>(2 * i) / static_cast<double>(d));
    if (c.llama3_scaling) {
      const double orig = static_cast<double>(c.original_max_position);
      const double lambda = 2.0 * std::numbers::pi / fi;
      if (lambda > orig / c.low_freq_factor) {
        fi = fi / c.factor;
      } else if (lambda >= orig / c.high_freq_factor) {
        const double t = (orig / lambda - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
        fi = (1.0 - t) * fi / c.factor + t * fi;
      }
    }
    f[i] = fi;
  }
  return f;
}

void expect_close_each(const std::vector<float>& got, const std::vector<double>& want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * std::fabs(want[i])) << "inv_freq[" << i << "]";
}

TEST(Rope, InvFreqPlainMatchesFormula) {
  for (int64_t d : {2, 8, 64, 128}) {
    for (double theta : {10000.0, 1000000.0}) {
      RopeConfig c;
      c.theta = theta;
      expect_close_each(ops::rope_inv_freq(c, d), expected_inv_freq(c, d), 1.2e-7);
    }
  }
}

TEST(Rope, InvFreqLlama3MatchesKnownValues) {
  const RopeConfig c = llama3_config();
  const std::vector<float> got = ops::rope_inv_freq(c, 128);
  const std::vector<double> want = expected_inv_freq(c, 128);
  // The scaling is computed from the f32-rounded base frequency: one more rounding than the pure-double
  // values.
  expect_close_each(got, want, 3e-7);
  // Known structure for Llama-3.1 (wavelength bands 2048 / 8192): dims 0..28 keep f, 29..34 are blended,
  // 35..63 are divided by 8.
  RopeConfig plain = c;
  plain.llama3_scaling = false;
  const std::vector<double> base = expected_inv_freq(plain, 128);
  for (int i = 0; i <= 28; ++i) EXPECT_NEAR(got[i], base[i], 1.2e-7 * base[i]) << i;
  for (int i = 35; i < 64; ++i) EXPECT_NEAR(got[i], base[i] / 8.0, 1.2e-7 * base[i] / 8.0) << i;
  for (int i = 29; i <= 34; ++i) {
    EXPECT_LT(got[i], base[i] * (1 - 1e-6)) << i;
    EXPECT_GT(got[i], base[i] / 8.0 * (1 + 1e-6)) << i;
  }
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_NEAR(got[63], std::pow(500000.0, -126.0 / 128.0) / 8.0, 1e-7 * got[63]);
}

TEST(Rope, TableHoldsCosThenSin) {
  const RopeConfig c = llama3_config();
  const int64_t d = 16, max_pos = 4099;
  Tensor table = ops::rope_table(c, max_pos, d);
  ASSERT_EQ(table.shape(), (Shape{max_pos, d}));
  ASSERT_EQ(table.dtype(), DType::kF32);
  const std::vector<float> f = ops::rope_inv_freq(c, d);
  const auto t = host(table);
  for (int64_t pos : {0L, 1L, 7L, 1000L, 4098L}) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const double angle = static_cast<double>(pos) * static_cast<double>(f[i]);
      EXPECT_NEAR(t[pos * d + i], std::cos(angle), 1e-7) << pos << "," << i;
      EXPECT_NEAR(t[pos * d + d / 2 + i], std::sin(angle), 1e-7) << pos << "," << i;
    }
  }
}

// Table [max_pos, d] in f64 straight from the double angles.
Tensor table_f64(const RopeConfig& c, int64_t max_pos, int64_t d) {
  const std::vector<float> f = ops::rope_inv_freq(c, d);
  std::vector<double> v(static_cast<size_t>(max_pos * d));
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int64_t i = 0; i < d / 2; ++i) {
      v[p * d + i] = std::cos(static_cast<double>(p) * f[i]);
      v[p * d + d / 2 + i] = std::sin(static_cast<double>(p) * f[i]);
    }
  }
  return tensor_of(v, {max_pos, d}, DType::kF64);
}

// Direct rotate-half formula with the angles of `table` (host copy) at positions offset + t.
std::vector<double> naive_rope(const std::vector<double>& x, const std::vector<double>& table, int64_t b,
                               int64_t t, int64_t total, int64_t n, int64_t d, int64_t offset, bool inverse) {
  std::vector<double> y = x;
  const int64_t half = d / 2;
  for (int64_t bb = 0; bb < b; ++bb) {
    for (int64_t tt = 0; tt < t; ++tt) {
      const double* cs = table.data() + (offset + tt) * d;
      for (int64_t h = 0; h < n; ++h) {
        const int64_t base = ((bb * t + tt) * total + h) * d;
        for (int64_t i = 0; i < half; ++i) {
          const double s = inverse ? -cs[half + i] : cs[half + i];
          const double x1 = x[base + i], x2 = x[base + half + i];
          y[base + i] = x1 * cs[i] - x2 * s;         // x * cos + (-x2) * sin
          y[base + half + i] = x2 * cs[i] + x1 * s;  // x * cos + x1 * sin
        }
      }
    }
  }
  return y;
}

struct RopeCase {
  int64_t b, t, total, n, d, offset;
};
const RopeCase kCases[] = {{1, 1, 1, 1, 2, 0},
                           {2, 3, 3, 2, 6, 5},
                           {1, 31, 5, 3, 8, 17},
                           {2, 33, 4, 4, 64, 100},
                           {2, 130, 5, 4, 64, 7}};

TEST(Rope, ApplyMatchesDirectFormula) {
  Rng rng;
  const RopeConfig configs[] = {RopeConfig{}, llama3_config()};
  for (const RopeConfig& cfg : configs) {
    for (DType dt : float_types()) {
      for (const RopeCase& c : kCases) {
        SCOPED_TRACE(fmt::format("{} llama3={} b={} t={} total={} n={} d={} offset={}", dtype_name(dt),
                                 cfg.llama3_scaling, c.b, c.t, c.total, c.n, c.d, c.offset));
        const int64_t max_pos = c.offset + c.t + 3;
        Tensor table = ops::rope_table(cfg, max_pos, c.d);
        Tensor x = rand_tensor(rng, {c.b, c.t, c.total * c.d}, dt);
        const auto x0 = host(x);
        ops::rope_apply(x, c.b, c.t, c.total, c.n, c.d, table, c.offset, false, Stream::cpu());
        // Against the f32 table's own cos/sin: f32 and f64 x must both reproduce them to rounding.
        EXPECT_LT(rel_err(x, naive_rope(x0, host(table), c.b, c.t, c.total, c.n, c.d, c.offset, false)),
                  fwd_tol(dt));
        // Heads past n are untouched (bitwise).
        const auto y = host(x);
        for (int64_t tok = 0; tok < c.b * c.t; ++tok)
          for (int64_t col = c.n * c.d; col < c.total * c.d; ++col)
            ASSERT_EQ(y[tok * c.total * c.d + col], x0[tok * c.total * c.d + col]);
        // f64 with an f64 table against the exact angles.
        if (dt == DType::kF64) {
          Tensor t64 = table_f64(cfg, max_pos, c.d);
          Tensor x64 = tensor_of(x0, x.shape(), dt);
          ops::rope_apply(x64, c.b, c.t, c.total, c.n, c.d, t64, c.offset, false, Stream::cpu());
          EXPECT_LT(rel_err(x64, naive_rope(x0, host(t64), c.b, c.t, c.total, c.n, c.d, c.offset, false)),
                    1e-14);
        }
      }
    }
  }
}

TEST(Rope, InverseUndoesRotation) {
  Rng rng;
  for (DType dt : float_types()) {
    for (const RopeCase& c : kCases) {
      const int64_t max_pos = c.offset + c.t;
      Tensor table = dt == DType::kF64 ? table_f64(llama3_config(), max_pos, c.d)
                                       : ops::rope_table(llama3_config(), max_pos, c.d);
      Tensor x = rand_tensor(rng, {c.b, c.t, c.total * c.d}, dt);
      const auto x0 = host(x);
      ops::rope_apply(x, c.b, c.t, c.total, c.n, c.d, table, c.offset, false, Stream::cpu());
      if (c.n > 0 && c.d * c.t > 2) EXPECT_GT(rel_err(x, x0), 1e-3);  // it did rotate
      ops::rope_apply(x, c.b, c.t, c.total, c.n, c.d, table, c.offset, true, Stream::cpu());
      EXPECT_LT(rel_err(x, x0), dt == DType::kF64 ? 1e-14 : 1e-6);
    }
  }
}

// The backward (the inverse rotation, with `table`) against central finite differences of the forward, in
// f64: the relative error of the gradient of <dy, rope(x)>.
double backward_fd_error(Rng& rng, const RopeCase& c, const Tensor& table) {
  const Shape shape{c.b, c.t, c.total * c.d};
  Tensor x = rand_tensor(rng, shape, DType::kF64), dy = rand_tensor(rng, shape, DType::kF64);
  auto forward = [&] {
    Tensor y = clone(x);
    ops::rope_apply(y, c.b, c.t, c.total, c.n, c.d, table, c.offset, false, Stream::cpu());
    return host(y);
  };
  Tensor dx = clone(dy);
  ops::rope_apply(dx, c.b, c.t, c.total, c.n, c.d, table, c.offset, true, Stream::cpu());
  return fd_rel_error(rng, x, host(dx), forward, host(dy), 200);
}

TEST(Rope, BackwardIsInverseRotationFiniteDifferences) {
  Rng rng;
  EXPECT_LT(backward_fd_error(rng, RopeCase{2, 5, 3, 2, 6, 3}, table_f64(llama3_config(), 16, 6)), kGradTol);
}

TEST(Rope, RejectsBadInputs) {
  Rng rng;
  const Stream s = Stream::cpu();
  Tensor table = ops::rope_table(RopeConfig{}, 8, 4);
  Tensor x = rand_tensor(rng, {1, 4, 12}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::rope_apply(x, 1, 4, 3, 3, 4, table, 5, false, s), "positions [5, 9) exceed");
  EXPECT_PRIMUS_ERROR(ops::rope_apply(x, 1, 4, 3, 4, 4, table, 0, false, s), "n_heads (4)");
  EXPECT_PRIMUS_ERROR(ops::rope_apply(x, 1, 4, 4, 3, 3, table, 0, false, s), "in [2, head_dim = 3]");
  EXPECT_PRIMUS_ERROR(ops::rope_apply(x, 2, 4, 3, 3, 4, table, 0, false, s),
                      "rope_apply: x must be [2, 4, 12]");
  Tensor t64 = table_f64(RopeConfig{}, 8, 4);
  EXPECT_PRIMUS_ERROR(ops::rope_apply(x, 1, 4, 3, 3, 4, t64, 0, false, s), "table must be f32 or f32");
  Tensor wide = ops::rope_table(RopeConfig{}, 8, 6);
  EXPECT_PRIMUS_ERROR(ops::rope_apply(x, 1, 4, 3, 3, 4, wide, 0, false, s), "table must be [max_pos, R]");
  EXPECT_PRIMUS_ERROR(ops::rope_inv_freq(RopeConfig{}, 7), "head_dim must be even");
  RopeConfig bad = llama3_config();
  bad.high_freq_factor = 0.5;
  EXPECT_PRIMUS_ERROR(ops::rope_inv_freq(bad, 8), "low_freq_factor < high_freq_factor");
}

// Partial rotary (Megatron rotary_percent, HF partial_rotary_factor): a table R < D wide rotates each head's
// first R elements exactly as a rope over heads of R elements does (bitwise: the same arithmetic on the same
// values) and leaves [R, D) of every head bitwise as it was; the inverse undoes it; its gradient is the
// inverse.
TEST(Rope, PartialRotaryRotatesTheLeadingSliceOnly) {
  struct Case {
    int64_t b, t, total, n, d, r, offset;
  };
  const Case cases[] = {{1, 3, 2, 2, 8, 4, 0},
                        {2, 31, 3, 2, 33, 16, 5},
                        {1, 33, 4, 3, 31, 12, 2},
                        {2, 127, 2, 2, 64, 16, 1},
                        {1, 5, 3, 3, 6, 2, 0}};
  Rng rng;
  for (DType dt : float_types()) {
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt::format("{} b={} t={} heads {}/{} d={} r={} offset={}", dtype_name(dt), c.b, c.t, c.n,
                               c.total, c.d, c.r, c.offset));
      Tensor table = ops::rope_table(llama3_config(), c.offset + c.t, c.r);
      Tensor x = rand_tensor(rng, {c.b, c.t, c.total * c.d}, dt);
      const auto x0 = host(x);
      // The leading slices gathered into heads of r elements, rotated as whole heads.
      std::vector<double> lead(static_cast<size_t>(c.b * c.t * c.total * c.r));
      for (int64_t tok = 0; tok < c.b * c.t; ++tok)
        for (int64_t h = 0; h < c.total; ++h)
          for (int64_t i = 0; i < c.r; ++i)
            lead[(tok * c.total + h) * c.r + i] = x0[(tok * c.total + h) * c.d + i];
      Tensor xr = tensor_of(lead, {c.b, c.t, c.total * c.r}, dt);
      ops::rope_apply(xr, c.b, c.t, c.total, c.n, c.r, table, c.offset, false, Stream::cpu());
      ops::rope_apply(x, c.b, c.t, c.total, c.n, c.d, table, c.offset, false, Stream::cpu());
      const auto y = host(x), yr = host(xr);
      for (int64_t tok = 0; tok < c.b * c.t; ++tok)
        for (int64_t h = 0; h < c.total; ++h)
          for (int64_t i = 0; i < c.d; ++i) {
            const size_t at = static_cast<size_t>((tok * c.total + h) * c.d + i);
            const double want = i < c.r ? yr[(tok * c.total + h) * c.r + i] : x0[at];
            ASSERT_EQ(y[at], want) << "token " << tok << " head " << h << " element " << i;
          }
      if (c.t > 1) EXPECT_GT(rel_err(x, x0), 1e-4);  // it did rotate
      // The same through per-token positions, and back.
      std::vector<int32_t> pos(static_cast<size_t>(c.b * c.t));
      for (int64_t i = 0; i < c.b * c.t; ++i) pos[i] = static_cast<int32_t>(c.offset + i % c.t);
      Tensor p = Tensor::from_vector(pos, {c.b, c.t});
      Tensor xp = tensor_of(x0, x.shape(), dt);
      ops::rope_apply(xp, c.b, c.t, c.total, c.n, c.d, table, 0, &p, false, Stream::cpu());
      EXPECT_EQ(host(xp), y);
      // (The f32 table's cos^2 + sin^2 is 1 to f32 rounding, whatever x's type.)
      ops::rope_apply(x, c.b, c.t, c.total, c.n, c.d, table, c.offset, true, Stream::cpu());
      EXPECT_LT(rel_err(x, x0), 1e-6);
    }
  }
  // The backward (the inverse rotation) against finite differences of the forward: heads of 10, 4 rotated.
  EXPECT_LT(backward_fd_error(rng, RopeCase{2, 5, 3, 2, 10, 3}, table_f64(llama3_config(), 16, 4)), kGradTol);
}

RopeConfig yarn_config(double mscale, double mscale_all_dim) {
  RopeConfig c;  // DeepSeek-V2/V3: theta 1e4, factor 40, original context 4096, beta 32 / 1
  c.theta = 10000.0;
  c.yarn = true;
  c.factor = 40.0;
  c.original_max_position = 4096;
  c.beta_fast = 32.0;
  c.beta_slow = 1.0;
  c.mscale = mscale;
  c.mscale_all_dim = mscale_all_dim;
  return c;
}

// reference.md §1.5's YaRN formula, written out in double.
std::vector<double> expected_yarn_inv_freq(const RopeConfig& c, int64_t d) {
  const double dd = static_cast<double>(d), orig = static_cast<double>(c.original_max_position);
  auto corr = [&](double r) {
    return dd * std::log(orig / (2 * std::numbers::pi * r)) / (2 * std::log(c.theta));
  };
  const double lo = std::max(std::floor(corr(c.beta_fast)), 0.0);
  double hi = std::min(std::ceil(corr(c.beta_slow)), dd - 1);
  if (hi == lo) hi += 0.001;
  std::vector<double> f(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) {
    const double fi = 1.0 / std::pow(c.theta, static_cast<double>(2 * i) / dd);
    const double ramp = std::min(1.0, std::max(0.0, (static_cast<double>(i) - lo) / (hi - lo)));
    f[i] = fi / c.factor * ramp + fi * (1 - ramp);
  }
  return f;
}

TEST(Rope, YarnInvFreqMatchesFormulaAndHfValues) {
  const RopeConfig c = yarn_config(1.0, 1.0);
  const std::vector<float> got = ops::rope_inv_freq(c, 64);
  expect_close_each(got, expected_yarn_inv_freq(c, 64), 3e-7);
  // HF DeepseekV3YarnRotaryEmbedding's f32 arithmetic (computed with Python's struct-rounded floats): the
  // ramp runs over dims 10..23, so dims <= 10 keep f and dims >= 23 use f / 40.
  const std::pair<int, double> hf[] = {{0, 1.0},
                                       {5, 0.23713736236095428},
                                       {10, 0.05623412877321243},
                                       {11, 0.039006926119327545},
                                       {15, 0.0083345090970397},
                                       {20, 0.0007905694073997438},
                                       {23, 3.333803397254087e-05},
                                       {25, 1.8747354260995053e-05},
                                       {31, 3.3338035336782923e-06}};
  for (const auto& [i, v] : hf) EXPECT_NEAR(got[i], v, 1e-6 * v) << "dim " << i;
  // A short context where the ramp is only two dims wide (corr(8) -> 1, corr(2) -> 3).
  RopeConfig s = c;
  s.factor = 4.0;
  s.original_max_position = 256;
  s.beta_fast = 8.0;
  s.beta_slow = 2.0;
  const std::vector<float> g2 = ops::rope_inv_freq(s, 16);
  const double hf2[] = {1.0,
                        0.3162277638912201,
                        0.0625,
                        0.007905694656074047,
                        0.0024999999441206455,
                        0.0007905694656074047,
                        0.0002500000118743628,
                        7.905694656074047e-05};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(g2[i], hf2[i], 1e-6 * hf2[i]) << "dim " << i;
}

TEST(Rope, YarnMscaleScalesTheTable) {
  EXPECT_DOUBLE_EQ(ops::yarn_mscale(1.0, 0.707), 1.0);
  EXPECT_DOUBLE_EQ(ops::yarn_mscale(0.5, 3.0), 1.0);
  EXPECT_NEAR(ops::yarn_mscale(40.0, 0.707), 1.2608037774058554, 1e-15);
  EXPECT_NEAR(ops::yarn_mscale(40.0, 1.0) * ops::yarn_mscale(40.0, 1.0), 1.8738542070926265, 1e-14);
  // DeepSeek-V2/V3 set mscale == mscale_all_dim: the table is unscaled.
  EXPECT_DOUBLE_EQ(ops::rope_cos_sin_scale(yarn_config(0.707, 0.707)), 1.0);
  const RopeConfig c = yarn_config(1.0, 0.707);
  const double scale = ops::rope_cos_sin_scale(c);
  EXPECT_NEAR(scale, 1.0857263992561355, 1e-14);
  Tensor table = ops::rope_table(c, 1001, 64);
  const auto t = host(table);
  // Position 1000, dim 10 (HF: emb.cos() * mscale, in f32). One f32 ulp of the frequency moves the angle at
  // position 1000 by ~4e-6, which bounds the agreement with HF's own f32 rounding.
  EXPECT_NEAR(t[1000 * 64 + 10], 1.0324596913927886, 1e-5);
  EXPECT_NEAR(t[1000 * 64 + 32 + 10], -0.33589998465436266, 1e-5);
  const std::vector<float> f = ops::rope_inv_freq(c, 64);
  for (int64_t pos : {0L, 3L, 999L})
    for (int64_t i = 0; i < 32; ++i) {
      const double a = static_cast<double>(pos) * f[i];
      EXPECT_NEAR(t[pos * 64 + i], scale * std::cos(a), 2e-7) << pos << "," << i;
      EXPECT_NEAR(t[pos * 64 + 32 + i], scale * std::sin(a), 2e-7) << pos << "," << i;
    }
  // Without YaRN nothing changes.
  RopeConfig plain = c;
  plain.yarn = false;
  EXPECT_DOUBLE_EQ(ops::rope_cos_sin_scale(plain), 1.0);
}

TEST(Rope, YarnInverseIsTheTransposeOfTheScaledRotation) {
  // With c != 1 the forward map is c R(angle); backward needs its transpose c R(-angle), which the inverse
  // flag applies: <y, R x> = <R^T y, x> for random x, y.
  Rng rng;
  const RopeConfig c = yarn_config(1.0, 0.3);
  const int64_t b = 2, t = 9, total = 3, n = 2, d = 8, off = 100;
  Tensor table = ops::rope_table(c, off + t, d);
  Tensor x = rand_tensor(rng, {b, t, total * d}, DType::kF64),
         y = rand_tensor(rng, {b, t, total * d}, DType::kF64);
  Tensor rx = clone(x), ry = clone(y);
  ops::rope_apply(rx, b, t, total, n, d, table, off, false, Stream::cpu());
  ops::rope_apply(ry, b, t, total, n, d, table, off, true, Stream::cpu());
  const double lhs = dot(host(y), host(rx)), rhs = dot(host(ry), host(x));
  EXPECT_NEAR(lhs, rhs, 1e-12 * std::fabs(lhs));
  EXPECT_GT(std::fabs(dot(host(rx), host(rx)) - dot(host(x), host(x))), 1e-3);  // not a pure rotation
}

TEST(Rope, YarnRejectsBadConfigs) {
  RopeConfig c = yarn_config(1.0, 1.0);
  c.beta_slow = 0.0;
  EXPECT_PRIMUS_ERROR(ops::rope_inv_freq(c, 64), "YaRN needs");
  c = yarn_config(1.0, 1.0);
  c.llama3_scaling = true;
  EXPECT_PRIMUS_ERROR(ops::rope_inv_freq(c, 64), "exclusive");
}

// ---- Per-token positions (packed SFT rows) ----

// int32 [b, t] positions: row r holds packed samples of random lengths, each restarting at 0 (the packed-SFT
// pattern), except that a row of index 1 mod 3 draws every position uniformly from [0, max_pos) (no structure
// at all, so a kernel that assumed runs would fail).
Tensor packed_positions(Rng& rng, int64_t b, int64_t t, int64_t max_pos) {
  std::vector<int32_t> v(static_cast<size_t>(b * t));
  for (int64_t r = 0; r < b; ++r) {
    int64_t p = 0, left = 0;
    for (int64_t i = 0; i < t; ++i) {
      if (r % 3 == 1) {
        v[r * t + i] = static_cast<int32_t>(rng.integer(0, max_pos - 1));
        continue;
      }
      if (left == 0) p = 0, left = rng.integer(1, std::max<int64_t>(1, t / 2));
      v[r * t + i] = static_cast<int32_t>(std::min(p, max_pos - 1));
      ++p, --left;
    }
  }
  return Tensor::from_vector(v, {b, t});
}

Tensor offset_positions(int64_t b, int64_t t, int64_t offset) {
  std::vector<int32_t> v(static_cast<size_t>(b * t));
  for (int64_t r = 0; r < b; ++r)
    for (int64_t i = 0; i < t; ++i) v[r * t + i] = static_cast<int32_t>(offset + i);
  return Tensor::from_vector(v, {b, t});
}

// The rotation written out per token with the angle positions[b, t] * f_i computed here in double, times the
// table's scale c (YaRN; 1 otherwise): an independent f64 reference that shares no code with the op.
std::vector<double> naive_rope_positions(const std::vector<double>& x, const std::vector<int32_t>& pos,
                                         const std::vector<float>& f, double c, int64_t b, int64_t t,
                                         int64_t total, int64_t n, int64_t d, bool inverse) {
  std::vector<double> y = x;
  const int64_t half = d / 2;
  for (int64_t tok = 0; tok < b * t; ++tok) {
    for (int64_t h = 0; h < n; ++h) {
      const int64_t base = (tok * total + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pos[tok]) * static_cast<double>(f[i]);
        const double cs = c * std::cos(angle), sn = (inverse ? -c : c) * std::sin(angle);
        const double x1 = x[base + i], x2 = x[base + half + i];
        y[base + i] = x1 * cs - x2 * sn;
        y[base + half + i] = x2 * cs + x1 * sn;
      }
    }
  }
  return y;
}

std::vector<int32_t> host_i32(const Tensor& t) {
  const int32_t* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

struct PosCase {
  int64_t b, t, total, n, d;
};
// Odd token counts, head dims 64 and 128, several rows, some heads left unrotated.
const PosCase kPosCases[] = {{1, 1, 1, 1, 2},    {3, 31, 3, 2, 64},   {2, 33, 4, 4, 128},
                             {4, 127, 2, 1, 64}, {2, 127, 5, 3, 128}, {3, 33, 1, 1, 6}};

TEST(RopePositions, OffsetPlusTokenIsBitwiseTheOffsetPath) {
  Rng rng;
  for (DType dt : float_types()) {
    for (const PosCase& c : kPosCases) {
      for (int64_t offset : {0L, 5L, 1000L}) {
        for (bool inverse : {false, true}) {
          SCOPED_TRACE(fmt::format("{} b={} t={} d={} offset={} inverse={}", dtype_name(dt), c.b, c.t, c.d,
                                   offset, inverse));
          Tensor table = ops::rope_table(llama3_config(), offset + c.t, c.d);
          Tensor x = rand_tensor(rng, {c.b, c.t, c.total * c.d}, dt);
          Tensor y = clone(x);
          Tensor pos = offset_positions(c.b, c.t, offset);
          ops::rope_apply(x, c.b, c.t, c.total, c.n, c.d, table, offset, inverse, Stream::cpu());
          ops::rope_apply(y, c.b, c.t, c.total, c.n, c.d, table, 0, &pos, inverse, Stream::cpu());
          EXPECT_TRUE(bitwise_equal(x, y));
        }
      }
    }
  }
  // A null positions pointer is the offset overload itself.
  Tensor table = ops::rope_table(RopeConfig{}, 40, 8);
  Tensor x = rand_tensor(rng, {2, 31, 16}, DType::kF32), y = clone(x);
  ops::rope_apply(x, 2, 31, 2, 2, 8, table, 9, false, Stream::cpu());
  ops::rope_apply(y, 2, 31, 2, 2, 8, table, 9, nullptr, false, Stream::cpu());
  EXPECT_TRUE(bitwise_equal(x, y));
}

TEST(RopePositions, MatchesPerTokenRotation) {
  Rng rng;
  const RopeConfig configs[] = {RopeConfig{}, llama3_config()};
  for (const RopeConfig& cfg : configs) {
    for (DType dt : float_types()) {
      for (const PosCase& c : kPosCases) {
        for (bool inverse : {false, true}) {
          SCOPED_TRACE(fmt::format("{} llama3={} b={} t={} total={} n={} d={} inverse={}", dtype_name(dt),
                                   cfg.llama3_scaling, c.b, c.t, c.total, c.n, c.d, inverse));
          const int64_t max_pos = 3 * c.t + 50;  // positions reach past the row length
          Tensor pos = packed_positions(rng, c.b, c.t, max_pos);
          const std::vector<int32_t> p = host_i32(pos);
          const std::vector<float> f = ops::rope_inv_freq(cfg, c.d);
          Tensor x = rand_tensor(rng, {c.b, c.t, c.total * c.d}, dt);
          const auto x0 = host(x);
          // The production f32 table: within its own rounding of the exact angles.
          Tensor table = ops::rope_table(cfg, max_pos, c.d);
          ops::rope_apply(x, c.b, c.t, c.total, c.n, c.d, table, 0, &pos, inverse, Stream::cpu());
          const auto want = naive_rope_positions(x0, p, f, 1.0, c.b, c.t, c.total, c.n, c.d, inverse);
          EXPECT_LT(rel_err(x, want), 1e-6);
          // Heads past n are untouched (bitwise).
          const auto y = host(x);
          for (int64_t tok = 0; tok < c.b * c.t; ++tok)
            for (int64_t col = c.n * c.d; col < c.total * c.d; ++col)
              ASSERT_EQ(y[tok * c.total * c.d + col], x0[tok * c.total * c.d + col]);
          // f64 x with an f64 table: the exact angles to f64 rounding.
          if (dt == DType::kF64) {
            Tensor x64 = tensor_of(x0, x.shape(), dt);
            ops::rope_apply(x64, c.b, c.t, c.total, c.n, c.d, table_f64(cfg, max_pos, c.d), 0, &pos, inverse,
                            Stream::cpu());
            EXPECT_LT(rel_err(x64, want), 1e-14);
          }
        }
      }
    }
  }
}

TEST(RopePositions, InverseUndoesRotation) {
  Rng rng;
  for (DType dt : float_types()) {
    for (const PosCase& c : kPosCases) {
      const int64_t max_pos = 2 * c.t + 7;
      Tensor table = dt == DType::kF64 ? table_f64(llama3_config(), max_pos, c.d)
                                       : ops::rope_table(llama3_config(), max_pos, c.d);
      Tensor pos = packed_positions(rng, c.b, c.t, max_pos);
      Tensor x = rand_tensor(rng, {c.b, c.t, c.total * c.d}, dt);
      const auto x0 = host(x);
      ops::rope_apply(x, c.b, c.t, c.total, c.n, c.d, table, 0, &pos, false, Stream::cpu());
      if (c.d * c.t > 2) EXPECT_GT(rel_err(x, x0), 1e-3);  // it did rotate
      ops::rope_apply(x, c.b, c.t, c.total, c.n, c.d, table, 0, &pos, true, Stream::cpu());
      EXPECT_LT(rel_err(x, x0), dt == DType::kF64 ? 1e-14 : 1e-6);
    }
  }
}

TEST(RopePositions, BackwardIsInverseRotationFiniteDifferences) {
  Rng rng;
  const PosCase c{3, 7, 3, 2, 6};
  const DType dt = DType::kF64;
  Tensor table = table_f64(llama3_config(), 16, c.d);
  Tensor pos = packed_positions(rng, c.b, c.t, 16);
  const Shape shape{c.b, c.t, c.total * c.d};
  Tensor x = rand_tensor(rng, shape, dt), dy = rand_tensor(rng, shape, dt);
  const auto w = host(dy);
  auto forward = [&] {
    Tensor y = clone(x);
    ops::rope_apply(y, c.b, c.t, c.total, c.n, c.d, table, 0, &pos, false, Stream::cpu());
    return host(y);
  };
  Tensor dx = clone(dy);
  ops::rope_apply(dx, c.b, c.t, c.total, c.n, c.d, table, 0, &pos, true, Stream::cpu());
  EXPECT_LT(fd_rel_error(rng, x, host(dx), forward, w, 200), kGradTol);
}

TEST(RopePositions, YarnTable) {
  // The table carries YaRN's frequencies and its cos/sin scale c; per-token positions just pick its rows.
  Rng rng;
  const RopeConfig cfg = yarn_config(1.0, 0.707);
  const double scale = ops::rope_cos_sin_scale(cfg);
  ASSERT_GT(std::fabs(scale - 1.0), 1e-3);
  const int64_t b = 3, t = 33, total = 3, n = 2, d = 64, max_pos = 5000;
  Tensor table = ops::rope_table(cfg, max_pos, d);
  Tensor pos = packed_positions(rng, b, t, max_pos);
  const std::vector<float> f = ops::rope_inv_freq(cfg, d);
  Tensor x = rand_tensor(rng, {b, t, total * d}, DType::kF64),
         y = rand_tensor(rng, {b, t, total * d}, DType::kF64);
  Tensor rx = clone(x), ry = clone(y);
  ops::rope_apply(rx, b, t, total, n, d, table, 0, &pos, false, Stream::cpu());
  ops::rope_apply(ry, b, t, total, n, d, table, 0, &pos, true, Stream::cpu());
  // The f32 table rounds c cos / c sin of angles up to ~5000 rad: ~1e-7 relative.
  EXPECT_LT(rel_err(rx, naive_rope_positions(host(x), host_i32(pos), f, scale, b, t, total, n, d, false)),
            1e-6);
  EXPECT_LT(rel_err(ry, naive_rope_positions(host(y), host_i32(pos), f, scale, b, t, total, n, d, true)),
            1e-6);
  // Backward is the transpose of c R: <y, (c R) x> = <(c R)^T y, x>.
  const double lhs = dot(host(y), host(rx)), rhs = dot(host(ry), host(x));
  EXPECT_NEAR(lhs, rhs, 1e-12 * std::fabs(lhs));
}

TEST(RopePositions, RejectsBadPositions) {
  Rng rng;
  const Stream s = Stream::cpu();
  Tensor table = ops::rope_table(RopeConfig{}, 8, 4);
  Tensor x = rand_tensor(rng, {2, 3, 12}, DType::kF32);
  const auto x0 = host(x);
  Tensor pos = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 0, 8, 1}, {2, 3});
  EXPECT_PRIMUS_ERROR(ops::rope_apply(x, 2, 3, 3, 3, 4, table, 0, &pos, false, s),
                      "positions[1, 1] = 8 is outside the table's 8 rows");
  Tensor neg = Tensor::from_vector(std::vector<int32_t>{0, 1, -1, 0, 1, 2}, {2, 3});
  EXPECT_PRIMUS_ERROR(ops::rope_apply(x, 2, 3, 3, 3, 4, table, 0, &neg, true, s),
                      "positions[0, 2] = -1 is outside the table's 8 rows");
  EXPECT_EQ(host(x), x0);  // refused before touching x
  Tensor ok = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 0, 7, 1}, {2, 3});
  EXPECT_PRIMUS_ERROR(ops::rope_apply(x, 2, 3, 3, 3, 4, table, 1, &ok, false, s),
                      "pos_offset must be 0 with per-token positions, got 1");
  Tensor wide = Tensor::zeros({2, 4}, DType::kI32);
  EXPECT_PRIMUS_ERROR(ops::rope_apply(x, 2, 3, 3, 3, 4, table, 0, &wide, false, s),
                      "positions must be [2, 3]");
  Tensor i64 = Tensor::zeros({2, 3}, DType::kI64);
  EXPECT_PRIMUS_ERROR(ops::rope_apply(x, 2, 3, 3, 3, 4, table, 0, &i64, false, s), "positions must be i32");
  Tensor undefined;
  EXPECT_PRIMUS_ERROR(ops::rope_apply(x, 2, 3, 3, 3, 4, table, 0, &undefined, false, s), "undefined");
  ops::rope_apply(x, 2, 3, 3, 3, 4, table, 0, &ok, false, s);  // position 7 = the last row is fine
}

}  // namespace
}  // namespace primus::test
