// Packed SFT rows through the whole model (issue #23): with the row's positions and sample starts
// (LlamaModel::set_packing), a row holding two samples gives each sample's tokens exactly the losses and the
// parameters exactly the gradients of running the samples one by one (f64 on the CPU reference); without them
// the second sample sees the first and its losses change.
#include <gtest/gtest.h>

#include <random>

#include "model/llama_model.h"
#include "unit/model_grad_util.h"

using namespace primus;
using namespace primus::grad_test;

namespace {

// The tiny f64 model of the gradient tests with a rope table long enough for a 15-token row.
struct Model {
  ParamStore params;
  LlamaModel model;
  explicit Model(const ModelConfig& c)
      : params(ModelSpec::from_config(c)), model(c, {}, Fixture::alloc(params, 5), Stream::cpu(), 16) {}
};

struct Sample {
  std::vector<int32_t> tokens, targets;
};

std::vector<double> losses(LlamaModel& model, const std::vector<int32_t>& t, const std::vector<int32_t>& y,
                           int64_t T, const Tensor& pos = {}, const Tensor& seg = {}) {
  model.set_packing(pos, seg);
  return model.forward_loss(Tensor::from_vector(t, {1, T}), Tensor::from_vector(y, {1, T}))
      .to_vector<double>();
}

}  // namespace

TEST(ModelPacking, PackedRowEqualsItsSamplesRunAlone) {
  // Plain attention, q/k norms with biases, and multi-latent attention (whose RoPE runs in its pack step).
  const std::pair<const char*, ModelConfig> models[] = {{"plain", tiny_model(false, false, false)},
                                                        {"qk-norm", tiny_model(true, true, false)},
                                                        {"mla", grad_test::tiny_mla(6, false)}};
  for (const auto& [name, config] : models) {
    SCOPED_TRACE(name);
    Model f(config);
    std::mt19937 rng(11);
    std::uniform_int_distribution<int32_t> tok(0, 22);
    // Samples of 5 and 7 tokens (the last target of each is -1: nothing to predict across the boundary),
    // packed into a row of 15 with 3 padding tokens.
    std::vector<Sample> samples(2);
    for (int s = 0; s < 2; ++s) {
      const int n = s == 0 ? 5 : 7;
      for (int i = 0; i < n; ++i) samples[s].tokens.push_back(tok(rng));
      for (int i = 0; i < n; ++i) samples[s].targets.push_back(i + 1 < n ? samples[s].tokens[i + 1] : -1);
    }
    samples[1].targets[2] = -1;  // a prompt token: no loss
    const int64_t T = 15;
    std::vector<int32_t> t, y, pos, seg;
    for (int s = 0; s < 2; ++s)
      for (size_t i = 0; i < samples[s].tokens.size(); ++i) {
        t.push_back(samples[s].tokens[i]);
        y.push_back(samples[s].targets[i]);
        pos.push_back(static_cast<int32_t>(i));
        seg.push_back(s == 0 ? 0 : 5);
      }
    for (int i = 0; i < 3; ++i) {
      t.push_back(0);
      y.push_back(-1);
      pos.push_back(i);
      seg.push_back(12);
    }
    const Tensor P = Tensor::from_vector(pos, {1, T}), S = Tensor::from_vector(seg, {1, T});

    const std::vector<double> packed = losses(f.model, t, y, T, P, S);
    const std::vector<double> a = losses(f.model, samples[0].tokens, samples[0].targets, 5);
    const std::vector<double> b = losses(f.model, samples[1].tokens, samples[1].targets, 7);
    for (int i = 0; i < 5; ++i) EXPECT_NEAR(packed[i], a[i], 1e-12) << "sample 0 token " << i;
    for (int i = 0; i < 7; ++i) EXPECT_NEAR(packed[5 + i], b[i], 1e-12) << "sample 1 token " << i;
    // Without the packing the second sample attends to the first (and sits at positions 5..11).
    const std::vector<double> causal = losses(f.model, t, y, T);
    double moved = 0;
    for (int i = 0; i < 7; ++i) moved = std::max(moved, std::abs(causal[5 + i] - b[i]));
    EXPECT_GT(moved, 1e-6);

    // Gradients: the packed row's equal the two samples' summed.
    auto grads = [&](const std::vector<int32_t>& tt, const std::vector<int32_t>& yy, int64_t n,
                     const Tensor& pp, const Tensor& ss) {
      f.model.set_packing(pp, ss);
      f.model.forward_backward(Tensor::from_vector(tt, {1, n}), Tensor::from_vector(yy, {1, n}), 1.0f);
    };
    f.params.grad_flat().zero_(Stream::cpu());
    grads(t, y, T, P, S);
    const std::vector<double> g_packed = f.params.grad_flat().to_vector<double>();
    f.params.grad_flat().zero_(Stream::cpu());
    grads(samples[0].tokens, samples[0].targets, 5, {}, {});
    grads(samples[1].tokens, samples[1].targets, 7, {}, {});
    const std::vector<double> g_alone = f.params.grad_flat().to_vector<double>();
    ASSERT_EQ(g_packed.size(), g_alone.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < g_alone.size(); ++i) {
      worst = std::max(worst, std::abs(g_packed[i] - g_alone[i]));
      scale = std::max(scale, std::abs(g_alone[i]));
    }
    EXPECT_LT(worst, 1e-11 * std::max(1.0, scale)) << "largest gradient " << scale;
    f.model.set_packing({}, {});
  }
}
