#include "ops/embedding.h"

#include <omp.h>

#include <cstring>

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

}  // namespace
}  // namespace primus::test
