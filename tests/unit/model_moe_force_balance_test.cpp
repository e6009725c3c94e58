// Forced MoE load balancing (MoeConfig::force_balance, docs/moe.md) in the MoE layer and the whole model,
// f64 on the CPU reference ops:
// - "uniform" is Megatron's straight-through RandomSTE: a layer routing by random logits R gives bitwise the
//   output and the gradients of a layer whose real logits are R (built by making the input's rows unit
//   vectors), except that the input gradient goes through its own router weight; the draws are keyed by the
//   batch's origin (same origin: same routing; another sample, evaluation: other draws; any micro-batch
//   split: the same draws).
// - "even" dispatches slot j of token t to expert (n(t) k + j) % E with the j-th largest real weight (the
//   layer's output recomputed by hand), balances exactly, keeps the real routing's gradient (central
//   differences) and feeds the expert bias the real routing's loads.
// - "round_robin" (TorchTitan) dispatches the same way weighed by the router's probabilities of those
//   experts; its gradient is checked the same way.
// - Every recompute mode gives bitwise the same gradients under each mode.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "model/moe_mlp.h"
#include "unit/model_grad_util.h"

using namespace primus;
using namespace primus::grad_test;

namespace {

ModelConfig tiny_moe(int64_t experts, int64_t topk, std::vector<char> layers, const std::string& force) {
  ModelConfig m = tiny_model(/*qk_norm=*/false, /*qkv_bias=*/false, /*tied=*/false);
  m.num_layers = static_cast<int64_t>(layers.size());
  m.moe.num_experts = experts;
  m.moe.topk = topk;
  m.moe.ffn_hidden_size = 8;
  m.moe.layer_is_moe = std::move(layers);
  m.moe.aux_loss_coeff = 0.3;  // large, so the balancing gradient is not lost under the token losses'
  m.moe.z_loss_coeff = 0.05;
  m.moe.force_balance = force;
  return m;
}

// Layer 0 of a one-layer MoE model on its own, f64 parameters initialised from `seed`.
struct Layer {
  ModelSpec spec;
  ParamStore params;
  MoeMlp mlp;
  Layer(const ModelConfig& c, uint64_t seed)
      : spec(ModelSpec::from_config(c)), params(spec), mlp(spec, params, 0) {
    params.allocate(DType::kF64, Stream::cpu(), DType::kF64);
    params.initialize(seed, Stream::cpu());
    params.grad_flat().zero_(Stream::cpu());
  }
  double* weight(const std::string& name) {
    return params.master(params.find("layers.0.mlp." + name)).data<double>();
  }
  std::vector<double> grad(const std::string& name) {
    return params.grad(params.find("layers.0.mlp." + name)).to_vector<double>();
  }
};

StepContext context(int64_t batch, int64_t seq, BatchOrigin origin = {7, false, 40}) {
  StepContext ctx;
  ctx.stream = Stream::cpu();
  ctx.act_dtype = DType::kF64;
  ctx.batch = batch;
  ctx.seq = seq;
  ctx.aux_grad_scale = 1.0f;
  ctx.origin = origin;
  return ctx;
}

Tensor random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (double& x : v) x = nd(rng);
  return Tensor::from_vector(v, {rows, cols});
}

std::vector<double> host(const Tensor& t) {
  return t.to_vector<double>();
}

// The expert that plan row `row` belongs to.
int64_t expert_of_row(const std::vector<int32_t>& offsets, int32_t row) {
  int64_t e = 0;
  while (row >= offsets[e + 1]) ++e;
  return e;
}

// y[t] = sum_j w[t][j] expert_{ex[t][j]}(h[t]) computed directly from the f64 weights (SwiGLU experts: gate
// rows then up rows of gate_up [E, 2F, d], down [E, d, F]).
std::vector<double> expected_output(Layer& L, const Tensor& h, const std::vector<int32_t>& ex,
                                    const std::vector<double>& w, int64_t k) {
  const int64_t n = h.size(0), d = h.size(1), F = L.spec.moe.ffn_hidden_size;
  const double* gu = L.weight("experts.gate_up_proj.weight");
  const double* dn = L.weight("experts.down_proj.weight");
  const std::vector<double> hv = host(h);
  std::vector<double> y(static_cast<size_t>(n * d), 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = ex[t * k + j];
      std::vector<double> act(static_cast<size_t>(F));
      for (int64_t f = 0; f < F; ++f) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < d; ++c) {
          g += gu[(e * 2 * F + f) * d + c] * hv[t * d + c];
          u += gu[(e * 2 * F + F + f) * d + c] * hv[t * d + c];
        }
        act[f] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int64_t c = 0; c < d; ++c) {
        double o = 0;
        for (int64_t f = 0; f < F; ++f) o += dn[(e * d + c) * F + f] * act[f];
        y[t * d + c] += w[t * k + j] * o;
      }
    }
  return y;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return a.size() == b.size() ? m : INFINITY;
}

}  // namespace

TEST(ModelMoeForceBalance, UniformIsMegatronsStraightThroughEstimator) {
  const int64_t B = 2, S = 7, n = B * S, d = 16, E = 5, k = 2;
  Layer A(tiny_moe(E, k, {1}, "uniform"), 11), Bl(tiny_moe(E, k, {1}, "none"), 11);
  // h: unit rows, so the router's logits h W^T are exactly columns of its weight [E, d].
  Tensor h = Tensor::zeros({n, d}, DType::kF64);
  for (int64_t t = 0; t < n; ++t) h.data<double>()[t * d + t] = 1.0;
  const StepContext ctx = context(B, S);
  MoeActivations aa, ab;
  Tensor ya = Tensor::empty({n, d}, DType::kF64), yb = Tensor::empty({n, d}, DType::kF64);
  A.mlp.forward(ctx, h, ya, aa, true);
  const std::vector<double> R = host(aa.logits);
  const double* wa = A.weight("router.weight");
  int64_t replaced = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t e = 0; e < E; ++e) replaced += R[t * E + e] != wa[e * d + t];
  EXPECT_EQ(replaced, n * E);  // the logits are not the GEMM's
  // B routes for real with W_B[e][t] = R[t][e]: its logits are R.
  double* wb = Bl.weight("router.weight");
  for (int64_t t = 0; t < n; ++t)
    for (int64_t e = 0; e < E; ++e) wb[e * d + t] = R[t * E + e];
  Bl.mlp.forward(ctx, h, yb, ab, true);
  ASSERT_EQ(host(ab.logits), R);
  EXPECT_EQ(aa.ids.to_vector<int32_t>(), ab.ids.to_vector<int32_t>());
  EXPECT_EQ(host(ya), host(yb));
  EXPECT_EQ(A.mlp.last_losses(ctx.stream), Bl.mlp.last_losses(ctx.stream));  // aux and z on R

  Tensor dy = random_matrix(n, d, 5);
  Tensor dha = Tensor::empty({n, d}, DType::kF64), dhb = Tensor::empty({n, d}, DType::kF64);
  A.mlp.backward(ctx, dy, h, aa, dha);
  Bl.mlp.backward(ctx, dy, h, ab, dhb);
  for (const char* w : {"experts.gate_up_proj.weight", "experts.down_proj.weight"})
    EXPECT_EQ(A.grad(w), Bl.grad(w)) << w;
  // The router weight's gradient is dR^T h in both (straight through): with unit rows, G[e][t] = dR[t][e].
  const std::vector<double> ga = A.grad("router.weight");
  EXPECT_EQ(ga, Bl.grad("router.weight"));
  double norm = 0;
  for (double g : ga) norm += g * g;
  EXPECT_GT(norm, 0.0);
  // The input's gradient goes through each layer's own weight: dh_A - dh_B = dR (W_A - W_B).
  const std::vector<double> da = host(dha), db = host(dhb);
  std::vector<double> want(static_cast<size_t>(n * d)), got(static_cast<size_t>(n * d));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < d; ++c) {
      double acc = 0;
      for (int64_t e = 0; e < E; ++e) acc += ga[e * d + t] * (wa[e * d + c] - wb[e * d + c]);
      want[t * d + c] = acc;
      got[t * d + c] = da[t * d + c] - db[t * d + c];
    }
  EXPECT_LT(max_abs_diff(got, want), 1e-12);
}

TEST(ModelMoeForceBalance, UniformDrawsAreKeyedByTheBatchOrigin) {
  const int64_t S = 7, d = 16, E = 8, k = 2;
  Layer L(tiny_moe(E, k, {1}, "uniform"), 3);
  Tensor h = random_matrix(2 * S, d, 9);
  auto run = [&](int64_t batch, const Tensor& x, BatchOrigin o) {
    MoeActivations a;
    Tensor y = Tensor::empty({batch * S, d}, DType::kF64);
    L.mlp.forward(context(batch, S, o), x, y, a, false);
    return std::make_pair(host(a.logits), a.ids.to_vector<int32_t>());
  };
  const auto base = run(2, h, {7, false, 40});
  EXPECT_EQ(run(2, h, {7, false, 40}), base);  // reproducible
  // The logits do not depend on h: a micro-batch of one sequence draws the rows of its sample.
  const auto first = run(1, h.slice(0, S), {7, false, 40}),
             second = run(1, h.slice(S, 2 * S), {7, false, 41});
  std::vector<double> joined = first.first;
  joined.insert(joined.end(), second.first.begin(), second.first.end());
  EXPECT_EQ(joined, base.first);
  // Another sample, seed or evaluation: other draws, other routing.
  for (const BatchOrigin& o :
       {BatchOrigin{7, false, 42}, BatchOrigin{8, false, 40}, BatchOrigin{7, true, 40}}) {
    const auto other = run(2, h, o);
    int64_t same = 0;
    for (size_t i = 0; i < other.first.size(); ++i) same += other.first[i] == base.first[i];
    EXPECT_EQ(same, 0);
    EXPECT_NE(other.second, base.second);
  }
}

TEST(ModelMoeForceBalance, EvenDispatchesRoundRobinWithTheSortedRealWeights) {
  const int64_t B = 2, S = 7, n = B * S, d = 16;
  // Softmax (the router's order is the weights' already), and sigmoid with an expert bias, where selection
  // order and weight order differ, so the reordering matters.
  struct Case {
    int64_t E, k;
    bool sigmoid_bias;
  };
  for (const Case& cs : {Case{4, 2, false}, Case{5, 2, false}, Case{6, 3, true}}) {
    const int64_t E = cs.E, k = cs.k;
    SCOPED_TRACE(fmt::format("E={} k={}{}", E, k, cs.sigmoid_bias ? " sigmoid + bias" : ""));
    ModelConfig ce = tiny_moe(E, k, {1}, "even");
    if (cs.sigmoid_bias) {
      ce.moe.score_function = "sigmoid";
      ce.moe.normalize_topk = true;
      ce.moe.expert_bias = true;
    }
    ModelConfig cr = ce;
    cr.moe.force_balance = "none";
    Layer even(ce, 21), real(cr, 21);
    if (cs.sigmoid_bias) {
      const Tensor bias = random_matrix(1, E, 3);
      for (Layer* L : {&even, &real})
        for (int64_t e = 0; e < E; ++e) L->weight("router.expert_bias")[e] = 0.5 * bias.data<double>()[e];
    }
    Tensor h = random_matrix(n, d, 13);
    const StepContext ctx = context(B, S);
    MoeActivations ae, ar;
    Tensor ye = Tensor::empty({n, d}, DType::kF64), yr = Tensor::empty({n, d}, DType::kF64);
    even.mlp.forward(ctx, h, ye, ae, true);
    real.mlp.forward(ctx, h, yr, ar, true);
    // ids / probs: the real routing, each row ordered by descending weight.
    const std::vector<int32_t> ie = ae.ids.to_vector<int32_t>(), ir = ar.ids.to_vector<int32_t>();
    const std::vector<double> pe = host(ae.probs), pr = host(ar.probs);
    std::vector<int32_t> rr(static_cast<size_t>(n * k));
    int64_t reordered = 0;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t nt = (t % S) * B + t / S;  // Megatron's sequence-major token number
      for (int64_t j = 0; j < k; ++j) rr[t * k + j] = static_cast<int32_t>((nt * k + j) % E);
      std::vector<std::pair<double, int32_t>> want, got;
      for (int64_t j = 0; j < k; ++j) {
        want.emplace_back(pr[t * k + j], ir[t * k + j]);
        got.emplace_back(pe[t * k + j], ie[t * k + j]);
      }
      const auto routed = want;
      std::stable_sort(want.begin(), want.end(), [](auto& a, auto& b) { return a.first > b.first; });
      reordered += want != routed;
      EXPECT_EQ(got, want) << t;
    }
    if (cs.sigmoid_bias) EXPECT_GT(reordered, 0);
    // The plan puts slot (t, j) in round-robin expert rr[t][j]'s block.
    const std::vector<int32_t> offsets = ae.plan.offsets.to_vector<int32_t>();
    const std::vector<int32_t> slot_row = ae.plan.slot_row.to_vector<int32_t>();
    for (int64_t sl = 0; sl < n * k; ++sl) EXPECT_EQ(expert_of_row(offsets, slot_row[sl]), rr[sl]) << sl;
    // The output: sum_j sorted weight j x expert rr[t][j], computed by hand.
    EXPECT_LT(max_abs_diff(host(ye), expected_output(even, h, rr, pe, k)), 1e-12);
    // Exact balance: 28 entries over 4 experts is 7 each; over 5, 6 or 5; 42 over 6, 7 each.
    const MoeLayerStats st = even.mlp.take_stats(ctx.stream);
    EXPECT_EQ(st.routed, n * k);
    EXPECT_EQ(st.dropped, 0);
    EXPECT_EQ(st.max_load, (n * k + E - 1) / E);
    if ((n * k) % E == 0) {
      for (int64_t r : ae.rows) EXPECT_EQ(r, n * k / E);
    }
    // The balancing losses are the real routing's.
    EXPECT_EQ(even.mlp.last_losses(ctx.stream), real.mlp.last_losses(ctx.stream));
  }
}

TEST(ModelMoeForceBalance, RoundRobinWeighsTheDispatchWithTheRoutersProbabilities) {
  const int64_t B = 2, S = 7, n = B * S, d = 16, E = 6, k = 3;
  ModelConfig c = tiny_moe(E, k, {1}, "round_robin");
  c.moe.score_function = "sigmoid";
  c.moe.normalize_topk = true;
  c.moe.topk_scaling_factor = 2.5;
  Layer L(c, 5);
  Tensor h = random_matrix(n, d, 17);
  const StepContext ctx = context(B, S);
  MoeActivations a;
  Tensor y = Tensor::empty({n, d}, DType::kF64);
  L.mlp.forward(ctx, h, y, a, true);
  // TorchTitan: batch-major arange, sigmoid of the router's logits at those experts, renormalised, x 2.5.
  std::vector<int32_t> rr(static_cast<size_t>(n * k));
  std::vector<double> w(static_cast<size_t>(n * k));
  const std::vector<double> lg = host(a.logits);
  for (int64_t t = 0; t < n; ++t) {
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      rr[t * k + j] = static_cast<int32_t>((t * k + j) % E);
      sum += w[t * k + j] = 1.0 / (1.0 + std::exp(-lg[t * E + rr[t * k + j]]));
    }
    for (int64_t j = 0; j < k; ++j) w[t * k + j] = 2.5 * w[t * k + j] / (sum + 1e-20);
  }
  EXPECT_EQ(a.ids.to_vector<int32_t>(), rr);
  EXPECT_LT(max_abs_diff(host(a.probs), w), 1e-14);
  EXPECT_LT(max_abs_diff(host(y), expected_output(L, h, rr, w, k)), 1e-12);
  for (int64_t r : a.rows) EXPECT_EQ(r, n * k / E);
}

// Central differences of the whole model: the router's gradient is right with the changed dispatch.
TEST(ModelMoeForceBalance, EvenGradientsMatchFiniteDifferences) {
  check_gradients(tiny_moe(5, 2, {1, 1}, "even"), {});
  ModelConfig m = tiny_moe(8, 2, {1, 1}, "even");  // DeepSeek-style routing, capacity on the dispatch
  m.moe.score_function = "sigmoid";
  m.moe.normalize_topk = true;
  m.moe.num_groups = 4;
  m.moe.group_topk = 2;
  m.moe.topk_scaling_factor = 2.5;
  m.moe.shared_ffn_hidden_size = 8;
  m.moe.load_balancing = "seq_aux_loss";
  m.moe.capacity_factor = 0.8;  // 28 entries / 8 x 0.8 -> capacity 3 of 3 or 4 per expert: drops
  check_gradients(m, {});
  ModelConfig q = tiny_moe(6, 3, {1, 0}, "even");  // Qwen2-MoE: the full softmax weighs, not renormalised
  q.moe.pre_softmax = true;
  q.moe.shared_ffn_hidden_size = 8;
  q.moe.shared_expert_gate = true;
  check_gradients(q, {});
}

TEST(ModelMoeForceBalance, RoundRobinGradientsMatchFiniteDifferences) {
  ModelConfig m = tiny_moe(6, 3, {1, 1}, "round_robin");
  m.moe.score_function = "sigmoid";
  m.moe.normalize_topk = true;
  m.moe.topk_scaling_factor = 2.5;
  check_gradients(m, {});
  ModelConfig s = tiny_moe(6, 2, {1, 0}, "round_robin");  // TorchTitan's softmax: over all experts
  s.moe.pre_softmax = true;
  s.moe.normalize_topk = false;
  check_gradients(s, {});
}

TEST(ModelMoeForceBalance, RecomputeModesGiveBitwiseIdenticalGradients) {
  for (const char* mode : {"uniform", "even", "round_robin"}) {
    SCOPED_TRACE(mode);
    ModelConfig c = tiny_moe(6, 2, {1, 0, 1}, mode);
    c.moe.shared_ffn_hidden_size = 8;
    auto grads = [&](const std::string& gran, const std::string& method) {
      RecomputeConfig rc;
      rc.granularity = gran;
      rc.method = method;
      rc.num_layers = 2;
      Fixture f(c, rc, 5);
      f.params.grad_flat().zero_(Stream::cpu());
      f.model.forward_backward(f.tokens, f.targets, 0.5f, 0.25f, nullptr, BatchOrigin{9, false, 12});
      return f.params.grad_flat().to_vector<double>();
    };
    const auto base = grads("", "");
    EXPECT_EQ(base, grads("full", "uniform"));
    EXPECT_EQ(base, grads("selective", ""));
  }
}

// The expert bias follows the router's own choices under "even" (Primus counts the routing map before its
// override): the update equals the real routing's; under "round_robin" it follows the balanced dispatch and
// stays put.
TEST(ModelMoeForceBalance, ExpertBiasLoads) {
  auto bias_after_step = [](const std::string& mode) {
    ModelConfig c = tiny_moe(4, 1, {1}, mode);
    c.moe.expert_bias = true;
    c.moe.bias_update_rate = 0.125;
    ParamStore params(ModelSpec::from_config(c));
    params.allocate(DType::kF32, Stream::cpu());
    params.initialize(3, Stream::cpu());
    LlamaModel model(c, {}, params, Stream::cpu(), 8);
    std::vector<int32_t> t(16), y(16);
    for (int i = 0; i < 16; ++i) t[i] = y[i] = (i * 7) % 23;
    params.grad_flat().zero_(Stream::cpu());
    model.forward_backward(Tensor::from_vector(t, {2, 8}), Tensor::from_vector(y, {2, 8}), 1.0f, 1.0f);
    const MoeLayerStats st = model.take_moe_stats()[0];
    model.end_step();
    return std::make_pair(params.master(params.find("layers.0.mlp.router.expert_bias")).to_vector<float>(),
                          st.max_load);
  };
  const auto real = bias_after_step("none"), even = bias_after_step("even"),
             rr = bias_after_step("round_robin");
  EXPECT_EQ(even.first, real.first);
  EXPECT_EQ(even.second, 4);  // 16 entries over 4 experts, dispatched evenly
  if (real.second > 4) EXPECT_NE(real.first, std::vector<float>(4, 0.0f));
  EXPECT_EQ(rr.first, std::vector<float>(4, 0.0f));
  EXPECT_EQ(rr.second, 4);
}
