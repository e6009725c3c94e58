#include "ops/optimizer.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/master_split.h"
#include "op_test_util.h"

namespace primus::test {
namespace {

using ops::AdamWParams;

// Hyper-parameters away from the defaults, each visible in the result.
AdamWParams hand_params() {
  AdamWParams p;
  p.lr = 0.01f;
  p.beta1 = 0.8f;
  p.beta2 = 0.95f;
  p.eps = 1e-6f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.5f;
  return p;
}

TEST(AdamW, ThreeStepsMatchHandComputedSequence) {
  Rng rng;
  for (DType dt : float_types()) {
    for (int64_t n : {37L, 70001L}) {
      AdamWParams p = hand_params();
      Tensor master = rand_tensor(rng, {n}, dt), m = Tensor::zeros({n}, dt), v = Tensor::zeros({n}, dt);
      std::vector<double> w = host(master), em(n, 0.0), ev(n, 0.0);
      for (int step = 1; step <= 3; ++step) {
        p.step = step;
        Tensor grad = rand_tensor(rng, {n}, dt, -2, 2);
        const auto g = host(grad);
        ops::adamw_step(master, grad, m, v, p, nullptr, Stream::cpu());
        // By hand, with the float hyper-parameters exactly as the op receives them.
        const double b1 = p.beta1, b2 = p.beta2, lr = p.lr, eps = p.eps, wd = p.weight_decay,
                     gs = p.grad_scale;
        for (int64_t i = 0; i < n; ++i) {
          const double gi = g[i] * gs;
          em[i] = b1 * em[i] + (1 - b1) * gi;
          ev[i] = b2 * ev[i] + (1 - b2) * gi * gi;
          const double mhat = em[i] / (1 - std::pow(b1, step)), vhat = ev[i] / (1 - std::pow(b2, step));
          w[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * w[i]);
        }
        const double tol = dt == DType::kF64 ? 1e-12 : 2e-6;
        EXPECT_LT(rel_err(master, w), tol) << "step " << step;
        EXPECT_LT(rel_err(m, em), tol) << "step " << step;
        EXPECT_LT(rel_err(v, ev), tol) << "step " << step;
      }
    }
  }
}

// bf16 moments (the precision-aware optimizer): each step computes with the moments as this step makes them
// and stores them rounded to nearest even; the next step starts from the stored values. By hand with the
// reference's own arithmetic, so master and moments agree bit for bit; odd sizes, every pair with a bf16.
TEST(AdamW, Bf16MomentsStoreTheRoundedMomentsAndStepWithTheExactOnes) {
  Rng rng;
  for (auto [mdt, vdt] :
       {std::pair{DType::kBF16, DType::kBF16}, {DType::kBF16, DType::kF32}, {DType::kF32, DType::kBF16}}) {
    for (int64_t n : {31L, 33L, 127L}) {
      AdamWParams p = hand_params();
      Tensor master = rand_tensor(rng, {n}, DType::kF32);
      Tensor m = cpu_cast(rand_tensor(rng, {n}, DType::kF32, -0.1, 0.1), mdt);
      Tensor v = cpu_cast(rand_tensor(rng, {n}, DType::kF32, 0.0, 0.01), vdt);
      std::vector<float> w = master.to_vector<float>();
      std::vector<double> em = host(m), ev = host(v);
      auto stored = [](double x, DType dt) {
        const float f = static_cast<float>(x);
        return dt == DType::kBF16 ? static_cast<double>(bf16_to_float(float_to_bf16(f))) : f;
      };
      for (int step = 1; step <= 3; ++step) {
        p.step = step;
        Tensor grad = rand_tensor(rng, {n}, DType::kF32, -2, 2);
        const auto g = host(grad);
        ops::adamw_step(master, grad, m, v, p, nullptr, Stream::cpu());
        const double b1 = p.beta1, b2 = p.beta2, lr = p.lr, eps = p.eps, wd = p.weight_decay,
                     gs = p.grad_scale;
        const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step)),
                     bc2 = 1.0 - std::pow(b2, static_cast<double>(step));
        for (int64_t i = 0; i < n; ++i) {
          const double gi = g[i] * gs;
          const double mi = b1 * em[i] + (1.0 - b1) * gi, vi = b2 * ev[i] + (1.0 - b2) * gi * gi;
          const double wi = w[i];
          w[i] = static_cast<float>(wi - lr * ((mi / bc1) / (std::sqrt(vi / bc2) + eps) + wd * wi));
          em[i] = stored(mi, mdt);
          ev[i] = stored(vi, vdt);
        }
        const std::string what =
            fmt::format("n={} m {} v {} step {}", n, dtype_name(mdt), dtype_name(vdt), step);
        ASSERT_EQ(m.dtype(), mdt);
        ASSERT_EQ(v.dtype(), vdt);
        EXPECT_EQ(master.to_vector<float>(), w) << what;
        EXPECT_EQ(host(m), em) << what;
        EXPECT_EQ(host(v), ev) << what;
      }
    }
  }
}

TEST(AdamW, Bf16MomentsNeedAnF32Master) {
  Tensor master = Tensor::zeros({4}, DType::kF64), grad = Tensor::zeros({4}, DType::kF64);
  Tensor m = Tensor::zeros({4}, DType::kBF16), v = Tensor::zeros({4}, DType::kF64);
  EXPECT_THROW(ops::adamw_step(master, grad, m, v, AdamWParams{}, nullptr, Stream::cpu()), Error);
  Tensor m16 = Tensor::zeros({4}, DType::kF16), master32 = Tensor::zeros({4}, DType::kF32),
         grad32 = Tensor::zeros({4}, DType::kF32), v32 = Tensor::zeros({4}, DType::kF32);
  EXPECT_THROW(ops::adamw_step(master32, grad32, m16, v32, AdamWParams{}, nullptr, Stream::cpu()), Error);
}

TEST(AdamW, FirstStepIsSignedLearningRate) {
  // With bias correction, step 1 moves every weight by lr * g / (|g| + eps) (no decay): about +-lr.
  Tensor master = tensor_of({1.0, -2.0, 3.0}, {3}, DType::kF64);
  Tensor grad = tensor_of({4.0, -0.5, 1e-3}, {3}, DType::kF64);
  Tensor m = Tensor::zeros({3}, DType::kF64), v = Tensor::zeros({3}, DType::kF64);
  AdamWParams p;
  p.lr = 0.1f;
  p.eps = 0.0f;
  ops::adamw_step(master, grad, m, v, p, nullptr, Stream::cpu());
  const double lr = p.lr;
  EXPECT_LT(rel_err(master, {1.0 - lr, -2.0 + lr, 3.0 - lr}), 1e-12);
}

TEST(AdamW, ParamCopyReceivesCastUpdate) {
  Rng rng;
  const int64_t n = 300;
  Tensor master = rand_tensor(rng, {n}, DType::kF32), grad = rand_tensor(rng, {n}, DType::kF32);
  Tensor m = Tensor::zeros({n}, DType::kF32), v = Tensor::zeros({n}, DType::kF32);
  AdamWParams p;
  p.weight_decay = 0.01f;
  // bf16 copy: the compute rounding (nearest, ties away from zero; core/master_split.h), the hi a store with
  // masters in remainders holds.
  Tensor copy = Tensor::zeros({n}, DType::kBF16);
  ops::adamw_step(master, grad, m, v, p, &copy, Stream::cpu());
  const auto mv = master.to_vector<float>();
  const auto cv = copy.to_vector<bf16_t>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(cv[i].bits, compute_round(mv[i]).bits) << i;
  // f32 copy.
  Tensor copy32 = Tensor::zeros({n}, DType::kF32);
  p.step = 2;
  ops::adamw_step(master, grad, m, v, p, &copy32, Stream::cpu());
  EXPECT_EQ(copy32.to_vector<float>(), master.to_vector<float>());
  // A copy that is master itself is allowed (nothing extra to write).
  Tensor alias = master;
  p.step = 3;
  const auto before = master.to_vector<float>();
  ops::adamw_step(master, grad, m, v, p, &alias, Stream::cpu());
  EXPECT_NE(master.to_vector<float>(), before);
  // An undefined copy is the same as none.
  Tensor none;
  p.step = 4;
  ops::adamw_step(master, grad, m, v, p, &none, Stream::cpu());
}

TEST(AdamW, RejectsBadInputs) {
  const Stream s = Stream::cpu();
  Tensor master = Tensor::zeros({8}, DType::kF32), grad = Tensor::zeros({8}, DType::kF32);
  Tensor m = Tensor::zeros({8}, DType::kF32), v7 = Tensor::zeros({7}, DType::kF32);
  AdamWParams p;
  EXPECT_PRIMUS_ERROR(ops::adamw_step(master, grad, m, v7, p, nullptr, s),
                      "adamw_step: v must have 8 elements");
  Tensor v = Tensor::zeros({8}, DType::kF32);
  p.step = 0;
  EXPECT_PRIMUS_ERROR(ops::adamw_step(master, grad, m, v, p, nullptr, s), "step is 1-based");
  p.step = 1;
  Tensor g64 = Tensor::zeros({8}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::adamw_step(master, g64, m, v, p, nullptr, s), "adamw_step: grad must be f32");
  Tensor copy_i32 = Tensor::zeros({8}, DType::kI32);
  EXPECT_PRIMUS_ERROR(ops::adamw_step(master, grad, m, v, p, &copy_i32, s), "param_copy must be f32, bf16");
  EXPECT_PRIMUS_ERROR(ops::adamw_step(master, grad, m, m, p, nullptr, s), "must not overlap");
}

TEST(SumSquares, MatchesDoubleSumAndAccumulates) {
  Rng rng;
  for (DType dt : float_types()) {
    for (int64_t n : {1L, 3L, 127L, 100003L}) {
      Tensor x = rand_tensor(rng, {n}, dt, -3, 3);
      double ref = 0.0;
      for (double e : host(x)) ref += e * e;
      Tensor out = tensor_of({12345.0}, {1}, dt);
      ops::sum_squares(x, out, false, Stream::cpu());
      EXPECT_NEAR(host(out)[0], ref, fwd_tol(dt) * ref) << n;
      ops::sum_squares(x, out, true, Stream::cpu());
      EXPECT_NEAR(host(out)[0], 2 * ref, fwd_tol(dt) * 2 * ref) << n;
    }
  }
}

TEST(SumSquares, DeterministicAcrossThreadCounts) {
  Rng rng;
  Tensor x = rand_tensor(rng, {1 << 18}, DType::kF32);
  const int saved = omp_get_max_threads();
  std::vector<float> r;
  for (int t : {1, 2, 3}) {
    omp_set_num_threads(t);
    Tensor out = Tensor::zeros({1}, DType::kF32);
    ops::sum_squares(x, out, false, Stream::cpu());
    r.push_back(out.to_vector<float>()[0]);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(r[0], r[1]);
  EXPECT_EQ(r[0], r[2]);
}

TEST(SumSquares, ChunksAreEachChunksSum) {
  Rng rng;
  for (auto [n, chunk] : {std::pair<int64_t, int64_t>{127, 31}, {31, 33}, {1000, 100}, {1, 1}}) {
    Tensor x = rand_tensor(rng, {n}, DType::kF32, -3, 3);
    const int64_t chunks = (n + chunk - 1) / chunk;
    Tensor out = Tensor::zeros({chunks}, DType::kF32);
    ops::sum_squares_chunks(x, chunk, out, Stream::cpu());
    const std::vector<float> got = out.to_vector<float>();
    for (int64_t c = 0; c < chunks; ++c) {
      Tensor one = Tensor::zeros({1}, DType::kF32);
      ops::sum_squares(x.slice(c * chunk, std::min(n, (c + 1) * chunk)), one, false, Stream::cpu());
      EXPECT_EQ(got[static_cast<size_t>(c)], one.to_vector<float>()[0]) << n << " chunk " << c;
    }
  }
  Tensor x = Tensor::zeros({10}, DType::kF32), wrong = Tensor::zeros({2}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::sum_squares_chunks(x, 4, wrong, Stream::cpu()), "sum_squares_chunks: out must be");
  Tensor three = Tensor::zeros({3}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::sum_squares_chunks(x, 0, three, Stream::cpu()), "chunk must be positive");
}

TEST(SumSquares, RejectsBadInputs) {
  const Stream s = Stream::cpu();
  Tensor x = Tensor::zeros({4}, DType::kF32), out64 = Tensor::zeros({1}, DType::kF64);
  EXPECT_PRIMUS_ERROR(ops::sum_squares(x, out64, false, s), "sum_squares: out must be f32");
  Tensor out2 = Tensor::zeros({2}, DType::kF32);
  EXPECT_PRIMUS_ERROR(ops::sum_squares(x, out2, false, s), "sum_squares: out must be [1]");
}

TEST(AdamW, ThreadCountDoesNotChangeResults) {
  Rng rng;
  const int64_t n = 100003;
  Tensor master0 = rand_tensor(rng, {n}, DType::kF32), grad = rand_tensor(rng, {n}, DType::kF32);
  expect_thread_count_invariant([&] {
    Tensor master = clone(master0), m = Tensor::zeros({n}, DType::kF32), v = Tensor::zeros({n}, DType::kF32);
    Tensor copy = Tensor::empty({n}, DType::kBF16);
    AdamWParams p;
    p.weight_decay = 0.1f;
    ops::adamw_step(master, grad, m, v, p, &copy, Stream::cpu());
    std::vector<double> all = host(master), c = host(copy);
    all.insert(all.end(), c.begin(), c.end());
    return all;
  });
}

}  // namespace
}  // namespace primus::test
