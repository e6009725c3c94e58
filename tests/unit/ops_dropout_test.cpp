// The position-keyed dropout's CPU reference (ops/dropout.h): the kept fraction and the 1 / (1 - p) scale,
// the mask as a function of the element's place in the whole tensor (a column split reproduces the whole
// tensor's columns), in place, and its key.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/dropout.h"

namespace primus {
namespace {

Tensor ones(int64_t r, int64_t c) {
  return Tensor::from_vector(std::vector<float>(static_cast<size_t>(r * c), 1.0f), {r, c});
}

TEST(Dropout, KeepsAboutOneMinusPAndScales) {
  const int64_t r = 200, c = 500;
  for (float p : {0.05f, 0.3f, 0.9f}) {
    Tensor x = ones(r, c), out = Tensor::empty({r, c}, DType::kF32);
    ops::dropout_apply(x, p, 42, 0, c, out, Stream::cpu());
    int64_t kept = 0;
    for (float v : out.to_vector<float>()) {
      if (v != 0.0f) {
        ++kept;
        EXPECT_FLOAT_EQ(v, 1.0f / (1.0f - p));
      }
    }
    const double frac = static_cast<double>(kept) / static_cast<double>(r * c);
    EXPECT_NEAR(frac, 1.0 - p, 4 * std::sqrt(p * (1 - p) / (r * c))) << p;  // 4 sigma
  }
  Tensor x = ones(3, 7), out = Tensor::empty({3, 7}, DType::kF32);
  ops::dropout_apply(x, 0.0f, 1, 0, 7, out, Stream::cpu());
  EXPECT_EQ(out.to_vector<float>(), x.to_vector<float>());
}

TEST(Dropout, ColumnSplitDrawsTheWholeTensorsMask) {
  const int64_t r = 31, c = 33, parts = 3, w = c / parts;
  std::vector<double> whole(static_cast<size_t>(r * c));
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = 1.0 + static_cast<double>(i);
  Tensor x = Tensor::from_vector(whole, {r, c}), out = Tensor::empty({r, c}, DType::kF64);
  ops::dropout_apply(x, 0.4f, 7, 0, c, out, Stream::cpu());
  const std::vector<double> full = out.to_vector<double>();
  for (int64_t k = 0; k < parts; ++k) {
    std::vector<double> mine;
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = k * w; j < (k + 1) * w; ++j) mine.push_back(whole[static_cast<size_t>(i * c + j)]);
    Tensor xs = Tensor::from_vector(mine, {r, w});
    ops::dropout_apply(xs, 0.4f, 7, k * w, c, xs, Stream::cpu());  // in place
    const std::vector<double> got = xs.to_vector<double>();
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < w; ++j)
        ASSERT_EQ(got[static_cast<size_t>(i * w + j)], full[static_cast<size_t>(i * c + k * w + j)]) << k;
  }
  Tensor other = Tensor::empty({r, c}, DType::kF64);
  ops::dropout_apply(x, 0.4f, 8, 0, c, other, Stream::cpu());
  EXPECT_NE(other.to_vector<double>(), full);  // another key, another mask
}

// Context parallelism: each rank holds chunks r and 2 CP - 1 - r of every sequence, chunk-major
// (parallel/context_parallel.h). With the row map a rank's rows draw the whole batch's mask at their tokens,
// so the CP ranks together drop exactly what one process drops.
TEST(Dropout, ContextParallelChunksDrawTheWholeBatchsMask) {
  const int64_t B = 3, cp = 2, C = 5, T = 2 * cp * C, cols = 33;
  std::vector<double> whole(static_cast<size_t>(B * T * cols));
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = 1.0 + static_cast<double>(i);
  Tensor x = Tensor::from_vector(whole, {B * T, cols}), out = Tensor::empty({B * T, cols}, DType::kF64);
  ops::dropout_apply(x, 0.4f, 11, 0, cols, out, Stream::cpu());
  const std::vector<double> full = out.to_vector<double>();
  for (int64_t r = 0; r < cp; ++r) {
    const int64_t chunks[2] = {r, 2 * cp - 1 - r};
    std::vector<double> mine;  // row (h B + b) C + j = token chunks[h] C + j of sequence b
    for (int h = 0; h < 2; ++h)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < C; ++j)
          for (int64_t c = 0; c < cols; ++c)
            mine.push_back(whole[static_cast<size_t>((b * T + chunks[h] * C + j) * cols + c)]);
    Tensor xs = Tensor::from_vector(mine, {2 * B * C, cols});
    ops::DropoutRows rows;
    rows.chunk = C;
    rows.batch = B;
    rows.seq = T;
    rows.chunks[0] = chunks[0];
    rows.chunks[1] = chunks[1];
    ops::dropout_apply(xs, 0.4f, 11, 0, cols, xs, Stream::cpu(), rows);
    const std::vector<double> got = xs.to_vector<double>();
    size_t k = 0;
    for (int h = 0; h < 2; ++h)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < C; ++j)
          for (int64_t c = 0; c < cols; ++c, ++k)
            ASSERT_EQ(got[k], full[static_cast<size_t>((b * T + chunks[h] * C + j) * cols + c)])
                << "rank " << r << " half " << h << " sequence " << b << " token " << j;
  }
  ops::DropoutRows bad;
  bad.chunk = C;
  bad.batch = B;
  bad.seq = T;
  bad.chunks[1] = 2 * cp;  // past T
  Tensor xs = Tensor::empty({2 * B * C, cols}, DType::kF64);
  EXPECT_THROW(ops::dropout_apply(xs, 0.4f, 11, 0, cols, xs, Stream::cpu(), bad), Error);
}

TEST(Dropout, BadArgumentsAreRefused) {
  Tensor x = ones(2, 3), out = Tensor::empty({2, 3}, DType::kF32);
  EXPECT_THROW(ops::dropout_apply(x, 1.0f, 1, 0, 3, out, Stream::cpu()), Error);
  EXPECT_THROW(ops::dropout_apply(x, 0.1f, 1, 1, 3, out, Stream::cpu()), Error);  // past the whole width
}

}  // namespace
}  // namespace primus
