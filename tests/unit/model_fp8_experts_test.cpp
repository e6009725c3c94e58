// FP8 MoE experts (model/fp8_experts.h) on the CPU: every recipe's grouped forward and input gradient stay
// within FP8's rounding of the f32 grouped GEMM they replace, per expert, on uneven routed counts (one expert
// without tokens, counts that are not multiples of 16) with padding rows past them written as zeros; each
// expert's rows are exactly the FP8 GEMM of its own casts (the slicing of a cast operand is checked against
// casting the slice); delayed scaling records the amax of the routed rows only.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "fp8_test_util.h"
#include "model/fp8_experts.h"
#include "model/fp8_linear.h"
#include "ops/fp8.h"
#include "ops/grouped_gemm.h"

namespace primus {
namespace {

using fp8test::randn;
using fp8test::recipe;

Tensor filled(const Shape& shape, float v) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = v;
  return t;
}

// ||a - b|| / ||b|| over rows [begin, end).
double rel_err_rows(const Tensor& a, const Tensor& b, int64_t begin, int64_t end) {
  const int64_t c = a.size(1);
  const float *x = a.data<float>(), *y = b.data<float>();
  double num = 0, den = 0;
  for (int64_t i = begin * c; i < end * c; ++i) {
    num += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    den += static_cast<double>(y[i]) * y[i];
  }
  return std::sqrt(num / den);
}

StepContext cpu_ctx(Fp8State* st) {
  StepContext ctx;
  ctx.stream = Stream::cpu();
  ctx.act_dtype = DType::kF32;
  ctx.fp8 = st;
  return ctx;
}

// The shapes here are small: FP8 at any row count (the launch-bound rule is tested on its own below).
class Fp8Experts : public ::testing::Test {
 protected:
  void SetUp() override { set_fp8_expert_min_rows(0); }
  void TearDown() override { set_fp8_expert_min_rows(kFp8ExpertMinMeanRows); }
};

struct Problem {
  std::vector<int64_t> counts = {31, 0, 128, 33, 127};  // 319 routed rows
  int64_t rows = 323;                                   // 4 padding rows past them
  int64_t E = 5, N = 256, K = 384;                      // K and N multiples of 128 (blockwise)
};

TEST_F(Fp8Experts, EveryRecipeStaysWithinFp8RoundingPerExpertAndZeroesThePadding) {
  std::mt19937 rng(20261128);
  const Problem p;
  const Tensor x = randn(rng, {p.rows, p.K}, 1.0f), w = randn(rng, {p.E, p.N, p.K}, 0.02f),
               dy = randn(rng, {p.rows, p.N}, 1e-4f);
  Tensor y_ref = Tensor::empty({p.rows, p.N}, DType::kF32),
         dx_ref = Tensor::empty({p.rows, p.K}, DType::kF32);
  ops::grouped_gemm_forward(x, w, p.counts, y_ref, Stream::cpu());
  ops::grouped_gemm_backward_input(dy, w, p.counts, dx_ref, Stream::cpu());
  // As model_fp8_linear_test: E4M3 x E4M3 within 5% relative norm error, an E5M2 gradient within 8%.
  struct Case {
    const char* name;
    const char* format;
    double fwd_tol, grad_tol;
  };
  for (const Case& c : {Case{"delayed", "hybrid", 0.05, 0.08}, Case{"tensorwise", "hybrid", 0.05, 0.08},
                        Case{"rowwise", "e4m3", 0.05, 0.05}, Case{"blockwise", "e4m3", 0.05, 0.05}}) {
    SCOPED_TRACE(c.name);
    Fp8State st(recipe(c.name, c.format), Stream::cpu());
    const int slot = st.add("layers.0.mlp.experts.gate_up_proj");
    const StepContext ctx = cpu_ctx(&st);
    Tensor y = filled({p.rows, p.N}, NAN), dx = filled({p.rows, p.K}, NAN);
    expert_project(ctx, slot, x, w, p.counts, y);
    expert_project_backward_input(ctx, slot, dy, w, p.counts, dx);
    int64_t at = 0;
    for (size_t e = 0; e < p.counts.size(); ++e) {
      const int64_t m = p.counts[e];
      if (m > 0) {
        SCOPED_TRACE(e);
        const double ef = rel_err_rows(y, y_ref, at, at + m), eb = rel_err_rows(dx, dx_ref, at, at + m);
        EXPECT_LT(ef, c.fwd_tol);
        EXPECT_LT(eb, c.grad_tol);
        EXPECT_GT(ef, 1e-4);  // the casts happened
        EXPECT_GT(eb, 1e-4);
      }
      at += m;
    }
    for (int64_t i = at * p.N; i < p.rows * p.N; ++i) ASSERT_EQ(y.data<float>()[i], 0.0f) << i;
    for (int64_t i = at * p.K; i < p.rows * p.K; ++i) ASSERT_EQ(dx.data<float>()[i], 0.0f) << i;
  }
}

TEST_F(Fp8Experts, EachExpertIsTheFp8GemmOfItsOwnCasts) {
  // The whole-tensor casts (tensorwise activations, the weight stack) sliced per expert are exactly the casts
  // of the slices under the same scale: each expert's output equals fp8_gemm on separately cast operands, to
  // the bit, under delayed scaling with a history (the scales fixed) and rowwise (per-row scales).
  std::mt19937 rng(7);
  const Problem p;
  const Tensor x = randn(rng, {p.rows, p.K}, 1.0f), w = randn(rng, {p.E, p.N, p.K}, 0.02f);
  for (const char* name : {"delayed", "rowwise"}) {
    SCOPED_TRACE(name);
    Fp8State st(recipe(name, "e4m3"), Stream::cpu());
    const int slot = st.add("experts");
    const StepContext ctx = cpu_ctx(&st);
    Tensor y = filled({p.rows, p.N}, NAN);
    expert_project(ctx, slot, x, w, p.counts, y);
    st.end_step({});  // delayed: a history now, so the next step casts with fixed scales
    expert_project(ctx, slot, x, w, p.counts, y);
    const Fp8Recipe& r = st.recipe();
    int64_t at = 0;
    for (int64_t e = 0; e < p.E; ++e) {
      const int64_t m = p.counts[static_cast<size_t>(e)];
      if (m > 0) {
        const ops::Fp8Tensor xe = fp8_cast(x.slice(at, at + m), r.fwd, r.activation_granularity(), false,
                                           st.scale(slot, Fp8State::kX), nullptr, Stream::cpu(), "x_e");
        const ops::Fp8Tensor we =
            fp8_cast(w.slice(e, e + 1).view({p.N, p.K}), r.fwd, r.weight_granularity(), false,
                     st.scale(slot, Fp8State::kW), nullptr, Stream::cpu(), "w_e");
        Tensor ye = Tensor::empty({m, p.N}, DType::kF32);
        ops::fp8_gemm(xe, we, ye, 1.0f, 0.0f, true, Stream::cpu());
        for (int64_t i = 0; i < m * p.N; ++i)
          ASSERT_EQ(y.data<float>()[at * p.N + i], ye.data<float>()[i]) << "expert " << e << " element " << i;
      }
      at += m;
    }
  }
}

TEST_F(Fp8Experts, DelayedScalingRecordsTheRoutedRowsOnly) {
  // A huge value in a padding row must not reach the amax history: only routed rows are cast.
  std::mt19937 rng(3);
  const Problem p;
  Tensor x = randn(rng, {p.rows, p.K}, 1.0f);
  const Tensor w = randn(rng, {p.E, p.N, p.K}, 0.02f);
  x.data<float>()[(p.rows - 1) * p.K] = 1e6f;
  double want = 0;
  for (int64_t i = 0; i < 319 * p.K; ++i)
    want = std::max(want, std::fabs(static_cast<double>(x.data<float>()[i])));
  Fp8State st(recipe("delayed", "hybrid"), Stream::cpu());
  const int slot = st.add("experts");
  Tensor y = Tensor::empty({p.rows, p.N}, DType::kF32);
  expert_project(cpu_ctx(&st), slot, x, w, p.counts, y);
  EXPECT_EQ(st.amax_out(slot, Fp8State::kX)->to_vector<float>()[0], static_cast<float>(want));
}

TEST_F(Fp8Experts, FewRowsPerExpertRunTheBf16GroupedGemm) {
  // Below the mean rows per expert where per-expert FP8 launches make the host the limit, a slot changes
  // nothing: the BF16 grouped GEMM runs (no amax is recorded).
  std::mt19937 rng(11);
  const Problem p;  // 319 rows over 5 experts: 63 on average
  const Tensor x = randn(rng, {p.rows, p.K}, 1.0f), w = randn(rng, {p.E, p.N, p.K}, 0.02f);
  set_fp8_expert_min_rows(64);
  EXPECT_FALSE(fp8_experts_worthwhile(319, 5));
  EXPECT_TRUE(fp8_experts_worthwhile(320, 5));
  Fp8State st(recipe("delayed", "hybrid"), Stream::cpu());
  const int slot = st.add("experts");
  Tensor y = Tensor::empty({p.rows, p.N}, DType::kF32), y_ref = Tensor::empty({p.rows, p.N}, DType::kF32);
  expert_project(cpu_ctx(&st), slot, x, w, p.counts, y);
  set_fp8_expert_min_rows(0);
  ops::grouped_gemm_forward(x, w, p.counts, y_ref, Stream::cpu());
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.data<float>()[i], y_ref.data<float>()[i]);
  EXPECT_EQ(st.amax_out(slot, Fp8State::kX)->to_vector<float>()[0], 0.0f);
}

TEST_F(Fp8Experts, WithoutASlotItIsTheBf16GroupedGemm) {
  std::mt19937 rng(5);
  const Problem p;
  const Tensor x = randn(rng, {p.rows, p.K}, 1.0f), w = randn(rng, {p.E, p.N, p.K}, 0.02f);
  Fp8State st(recipe("delayed", "hybrid"), Stream::cpu());
  Tensor y = Tensor::empty({p.rows, p.N}, DType::kF32), y_ref = Tensor::empty({p.rows, p.N}, DType::kF32);
  expert_project(cpu_ctx(&st), -1, x, w, p.counts, y);
  ops::grouped_gemm_forward(x, w, p.counts, y_ref, Stream::cpu());
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.data<float>()[i], y_ref.data<float>()[i]);
}

}  // namespace
}  // namespace primus
