// f32 masters as (bf16 hi, i16 remainder) pairs (core/master_split.h): the split / join bit functions on
// every 32-bit pattern and on the edge cases by hand; the CPU ops master_split / master_join; AdamW on the
// pair (adamw_step_split) bitwise against the f32-master AdamW followed by a split; and the updated embedding
// lookup on the pair.
#include <omp.h>

#include <cstring>

#include "core/master_split.h"
#include "op_test_util.h"
#include "ops/embedding.h"
#include "ops/optimizer.h"

namespace primus::test {
namespace {

using ops::AdamWParams;

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
bool is_nan_bits(uint32_t b) {
  return (b & 0x7fffffffu) > 0x7f800000u;
}

// Every one of the 2^32 patterns: the remainder fits and the join gives the pattern back (NaNs: the canonical
// quiet NaN of their sign, and a NaN master is a NaN weight); outside NaNs hi is the upper half rounded up
// exactly when the lower half is >= 0x8000 -- round to nearest, ties away from zero. On every 256th pattern
// hi is also compared with the independent RNE reference float_to_bf16: equal except on ties.
TEST(MasterSplit, EveryBitPatternJoinsBackExactly) {
  int64_t bad_join = 0, bad_round = 0, compared = 0;
#pragma omp parallel for schedule(static) reduction(+ : bad_join, bad_round, compared)
  for (int64_t up = 0; up < 65536; ++up) {
    const uint32_t base = static_cast<uint32_t>(up) << 16;
    int64_t bad = 0;
    if (!is_nan_bits(base | 0xffffu)) {  // no NaN in this upper half (a branch-free loop for the common case)
      for (uint32_t lo = 0; lo < 65536; ++lo) {
        const uint32_t b = base | lo;
        const uint16_t hi = compute_bits(b);
        bad += join_bits(hi, remainder_bits(b, hi)) != b;
        bad += hi != static_cast<uint16_t>(up + (lo >= 0x8000u));
      }
    } else {
      for (uint32_t lo = 0; lo < 65536; ++lo) {
        const uint32_t b = base | lo;
        const uint16_t hi = compute_bits(b);
        const bool nan = is_nan_bits(b);
        bad += join_bits(hi, remainder_bits(b, hi)) != (nan ? (b & 0x80000000u) | 0x7fc00000u : b);
        bad += nan ? !is_nan_bits(static_cast<uint32_t>(hi) << 16)
                   : hi != static_cast<uint16_t>(up + (lo >= 0x8000u));
      }
    }
    bad_join += bad;
    for (uint32_t lo = 0; lo < 65536; lo += 256) {
      const uint32_t b = base | lo;
      if (is_nan_bits(b) || lo == 0x8000u) continue;  // NaN payloads differ by design; ties are checked above
      float f;
      std::memcpy(&f, &b, 4);
      ++compared;
      bad_round += compute_bits(b) != float_to_bf16(f).bits;
    }
  }
  EXPECT_EQ(bad_join, 0);
  EXPECT_EQ(bad_round, 0);
  EXPECT_GT(compared, int64_t{16000000});
}

TEST(MasterSplit, EdgeCasesByHand) {
  struct Case {
    uint32_t b;
    uint16_t hi;
    int16_t rem;
    const char* what;
  };
  const Case cases[] = {
      {0x00000000u, 0x0000, 0, "+0"},
      {0x80000000u, 0x8000, 0, "-0"},
      {0x00000001u, 0x0000, 1, "smallest subnormal"},
      {0x80000001u, 0x8000, 1, "smallest negative subnormal"},
      {0x007fffffu, 0x0080, -1, "largest subnormal: rounds up into the smallest normal"},
      {0x3f800000u, 0x3f80, 0, "1.0"},
      {0x3f807fffu, 0x3f80, 0x7fff, "just below a tie: down"},
      {0x3f808000u, 0x3f81, -0x8000, "tie, even truncation: away from zero (RNE keeps 0x3f80)"},
      {0x3f818000u, 0x3f82, -0x8000, "tie, odd truncation: up (RNE too)"},
      {0x3f7fffffu, 0x3f80, -1, "below 1.0: carries into the exponent"},
      {0x3fff8000u, 0x4000, -0x8000, "tie that carries into the exponent"},
      {0xbf808000u, 0xbf81, -0x8000, "negative tie: away from zero"},
      {0xbf807fffu, 0xbf80, 0x7fff, "negative below a tie"},
      {0x7f7fffffu, 0x7f80, -1, "largest finite: rounds to +inf (as RNE)"},
      {0xff7fffffu, 0xff80, -1, "most negative finite: rounds to -inf"},
      {0x7f7f7fffu, 0x7f7f, 0x7fff, "largest finite that stays finite"},
      {0x7f800000u, 0x7f80, 0, "+inf"},
      {0xff800000u, 0xff80, 0, "-inf"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(compute_bits(c.b), c.hi) << c.what;
    EXPECT_EQ(remainder_bits(c.b, c.hi), c.rem) << c.what;
    EXPECT_EQ(join_bits(c.hi, c.rem), c.b) << c.what;
  }
  // The one difference from the RNE cast, on the tie above.
  EXPECT_EQ(float_to_bf16(join_float(0x3f81, -0x8000)).bits, 0x3f80);
  EXPECT_EQ(compute_round(join_float(0x3f81, -0x8000)).bits, 0x3f81);
  // NaNs: canonical quiet NaN of their sign, never a finite weight. 0x7fffffff is the GPU's default NaN,
  // whose raw split would be hi = 0x8000 (-0.0).
  for (uint32_t nan : {0x7fffffffu, 0x7f800001u, 0x7fc00000u, 0x7fff8000u}) {
    EXPECT_EQ(compute_bits(nan), 0x7fc0) << std::hex << nan;
    EXPECT_EQ(join_bits(compute_bits(nan), remainder_bits(nan, compute_bits(nan))), 0x7fc00000u);
  }
  for (uint32_t nan : {0xffffffffu, 0xff800001u}) EXPECT_EQ(compute_bits(nan), 0xffc0) << std::hex << nan;
}

// Random f32 bit patterns (every class of value) and random normal floats.
Tensor random_patterns(Rng& rng, int64_t n, bool with_nan) {
  Tensor t = Tensor::empty({n}, DType::kF32);
  auto* b = static_cast<uint32_t*>(t.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    uint32_t x = static_cast<uint32_t>(rng.gen()());
    if (i % 3 == 0) x = bits_of(static_cast<float>(rng.uniform(-2, 2)));
    if (i % 7 == 0) x = (x & 0xffff0000u) | 0x8000u;    // ties
    if (!with_nan && is_nan_bits(x)) x &= 0xff800000u;  // NaN -> inf of its sign
    b[i] = x;
  }
  return t;
}

TEST(MasterSplit, OpsSplitAndJoinRoundTrip) {
  Rng rng;
  for (int64_t n : {1L, 31L, 33L, 127L, 70001L}) {
    Tensor master = random_patterns(rng, n, false);
    Tensor hi = filled({n}, DType::kBF16, 7.0), rem = Tensor::zeros({n}, DType::kI16);
    ops::master_split(master, hi, &rem, Stream::cpu());
    const auto* b = static_cast<const uint32_t*>(master.data_ptr());
    const auto* h = static_cast<const uint16_t*>(hi.data_ptr());
    const int16_t* r = rem.data<int16_t>();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(h[i], compute_bits(b[i])) << i;
      ASSERT_EQ(r[i], remainder_bits(b[i], h[i])) << i;
    }
    Tensor back = filled({n}, DType::kF32, 3.0);
    ops::master_join(hi, rem, back, Stream::cpu());
    ASSERT_EQ(std::memcmp(back.data_ptr(), master.data_ptr(), master.nbytes()), 0) << "n=" << n;
    // Without a remainder only hi is written: the compute rounding of every layout.
    Tensor hi2 = filled({n}, DType::kBF16, 7.0);
    ops::master_split(master, hi2, nullptr, Stream::cpu());
    ASSERT_EQ(std::memcmp(hi2.data_ptr(), hi.data_ptr(), hi.nbytes()), 0);
  }
}

TEST(MasterSplit, OpsRejectBadInputs) {
  const Stream s = Stream::cpu();
  Tensor master = Tensor::zeros({8}, DType::kF32), hi = Tensor::zeros({8}, DType::kBF16);
  Tensor rem = Tensor::zeros({8}, DType::kI16), rem7 = Tensor::zeros({7}, DType::kI16);
  Tensor rem_u16 = Tensor::zeros({8}, DType::kU16);
  EXPECT_PRIMUS_ERROR(ops::master_split(master, hi, &rem7, s), "master_split: rem must have 8 elements");
  EXPECT_PRIMUS_ERROR(ops::master_split(master, hi, &rem_u16, s), "master_split: rem must be i16");
  Tensor hi32 = Tensor::zeros({8}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::master_split(master, hi32, &rem, s), "master_split: hi must be bf16");
  EXPECT_PRIMUS_ERROR(ops::master_join(hi, rem7, master, s), "master_join: hi");
  Tensor grad = Tensor::zeros({8}, DType::kF32), m = Tensor::zeros({8}, DType::kF32);
  Tensor v = Tensor::zeros({8}, DType::kF32);
  AdamWParams p;
  EXPECT_PRIMUS_ERROR(ops::adamw_step_split(hi, rem_u16, grad, m, v, p, s), "rem must be i16");
  EXPECT_PRIMUS_ERROR(ops::adamw_step_split(hi, rem, grad, m, m, p, s), "must not overlap");
}

AdamWParams split_test_params(int64_t step, bool decay) {
  AdamWParams p;
  p.lr = 3e-3f;
  p.beta1 = 0.9f;
  p.beta2 = 0.95f;
  p.eps = 1e-8f;
  p.weight_decay = decay ? 0.1f : 0.0f;
  p.grad_scale = 0.7f;
  p.step = step;
  return p;
}

// The pair path is the f32 path: each step, adamw_step on an f32 master followed by master_split gives
// bitwise the hi and rem of adamw_step_split, the same moments, and (the fused copy of the f32 path) the same
// bf16 weights.
TEST(AdamWSplit, BitwiseEqualToF32AdamWThenSplit) {
  Rng rng;
  for (int64_t n : {1L, 31L, 33L, 127L, 70001L}) {
    for (bool decay : {true, false}) {
      Tensor master = rand_tensor(rng, {n}, DType::kF32);
      Tensor m = Tensor::zeros({n}, DType::kF32), v = Tensor::zeros({n}, DType::kF32);
      Tensor hi = Tensor::empty({n}, DType::kBF16), rem = Tensor::empty({n}, DType::kI16);
      ops::master_split(master, hi, &rem, Stream::cpu());
      Tensor m2 = clone(m), v2 = clone(v), copy = Tensor::empty({n}, DType::kBF16);
      for (int step = 1; step <= 4; ++step) {
        const AdamWParams p = split_test_params(step, decay);
        Tensor grad = rand_tensor(rng, {n}, DType::kF32, -2, 2);
        const std::vector<double> before = host(master);
        ops::adamw_step(master, grad, m, v, p, &copy, Stream::cpu());
        ops::adamw_step_split(hi, rem, grad, m2, v2, p, Stream::cpu());
        Tensor hi_ref = Tensor::empty({n}, DType::kBF16), rem_ref = Tensor::empty({n}, DType::kI16);
        ops::master_split(master, hi_ref, &rem_ref, Stream::cpu());
        const std::string at = "n=" + std::to_string(n) + " step " + std::to_string(step);
        ASSERT_EQ(std::memcmp(hi.data_ptr(), hi_ref.data_ptr(), hi.nbytes()), 0) << at;
        ASSERT_EQ(std::memcmp(rem.data_ptr(), rem_ref.data_ptr(), rem.nbytes()), 0) << at;
        ASSERT_EQ(std::memcmp(copy.data_ptr(), hi.data_ptr(), hi.nbytes()), 0) << at << " (fused bf16 copy)";
        ASSERT_EQ(std::memcmp(m2.data_ptr(), m.data_ptr(), m.nbytes()), 0) << at;
        ASSERT_EQ(std::memcmp(v2.data_ptr(), v.data_ptr(), v.nbytes()), 0) << at;
        ASSERT_NE(host(master), before) << at;  // the step moved the weights, so the checks have teeth
      }
      // And the joined pair is the f32 master itself.
      Tensor joined = Tensor::empty({n}, DType::kF32);
      ops::master_join(hi, rem, joined, Stream::cpu());
      ASSERT_EQ(std::memcmp(joined.data_ptr(), master.data_ptr(), master.nbytes()), 0) << "n=" << n;
    }
  }
}

// The weights' updates are far below a bf16 ulp (lr 1e-5 on weights ~1): the remainder carries them, so the
// master moves while hi stays, exactly as an f32 master would.
TEST(AdamWSplit, SmallUpdatesAccumulateInTheRemainder) {
  const int64_t n = 64;
  Tensor master = filled({n}, DType::kF32, 1.0), grad = filled({n}, DType::kF32, 1.0);
  Tensor m = Tensor::zeros({n}, DType::kF32), v = Tensor::zeros({n}, DType::kF32);
  Tensor hi = Tensor::empty({n}, DType::kBF16), rem = Tensor::empty({n}, DType::kI16);
  ops::master_split(master, hi, &rem, Stream::cpu());
  Tensor m2 = clone(m), v2 = clone(v);
  AdamWParams p = split_test_params(1, false);
  p.lr = 1e-5f;
  for (int step = 1; step <= 50; ++step) {
    p.step = step;
    ops::adamw_step(master, grad, m, v, p, nullptr, Stream::cpu());
    ops::adamw_step_split(hi, rem, grad, m2, v2, p, Stream::cpu());
  }
  Tensor joined = Tensor::empty({n}, DType::kF32);
  ops::master_join(hi, rem, joined, Stream::cpu());
  EXPECT_EQ(joined.to_vector<float>(), master.to_vector<float>());
  EXPECT_LT(master.to_vector<float>()[0], 1.0f - 4e-4f);      // 50 steps of ~1e-5
  EXPECT_EQ(bf16_to_float(hi.to_vector<bf16_t>()[0]), 1.0f);  // below half a bf16 ulp (2^-9) of 1.0
}

// The updated lookup on the pair: bitwise the lookup on the joined f32 master, and the rows of hi after the
// table's adamw_step_split.
TEST(AdamWSplit, EmbeddingForwardUpdatedOnThePair) {
  Rng rng;
  const std::tuple<int64_t, int64_t, int64_t> sizes[] = {{1, 1, 1}, {127, 31, 33}, {33, 127, 31}};
  const AdamWParams p = split_test_params(3, true);
  for (auto [n, vocab, d] : sizes) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = static_cast<int32_t>(rng.integer(0, vocab - 1));
    Tensor tok = Tensor::from_vector(ids, {n});
    Tensor master = rand_tensor(rng, {vocab, d}, DType::kF32), g = rand_tensor(rng, {vocab, d}, DType::kF32);
    Tensor m = rand_tensor(rng, {vocab, d}, DType::kF32, -0.1, 0.1);
    Tensor v = rand_tensor(rng, {vocab, d}, DType::kF32, 0.0, 0.01);
    Tensor hi = Tensor::empty({vocab, d}, DType::kBF16), rem = Tensor::empty({vocab, d}, DType::kI16);
    ops::master_split(master, hi, &rem, Stream::cpu());
    Tensor out = Tensor::empty({n, d}, DType::kBF16), ref = Tensor::empty({n, d}, DType::kBF16);
    ops::embedding_forward_updated_split(tok, hi, rem, g, m, v, p, out, Stream::cpu());
    ops::embedding_forward_updated(tok, master, g, m, v, p, ref, Stream::cpu());
    ASSERT_EQ(std::memcmp(out.data_ptr(), ref.data_ptr(), out.nbytes()), 0) << n << " " << vocab << " " << d;
    ops::adamw_step_split(hi, rem, g, m, v, p, Stream::cpu());
    const auto* h = static_cast<const uint16_t*>(hi.data_ptr());
    const auto* o = static_cast<const uint16_t*>(out.data_ptr());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t e = 0; e < d; ++e) ASSERT_EQ(o[i * d + e], h[ids[i] * d + e]) << i << "," << e;
  }
  Tensor tok = Tensor::from_vector(std::vector<int32_t>{0}, {1});
  Tensor hi = Tensor::zeros({2, 3}, DType::kBF16), rem = Tensor::zeros({3, 2}, DType::kI16);
  Tensor f = Tensor::zeros({2, 3}, DType::kF32), out = Tensor::empty({1, 3}, DType::kBF16);
  EXPECT_PRIMUS_ERROR(ops::embedding_forward_updated_split(tok, hi, rem, f, f, f, p, out, Stream::cpu()),
                      "embedding_forward_updated_split: rem must be [2, 3]");
}

}  // namespace
}  // namespace primus::test
