// Packed SFT rows through the whole model (issue #23): with the row's positions and sample starts
// (LlamaModel::set_packing), a row holding two samples gives each sample's tokens exactly the losses and the
// parameters exactly the gradients of running the samples one by one (f64 on the CPU reference); without them
// the second sample sees the first and its losses change.
#include <gtest/gtest.h>

#include <functional>
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

// The parameters' gradients after `packed()` equal those after `alone()` (each runs its forward_backward
// calls on zeroed gradients) within f64 rounding.
void expect_same_gradients(ParamStore& params, const std::function<void()>& packed,
                           const std::function<void()>& alone) {
  params.grad_flat().zero_(Stream::cpu());
  packed();
  const std::vector<double> g_packed = params.grad_flat().to_vector<double>();
  params.grad_flat().zero_(Stream::cpu());
  alone();
  const std::vector<double> g_alone = params.grad_flat().to_vector<double>();
  ASSERT_EQ(g_packed.size(), g_alone.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < g_alone.size(); ++i) {
    worst = std::max(worst, std::abs(g_packed[i] - g_alone[i]));
    scale = std::max(scale, std::abs(g_alone[i]));
  }
  EXPECT_LT(worst, 1e-11 * std::max(1.0, scale)) << "largest gradient " << scale;
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
    expect_same_gradients(
        f.params, [&] { grads(t, y, T, P, S); },
        [&] {
          grads(samples[0].tokens, samples[0].targets, 5, {}, {});
          grads(samples[1].tokens, samples[1].targets, 7, {}, {});
        });
    f.model.set_packing({}, {});
  }
}

// Multi-token prediction over a packed row (MLA with two depths, and plain attention with one): each depth
// shifts within its sample (mtp_batch with the sample starts) and its attention stays inside the sample, so
// the depths' per-token losses are the samples' run alone, and so are the gradients. A depth's loss is a
// mean over the targets it counts in the micro-batch, which differ between one row and two: the gradient
// comparison gives every run the same counts, so that each token's loss has the same weight.
TEST(ModelPacking, MtpDepthsOfAPackedRowAreItsSamplesRunAlone) {
  ModelConfig mla = grad_test::tiny_mla(6, false);
  mla.mtp_num_layers = 2;
  mla.mtp_loss_scaling_factor = 0.7;
  ModelConfig plain = tiny_model(false, false, true);
  plain.mtp_num_layers = 1;
  plain.mtp_loss_scaling_factor = 0.5;
  for (const auto& [name, config] :
       {std::pair<const char*, ModelConfig>{"mla", mla}, {"plain tied", plain}}) {
    SCOPED_TRACE(name);
    Model f(config);
    const int64_t D = config.mtp_num_layers;
    // Samples of 6 and 7 tokens and 2 padding tokens in a row of 15; a prompt token in the second.
    const std::vector<int32_t> s0 = {3, 9, 4, 17, 2, 11}, s1 = {8, 1, 20, 5, 14, 7, 12};
    auto targets = [](const std::vector<int32_t>& s) {
      std::vector<int32_t> y(s.size(), -1);
      for (size_t i = 0; i + 1 < s.size(); ++i) y[i] = s[i + 1];
      return y;
    };
    std::vector<int32_t> y0 = targets(s0), y1 = targets(s1);
    y1[1] = -1;
    std::vector<int32_t> t = s0, y = y0, pos, seg;
    t.insert(t.end(), s1.begin(), s1.end());
    y.insert(y.end(), y1.begin(), y1.end());
    t.insert(t.end(), {0, 0});
    y.insert(y.end(), {-1, -1});
    for (int i = 0; i < 6; ++i) pos.push_back(i), seg.push_back(0);
    for (int i = 0; i < 7; ++i) pos.push_back(i), seg.push_back(6);
    for (int i = 0; i < 2; ++i) pos.push_back(i), seg.push_back(13);
    const int64_t T = 15;
    const Tensor P = Tensor::from_vector(pos, {1, T}), S = Tensor::from_vector(seg, {1, T});

    // Forward: the depths' rows built by the model from the row's sample starts.
    auto depth_losses = [&](const std::vector<int32_t>& tt, const std::vector<int32_t>& yy, int64_t n,
                            const Tensor& pp, const Tensor& ss) {
      f.model.set_packing(pp, ss);
      f.model.forward_loss(Tensor::from_vector(tt, {1, n}), Tensor::from_vector(yy, {1, n}), true);
      std::vector<std::vector<double>> out;
      for (const Tensor& l : f.model.mtp_losses()) out.push_back(l.to_vector<double>());
      return out;
    };
    const auto packed = depth_losses(t, y, T, P, S);
    const auto a = depth_losses(s0, y0, 6, {}, {});
    const auto b = depth_losses(s1, y1, 7, {}, {});
    ASSERT_EQ(static_cast<int64_t>(packed.size()), D);
    for (int64_t k = 0; k < D; ++k) {
      SCOPED_TRACE("depth " + std::to_string(k + 1));
      for (int i = 0; i < 6; ++i) EXPECT_NEAR(packed[k][i], a[k][i], 1e-12) << "sample 0 token " << i;
      for (int i = 0; i < 7; ++i) EXPECT_NEAR(packed[k][6 + i], b[k][i], 1e-12) << "sample 1 token " << i;
    }
    // Without the sample starts the second sample's depth attends to the first.
    const auto shared = depth_losses(t, y, T, {}, {});
    double moved = 0;
    for (int i = 0; i < 7; ++i) moved = std::max(moved, std::abs(shared[0][6 + i] - b[0][i]));
    EXPECT_GT(moved, 1e-6);

    // Gradients, with the depths' rows given (mtp_batch as the trainer builds them) and fixed counts.
    auto grads = [&](const std::vector<int32_t>& tt, const std::vector<int32_t>& yy, int64_t n,
                     const Tensor& pp, const Tensor& ss) {
      const Tensor x = Tensor::from_vector(tt, {1, n}), yt = Tensor::from_vector(yy, {1, n});
      MtpBatch rows = mtp_batch(x, yt, D, ss.defined() ? &ss : nullptr);
      rows.counted = 9;
      for (int64_t& c : rows.counts) c = 5;
      f.model.set_packing(pp, ss);
      f.model.forward_backward(x, yt, 1.0f, 0.0f, &rows);
    };
    expect_same_gradients(
        f.params, [&] { grads(t, y, T, P, S); },
        [&] {
          grads(s0, y0, 6, {}, {});
          grads(s1, y1, 7, {}, {});
        });
    f.model.set_packing({}, {});
  }
}
