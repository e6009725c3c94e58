#include "ops/mla.h"

#include <cmath>
#include <limits>

#include "op_test_util.h"
#include "ops/rope.h"

namespace primus::test {
namespace {

using ops::MlaDims;

MlaDims dims(int64_t b, int64_t t, int64_t h, int64_t nope, int64_t rope, int64_t v) {
  MlaDims d;
  d.batch = b;
  d.seq = t;
  d.heads = h;
  d.nope = nope;
  d.rope = rope;
  d.v_dim = v;
  return d;
}

// A YaRN table, so that the rope slices are scaled as well as rotated (c != 1).
Tensor yarn_table(int64_t max_pos, int64_t rope) {
  ops::RopeConfig c;
  c.yarn = true;
  c.factor = 8.0;
  c.original_max_position = 16;
  c.mscale = 1.0;
  c.mscale_all_dim = 0.5;
  return ops::rope_table(c, max_pos, rope);
}

// Rotate-half on slice x (length dr) at table row `cs`, written out per element.
std::vector<double> rot(const std::vector<double>& x, const float* cs, int64_t dr) {
  const int64_t half = dr / 2;
  std::vector<double> y(static_cast<size_t>(dr));
  for (int64_t i = 0; i < half; ++i) {
    y[i] = x[i] * cs[i] - x[half + i] * cs[half + i];
    y[half + i] = x[half + i] * cs[i] + x[i] * cs[half + i];
  }
  return y;
}

std::vector<double> naive_pack(const std::vector<double>& q, const std::vector<double>& kv,
                               const std::vector<double>& kpe, const MlaDims& d, const Tensor& table,
                               int64_t off) {
  const int64_t H = d.heads, dn = d.nope, dr = d.rope, dv = d.v_dim, dq = dn + dr, w = d.qkv_width();
  std::vector<double> out(static_cast<size_t>(d.tokens() * w));
  for (int64_t tok = 0; tok < d.tokens(); ++tok) {
    const float* cs = table.data<float>() + (off + tok % d.seq) * dr;
    const std::vector<double> kr(kpe.begin() + tok * dr, kpe.begin() + (tok + 1) * dr);
    const std::vector<double> krot = rot(kr, cs, dr);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t qb = tok * H * dq + h * dq, kvb = tok * H * (dn + dv) + h * (dn + dv);
      const std::vector<double> qr(q.begin() + qb + dn, q.begin() + qb + dq);
      const std::vector<double> qrot = rot(qr, cs, dr);
      for (int64_t e = 0; e < dq; ++e) {
        out[tok * w + h * dq + e] = e < dn ? q[qb + e] : qrot[e - dn];
        out[tok * w + H * dq + h * dq + e] = e < dn ? kv[kvb + e] : krot[e - dn];
      }
      for (int64_t e = 0; e < dv; ++e) out[tok * w + 2 * H * dq + h * dv + e] = kv[kvb + dn + e];
    }
  }
  return out;
}

TEST(Mla, PackMatchesPerElementFormula) {
  Rng rng;
  const MlaDims cases[] = {dims(2, 31, 3, 5, 6, 7), dims(1, 33, 1, 0, 2, 1), dims(1, 1, 4, 16, 8, 16),
                           dims(3, 7, 2, 3, 4, 5)};
  for (DType dt : float_types()) {
    for (const MlaDims& d : cases) {
      SCOPED_TRACE(fmt::format("{} B={} T={} H={} nope={} rope={} v={}", dtype_name(dt), d.batch, d.seq,
                               d.heads, d.nope, d.rope, d.v_dim));
      const int64_t n = d.tokens(), off = 5;
      Tensor table = yarn_table(off + d.seq, d.rope);
      Tensor q = rand_tensor(rng, {n, d.q_width()}, dt), kv = rand_tensor(rng, {n, d.kv_width()}, dt);
      Tensor kpe = rand_tensor(rng, {n, d.rope}, dt);
      Tensor qkv = filled({n, d.qkv_width()}, dt, std::numeric_limits<double>::quiet_NaN());
      ops::mla_pack_qkv(q, kv, kpe, d, table, off, qkv, Stream::cpu());
      EXPECT_LT(rel_err(qkv, naive_pack(host(q), host(kv), host(kpe), d, table, off)), fwd_tol(dt));
    }
  }
}

// The unpack is the backward of the pack, i.e. its transpose: <pack(x), y> = <x, unpack(y)> for all x, y.
TEST(Mla, UnpackIsTheTransposeOfPack) {
  Rng rng;
  const MlaDims cases[] = {dims(2, 31, 3, 5, 6, 7), dims(1, 127, 2, 0, 4, 3), dims(1, 3, 5, 9, 2, 1)};
  for (const MlaDims& d : cases) {
    SCOPED_TRACE(
        fmt::format("B={} T={} H={} nope={} rope={} v={}", d.batch, d.seq, d.heads, d.nope, d.rope, d.v_dim));
    const DType dt = DType::kF64;
    const int64_t n = d.tokens(), off = 2;
    Tensor table = yarn_table(off + d.seq, d.rope);
    Tensor q = rand_tensor(rng, {n, d.q_width()}, dt), kv = rand_tensor(rng, {n, d.kv_width()}, dt);
    Tensor kpe = rand_tensor(rng, {n, d.rope}, dt), y = rand_tensor(rng, {n, d.qkv_width()}, dt);
    Tensor qkv = Tensor::empty({n, d.qkv_width()}, dt);
    ops::mla_pack_qkv(q, kv, kpe, d, table, off, qkv, Stream::cpu());
    Tensor dq = filled({n, d.q_width()}, dt, NAN), dkv = filled({n, d.kv_width()}, dt, NAN);
    Tensor dkpe = filled({n, d.rope}, dt, NAN);
    ops::mla_unpack_dqkv(y, d, table, off, dq, dkv, dkpe, Stream::cpu());
    const double lhs = dot(host(qkv), host(y));
    const double rhs = dot(host(q), host(dq)) + dot(host(kv), host(dkv)) + dot(host(kpe), host(dkpe));
    EXPECT_NEAR(lhs, rhs, 1e-12 * (std::fabs(lhs) + 1.0));
    // And slice by slice, so that one wrong slice cannot be hidden by another: perturbing only kpe.
    Tensor zq = filled({n, d.q_width()}, dt, 0.0), zkv = filled({n, d.kv_width()}, dt, 0.0);
    ops::mla_pack_qkv(zq, zkv, kpe, d, table, off, qkv, Stream::cpu());
    EXPECT_NEAR(dot(host(qkv), host(y)), dot(host(kpe), host(dkpe)), 1e-12 * (std::fabs(lhs) + 1.0));
    ops::mla_pack_qkv(q, zkv, filled({n, d.rope}, dt, 0.0), d, table, off, qkv, Stream::cpu());
    EXPECT_NEAR(dot(host(qkv), host(y)), dot(host(q), host(dq)), 1e-12 * (std::fabs(lhs) + 1.0));
  }
}

TEST(Mla, F32AgreesWithF64AndRejectsBadInputs) {
  Rng rng;
  const MlaDims d = dims(1, 9, 2, 3, 4, 5);
  const int64_t n = d.tokens();
  Tensor table = yarn_table(d.seq, d.rope);
  Tensor y64 = rand_tensor(rng, {n, d.qkv_width()}, DType::kF64);
  Tensor y32 = cpu_cast(y64, DType::kF32);
  std::vector<double> got[2];
  int i = 0;
  for (const Tensor* y : {&y32, &y64}) {
    const DType dt = y->dtype();
    Tensor dq = Tensor::empty({n, d.q_width()}, dt), dkv = Tensor::empty({n, d.kv_width()}, dt);
    Tensor dkpe = Tensor::empty({n, d.rope}, dt);
    ops::mla_unpack_dqkv(*y, d, table, 0, dq, dkv, dkpe, Stream::cpu());
    got[i++] = host(dkpe);
  }
  EXPECT_LT(rel_err(got[0], got[1]), 1e-6);

  Tensor q = rand_tensor(rng, {n, d.q_width()}, DType::kF32),
         kv = rand_tensor(rng, {n, d.kv_width()}, DType::kF32);
  Tensor kpe = rand_tensor(rng, {n, d.rope}, DType::kF32),
         qkv = Tensor::empty({n, d.qkv_width()}, DType::kF32);
  MlaDims odd = d;
  odd.rope = 3;
  EXPECT_PRIMUS_ERROR(ops::mla_pack_qkv(q, kv, kpe, odd, table, 0, qkv, Stream::cpu()), "even rope");
  EXPECT_PRIMUS_ERROR(ops::mla_pack_qkv(q, kv, kpe, d, table, 1, qkv, Stream::cpu()), "exceed the table");
  Tensor bad = Tensor::empty({n, d.qkv_width() - 1}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::mla_pack_qkv(q, kv, kpe, d, table, 0, bad, Stream::cpu()), "qkv must be");
}

// Per-token positions (packed SFT rows, every sample from 0): each token packs and unpacks exactly as a
// one-token call at its position through the offset path (checked above), and bad positions are refused
// naming the token.
TEST(Mla, PerTokenPositionsActAsEachTokensOwnOffset) {
  Rng rng;
  const MlaDims d = dims(2, 13, 3, 5, 6, 7);
  const int64_t n = d.tokens();
  Tensor table = yarn_table(16, d.rope);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t b = 0; b < d.batch; ++b)  // samples of lengths 4, 6, 3 (row 0) and 13 (row 1)
    for (int64_t t = 0; t < d.seq; ++t)
      pos[b * d.seq + t] = static_cast<int32_t>(b == 0 ? (t < 4 ? t : t < 10 ? t - 4 : t - 10) : t);
  const Tensor positions = Tensor::from_vector(pos, {d.batch, d.seq});
  for (DType dt : float_types()) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor q = rand_tensor(rng, {n, d.q_width()}, dt), kv = rand_tensor(rng, {n, d.kv_width()}, dt);
    Tensor kpe = rand_tensor(rng, {n, d.rope}, dt), y = rand_tensor(rng, {n, d.qkv_width()}, dt);
    Tensor qkv = filled({n, d.qkv_width()}, dt, NAN);
    Tensor dq = filled({n, d.q_width()}, dt, NAN), dkv = filled({n, d.kv_width()}, dt, NAN);
    Tensor dkpe = filled({n, d.rope}, dt, NAN);
    ops::mla_pack_qkv(q, kv, kpe, d, table, 0, qkv, Stream::cpu(), &positions);
    ops::mla_unpack_dqkv(y, d, table, 0, dq, dkv, dkpe, Stream::cpu(), &positions);
    const MlaDims one = dims(1, 1, d.heads, d.nope, d.rope, d.v_dim);
    for (int64_t tok = 0; tok < n; ++tok) {
      Tensor o = Tensor::empty({1, d.qkv_width()}, dt), oq = Tensor::empty({1, d.q_width()}, dt),
             okv = Tensor::empty({1, d.kv_width()}, dt), okpe = Tensor::empty({1, d.rope}, dt);
      ops::mla_pack_qkv(q.slice(tok, tok + 1), kv.slice(tok, tok + 1), kpe.slice(tok, tok + 1), one, table,
                        pos[tok], o, Stream::cpu());
      ops::mla_unpack_dqkv(y.slice(tok, tok + 1), one, table, pos[tok], oq, okv, okpe, Stream::cpu());
      ASSERT_EQ(host(qkv.slice(tok, tok + 1)), host(o)) << "token " << tok;
      ASSERT_EQ(host(dq.slice(tok, tok + 1)), host(oq)) << "token " << tok;
      ASSERT_EQ(host(dkv.slice(tok, tok + 1)), host(okv)) << "token " << tok;
      ASSERT_EQ(host(dkpe.slice(tok, tok + 1)), host(okpe)) << "token " << tok;
    }
  }
  Tensor q = rand_tensor(rng, {n, d.q_width()}, DType::kF32),
         kv = rand_tensor(rng, {n, d.kv_width()}, DType::kF32);
  Tensor kpe = rand_tensor(rng, {n, d.rope}, DType::kF32),
         qkv = Tensor::empty({n, d.qkv_width()}, DType::kF32);
  pos[17] = 16;  // row 1, token 4: past the table's 16 rows
  const Tensor bad = Tensor::from_vector(pos, {d.batch, d.seq});
  EXPECT_PRIMUS_ERROR(ops::mla_pack_qkv(q, kv, kpe, d, table, 0, qkv, Stream::cpu(), &bad),
                      "positions[1, 4] = 16 is outside the table's 16 rows");
  EXPECT_PRIMUS_ERROR(ops::mla_pack_qkv(q, kv, kpe, d, table, 1, qkv, Stream::cpu(), &positions),
                      "pos_offset must be 0 with per-token positions");
}

}  // namespace
}  // namespace primus::test
