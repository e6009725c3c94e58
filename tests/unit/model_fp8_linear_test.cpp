// FP8 projections (model/fp8_linear.h) on the CPU against the f32 projection they replace: the forward, the
// input gradient and the weight gradient of every recipe land within the error FP8's rounding allows (stated
// per format below) and not at zero error (the casts happened); delayed scaling's state turns recorded amaxes
// into the scales Transformer Engine's formula gives, and its checkpoint form round-trips.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fp8_test_util.h"
#include "model/fp8_linear.h"
#include "ops/gemm.h"

namespace primus {
namespace {

using fp8test::randn;
using fp8test::recipe;

double rel_err(const Tensor& a, const Tensor& b) {
  const float *x = a.data<float>(), *y = b.data<float>();
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    num += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    den += static_cast<double>(y[i]) * y[i];
  }
  return std::sqrt(num / den);
}

struct Grads {
  Tensor y, dx, dw;
};

// y = x W^T, dx = dy W, dW = dy^T x through project() with `state` (nullptr: the f32 path).
Grads run(Fp8State* state, const Tensor& x, const Tensor& w, const Tensor& dy) {
  StepContext ctx;
  ctx.stream = Stream::cpu();
  ctx.act_dtype = DType::kF32;
  ctx.fp8 = state;
  const int slot = state ? 0 : -1;
  Grads g{Tensor::empty({x.size(0), w.size(0)}, DType::kF32), Tensor::empty(x.shape(), DType::kF32),
          Tensor::empty(w.shape(), DType::kF32)};
  project(ctx, slot, x, w, nullptr, g.y);
  project_backward(ctx, slot, dy, x, w, g.dx, false, g.dw, Tensor(), /*accumulate_w=*/false);
  return g;
}

TEST(Fp8Linear, EveryRecipeStaysWithinFp8RoundingOfTheF32Projection) {
  std::mt19937 rng(20261127);
  // Every dimension a multiple of 128 (blockwise); 384 tokens make the weight gradient's K three 1x128 tiles.
  const Tensor x = randn(rng, {384, 256}, 1.0f), w = randn(rng, {128, 256}, 0.02f),
               dy = randn(rng, {384, 128}, 1e-4f);
  const Grads ref = run(nullptr, x, w, dy);
  // Relative norm errors: an E4M3 cast is within 2^-4 relative per element (RMS ~1.8% for a uniform rounding
  // position), E5M2 within 2^-3 (~3.6%); a GEMM of two casts adds them in quadrature. Bounds: E4M3 x E4M3 5%,
  // with an E5M2 operand 8%.
  struct Case {
    const char* name;
    const char* format;
    double fwd_tol, grad_tol;
  };
  for (const Case& c : {Case{"delayed", "hybrid", 0.05, 0.08}, Case{"tensorwise", "hybrid", 0.05, 0.08},
                        Case{"rowwise", "e4m3", 0.05, 0.05}, Case{"blockwise", "e4m3", 0.05, 0.05}}) {
    SCOPED_TRACE(c.name);
    Fp8State st(recipe(c.name, c.format), Stream::cpu());
    ASSERT_EQ(st.add("proj"), 0);
    const Grads g = run(&st, x, w, dy);
    for (const auto& [what, got, want, tol] :
         {std::tuple{"y", &g.y, &ref.y, c.fwd_tol}, std::tuple{"dx", &g.dx, &ref.dx, c.grad_tol},
          std::tuple{"dw", &g.dw, &ref.dw, c.grad_tol}}) {
      const double e = rel_err(*got, *want);
      EXPECT_LT(e, tol) << what;
      EXPECT_GT(e, 1e-4) << what << ": no FP8 rounding at all";
    }
  }
}

TEST(Fp8Linear, DelayedScalingTurnsRecordedAmaxesIntoScales) {
  std::mt19937 rng(7);
  const Tensor x = randn(rng, {128, 128}, 2.0f), w = randn(rng, {128, 128}, 0.05f),
               dy = randn(rng, {128, 128}, 1e-3f);
  Fp8Recipe r = recipe("delayed", "hybrid");
  r.history_len = 3;
  r.margin = 1;
  Fp8State st(r, Stream::cpu());
  st.add("proj");
  // No history yet: the casts compute their own scale (current scaling), and record the amaxes.
  EXPECT_EQ(st.scale(0, Fp8State::kX), nullptr);
  run(&st, x, w, dy);
  auto amax = [](const Tensor& t) {
    float a = 0;
    for (int64_t i = 0; i < t.numel(); ++i) a = std::max(a, std::fabs(t.data<float>()[i]));
    return a;
  };
  EXPECT_EQ(st.amax_out(0, Fp8State::kX)->to_vector<float>()[0], amax(x));
  EXPECT_EQ(st.amax_out(0, Fp8State::kDy)->to_vector<float>()[0], amax(dy));
  st.end_step({});
  // scale = fp8_max / amax / 2^margin, E4M3 for x and W, E5M2 for dy.
  ASSERT_NE(st.scale(0, Fp8State::kX), nullptr);
  EXPECT_EQ(st.scale(0, Fp8State::kX)->to_vector<float>()[0], 448.0f / amax(x) / 2.0f);
  EXPECT_EQ(st.scale(0, Fp8State::kW)->to_vector<float>()[0], 448.0f / amax(w) / 2.0f);
  EXPECT_EQ(st.scale(0, Fp8State::kDy)->to_vector<float>()[0], 57344.0f / amax(dy) / 2.0f);
  EXPECT_EQ(st.amax_out(0, Fp8State::kX)->to_vector<float>()[0], 0.0f) << "the step's amax starts again at 0";
  // A smaller x next step: the history's max (the first step's) still decides.
  Tensor half = Tensor::empty(x.shape(), DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) half.data<float>()[i] = 0.5f * x.data<float>()[i];
  run(&st, half, w, dy);
  st.end_step({});
  EXPECT_EQ(st.scale(0, Fp8State::kX)->to_vector<float>()[0], 448.0f / amax(x) / 2.0f);
  // The checkpoint form restores the same state into a fresh one; another recipe is refused.
  Fp8State back(r, Stream::cpu());
  back.add("proj");
  back.load(st.save(), "ckpt");
  EXPECT_EQ(back.scale(0, Fp8State::kX)->to_vector<float>(), st.scale(0, Fp8State::kX)->to_vector<float>());
  EXPECT_EQ(back.save().history, st.save().history);
  Fp8State other(recipe("blockwise", "hybrid"), Stream::cpu());
  other.add("proj");
  try {
    other.load(st.save(), "ckpt");
    ADD_FAILURE() << "a checkpoint of another recipe loaded";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("trained with FP8 recipe delayed-hybrid, this run uses blockwise-hybrid"),
        std::string::npos)
        << e.what();
  }
}

TEST(Fp8Linear, PipelineStagesMergeAndLoadByName) {
  // Two pipeline stages, each with its own projections and a history: the merged state loads into either
  // stage (its own names) and into the whole model, bitwise; a model with a projection it lacks is refused.
  std::mt19937 rng(11);
  Fp8Recipe r = recipe("delayed", "hybrid");
  r.history_len = 4;
  auto stage = [&](std::vector<std::string> names, float gain) {
    auto st = std::make_unique<Fp8State>(r, Stream::cpu());
    for (const std::string& n : names) st->add(n);
    for (int step = 0; step < 3; ++step) {
      for (int slot = 0; slot < st->slots(); ++slot) {
        const Tensor x = randn(rng, {32, 32}, gain * (1 + step)), w = randn(rng, {32, 32}, 0.05f),
                     dy = randn(rng, {32, 32}, 1e-3f);
        StepContext ctx;
        ctx.stream = Stream::cpu();
        ctx.act_dtype = DType::kF32;
        ctx.fp8 = st.get();
        Tensor y = Tensor::empty({32, 32}, DType::kF32);
        project(ctx, slot, x, w, nullptr, y);
        Tensor dx = Tensor::empty({32, 32}, DType::kF32), g = Tensor::zeros({32, 32}, DType::kF32);
        project_backward(ctx, slot, dy, x, w, dx, false, g, Tensor(), false);
      }
      st->end_step({});
    }
    return st;
  };
  auto a = stage({"layers.0.self_attn.qkv_proj", "layers.0.mlp.down_proj"}, 1.0f);
  auto b = stage({"layers.1.self_attn.qkv_proj", "output"}, 3.0f);
  const Fp8State::Saved merged = merge_fp8_saved({a->save(), b->save()});
  ASSERT_EQ(merged.names.size(), 4u);
  Fp8State back_b(r, Stream::cpu());
  back_b.add("layers.1.self_attn.qkv_proj");
  back_b.add("output");
  back_b.load(merged, "ckpt");
  EXPECT_EQ(back_b.save().history, b->save().history);
  EXPECT_EQ(back_b.save().scale, b->save().scale);
  EXPECT_EQ(back_b.save().steps, 3);
  Fp8State whole(r, Stream::cpu());
  for (const std::string& n : merged.names) whole.add(n);
  whole.load(merged, "ckpt");
  EXPECT_EQ(whole.save().history, merged.history);
  Fp8State more(r, Stream::cpu());
  more.add("layers.2.self_attn.qkv_proj");
  auto error_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of([&] { more.load(merged, "ckpt"); }).find("it has no layers.2.self_attn.qkv_proj"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              merge_fp8_saved({a->save(), a->save()});
            }).find("is on two pipeline stages"),
            std::string::npos);
}

}  // namespace
}  // namespace primus
