// The row-sparse embedding gradient (ops/row_sparse_grad.h) against the dense ops it stands in for: the
// backward's slot rows bitwise the dense gradient's rows over several accumulating calls, AdamW and the
// updated lookup bitwise the dense ones with the densified gradient, clearing, and the errors.
#include "ops/row_sparse_grad.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "op_test_util.h"
#include "ops/embedding.h"

namespace primus::test {
namespace {

Tensor tokens_in(Rng& rng, int64_t n, int64_t lo, int64_t hi) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(rng.integer(lo, hi - 1));
  return Tensor::from_vector(ids, {n});
}

Tensor dense_of(const ops::RowSparseGrad& g) {
  Tensor d = Tensor::empty({g.vocab(), g.dim()}, DType::kF32);
  ops::row_sparse_to_dense(g, d, Stream::cpu());
  return d;
}

void expect_bitwise(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.numel(), b.numel()) << what;
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::memcmp(&x[i], &y[i], sizeof(float)), 0)
        << what << ": element " << i << " " << x[i] << " vs " << y[i];
}

// Two micro-batches (the second touching new rows too), odd sizes: every slot row is bitwise the dense
// gradient's row, slots are handed out in ascending row order per call, and the map is consistent.
TEST(RowSparseGrad, BackwardEqualsDenseRowsOverAccumulatingCalls) {
  Rng rng;
  const std::tuple<int64_t, int64_t, int64_t> sizes[] = {
      {1, 1, 1}, {31, 127, 33}, {127, 33, 31}, {33, 1000, 64}, {4096, 300, 5}};
  for (auto [n, vocab, d] : sizes) {
    const int64_t capacity = std::min(vocab, 2 * n);
    ops::RowSparseGrad g = ops::row_sparse_grad(vocab, d, capacity, Stream::cpu());
    Tensor dense = Tensor::zeros({vocab, d}, DType::kF32);
    std::set<int32_t> seen;
    for (int call = 0; call < 2; ++call) {
      // The first call uses the lower half of the ids, the second all of them (new rows after old slots).
      Tensor tok = tokens_in(rng, n, 0, call == 0 ? std::max<int64_t>(1, vocab / 2) : vocab);
      Tensor dout = rand_tensor(rng, {n, d}, DType::kF32);
      const int32_t before = g.count.to_vector<int32_t>()[0];
      ops::embedding_backward_sparse(tok, dout, g, Stream::cpu());
      ops::embedding_backward(tok, dout, dense, Stream::cpu());
      std::set<int32_t> fresh;
      for (int32_t id : tok.to_vector<int32_t>())
        if (!seen.count(id)) fresh.insert(id);
      seen.insert(fresh.begin(), fresh.end());
      const auto row_of = g.row_of.to_vector<int32_t>();
      ASSERT_EQ(g.count.to_vector<int32_t>()[0], static_cast<int32_t>(seen.size()));
      int32_t k = before;
      for (int32_t r : fresh)
        ASSERT_EQ(row_of[static_cast<size_t>(k++)], r) << "slots in ascending row order";
    }
    const auto slot_of = g.slot_of.to_vector<int32_t>();
    for (int64_t r = 0; r < vocab; ++r) ASSERT_EQ(slot_of[r] >= 0, seen.count(static_cast<int32_t>(r)) == 1);
    expect_bitwise(dense_of(g), dense, fmt::format("N {} V {} D {}", n, vocab, d));
  }
}

// A vocabulary shard (rows [vocab_begin, vocab_begin + V) of a larger vocabulary): other shards' ids take
// no slot, and the rows equal the sharded dense backward's.
TEST(RowSparseGrad, ShardedBackwardEqualsShardedDense) {
  Rng rng;
  const int64_t vocab = 127, d = 33, n = 255, begin = 127, total = 381;
  ops::RowSparseGrad g = ops::row_sparse_grad(vocab, d, vocab, Stream::cpu());
  Tensor dense = Tensor::zeros({vocab, d}, DType::kF32);
  Tensor tok = tokens_in(rng, n, 0, total), dout = rand_tensor(rng, {n, d}, DType::kF32);
  ops::embedding_backward_sparse(tok, dout, g, Stream::cpu(), begin, total);
  ops::embedding_backward(tok, dout, dense, Stream::cpu(), begin, total);
  expect_bitwise(dense_of(g), dense, "sharded");
  std::set<int32_t> mine;
  for (int32_t id : tok.to_vector<int32_t>())
    if (id >= begin && id < begin + vocab) mine.insert(id);
  EXPECT_EQ(g.count.to_vector<int32_t>()[0], static_cast<int32_t>(mine.size()));
}

TEST(RowSparseGrad, ClearFreesEverySlotAndZeroesTheRows) {
  Rng rng;
  ops::RowSparseGrad g = ops::row_sparse_grad(100, 31, 64, Stream::cpu());
  ops::embedding_backward_sparse(tokens_in(rng, 64, 0, 100), rand_tensor(rng, {64, 31}, DType::kF32), g,
                                 Stream::cpu());
  ops::row_sparse_clear(g, Stream::cpu());
  EXPECT_EQ(g.count.to_vector<int32_t>()[0], 0);
  for (int32_t s : g.slot_of.to_vector<int32_t>()) ASSERT_EQ(s, -1);
  for (float x : g.rows.to_vector<float>()) ASSERT_EQ(x, 0.0f);
  // And it fills again from slot 0.
  Tensor tok = Tensor::from_vector<int32_t>({7, 3, 7}, {3});
  ops::embedding_backward_sparse(tok, rand_tensor(rng, {3, 31}, DType::kF32), g, Stream::cpu());
  EXPECT_EQ(g.row_of.slice(0, 2).to_vector<int32_t>(), (std::vector<int32_t>{3, 7}));
}

// Data parallelism reserves the union of the ranks' rows before the backward: the reserved rows take slots
// in ascending order (repeats and order of the list do not matter), the backward then adds into them -- a
// rank whose tokens touch only some of them leaves the others' slots zero -- and the rows equal the dense
// backward's. A row outside the reservation still gets the next slot; too many rows are refused.
TEST(RowSparseGrad, ReservedRowsTakeAscendingSlotsAndTheBackwardAddsIntoThem) {
  Rng rng;
  const Stream s = Stream::cpu();
  const int64_t vocab = 127, d = 33;
  ops::RowSparseGrad g = ops::row_sparse_grad(vocab, d, 40, s);
  ops::row_sparse_reserve(Tensor::from_vector<int32_t>({90, 5, 31, 5, 126, 0}, {6}), g, s);
  EXPECT_EQ(g.count.to_vector<int32_t>()[0], 5);
  EXPECT_EQ(g.row_of.slice(0, 5).to_vector<int32_t>(), (std::vector<int32_t>{0, 5, 31, 90, 126}));
  for (float x : g.rows.to_vector<float>()) ASSERT_EQ(x, 0.0f) << "a reservation adds nothing";
  Tensor tok = Tensor::from_vector<int32_t>({31, 5, 31, 90}, {4});
  Tensor dout = rand_tensor(rng, {4, d}, DType::kF32);
  Tensor dense = Tensor::zeros({vocab, d}, DType::kF32);
  ops::embedding_backward_sparse(tok, dout, g, s);
  ops::embedding_backward(tok, dout, dense, s);
  EXPECT_EQ(g.count.to_vector<int32_t>()[0], 5) << "the backward's rows were all reserved";
  expect_bitwise(dense_of(g), dense, "reserved");
  const auto rows = g.rows.to_vector<float>();
  for (int64_t c = 0; c < d; ++c)
    ASSERT_EQ(rows[static_cast<size_t>(4 * d + c)], 0.0f) << "row 126: untouched";
  // A row the reservation left out comes after the reserved ones.
  ops::embedding_backward_sparse(Tensor::from_vector<int32_t>({7}, {1}),
                                 rand_tensor(rng, {1, d}, DType::kF32), g, s);
  EXPECT_EQ(g.row_of.slice(5, 6).to_vector<int32_t>(), (std::vector<int32_t>{7}));
  std::vector<int32_t> many(40);
  for (int32_t i = 0; i < 40; ++i) many[static_cast<size_t>(i)] = 50 + i;
  EXPECT_PRIMUS_ERROR(ops::row_sparse_reserve(Tensor::from_vector(many, {40}), g, s),
                      "46 distinct table rows this step, more than the gradient's 40 slots");
  EXPECT_PRIMUS_ERROR(ops::row_sparse_reserve(Tensor::from_vector<int32_t>({127}, {1}), g, s),
                      "out of range [0, 127)");
}

TEST(RowSparseGrad, RefusesMoreRowsThanSlotsAndBadIds) {
  Rng rng;
  const Stream s = Stream::cpu();
  ops::RowSparseGrad g = ops::row_sparse_grad(50, 8, 4, s);
  Tensor five = Tensor::from_vector<int32_t>({0, 1, 2, 3, 4}, {5});
  Tensor d5 = rand_tensor(rng, {5, 8}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::embedding_backward_sparse(five, d5, g, s),
                      "5 distinct table rows this step, more than the gradient's 4 slots");
  Tensor bad = Tensor::from_vector<int32_t>({0, 50}, {2});
  Tensor d2 = rand_tensor(rng, {2, 8}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::embedding_backward_sparse(bad, d2, g, s), "token id 50 at position 1");
  EXPECT_PRIMUS_ERROR(ops::row_sparse_grad(10, 4, 11, s), "1 <= capacity <= vocab");
}

ops::AdamWParams adam_params() {
  ops::AdamWParams p;
  p.lr = 1e-2f;
  p.beta1 = 0.9f;
  p.beta2 = 0.95f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.5f;
  p.step = 3;
  return p;
}

// A span that starts mid-row and runs past V x D (a region's padding): bitwise the dense update with the
// densified gradient (zeros in the padding), f32 master with a bf16 copy and the (hi, rem) split master.
TEST(RowSparseGrad, AdamWEqualsDenseWithTheDensifiedGradient) {
  Rng rng;
  const int64_t vocab = 127, d = 33, pad = 40, first = 17;
  ops::RowSparseGrad g = ops::row_sparse_grad(vocab, d, 64, Stream::cpu());
  ops::embedding_backward_sparse(tokens_in(rng, 64, 0, vocab), rand_tensor(rng, {64, d}, DType::kF32), g,
                                 Stream::cpu());
  const int64_t n = vocab * d + pad - first;
  Tensor full = Tensor::zeros({vocab * d + pad}, DType::kF32);
  Tensor dense = dense_of(g);
  std::copy_n(dense.data<float>(), vocab * d, full.data<float>());
  Tensor grad = full.slice(first, first + n);
  const ops::AdamWParams p = adam_params();

  Tensor w = rand_tensor(rng, {n}, DType::kF32), m = rand_tensor(rng, {n}, DType::kF32, -0.1, 0.1),
         v = rand_tensor(rng, {n}, DType::kF32, 0.0, 0.01);
  Tensor w2 = clone(w), m2 = clone(m), v2 = clone(v);
  Tensor c = Tensor::empty({n}, DType::kBF16), c2 = Tensor::empty({n}, DType::kBF16);
  ops::adamw_step_sparse(w, g, first, m, v, p, &c, Stream::cpu());
  ops::adamw_step(w2, grad, m2, v2, p, &c2, Stream::cpu());
  expect_bitwise(w, w2, "master");
  expect_bitwise(m, m2, "m");
  expect_bitwise(v, v2, "v");
  EXPECT_EQ(std::memcmp(c.data_ptr(), c2.data_ptr(), c.nbytes()), 0) << "bf16 copy";

  Tensor hi = Tensor::empty({n}, DType::kBF16), rem = Tensor::empty({n}, DType::kI16);
  ops::master_split(w, hi, &rem, Stream::cpu());
  Tensor hi2 = clone(hi), rem2 = clone(rem);
  ops::adamw_step_split_sparse(hi, rem, g, first, m, v, p, Stream::cpu());
  ops::adamw_step_split(hi2, rem2, grad, m2, v2, p, Stream::cpu());
  EXPECT_EQ(std::memcmp(hi.data_ptr(), hi2.data_ptr(), hi.nbytes()), 0) << "hi";
  EXPECT_EQ(std::memcmp(rem.data_ptr(), rem2.data_ptr(), rem.nbytes()), 0) << "rem";
  expect_bitwise(m, m2, "split m");
}

TEST(RowSparseGrad, UpdatedLookupEqualsDense) {
  Rng rng;
  const int64_t vocab = 127, d = 31, n = 33;
  ops::RowSparseGrad g = ops::row_sparse_grad(vocab, d, 64, Stream::cpu());
  ops::embedding_backward_sparse(tokens_in(rng, 64, 0, vocab), rand_tensor(rng, {64, d}, DType::kF32), g,
                                 Stream::cpu());
  Tensor grad = dense_of(g);
  Tensor w = rand_tensor(rng, {vocab, d}, DType::kF32),
         m = rand_tensor(rng, {vocab, d}, DType::kF32, -0.1, 0.1),
         v = rand_tensor(rng, {vocab, d}, DType::kF32, 0.0, 0.01);
  Tensor tok = tokens_in(rng, n, 0, vocab);
  const ops::AdamWParams p = adam_params();
  Tensor out = Tensor::empty({n, d}, DType::kF32), out2 = Tensor::empty({n, d}, DType::kF32);
  ops::embedding_forward_updated_sparse(tok, w, g, m, v, p, out, Stream::cpu());
  ops::embedding_forward_updated(tok, w, grad, m, v, p, out2, Stream::cpu());
  expect_bitwise(out, out2, "updated lookup");
  Tensor hi = Tensor::empty({vocab, d}, DType::kBF16), rem = Tensor::empty({vocab, d}, DType::kI16);
  ops::master_split(w, hi, &rem, Stream::cpu());
  ops::embedding_forward_updated_split_sparse(tok, hi, rem, g, m, v, p, out, Stream::cpu());
  ops::embedding_forward_updated_split(tok, hi, rem, grad, m, v, p, out2, Stream::cpu());
  expect_bitwise(out, out2, "updated lookup (split master)");
}

}  // namespace
}  // namespace primus::test
