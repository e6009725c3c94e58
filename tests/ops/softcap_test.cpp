// Soft-capping (ops/softcap.h): the forward against cap * tanh(x / cap) computed here, the backward from the
// capped values against central finite differences in f64, in place and out of place, odd sizes; bad
// arguments refused.
#include "ops/softcap.h"

#include <cmath>
#include <vector>

#include "op_test_util.h"

namespace primus::test {
namespace {

TEST(Softcap, ForwardIsCapTimesTanhAndStaysInside) {
  Rng rng;
  for (DType dt : float_types()) {
    for (int64_t n : {31L, 33L, 127L}) {
      const float cap = 1.5f;
      Tensor x = rand_tensor(rng, {n}, dt, -8, 8);  // far past the cap: tanh saturates
      Tensor y = Tensor::empty({n}, dt);
      ops::softcap_forward(x, cap, y, Stream::cpu());
      const std::vector<double> xs = host(x), ys = host(y);
      std::vector<double> want(xs.size());
      for (size_t i = 0; i < xs.size(); ++i) want[i] = cap * std::tanh(xs[i] / cap);
      EXPECT_LT(rel_err(y, want), dt == DType::kF64 ? 1e-15 : 1e-7) << n;
      for (double v : ys) EXPECT_LE(std::abs(v), cap);
      ops::softcap_forward(x, cap, x, Stream::cpu());  // in place: the same values
      EXPECT_EQ(host(x), ys);
    }
  }
}

// d/dx of L = sum_i w_i * softcap(x_i): the backward of the stored y against central differences of L.
TEST(Softcap, BackwardFromTheCappedValuesMatchesFiniteDifferences) {
  Rng rng;
  for (int64_t n : {31L, 33L, 127L}) {
    const float cap = 0.75f;
    Tensor x = rand_tensor(rng, {n}, DType::kF64, -3, 3);
    Tensor w = rand_tensor(rng, {n}, DType::kF64);
    Tensor y = Tensor::empty({n}, DType::kF64), dx = Tensor::empty({n}, DType::kF64);
    ops::softcap_forward(x, cap, y, Stream::cpu());
    ops::softcap_backward(y, w, cap, dx, Stream::cpu());
    const std::vector<double> xs = host(x), ws = host(w);
    std::vector<double> fd(xs.size());
    const double h = 1e-6;
    for (size_t i = 0; i < xs.size(); ++i) {
      auto f = [&](double v) { return ws[i] * cap * std::tanh(v / cap); };
      fd[i] = (f(xs[i] + h) - f(xs[i] - h)) / (2 * h);
    }
    EXPECT_LT(rel_err(dx, fd), 1e-8) << n;
    // In place over the incoming gradient: the same values.
    Tensor g = w.to(Stream::cpu());
    ops::softcap_backward(y, g, cap, g, Stream::cpu());
    EXPECT_EQ(host(g), host(dx));
  }
}

TEST(Softcap, RefusesBadArguments) {
  Tensor x = Tensor::zeros({8}, DType::kF32), y = Tensor::zeros({8}, DType::kF32);
  EXPECT_THROW(ops::softcap_forward(x, 0.0f, y, Stream::cpu()), Error);
  EXPECT_THROW(ops::softcap_forward(x, -1.0f, y, Stream::cpu()), Error);
  Tensor short_y = Tensor::zeros({7}, DType::kF32);
  EXPECT_THROW(ops::softcap_forward(x, 1.0f, short_y, Stream::cpu()), Error);
  Tensor shifted = x.slice(1, 8);  // overlaps x without being it
  Tensor head = x.slice(0, 7);
  EXPECT_THROW(ops::softcap_forward(head, 1.0f, shifted, Stream::cpu()), Error);
  Tensor dy = Tensor::zeros({8}, DType::kF64);  // another dtype
  EXPECT_THROW(ops::softcap_backward(y, dy, 1.0f, dy, Stream::cpu()), Error);
  EXPECT_THROW(ops::softcap_backward(y, x, 1.0f, y, Stream::cpu()), Error);  // dx over y
}

}  // namespace
}  // namespace primus::test
