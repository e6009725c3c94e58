#include "ops/attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "op_test_util.h"
#include "ops/elementwise.h"

namespace primus::test {
namespace {

using ops::AttentionShape;

AttentionShape make_shape(int64_t b, int64_t t, int64_t h, int64_t kv, int64_t d, bool causal = true,
                          int64_t dv = 0) {
  AttentionShape s;
  s.batch = b;
  s.seq = t;
  s.heads = h;
  s.kv_heads = kv;
  s.head_dim = d;
  s.v_head_dim = dv;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  s.causal = causal;
  return s;
}

Shape qkv_shape(const AttentionShape& s) {
  return {s.batch, s.seq, s.qkv_width()};
}
Shape out_shape(const AttentionShape& s) {
  return {s.batch, s.seq, s.out_width()};
}
Shape lse_shape(const AttentionShape& s) {
  return {s.batch, s.heads, s.seq};
}

struct Naive {
  std::vector<double> out, lse;
};

// Whether query i of row b may not see key j: the causal mask, and with packed sequences every key before
// the first token of i's sample.
bool naive_masked(const AttentionShape& s, int64_t b, int64_t i, int64_t j) {
  if (s.causal && j > i) return true;
  return s.seg_starts && j < s.seg_starts->data<int32_t>()[b * s.seq + i];
}

// Full score matrix per (batch, head) with an explicit -inf causal (and document) mask, a softmax per row,
// out = P @ V.
// Query head h reads kv head h / (H / KV).
Naive naive_attention(const std::vector<double>& qkv, const AttentionShape& s) {
  const int64_t B = s.batch, T = s.seq, H = s.heads, KV = s.kv_heads, D = s.head_dim, Dv = s.dv(),
                W = s.qkv_width();
  Naive r;
  r.out.assign(static_cast<size_t>(B * T * H * Dv), 0.0);
  r.lse.assign(static_cast<size_t>(B * H * T), 0.0);
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / (H / KV);
      std::vector<double> S(static_cast<size_t>(T * T));
      for (int64_t i = 0; i < T; ++i) {
        for (int64_t j = 0; j < T; ++j) {
          double acc = 0.0;
          for (int64_t e = 0; e < D; ++e)
            acc += qkv[(b * T + i) * W + h * D + e] * qkv[(b * T + j) * W + (H + kh) * D + e];
          S[i * T + j] = naive_masked(s, b, i, j) ? -inf : static_cast<double>(s.scale) * acc;
        }
      }
      for (int64_t i = 0; i < T; ++i) {
        double mx = -inf;
        for (int64_t j = 0; j < T; ++j) mx = std::max(mx, S[i * T + j]);
        double sum = 0.0;
        for (int64_t j = 0; j < T; ++j) sum += std::exp(S[i * T + j] - mx);
        r.lse[(b * H + h) * T + i] = mx + std::log(sum);
        for (int64_t j = 0; j < T; ++j) {
          const double p = std::exp(S[i * T + j] - mx) / sum;
          for (int64_t e = 0; e < Dv; ++e)
            r.out[((b * T + i) * H + h) * Dv + e] += p * qkv[(b * T + j) * W + (H + KV) * D + kh * Dv + e];
        }
      }
    }
  }
  return r;
}

// The textbook backward on the full matrices: dP = dO V^T, dS = P * (dP - rowsum(dO * O)), dQ = scale dS K,
// dK = scale dS^T Q, dV = P^T dO, with dK / dV summed over the query heads that share a kv head.
std::vector<double> naive_attention_backward(const std::vector<double>& qkv, const std::vector<double>& dout,
                                             const AttentionShape& s) {
  const int64_t B = s.batch, T = s.seq, H = s.heads, KV = s.kv_heads, D = s.head_dim, Dv = s.dv(),
                W = s.qkv_width();
  const double scale = s.scale;
  const Naive fwd = naive_attention(qkv, s);
  std::vector<double> g(qkv.size(), 0.0);
  auto at = [&](int64_t b, int64_t t, int64_t col) { return (b * T + t) * W + col; };
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / (H / KV), qc = h * D, kc = (H + kh) * D, vc = (H + KV) * D + kh * Dv;
      for (int64_t i = 0; i < T; ++i) {
        const double lse = fwd.lse[(b * H + h) * T + i];
        const int64_t o = ((b * T + i) * H + h) * Dv;
        double delta = 0.0;
        for (int64_t e = 0; e < Dv; ++e) delta += dout[o + e] * fwd.out[o + e];
        for (int64_t j = 0; j < T; ++j) {
          if (naive_masked(s, b, i, j)) continue;
          double sc = 0.0, dp = 0.0;
          for (int64_t e = 0; e < D; ++e) sc += qkv[at(b, i, qc + e)] * qkv[at(b, j, kc + e)];
          for (int64_t e = 0; e < Dv; ++e) dp += dout[o + e] * qkv[at(b, j, vc + e)];
          const double p = std::exp(scale * sc - lse);
          const double ds = p * (dp - delta);
          for (int64_t e = 0; e < D; ++e) {
            g[at(b, i, qc + e)] += scale * ds * qkv[at(b, j, kc + e)];
            g[at(b, j, kc + e)] += scale * ds * qkv[at(b, i, qc + e)];
          }
          for (int64_t e = 0; e < Dv; ++e) g[at(b, j, vc + e)] += p * dout[o + e];
        }
      }
    }
  }
  return g;
}

TEST(Attention, ForwardMatchesNaiveFullMatrix) {
  Rng rng;
  const AttentionShape cases[] = {
      make_shape(1, 1, 1, 1, 1),          make_shape(2, 3, 3, 1, 5),   make_shape(2, 31, 6, 2, 8),
      make_shape(1, 33, 4, 4, 16),        make_shape(1, 127, 2, 1, 3), make_shape(1, 64, 4, 2, 64),
      make_shape(2, 17, 6, 3, 7, false),  make_shape(1, 32, 8, 8, 32), make_shape(1, 65, 2, 1, 4),
      make_shape(1, 130, 3, 3, 5, false), make_shape(2, 100, 4, 2, 64)};
  for (DType dt : float_types()) {
    for (const AttentionShape& s : cases) {
      SCOPED_TRACE(fmt::format("{} B={} T={} H={} KV={} D={} causal={}", dtype_name(dt), s.batch, s.seq,
                               s.heads, s.kv_heads, s.head_dim, s.causal));
      Tensor qkv = rand_tensor(rng, qkv_shape(s), dt, -2.0, 2.0);
      Tensor out = filled(out_shape(s), dt, std::numeric_limits<double>::quiet_NaN());
      Tensor lse = filled(lse_shape(s), dt, std::numeric_limits<double>::quiet_NaN());
      ops::attention_forward(qkv, s, out, lse, Stream::cpu());
      const Naive ref = naive_attention(host(qkv), s);
      EXPECT_LT(rel_err(out, ref.out), fwd_tol(dt));
      EXPECT_LT(rel_err(lse, ref.lse), fwd_tol(dt));
    }
  }
}

// L = sum(out * W); dqkv from attention_backward against central differences of L.
void check_backward(Rng& rng, const AttentionShape& s) {
  SCOPED_TRACE(fmt::format("B={} T={} H={} KV={} D={} Dv={} causal={}", s.batch, s.seq, s.heads, s.kv_heads,
                           s.head_dim, s.dv(), s.causal));
  const DType dt = DType::kF64;
  Tensor qkv = rand_tensor(rng, qkv_shape(s), dt, -1.5, 1.5);
  Tensor out = Tensor::empty(out_shape(s), dt), lse = Tensor::empty(lse_shape(s), dt);
  Tensor dout = rand_tensor(rng, out_shape(s), dt);
  const auto w = host(dout);
  auto forward = [&] {
    ops::attention_forward(qkv, s, out, lse, Stream::cpu());
    return host(out);
  };
  forward();
  Tensor dqkv = filled(qkv_shape(s), dt, std::numeric_limits<double>::quiet_NaN());  // overwritten everywhere
  ops::attention_backward(dout, qkv, out, lse, s, dqkv, Stream::cpu());
  EXPECT_EQ(ops::count_nonfinite(dqkv, Stream::cpu()), 0);
  EXPECT_LT(fd_rel_error(rng, qkv, host(dqkv), forward, w, 120), kGradTol);
}

TEST(Attention, BackwardMatchesFiniteDifferencesGqa) {
  Rng rng;
  check_backward(rng, make_shape(2, 7, 6, 2, 3));
  check_backward(rng, make_shape(1, 5, 2, 2, 4));
  check_backward(rng, make_shape(1, 1, 3, 1, 2));
  check_backward(rng, make_shape(1, 9, 4, 1, 5, false));
  check_backward(rng, make_shape(1, 70, 2, 1, 2));  // two blocks of query rows
}

TEST(Attention, BackwardMatchesNaiveAcrossQueryBlocks) {
  // Sequences longer than one block of query rows (64), so gradients accumulate over several blocks.
  Rng rng;
  const AttentionShape cases[] = {make_shape(2, 130, 6, 2, 16), make_shape(1, 65, 2, 2, 3),
                                  make_shape(1, 129, 4, 1, 5, false), make_shape(1, 3, 3, 3, 2)};
  for (DType dt : float_types()) {
    for (const AttentionShape& s : cases) {
      SCOPED_TRACE(fmt::format("{} B={} T={} H={} KV={} D={} causal={}", dtype_name(dt), s.batch, s.seq,
                               s.heads, s.kv_heads, s.head_dim, s.causal));
      Tensor qkv = rand_tensor(rng, qkv_shape(s), dt, -1.5, 1.5), dout = rand_tensor(rng, out_shape(s), dt);
      Tensor out = Tensor::empty(out_shape(s), dt), lse = Tensor::empty(lse_shape(s), dt);
      Tensor dqkv = filled(qkv_shape(s), dt, std::numeric_limits<double>::quiet_NaN());
      ops::attention_forward(qkv, s, out, lse, Stream::cpu());
      ops::attention_backward(dout, qkv, out, lse, s, dqkv, Stream::cpu());
      EXPECT_LT(rel_err(dqkv, naive_attention_backward(host(qkv), host(dout), s)), fwd_tol(dt));
    }
  }
}

// Checks q, k and v slices separately so a wrong gradient in one of them cannot hide behind the others.
void check_backward_per_slice(Rng& rng, const AttentionShape& s) {
  SCOPED_TRACE(fmt::format("B={} T={} H={} KV={} D={} Dv={}", s.batch, s.seq, s.heads, s.kv_heads, s.head_dim,
                           s.dv()));
  const DType dt = DType::kF64;
  Tensor qkv = rand_tensor(rng, qkv_shape(s), dt);
  Tensor out = Tensor::empty(out_shape(s), dt), lse = Tensor::empty(lse_shape(s), dt);
  Tensor dout = rand_tensor(rng, out_shape(s), dt);
  const auto w = host(dout);
  auto forward = [&] {
    ops::attention_forward(qkv, s, out, lse, Stream::cpu());
    return host(out);
  };
  forward();
  Tensor dqkv = Tensor::empty(qkv_shape(s), dt);
  ops::attention_backward(dout, qkv, out, lse, s, dqkv, Stream::cpu());
  const auto g = host(dqkv);
  const int64_t W = s.qkv_width(), D = s.head_dim;
  const int64_t begin[] = {0, s.heads * D, (s.heads + s.kv_heads) * D};
  const int64_t end[] = {s.heads * D, (s.heads + s.kv_heads) * D, W};
  double* p = qkv.data<double>();
  for (int part = 0; part < 3; ++part) {
    double num = 0.0, den = 0.0;
    for (int64_t t = 0; t < s.batch * s.seq; ++t) {
      for (int64_t c = begin[part]; c < end[part]; ++c) {
        const int64_t i = t * W + c;
        const double saved = p[i];
        p[i] = saved + 1e-6;
        const double lp = dot(forward(), w);
        p[i] = saved - 1e-6;
        const double lm = dot(forward(), w);
        p[i] = saved;
        const double fd = (lp - lm) / 2e-6;
        num += (fd - g[i]) * (fd - g[i]);
        den += g[i] * g[i];
      }
    }
    EXPECT_GT(den, 0.0) << "part " << part;
    EXPECT_LT(std::sqrt(num / den), kGradTol) << "part " << part << " (0 = q, 1 = k, 2 = v)";
  }
}

TEST(Attention, BackwardMatchesFiniteDifferencesPerSlice) {
  Rng rng;
  check_backward_per_slice(rng, make_shape(1, 6, 6, 2, 3));
}

// Multi-latent attention reads q/k heads of D = nope + rope and v heads of Dv != D (DeepSeek: 192 / 128).
TEST(Attention, ValueHeadDimDiffersForwardMatchesNaive) {
  Rng rng;
  const AttentionShape cases[] = {
      make_shape(1, 31, 3, 3, 12, true, 8),   make_shape(2, 33, 4, 4, 5, true, 7),
      make_shape(1, 127, 2, 2, 24, true, 16), make_shape(1, 70, 4, 2, 6, false, 9),
      make_shape(1, 65, 2, 1, 3, true, 11),   make_shape(1, 1, 1, 1, 4, true, 2)};
  for (DType dt : float_types()) {
    for (const AttentionShape& s : cases) {
      SCOPED_TRACE(fmt::format("{} B={} T={} H={} KV={} D={} Dv={} causal={}", dtype_name(dt), s.batch, s.seq,
                               s.heads, s.kv_heads, s.head_dim, s.dv(), s.causal));
      Tensor qkv = rand_tensor(rng, qkv_shape(s), dt, -2.0, 2.0);
      Tensor out = filled(out_shape(s), dt, std::numeric_limits<double>::quiet_NaN());
      Tensor lse = filled(lse_shape(s), dt, std::numeric_limits<double>::quiet_NaN());
      ops::attention_forward(qkv, s, out, lse, Stream::cpu());
      const Naive ref = naive_attention(host(qkv), s);
      EXPECT_LT(rel_err(out, ref.out), fwd_tol(dt));
      EXPECT_LT(rel_err(lse, ref.lse), fwd_tol(dt));
      Tensor dout = rand_tensor(rng, out_shape(s), dt);
      Tensor dqkv = filled(qkv_shape(s), dt, std::numeric_limits<double>::quiet_NaN());
      ops::attention_backward(dout, qkv, out, lse, s, dqkv, Stream::cpu());
      EXPECT_LT(rel_err(dqkv, naive_attention_backward(host(qkv), host(dout), s)), fwd_tol(dt));
    }
  }
}

TEST(Attention, ValueHeadDimDiffersBackwardMatchesFiniteDifferences) {
  Rng rng;
  check_backward(rng, make_shape(1, 31, 2, 2, 5, true, 3));
  check_backward(rng, make_shape(1, 33, 2, 1, 3, true, 4));
  check_backward(rng, make_shape(1, 127, 1, 1, 3, true, 2));  // two blocks of query rows
  check_backward_per_slice(rng, make_shape(1, 7, 4, 2, 5, true, 3));
  check_backward_per_slice(rng, make_shape(2, 5, 2, 2, 2, false, 6));
}

TEST(Attention, F32BackwardAgreesWithF64) {
  Rng rng;
  const AttentionShape s = make_shape(2, 33, 4, 2, 16);
  Tensor qkv64 = rand_tensor(rng, qkv_shape(s), DType::kF64),
         dout64 = rand_tensor(rng, out_shape(s), DType::kF64);
  Tensor qkv32 = cpu_cast(qkv64, DType::kF32), dout32 = cpu_cast(dout64, DType::kF32);
  qkv64 = cpu_cast(qkv32, DType::kF64);  // same inputs on both paths
  dout64 = cpu_cast(dout32, DType::kF64);
  std::vector<double> grads[2];
  int idx = 0;
  for (DType dt : float_types()) {
    const Tensor& qkv = dt == DType::kF32 ? qkv32 : qkv64;
    const Tensor& dout = dt == DType::kF32 ? dout32 : dout64;
    Tensor out = Tensor::empty(out_shape(s), dt), lse = Tensor::empty(lse_shape(s), dt);
    Tensor dqkv = Tensor::empty(qkv_shape(s), dt);
    ops::attention_forward(qkv, s, out, lse, Stream::cpu());
    ops::attention_backward(dout, qkv, out, lse, s, dqkv, Stream::cpu());
    grads[idx++] = host(dqkv);
  }
  EXPECT_LT(rel_err(grads[0], grads[1]), 1e-5);
}

TEST(Attention, RejectsBadInputs) {
  Rng rng;
  const Stream st = Stream::cpu();
  AttentionShape s = make_shape(1, 4, 6, 4, 8);  // 6 heads do not split into 4 groups
  Tensor qkv = rand_tensor(rng, qkv_shape(s), DType::kF32);
  Tensor out = Tensor::empty(out_shape(s), DType::kF32), lse = Tensor::empty(lse_shape(s), DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::attention_forward(qkv, s, out, lse, st), "multiple of kv_heads");
  s = make_shape(2, 4, 4, 2, 8);
  Tensor qkv_flat = rand_tensor(rng, {8, 64}, DType::kF32);
  out = Tensor::empty(out_shape(s), DType::kF32);
  lse = Tensor::empty(lse_shape(s), DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::attention_forward(qkv_flat, s, out, lse, st),
                      "attention_forward: qkv must be [2, 4, 64]");
  qkv = rand_tensor(rng, qkv_shape(s), DType::kF32);
  Tensor lse64 = Tensor::empty(lse_shape(s), DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::attention_forward(qkv, s, out, lse64, st), "attention_forward: lse must be f32");
  Tensor out_bad = Tensor::empty({2, 4, 24}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::attention_forward(qkv, s, out_bad, lse, st),
                      "attention_forward: out must be [2, 4, 32]");
  Tensor dqkv_bad = Tensor::empty({2, 4, 32}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::attention_backward(out, qkv, out, lse, s, dqkv_bad, st),
                      "attention_backward: dqkv must be [2, 4, 64]");
  Tensor big = rand_tensor(rng, {2, 4, 128}, DType::kF32);
  Tensor strided = big.narrow(2, 0, 64);
  EXPECT_PRIMUS_ERROR(ops::attention_forward(strided, s, out, lse, st), "contiguous");
}

TEST(Attention, ThreadCountDoesNotChangeResults) {
  Rng rng;
  const AttentionShape s = make_shape(2, 130, 6, 2, 16);
  Tensor qkv = rand_tensor(rng, qkv_shape(s), DType::kF32),
         dout = rand_tensor(rng, out_shape(s), DType::kF32);
  expect_thread_count_invariant([&] {
    Tensor out = Tensor::empty(out_shape(s), DType::kF32), lse = Tensor::empty(lse_shape(s), DType::kF32);
    Tensor dqkv = Tensor::empty(qkv_shape(s), DType::kF32);
    ops::attention_forward(qkv, s, out, lse, Stream::cpu());
    ops::attention_backward(dout, qkv, out, lse, s, dqkv, Stream::cpu());
    std::vector<double> all;
    for (const Tensor* t : {&out, &lse, &dqkv}) {
      const auto v = host(*t);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  });
}

// ---- packed sequences (seg_starts): several samples in one row, causal + document mask ----

// A shape with seg_starts built from per-row sample lengths; owns the segment tensor the shape points to.
struct Packed {
  AttentionShape s;
  Tensor seg;
  std::vector<std::vector<int64_t>> lengths;
  Packed(int64_t t, int64_t h, int64_t kv, int64_t d, std::vector<std::vector<int64_t>> lens, int64_t dv = 0)
      : s(make_shape(static_cast<int64_t>(lens.size()), t, h, kv, d, true, dv)),
        seg(ops::attention_segment_starts(lens, t)),
        lengths(std::move(lens)) {
    s.seg_starts = &seg;
  }
  Packed(const Packed&) = delete;  // s points at seg
  std::string str() const {
    std::vector<std::string> rows;
    for (const auto& l : lengths) rows.push_back(fmt::format("{}", fmt::join(l, "+")));
    return fmt::format("T={} H={} KV={} D={} Dv={} samples={}", s.seq, s.heads, s.kv_heads, s.head_dim,
                       s.dv(), fmt::join(rows, " | "));
  }
};

TEST(AttentionPacked, SegmentStartsFromLengths) {
  const Tensor seg = ops::attention_segment_starts({{1, 3, 2}, {4}, {}}, 7);
  ASSERT_EQ(seg.shape(), (Shape{3, 7}));
  const std::vector<int32_t> want = {0, 1, 1, 1, 4, 4, 6,   // last token: padding, a sample of its own
                                     0, 0, 0, 0, 4, 4, 4,   // three padding tokens
                                     0, 0, 0, 0, 0, 0, 0};  // no sample: all padding
  EXPECT_EQ(seg.to_vector<int32_t>(), want);
  EXPECT_PRIMUS_ERROR(ops::attention_segment_starts({{3, 5}}, 7), "does not fit T = 7");
  EXPECT_PRIMUS_ERROR(ops::attention_segment_starts({{0, 5}}, 7), "sample of length 0");
}

TEST(AttentionPacked, ForwardBackwardMatchNaiveMaskedMatrix) {
  Rng rng;
  const Packed cases[] = {{200, 4, 2, 8, {{1, 31, 33, 127}, {127, 33, 1, 31}}},  // 8 padding tokens
                          {70, 3, 1, 5, {{1, 1, 1, 64}, {69}}},
                          {131, 2, 2, 16, {{64, 64}, {65, 1, 1, 64}}},  // boundaries on / next to blocks
                          {97, 4, 4, 6, {{33, 31, 33}}, 9},             // Dv != D
                          {5, 2, 1, 3, {{1, 1, 1, 1, 1}}}};             // every token its own sample
  for (DType dt : float_types()) {
    for (const Packed& c : cases) {
      const AttentionShape& s = c.s;
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dt), c.str()));
      Tensor qkv = rand_tensor(rng, qkv_shape(s), dt, -2.0, 2.0), dout = rand_tensor(rng, out_shape(s), dt);
      Tensor out = filled(out_shape(s), dt, std::numeric_limits<double>::quiet_NaN());
      Tensor lse = filled(lse_shape(s), dt, std::numeric_limits<double>::quiet_NaN());
      ops::attention_forward(qkv, s, out, lse, Stream::cpu());
      const Naive ref = naive_attention(host(qkv), s);
      EXPECT_LT(rel_err(out, ref.out), fwd_tol(dt));
      EXPECT_LT(rel_err(lse, ref.lse), fwd_tol(dt));
      Tensor dqkv = filled(qkv_shape(s), dt, std::numeric_limits<double>::quiet_NaN());
      ops::attention_backward(dout, qkv, out, lse, s, dqkv, Stream::cpu());
      EXPECT_LT(rel_err(dqkv, naive_attention_backward(host(qkv), host(dout), s)), fwd_tol(dt));
    }
  }
}

// Rows [t0, t0 + n) of a [B, T, w] tensor's row b, as a [1, n, w] tensor.
Tensor token_slice(const Tensor& x, int64_t b, int64_t t0, int64_t n) {
  const int64_t t = x.size(1), w = x.size(2);
  const std::vector<double> v = host(x);
  std::vector<double> r(v.begin() + (b * t + t0) * w, v.begin() + (b * t + t0 + n) * w);
  return tensor_of(r, {1, n, w}, x.dtype());
}

// Largest |a - b| over the entries of two equally long vectors.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// The point of packing: out, lse and every gradient of a packed row equal running each sample (and the
// padding) as a sequence of its own. f64; sample lengths 1, 31, 33, 127 and T not a multiple of 64.
TEST(AttentionPacked, EqualsEachSampleSeparately) {
  Rng rng;
  const Packed cases[] = {{200, 4, 2, 16, {{1, 31, 33, 127}, {127, 33, 1, 31}, {31, 1, 127}}},
                          {161, 2, 1, 8, {{33, 127, 1}}, 5}};
  const DType dt = DType::kF64;
  for (const Packed& c : cases) {
    const AttentionShape& s = c.s;
    SCOPED_TRACE(c.str());
    Tensor qkv = rand_tensor(rng, qkv_shape(s), dt, -2.0, 2.0), dout = rand_tensor(rng, out_shape(s), dt);
    Tensor out = Tensor::empty(out_shape(s), dt), lse = Tensor::empty(lse_shape(s), dt);
    Tensor dqkv = Tensor::empty(qkv_shape(s), dt);
    ops::attention_forward(qkv, s, out, lse, Stream::cpu());
    ops::attention_backward(dout, qkv, out, lse, s, dqkv, Stream::cpu());
    const std::vector<double> lse_all = host(lse);
    for (int64_t b = 0; b < s.batch; ++b) {
      std::vector<int64_t> lens = c.lengths[static_cast<size_t>(b)];
      int64_t used = 0;
      for (int64_t l : lens) used += l;
      if (used < s.seq) lens.push_back(s.seq - used);  // the padding sample
      int64_t t0 = 0;
      for (int64_t n : lens) {
        SCOPED_TRACE(fmt::format("row {} sample [{}, {})", b, t0, t0 + n));
        AttentionShape one = make_shape(1, n, s.heads, s.kv_heads, s.head_dim, true, s.v_head_dim);
        Tensor q1 = token_slice(qkv, b, t0, n), g1 = token_slice(dout, b, t0, n);
        Tensor o1 = Tensor::empty(out_shape(one), dt), l1 = Tensor::empty(lse_shape(one), dt);
        Tensor d1 = Tensor::empty(qkv_shape(one), dt);
        ops::attention_forward(q1, one, o1, l1, Stream::cpu());
        ops::attention_backward(g1, q1, o1, l1, one, d1, Stream::cpu());
        EXPECT_LT(max_abs_diff(host(token_slice(out, b, t0, n)), host(o1)), 1e-12);
        EXPECT_LT(max_abs_diff(host(token_slice(dqkv, b, t0, n)), host(d1)), 1e-12);
        std::vector<double> lse_packed;
        for (int64_t h = 0; h < s.heads; ++h)
          for (int64_t i = 0; i < n; ++i) lse_packed.push_back(lse_all[(b * s.heads + h) * s.seq + t0 + i]);
        EXPECT_LT(max_abs_diff(lse_packed, host(l1)), 1e-12);
        t0 += n;
      }
    }
  }
}

// All-zero seg_starts is one sample per row: bitwise the plain causal result.
TEST(AttentionPacked, OneSamplePerRowIsPlainCausal) {
  Rng rng;
  for (DType dt : float_types()) {
    Packed c(130, 4, 2, 16, {{130}, {130}});
    const AttentionShape& s = c.s;
    AttentionShape plain = s;
    plain.seg_starts = nullptr;
    Tensor qkv = rand_tensor(rng, qkv_shape(s), dt), dout = rand_tensor(rng, out_shape(s), dt);
    std::vector<double> res[2];
    for (int k = 0; k < 2; ++k) {
      const AttentionShape& sh = k == 0 ? s : plain;
      Tensor out = Tensor::empty(out_shape(s), dt), lse = Tensor::empty(lse_shape(s), dt);
      Tensor dqkv = Tensor::empty(qkv_shape(s), dt);
      ops::attention_forward(qkv, sh, out, lse, Stream::cpu());
      ops::attention_backward(dout, qkv, out, lse, sh, dqkv, Stream::cpu());
      for (const Tensor* t : {&out, &lse, &dqkv}) {
        const auto v = host(*t);
        res[k].insert(res[k].end(), v.begin(), v.end());
      }
    }
    EXPECT_EQ(res[0], res[1]) << dtype_name(dt);
  }
}

TEST(AttentionPacked, BackwardMatchesFiniteDifferences) {
  Rng rng;
  {
    Packed c(9, 4, 2, 3, {{1, 3, 4}, {2, 7}});  // row 0 ends with one padding token
    check_backward(rng, c.s);
    check_backward_per_slice(rng, c.s);
  }
  {
    Packed c(70, 2, 1, 2, {{1, 31, 33}, {33, 31}});  // across two blocks of query rows
    check_backward(rng, c.s);
  }
  {
    Packed c(11, 2, 2, 5, {{4, 1, 5}}, 3);  // Dv != D
    check_backward_per_slice(rng, c.s);
  }
}

TEST(AttentionPacked, PaddingOutputsAreFinite) {
  Rng rng;
  Packed c(100, 2, 1, 8, {{1}, {37, 31}});  // 99 and 32 padding tokens
  Tensor qkv = rand_tensor(rng, qkv_shape(c.s), DType::kF32, -4.0, 4.0);
  Tensor out = Tensor::empty(out_shape(c.s), DType::kF32), lse = Tensor::empty(lse_shape(c.s), DType::kF32);
  ops::attention_forward(qkv, c.s, out, lse, Stream::cpu());
  EXPECT_EQ(ops::count_nonfinite(out, Stream::cpu()), 0);
  EXPECT_EQ(ops::count_nonfinite(lse, Stream::cpu()), 0);
}

TEST(AttentionPacked, RejectsBadSegments) {
  Rng rng;
  const Stream st = Stream::cpu();
  Packed c(6, 2, 1, 8, {{2, 4}});
  AttentionShape s = c.s;
  Tensor qkv = rand_tensor(rng, qkv_shape(s), DType::kF32);
  Tensor out = Tensor::empty(out_shape(s), DType::kF32), lse = Tensor::empty(lse_shape(s), DType::kF32);
  auto with_seg = [&](const std::vector<int32_t>& v) {
    Tensor seg = Tensor::from_vector(v, {1, 6});
    AttentionShape b = s;
    b.seg_starts = &seg;
    ops::attention_forward(qkv, b, out, lse, st);
  };
  EXPECT_PRIMUS_ERROR(with_seg({1, 1, 2, 2, 2, 2}), "seg_starts[0, 0] must be 0");
  EXPECT_PRIMUS_ERROR(with_seg({0, 0, 2, 2, 2, 1}), "seg_starts[0, 5] = 1");  // back into a closed sample
  EXPECT_PRIMUS_ERROR(with_seg({0, 0, 1, 1, 1, 1}), "seg_starts[0, 2] = 1");  // a start must be its token
  Tensor seg_f = cpu_cast(c.seg, DType::kF32);
  s.seg_starts = &seg_f;
  EXPECT_PRIMUS_ERROR(ops::attention_forward(qkv, s, out, lse, st), "seg_starts must be i32");
  Tensor seg_short = ops::attention_segment_starts({{2, 3}}, 5);
  s.seg_starts = &seg_short;
  EXPECT_PRIMUS_ERROR(ops::attention_forward(qkv, s, out, lse, st), "seg_starts must be [1, 6]");
  s = c.s;
  s.causal = false;
  EXPECT_PRIMUS_ERROR(ops::attention_forward(qkv, s, out, lse, st), "needs causal");
  Tensor dqkv = Tensor::empty(qkv_shape(s), DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::attention_backward(out, qkv, out, lse, s, dqkv, st), "needs causal");
}

TEST(AttentionPacked, ThreadCountDoesNotChangeResults) {
  Rng rng;
  Packed c(200, 6, 2, 16, {{1, 31, 33, 127}, {127, 33, 1}});
  const AttentionShape& s = c.s;
  Tensor qkv = rand_tensor(rng, qkv_shape(s), DType::kF32),
         dout = rand_tensor(rng, out_shape(s), DType::kF32);
  expect_thread_count_invariant([&] {
    Tensor out = Tensor::empty(out_shape(s), DType::kF32), lse = Tensor::empty(lse_shape(s), DType::kF32);
    Tensor dqkv = Tensor::empty(qkv_shape(s), DType::kF32);
    ops::attention_forward(qkv, s, out, lse, Stream::cpu());
    ops::attention_backward(dout, qkv, out, lse, s, dqkv, Stream::cpu());
    std::vector<double> all;
    for (const Tensor* t : {&out, &lse, &dqkv}) {
      const auto v = host(*t);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  });
}

// ---- attention_merge: partial results over key blocks (context parallelism) ----

// Attention of every query over the keys [k0, k1) only, at their global positions (causal: key j is visible
// to query i when j <= i): each row softmax-normalised over the keys it sees there, lse = log sum exp of
// their scaled scores. A row that sees none gets out 0 and lse -inf. Over [0, T) this is naive_attention.
Naive naive_block_attention(const std::vector<double>& qkv, const AttentionShape& s, int64_t k0, int64_t k1) {
  const int64_t B = s.batch, T = s.seq, H = s.heads, KV = s.kv_heads, D = s.head_dim, Dv = s.dv(),
                W = s.qkv_width();
  const double inf = std::numeric_limits<double>::infinity();
  Naive r;
  r.out.assign(static_cast<size_t>(B * T * H * Dv), 0.0);
  r.lse.assign(static_cast<size_t>(B * H * T), -inf);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / (H / KV);
      for (int64_t i = 0; i < T; ++i) {
        const int64_t end = s.causal ? std::min(k1, i + 1) : k1;
        if (end <= k0) continue;  // no visible key in this block
        std::vector<double> sc(static_cast<size_t>(end - k0));
        double mx = -inf;
        for (int64_t j = k0; j < end; ++j) {
          double acc = 0.0;
          for (int64_t e = 0; e < D; ++e)
            acc += qkv[(b * T + i) * W + h * D + e] * qkv[(b * T + j) * W + (H + kh) * D + e];
          sc[j - k0] = static_cast<double>(s.scale) * acc;
          mx = std::max(mx, sc[j - k0]);
        }
        double sum = 0.0;
        for (double v : sc) sum += std::exp(v - mx);
        r.lse[(b * H + h) * T + i] = mx + std::log(sum);
        for (int64_t j = k0; j < end; ++j) {
          const double p = std::exp(sc[j - k0] - mx) / sum;
          for (int64_t e = 0; e < Dv; ++e)
            r.out[((b * T + i) * H + h) * Dv + e] += p * qkv[(b * T + j) * W + (H + KV) * D + kh * Dv + e];
        }
      }
    }
  }
  return r;
}

// Boundaries 0 = c[0] <= c[1] <= ... <= c[blocks] = T of random key blocks (an empty block is possible, and
// certain when T < blocks).
std::vector<int64_t> random_cuts(Rng& rng, int64_t t, int blocks) {
  std::vector<int64_t> c{0, t};
  for (int i = 1; i < blocks; ++i) c.push_back(rng.integer(0, t));
  std::sort(c.begin(), c.end());
  return c;
}

// A block's partial result as tensors of dtype dt. Rows whose lse is -inf get NaN values: a -inf side must
// contribute nothing, whatever it holds (a fully masked row of a real kernel may be 0/0).
std::pair<Tensor, Tensor> part_tensors(const Naive& p, const AttentionShape& s, DType dt) {
  std::vector<double> out = p.out;
  const int64_t T = s.seq, H = s.heads, Dv = s.dv();
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i)
        if (std::isinf(p.lse[(b * H + h) * T + i]))
          for (int64_t e = 0; e < Dv; ++e)
            out[((b * T + i) * H + h) * Dv + e] = std::numeric_limits<double>::quiet_NaN();
  return {tensor_of(out, out_shape(s), dt), tensor_of(p.lse, lse_shape(s), dt)};
}

struct Merged {
  Tensor out, lse;
};

// Folds the parts, in `order`, into a running result that starts at (0, -inf).
Merged merge_parts(const std::vector<Naive>& parts, const std::vector<int>& order, const AttentionShape& s,
                   DType dt) {
  Merged m{filled(out_shape(s), dt, 0.0), filled(lse_shape(s), dt, -std::numeric_limits<double>::infinity())};
  for (int i : order) {
    auto [part, part_lse] = part_tensors(parts[static_cast<size_t>(i)], s, dt);
    ops::attention_merge(m.out, m.lse, part, part_lse, Stream::cpu());
  }
  return m;
}

// -inf exactly where the reference is -inf; the relative error over the other entries below tol.
void expect_lse_near(const Tensor& lse, const std::vector<double>& ref, double tol) {
  const std::vector<double> got = host(lse);
  ASSERT_EQ(got.size(), ref.size());
  std::vector<double> g, r;
  int64_t mismatched = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(ref[i]) && ref[i] < 0) {
      mismatched += !(std::isinf(got[i]) && got[i] < 0);
    } else {
      g.push_back(got[i]);
      r.push_back(ref[i]);
    }
  }
  EXPECT_EQ(mismatched, 0) << "entries that should be -inf";
  EXPECT_LT(rel_err(g, r), tol);
}

int64_t count_neg_inf(const std::vector<double>& v) {
  return std::count_if(v.begin(), v.end(), [](double x) { return std::isinf(x) && x < 0; });
}

struct MergeCase {
  int64_t b, t, h, kv, d;
  bool causal;
  int blocks;
};

const MergeCase kMergeCases[] = {
    {1, 1, 1, 1, 8, true, 2},    {2, 1, 2, 1, 8, false, 3},   {2, 31, 3, 1, 8, true, 3},
    {1, 33, 4, 2, 64, false, 4}, {1, 127, 2, 2, 8, true, 4},  {2, 33, 1, 1, 128, true, 2},
    {1, 31, 4, 4, 64, false, 2}, {1, 127, 3, 3, 64, true, 3}, {2, 31, 2, 1, 128, true, 4}};

// Ring attention's merge: the keys are split into 2..4 blocks, each block's (out, lse) computed on its own,
// folded with attention_merge from (0, -inf); the result is the attention over all keys. Causal blocks leave
// rows with no visible key (lse -inf, NaN values) that must contribute nothing. Merging only the blocks after
// the first one leaves the rows before the first of those keys with no key at all: acc 0 and lse -inf.
TEST(AttentionMerge, KeyBlocksMergeToFullAttention) {
  Rng rng;
  for (DType dt : float_types()) {
    for (const MergeCase& c : kMergeCases) {
      const AttentionShape s = make_shape(c.b, c.t, c.h, c.kv, c.d, c.causal);
      const std::vector<int64_t> cuts = random_cuts(rng, c.t, c.blocks);
      SCOPED_TRACE(fmt::format("{} B={} T={} H={} KV={} D={} causal={} cuts={}", dtype_name(dt), c.b, c.t,
                               c.h, c.kv, c.d, c.causal, fmt::join(cuts, ",")));
      const std::vector<double> qkv = host(rand_tensor(rng, qkv_shape(s), DType::kF64, -2.0, 2.0));
      std::vector<Naive> parts;
      std::vector<int> order;
      int64_t empty_rows = 0;
      for (int k = 0; k < c.blocks; ++k) {
        parts.push_back(naive_block_attention(qkv, s, cuts[k], cuts[k + 1]));
        order.push_back(k);
        empty_rows += count_neg_inf(parts.back().lse);
      }
      if (c.causal && c.t > 1) EXPECT_GT(empty_rows, 0) << "no block left a row without keys";
      const Naive full = naive_attention(qkv, s);
      const Merged m = merge_parts(parts, order, s, dt);
      EXPECT_LT(rel_err(m.out, full.out), fwd_tol(dt));
      expect_lse_near(m.lse, full.lse, fwd_tol(dt));

      if (!c.causal) continue;
      // The blocks after the first: keys [cuts[1], T).
      const Naive later = naive_block_attention(qkv, s, cuts[1], c.t);
      const Merged ml = merge_parts(parts, std::vector<int>(order.begin() + 1, order.end()), s, dt);
      EXPECT_LT(rel_err(ml.out, later.out), fwd_tol(dt));
      expect_lse_near(ml.lse, later.lse, fwd_tol(dt));
      const std::vector<double> out = host(ml.out);
      for (int64_t b = 0; b < c.b; ++b)
        for (int64_t i = 0; i < std::min(cuts[1], c.t); ++i)  // every block -inf: exactly 0
          for (int64_t e = 0; e < c.h * c.d; ++e) ASSERT_EQ(out[(b * c.t + i) * c.h * c.d + e], 0.0);
      EXPECT_EQ(count_neg_inf(host(ml.lse)), count_neg_inf(later.lse));
    }
  }
}

// Any order of the blocks gives the same result up to rounding; swapping the two sides of one merge gives
// bitwise the same result (the formula is symmetric in them).
TEST(AttentionMerge, OrderDoesNotMatter) {
  Rng rng;
  for (DType dt : float_types()) {
    for (const MergeCase& c : kMergeCases) {
      const AttentionShape s = make_shape(c.b, c.t, c.h, c.kv, c.d, c.causal);
      const std::vector<int64_t> cuts = random_cuts(rng, c.t, c.blocks);
      SCOPED_TRACE(fmt::format("{} B={} T={} H={} D={} causal={} cuts={}", dtype_name(dt), c.b, c.t, c.h, c.d,
                               c.causal, fmt::join(cuts, ",")));
      const std::vector<double> qkv = host(rand_tensor(rng, qkv_shape(s), DType::kF64, -2.0, 2.0));
      std::vector<Naive> parts;
      std::vector<int> order;
      for (int k = 0; k < c.blocks; ++k) {
        parts.push_back(naive_block_attention(qkv, s, cuts[k], cuts[k + 1]));
        order.push_back(k);
      }
      const Merged fwd = merge_parts(parts, order, s, dt);
      const double tol = dt == DType::kF64 ? 1e-14 : 1e-6;
      std::vector<int> rev(order.rbegin(), order.rend()), shuffled = order;
      std::shuffle(shuffled.begin(), shuffled.end(), rng.gen());
      for (const std::vector<int>& o : {rev, shuffled}) {
        const Merged m = merge_parts(parts, o, s, dt);
        EXPECT_LT(rel_err(m.out, host(fwd.out)), tol) << "order " << fmt::format("{}", fmt::join(o, ","));
        expect_lse_near(m.lse, host(fwd.lse), tol);
      }
      // One merge, sides swapped: (acc = part 0, part = part 1) vs (acc = part 1, part = part 0).
      auto [p0, l0] = part_tensors(parts[0], s, dt);
      auto [p1, l1] = part_tensors(parts[1], s, dt);
      Tensor a01 = clone(p0), l01 = clone(l0), a10 = clone(p1), l10 = clone(l1);
      ops::attention_merge(a01, l01, p1, l1, Stream::cpu());
      ops::attention_merge(a10, l10, p0, l0, Stream::cpu());
      const std::vector<double> x = host(a01), y = host(a10);
      for (size_t i = 0; i < x.size(); ++i)  // NaN only where both sides had none (then 0 is written)
        ASSERT_TRUE(x[i] == y[i]) << "element " << i << ": " << x[i] << " vs " << y[i];
      EXPECT_EQ(host(l01), host(l10));
    }
  }
}

// The -inf cases exactly: a -inf side leaves the other side as it is (its values and lse), whatever the -inf
// side holds; both -inf gives 0 and -inf. One side far below the other (exp underflows) keeps the larger.
TEST(AttentionMerge, MinusInfinitySidesContributeNothing) {
  Rng rng;
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : float_types()) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t B = 2, T = 5, H = 3, D = 8;
    const Shape os{B, T, H * D}, ls{B, H, T};
    // Per lse entry (b, h, t), indexed q = (b * H + h) * T + t: which side is -inf, by q % 4:
    //   0: acc, 1: part, 2: both, 3: neither (part 1000 below acc: its weight underflows to 0).
    Tensor acc = rand_tensor(rng, os, dt), part = rand_tensor(rng, os, dt);
    Tensor acc_lse = rand_tensor(rng, ls, dt, -3.0, 3.0), part_lse = rand_tensor(rng, ls, dt, -3.0, 3.0);
    std::vector<double> a = host(acc), p = host(part), al = host(acc_lse), pl = host(part_lse);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          const int64_t q = (b * H + h) * T + t, row = ((b * T + t) * H + h) * D;
          if (q % 4 == 0 || q % 4 == 2) {
            al[q] = -inf;
            for (int64_t e = 0; e < D; ++e) a[row + e] = nan;
          }
          if (q % 4 == 1 || q % 4 == 2) {
            pl[q] = -inf;
            for (int64_t e = 0; e < D; ++e) p[row + e] = nan;
          }
          if (q % 4 == 3) pl[q] = al[q] - 1000.0;
        }
      }
    }
    acc = tensor_of(a, os, dt);
    acc_lse = tensor_of(al, ls, dt);
    part = tensor_of(p, os, dt);
    part_lse = tensor_of(pl, ls, dt);
    const std::vector<double> a_in = host(acc), al_in = host(acc_lse), p_in = host(part),
                              pl_in = host(part_lse);
    ops::attention_merge(acc, acc_lse, part, part_lse, Stream::cpu());
    const std::vector<double> a_out = host(acc), al_out = host(acc_lse);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          const int64_t q = (b * H + h) * T + t, row = ((b * T + t) * H + h) * D;
          SCOPED_TRACE(fmt::format("b={} h={} t={} case {}", b, h, t, q % 4));
          const bool part_wins = q % 4 == 0;
          const bool zero = q % 4 == 2;
          EXPECT_EQ(al_out[q], zero ? -inf : part_wins ? pl_in[q] : al_in[q]);
          for (int64_t e = 0; e < D; ++e)
            ASSERT_EQ(a_out[row + e], zero ? 0.0 : part_wins ? p_in[row + e] : a_in[row + e]) << "e=" << e;
        }
      }
    }
  }
}

TEST(AttentionMerge, RejectsBadInputs) {
  Rng rng;
  const Stream st = Stream::cpu();
  const int64_t B = 2, T = 3, H = 4, D = 8;
  Tensor acc = filled({B, T, H * D}, DType::kF32, 0.0);
  Tensor acc_lse = filled({B, H, T}, DType::kF32, -std::numeric_limits<double>::infinity());
  Tensor part = rand_tensor(rng, {B, T, H * D}, DType::kF32),
         part_lse = rand_tensor(rng, {B, H, T}, DType::kF32);
  Tensor part_short = rand_tensor(rng, {B, T, H * D - 8}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::attention_merge(acc, acc_lse, part_short, part_lse, st),
                      "attention_merge: part must be [2, 3, 32]");
  Tensor part_lse_t = rand_tensor(rng, {B, T, H}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::attention_merge(acc, acc_lse, part, part_lse_t, st),
                      "attention_merge: part_lse must be [2, 4, 3]");
  Tensor acc_lse_bad = filled({B, H, T + 1}, DType::kF32, 0.0);
  EXPECT_PRIMUS_ERROR(ops::attention_merge(acc, acc_lse_bad, part, part_lse, st),
                      "attention_merge: acc_lse must be [2, 4, 3]");
  Tensor acc_lse_h5 = filled({B, 5, T}, DType::kF32, 0.0);  // 5 heads do not divide 32
  EXPECT_PRIMUS_ERROR(ops::attention_merge(acc, acc_lse_h5, part, part_lse, st), "H = 5 from acc_lse");
  Tensor part64 = rand_tensor(rng, {B, T, H * D}, DType::kF64),
         part_lse64 = rand_tensor(rng, {B, H, T}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::attention_merge(acc, acc_lse, part64, part_lse64, st),
                      "attention_merge: acc must be f64");
  EXPECT_PRIMUS_ERROR(ops::attention_merge(acc, acc_lse, part, part_lse64, st),
                      "attention_merge: part_lse must be f32");
  Tensor part_bf = rand_tensor(rng, {B, T, H * D}, DType::kBF16);
  EXPECT_PRIMUS_ERROR(ops::attention_merge(acc, acc_lse, part_bf, part_lse, st), "part must be f32 or f64");
  Tensor acc_2d = filled({B * T, H * D}, DType::kF32, 0.0);
  EXPECT_PRIMUS_ERROR(ops::attention_merge(acc_2d, acc_lse, part, part_lse, st),
                      "acc must have 3 dimensions");
  EXPECT_PRIMUS_ERROR(ops::attention_merge(acc, acc_lse, acc, part_lse, st), "must not overlap");
}

TEST(AttentionMerge, ThreadCountDoesNotChangeResults) {
  Rng rng;
  const int64_t B = 2, T = 127, H = 4, D = 128;  // 130k elements: above the parallel grain
  Tensor acc0 = rand_tensor(rng, {B, T, H * D}, DType::kF32),
         part = rand_tensor(rng, {B, T, H * D}, DType::kF32);
  Tensor lse0 = rand_tensor(rng, {B, H, T}, DType::kF32, -4.0, 4.0),
         part_lse = rand_tensor(rng, {B, H, T}, DType::kF32, -4.0, 4.0);
  expect_thread_count_invariant([&] {
    Tensor acc = clone(acc0), lse = clone(lse0);
    ops::attention_merge(acc, lse, part, part_lse, Stream::cpu());
    std::vector<double> all = host(acc);
    const auto l = host(lse);
    all.insert(all.end(), l.begin(), l.end());
    return all;
  });
}

}  // namespace
}  // namespace primus::test
