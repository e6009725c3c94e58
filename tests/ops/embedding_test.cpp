#include "ops/embedding.h"
#include "ops/optimizer.h"

#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "op_test_util.h"

namespace primus::test {
namespace {

Tensor random_tokens(Rng& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(rng.integer(0, vocab - 1));
  return Tensor::from_vector(ids, {n});
}

TEST(Embedding, ForwardGathersRows) {
  Rng rng;
  const std::tuple<int64_t, int64_t, int64_t> sizes[] = {
      {1, 1, 1}, {3, 5, 7}, {127, 31, 33}, {64, 1000, 64}, {4096, 100, 32}};
  for (DType dt : float_types()) {
    for (auto [n, vocab, d] : sizes) {
      Tensor tok = random_tokens(rng, n, vocab), table = rand_tensor(rng, {vocab, d}, dt);
      Tensor out = Tensor::empty({n, d}, dt);
      ops::embedding_forward(tok, table, out, Stream::cpu());
      const auto ids = tok.to_vector<int32_t>();
      const auto t = host(table), o = host(out);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t e = 0; e < d; ++e) ASSERT_EQ(o[i * d + e], t[ids[i] * d + e]) << i << "," << e;
    }
  }
}

// The rows a pending AdamW step will leave, looked up without storing them: the same values as running the
// reference AdamW over the whole table and then looking up (every dtype; odd sizes; repeated ids).
TEST(Embedding, ForwardUpdatedEqualsUpdateThenLookup) {
  Rng rng;
  const std::tuple<int64_t, int64_t, int64_t> sizes[] = {
      {1, 1, 1}, {127, 31, 33}, {33, 127, 31}, {1000, 33, 64}};
  ops::AdamWParams p;
  p.lr = 1e-2f;
  p.beta1 = 0.9f;
  p.beta2 = 0.95f;
  p.eps = 1e-8f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.5f;
  p.step = 2;
  for (DType dt : float_types()) {
    for (auto [n, vocab, d] : sizes) {
      Tensor tok = random_tokens(rng, n, vocab);
      Tensor w = rand_tensor(rng, {vocab, d}, dt), g = rand_tensor(rng, {vocab, d}, dt);
      Tensor m = rand_tensor(rng, {vocab, d}, dt, -0.1, 0.1), v = rand_tensor(rng, {vocab, d}, dt, 0.0, 0.01);
      Tensor out = Tensor::empty({n, d}, dt);
      ops::embedding_forward_updated(tok, w, g, m, v, p, out, Stream::cpu());
      const std::vector<double> before = host(w);
      Tensor copy = Tensor::empty({vocab, d}, dt);
      ops::adamw_step(w, g, m, v, p, &copy, Stream::cpu());
      Tensor expect = Tensor::empty({n, d}, dt);
      ops::embedding_forward(tok, copy, expect, Stream::cpu());
      ASSERT_EQ(host(out), host(expect)) << dtype_name(dt) << " n=" << n << " V=" << vocab << " D=" << d;
      ASSERT_NE(host(w), before);  // the step changed the table, so the check above has teeth
    }
  }
  // Out-of-range ids are refused like the plain lookup.
  Tensor bad = Tensor::from_vector(std::vector<int32_t>{0, 5}, {2});
  Tensor w = Tensor::zeros({5, 3}, DType::kF32), o = Tensor::empty({2, 3}, DType::kF32);
  EXPECT_THROW(ops::embedding_forward_updated(bad, w, w, w, w, p, o, Stream::cpu()), Error);
}

TEST(Embedding, BackwardAccumulatesScatterAndMatchesFiniteDifferences) {
  Rng rng;
  const int64_t n = 37, vocab = 7, d = 5;  // few ids: many repeats
  const DType dt = DType::kF64;
  Tensor tok = random_tokens(rng, n, vocab), table = rand_tensor(rng, {vocab, d}, dt);
  Tensor out = Tensor::empty({n, d}, dt), dout = rand_tensor(rng, {n, d}, dt);
  const auto w = host(dout);
  auto forward = [&] {
    ops::embedding_forward(tok, table, out, Stream::cpu());
    return host(out);
  };
  Tensor start = rand_tensor(rng, {vocab, d}, dt);
  Tensor dtable = clone(start);
  ops::embedding_backward(tok, dout, dtable, Stream::cpu());
  std::vector<double> g = host(dtable), s0 = host(start);
  for (size_t i = 0; i < g.size(); ++i) g[i] -= s0[i];  // accumulated on top of the start values
  EXPECT_LT(fd_rel_error(rng, table, g, forward, w), kGradTol);
  // Naive scatter in token order.
  std::vector<double> ref = s0;
  const auto ids = tok.to_vector<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = 0; e < d; ++e) ref[ids[i] * d + e] += w[i * d + e];
  EXPECT_LT(rel_err(dtable, ref), 1e-15);
}

TEST(Embedding, BackwardIsDeterministicAcrossThreadCounts) {
  Rng rng;
  const int64_t n = 2048, vocab = 50, d = 192;
  Tensor tok = random_tokens(rng, n, vocab), dout = rand_tensor(rng, {n, d}, DType::kF32);
  std::vector<float> results[3];
  const int threads[] = {1, 2, 3};
  const int saved = omp_get_max_threads();
  for (int k = 0; k < 3; ++k) {
    omp_set_num_threads(threads[k]);
    Tensor dtable = Tensor::zeros({vocab, d}, DType::kF32);
    ops::embedding_backward(tok, dout, dtable, Stream::cpu());
    results[k] = dtable.to_vector<float>();
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), results[0].size() * 4), 0);
  EXPECT_EQ(std::memcmp(results[0].data(), results[2].data(), results[0].size() * 4), 0);
}

TEST(Embedding, RejectsOutOfRangeTokensNamingIdAndPosition) {
  Rng rng;
  const Stream s = Stream::cpu();
  Tensor table = rand_tensor(rng, {10, 4}, DType::kF32), out = Tensor::empty({5, 4}, DType::kF32);
  Tensor bad = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 10, 4}, {5});
  EXPECT_PRIMUS_ERROR(ops::embedding_forward(bad, table, out, s),
                      "token id 10 at position 3 is out of range [0, 10)");
  Tensor neg = Tensor::from_vector(std::vector<int32_t>{-1, 2, 3, 0, 4}, {5});
  EXPECT_PRIMUS_ERROR(ops::embedding_forward(neg, table, out, s), "token id -1 at position 0");
  Tensor dtable = Tensor::zeros({10, 4}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::embedding_backward(bad, out, dtable, s),
                      "embedding_backward: token id 10 at position 3");
  EXPECT_EQ(host(dtable), std::vector<double>(40, 0.0));  // nothing written before the check failed
  Tensor tok64 = Tensor::zeros({5}, DType::kI64);
  EXPECT_PRIMUS_ERROR(ops::embedding_forward(tok64, table, out, s), "embedding_forward: tokens must be i32");
  Tensor ok = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 0, 4}, {5});
  Tensor out_bad = Tensor::empty({5, 3}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::embedding_forward(ok, table, out_bad, s), "embedding_forward: out must be [5, 4]");
  Tensor dout64 = Tensor::empty({5, 4}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::embedding_backward(ok, dout64, dtable, s), "embedding_backward: dout must be f32");
}

// ---------------------------------------------------------------------------------------------------------------
// Vocabulary-sharded table: shard k holds rows [b[k], b[k + 1]). Its lookup is the unsharded lookup where the
// id is its own and zero elsewhere (so the shards' outputs sum to the unsharded one), and its backward is
// the matching rows of the unsharded backward, bitwise (the same additions in the same order).

std::vector<int64_t> shard_bounds(Rng& rng, int64_t vocab, int64_t shards) {
  std::vector<int64_t> b{0};
  for (int64_t k = 1; k < shards; ++k) b.push_back(rng.integer(b.back() + 1, vocab - (shards - k)));
  b.push_back(vocab);
  return b;
}

TEST(Embedding, ShardedEqualsSlicesOfUnsharded) {
  Rng rng;
  const std::tuple<int64_t, int64_t, int64_t> sizes[] = {
      {1, 3, 1}, {127, 31, 33}, {33, 127, 31}, {1000, 7, 5}};
  for (DType dt : float_types()) {
    for (auto [n, vocab, d] : sizes) {
      for (int64_t shards : {2, 3}) {
        const std::vector<int64_t> b = shard_bounds(rng, vocab, shards);
        SCOPED_TRACE(
            fmt::format("{} n={} V={} D={} bounds={}", dtype_name(dt), n, vocab, d, fmt::join(b, ",")));
        Tensor tok = random_tokens(rng, n, vocab), table = rand_tensor(rng, {vocab, d}, dt);
        const auto ids = tok.to_vector<int32_t>();
        Tensor full = Tensor::empty({n, d}, dt);
        ops::embedding_forward(tok, table, full, Stream::cpu());
        Tensor dout = rand_tensor(rng, {n, d}, dt), start = rand_tensor(rng, {vocab, d}, dt);
        Tensor dfull = clone(start);
        ops::embedding_backward(tok, dout, dfull, Stream::cpu());
        const auto f = host(full), df = host(dfull), st = host(start);
        std::vector<double> sum(static_cast<size_t>(n * d), 0.0);
        for (int64_t k = 0; k < shards; ++k) {
          const int64_t lo = b[k], rows = b[k + 1] - b[k];
          Tensor shard = clone(table.slice(lo, lo + rows));
          Tensor out = filled({n, d}, dt, std::numeric_limits<double>::quiet_NaN());
          ops::embedding_forward(tok, shard, out, Stream::cpu(), lo, vocab);
          const auto o = host(out);
          for (int64_t i = 0; i < n; ++i) {
            const bool mine = ids[i] >= lo && ids[i] < lo + rows;
            for (int64_t e = 0; e < d; ++e) {
              ASSERT_EQ(o[i * d + e], mine ? f[i * d + e] : 0.0) << "shard " << k << " position " << i;
              sum[i * d + e] += o[i * d + e];
            }
          }
          Tensor dshard = clone(start.slice(lo, lo + rows));
          ops::embedding_backward(tok, dout, dshard, Stream::cpu(), lo, vocab);
          const std::vector<double> expect(df.begin() + lo * d, df.begin() + (lo + rows) * d);
          ASSERT_EQ(host(dshard), expect) << "shard " << k;
          // A shard no id falls in keeps its start values.
          const std::vector<double> before(st.begin() + lo * d, st.begin() + (lo + rows) * d);
          if (std::none_of(ids.begin(), ids.end(), [&](int32_t id) { return id >= lo && id < lo + rows; })) {
            EXPECT_EQ(host(dshard), before);
          }
        }
        EXPECT_EQ(sum, f);
      }
    }
  }
}

// The defaults are the unsharded op, and so are vocab_begin = 0, vocab_total = V spelled out.
TEST(Embedding, ShardingDefaultsAreTheUnshardedOp) {
  Rng rng;
  const int64_t n = 127, vocab = 31, d = 33;
  Tensor tok = random_tokens(rng, n, vocab), table = rand_tensor(rng, {vocab, d}, DType::kF32);
  Tensor a = Tensor::empty({n, d}, DType::kF32), b = Tensor::empty({n, d}, DType::kF32);
  ops::embedding_forward(tok, table, a, Stream::cpu());
  ops::embedding_forward(tok, table, b, Stream::cpu(), 0, vocab);
  EXPECT_EQ(host(a), host(b));
  ops::embedding_forward(tok, table, b, Stream::cpu(), 0, -1);
  EXPECT_EQ(host(a), host(b));
  Tensor dout = rand_tensor(rng, {n, d}, DType::kF32);
  Tensor g1 = Tensor::zeros({vocab, d}, DType::kF32), g2 = Tensor::zeros({vocab, d}, DType::kF32);
  ops::embedding_backward(tok, dout, g1, Stream::cpu());
  ops::embedding_backward(tok, dout, g2, Stream::cpu(), 0, vocab);
  EXPECT_EQ(host(g1), host(g2));
}

TEST(Embedding, ShardedRejectsIdsOutsideTheVocabulary) {
  Rng rng;
  const Stream s = Stream::cpu();
  // Rows [4, 8) of a vocabulary of 12.
  Tensor shard = rand_tensor(rng, {4, 3}, DType::kF32), out = Tensor::empty({4, 3}, DType::kF32);
  Tensor other = Tensor::from_vector(std::vector<int32_t>{0, 11, 5, 3}, {4});  // other shards' ids are fine
  ops::embedding_forward(other, shard, out, s, 4, 12);
  Tensor bad = Tensor::from_vector(std::vector<int32_t>{5, 0, 12, 3}, {4});
  EXPECT_PRIMUS_ERROR(ops::embedding_forward(bad, shard, out, s, 4, 12),
                      "embedding_forward: token id 12 at position 2 is out of range [0, 12)");
  Tensor neg = Tensor::from_vector(std::vector<int32_t>{5, -1, 1, 3}, {4});
  EXPECT_PRIMUS_ERROR(ops::embedding_forward(neg, shard, out, s, 4, 12), "token id -1 at position 1");
  Tensor dshard = Tensor::zeros({4, 3}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::embedding_backward(bad, out, dshard, s, 4, 12),
                      "embedding_backward: token id 12 at position 2 is out of range [0, 12)");
  EXPECT_EQ(host(dshard), std::vector<double>(12, 0.0));
  // The table's rows must lie in the vocabulary; -1 (the table's own rows) leaves no room for an offset.
  EXPECT_PRIMUS_ERROR(ops::embedding_forward(other, shard, out, s, 9, 12),
                      "embedding_forward: the table's rows [9, 13) must lie in the vocabulary [0, 12)");
  EXPECT_PRIMUS_ERROR(ops::embedding_backward(other, out, dshard, s, 4, -1),
                      "embedding_backward: the table's rows [4, 8) must lie in the vocabulary [0, 4)");
  EXPECT_PRIMUS_ERROR(ops::embedding_forward(other, shard, out, s, -2, 12), "the table's rows [-2, 2)");
}

}  // namespace
}  // namespace primus::test
