// The model's region hooks (model/param_hooks.h) on the CPU: every layer reports its MLP's matrices through
// grads_final() inside its backward, between before_backward and after_backward of its region, and what the
// hook sees then is already the gradient the backward ends with (bitwise): the overlapped update sums those
// squares early (train/overlapped_update.h), so an early report would corrupt the gradient norm.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "unit/model_grad_util.h"

using namespace primus;
using namespace primus::grad_test;

namespace {

struct Recorder : ParamHooks {
  explicit Recorder(ParamStore& p) : params(p) {}
  ParamStore& params;
  std::vector<std::string> events;
  std::map<int, std::vector<double>> snapshot;  // entry -> its gradient when reported final
  void before_forward(int r) override { events.push_back("F" + std::to_string(r)); }
  void after_forward(int) override {}
  void before_backward(int r) override { events.push_back("B" + std::to_string(r)); }
  void after_backward(int r) override { events.push_back("b" + std::to_string(r)); }
  void grads_final(std::span<const int> entries) override {
    ASSERT_FALSE(entries.empty());
    events.push_back("G" + std::to_string(params.region_of_entry(entries.front())));
    for (int e : entries) {
      EXPECT_EQ(params.region_of_entry(e), params.region_of_entry(entries.front())) << params.entry(e).name;
      EXPECT_EQ(snapshot.count(e), 0u) << params.entry(e).name << " reported twice";
      snapshot[e] = params.grad(e).to_vector<double>();
    }
  }
};

ModelConfig dense_then_moe() {
  ModelConfig m = tiny_model(/*qk_norm=*/true, /*qkv_bias=*/true, /*tied=*/false);
  m.num_layers = 3;
  m.moe.num_experts = 4;
  m.moe.topk = 2;
  m.moe.ffn_hidden_size = 8;
  m.moe.shared_ffn_hidden_size = 6;
  m.moe.layer_is_moe = {0, 1, 1};
  return m;
}

}  // namespace

// The trainer composes data parallelism's hooks and the overlapped update's in one chain: every hook in it
// sees every call, in order, and the model runs exactly as with one hook.
TEST(ModelParamHooks, AChainCallsEveryHookInOrder) {
  const ModelConfig cfg = dense_then_moe();
  Fixture single(cfg, RecomputeConfig{}, 3), chained(cfg, RecomputeConfig{}, 3);
  Recorder alone(single.params), first(chained.params), second(chained.params);
  ParamHookChain chain;
  chain.add(&first);
  chain.add(nullptr);  // ignored
  chain.add(&second);
  single.model.set_hooks(&alone);
  chained.model.set_hooks(&chain);
  single.params.grad_flat().zero_(Stream::cpu());
  chained.params.grad_flat().zero_(Stream::cpu());
  Tensor a = single.model.forward_backward(single.tokens, single.targets, 1.0f, 1.0f);
  Tensor b = chained.model.forward_backward(chained.tokens, chained.targets, 1.0f, 1.0f);
  single.model.set_hooks(nullptr);
  chained.model.set_hooks(nullptr);
  EXPECT_FALSE(alone.events.empty());
  EXPECT_EQ(first.events, alone.events);
  EXPECT_EQ(second.events, alone.events);
  EXPECT_EQ(first.snapshot.size(), alone.snapshot.size());
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>());
}

TEST(ModelParamHooks, EachLayerReportsItsMlpMatricesCompleteInsideItsBackward) {
  const ModelConfig cfg = dense_then_moe();
  Fixture f(cfg, RecomputeConfig{}, 3);
  Recorder rec(f.params);
  f.model.set_hooks(&rec);
  f.params.grad_flat().zero_(Stream::cpu());
  f.model.forward_backward(f.tokens, f.targets, 1.0f, 1.0f);
  f.model.set_hooks(nullptr);

  // Order: for layer l (region l + 1), B r, G r, b r -- in the backward's order L..1.
  for (int l = static_cast<int>(cfg.num_layers); l >= 1; --l) {
    const std::string r = std::to_string(l);
    auto at = [&](const std::string& ev) {
      return std::find(rec.events.begin(), rec.events.end(), ev) - rec.events.begin();
    };
    ASSERT_LT(at("G" + r), static_cast<long>(rec.events.size()))
        << "layer region " << r << " reported nothing";
    EXPECT_LT(at("B" + r), at("G" + r));
    EXPECT_LT(at("G" + r), at("b" + r));
  }
  // Every MLP matrix, and nothing else, was reported; each one's reported gradient is the final one, bitwise.
  int mlp_matrices = 0;
  for (int i = 0; i < static_cast<int>(f.params.entries().size()); ++i) {
    const std::string& name = f.params.entry(i).name;
    const bool mlp_matrix = name.find(".mlp.") != std::string::npos && f.params.entry(i).decay;
    mlp_matrices += mlp_matrix;
    EXPECT_EQ(rec.snapshot.count(i), mlp_matrix ? 1u : 0u) << name;
    if (!rec.snapshot.count(i)) continue;
    const std::vector<double> end = f.params.grad(i).to_vector<double>();
    ASSERT_EQ(end.size(), rec.snapshot[i].size());
    EXPECT_EQ(std::memcmp(end.data(), rec.snapshot[i].data(), end.size() * sizeof(double)), 0) << name;
    double norm = 0;
    for (double v : end) norm += v * v;
    EXPECT_GT(norm, 0.0) << name << ": a zero gradient would make the comparison vacuous";
  }
  // dense: gate_up, down; each MoE layer: router, experts' gate_up and down, shared expert's gate_up and
  // down.
  EXPECT_EQ(mlp_matrices, 2 + 2 * 5);
}
