#include "ops/attention.h"

#include <cmath>
#include <limits>

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

// Full score matrix per (batch, head) with an explicit -inf causal mask, a softmax per row, out = P @ V.
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
          S[i * T + j] = (s.causal && j > i) ? -inf : static_cast<double>(s.scale) * acc;
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
          if (s.causal && j > i) continue;
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

}  // namespace
}  // namespace primus::test
