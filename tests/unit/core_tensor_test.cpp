#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "core/philox.h"
#include "core/tensor.h"

using namespace primus;

TEST(Tensor, EmptyHasShapeStridesAndBytes) {
  Tensor t = Tensor::empty({3, 5, 7}, DType::kBF16);
  EXPECT_EQ(t.numel(), 105);
  EXPECT_EQ(t.nbytes(), 210u);
  EXPECT_EQ(t.strides(), (Shape{35, 7, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.describe(), "bf16[3, 5, 7] on cpu");
}

TEST(Tensor, ViewInfersOneDimensionAndRejectsMismatch) {
  Tensor t = Tensor::zeros({4, 6}, DType::kF32);
  EXPECT_EQ(t.view({-1, 3}).shape(), (Shape{8, 3}));
  EXPECT_THROW(t.view({5, 5}), Error);
  EXPECT_THROW(t.view({-1, -1}), Error);
}

TEST(Tensor, SliceAndNarrowShareStorage) {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i);
  Tensor t = Tensor::from_vector(v, {4, 3});
  Tensor rows = t.slice(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(rows.to_vector<float>()[0], 3.0f);
  Tensor col = t.narrow(1, 1, 1);
  EXPECT_FALSE(col.is_contiguous());
  EXPECT_EQ(col.data<float>()[0], 1.0f);
  rows.data<float>()[0] = 42.0f;
  EXPECT_EQ(t.data<float>()[3], 42.0f);
  EXPECT_THROW(t.narrow(1, 2, 2), Error);
}

TEST(Tensor, TypedAccessChecksDtype) {
  Tensor t = Tensor::zeros({2}, DType::kF32);
  EXPECT_THROW(t.data<double>(), Error);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 is exactly half way between two bf16 values: ties go to the even one (1.0).
  EXPECT_EQ(float_to_bf16(1.00390625f).bits, 0x3f80);
  EXPECT_EQ(float_to_bf16(1.01171875f).bits, 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(-3.5f)), -3.5f);
}

TEST(DType, NamesRoundTrip) {
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64}) {
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  }
  EXPECT_THROW(dtype_from_name("float128"), ConfigError);
}

TEST(Philox, KnownAnswerAndStatistics) {
  // Random123's published known-answer vector for philox4x32-10 with counter and key all zero.
  Philox4 r = philox4x32(0, 0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = philox_normal(12345, i);
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.02);
  EXPECT_EQ(philox_normal(7, 99), philox_normal(7, 99));
  EXPECT_NE(philox_normal(7, 99), philox_normal(8, 99));
}
