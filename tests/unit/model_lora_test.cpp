// LoRA adapters (model/lora_adapter.h) on the CPU reference in f64: the adapters' gradients against central
// finite differences in every recompute mode, the adapted model against the same model with the merged
// weights W + (alpha / r) B A, B = 0 reproducing the base model exactly, and the frozen base holding no
// gradient or optimizer state.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/llama_model.h"
#include "model/mtp.h"
#include "model_grad_util.h"
#include "ops/gemm.h"

namespace primus {
namespace {

using grad_test::tiny_model;

LoraConfig lora(std::vector<std::string> targets, int64_t rank = 3, double alpha = 5) {
  LoraConfig l;
  l.enabled = true;
  l.rank = rank;
  l.alpha = alpha;
  l.targets = std::move(targets);
  return l;
}

const std::vector<std::string> kAll = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};

// A frozen f64 base (perturbed norms, as the whole-model gradient tests) and its adapters, with B random
// (at initialisation B = 0, which would leave dA = 0 and check nothing).
struct LoraFixture {
  ModelConfig cfg;
  ParamStore base, adapters;
  std::unique_ptr<LlamaModel> model;
  Tensor tokens, targets;
  LoraFixture(const ModelConfig& c, const LoraConfig& l, const RecomputeConfig& rc, uint64_t seed,
              bool randomize_b = true)
      : cfg(c), base(ModelSpec::from_config(c)), adapters(adapter_spec(c, l)) {
    base.allocate_frozen(DType::kF64, Stream::cpu());
    base.initialize(seed, Stream::cpu());
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> nd(0.0, 0.2);
    for (const auto& e : base.entries())
      if (!e.decay) {
        double* w = base.master(base.find(e.name)).data<double>();
        for (int64_t j = 0; j < e.numel; ++j) w[j] += nd(rng);
      }
    adapters.allocate(DType::kF64, Stream::cpu(), DType::kF64);
    adapters.initialize(seed + 1, Stream::cpu());
    if (randomize_b)
      for (const auto& e : adapters.entries()) {
        double* w = adapters.master(adapters.find(e.name)).data<double>();
        std::normal_distribution<double> nb(0.0, 0.3);
        if (e.name.find("lora_B") != std::string::npos)
          for (int64_t j = 0; j < e.numel; ++j) w[j] = nb(rng);
      }
    model = std::make_unique<LlamaModel>(c, rc, base, Stream::cpu(), 8);
    model->attach_adapters(adapters);
    std::mt19937 r(static_cast<uint32_t>(seed));
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size) - 1);
    std::vector<int32_t> t(2 * 7), y(2 * 7);
    for (auto& v : t) v = tok(r);
    for (auto& v : y) v = tok(r);
    y[5] = -1;
    tokens = Tensor::from_vector(t, {2, 7});
    targets = Tensor::from_vector(y, {2, 7});
  }
  static ModelSpec adapter_spec(const ModelConfig& c, const LoraConfig& l) {
    ModelSpec s = ModelSpec::from_config(c);
    s.adapters = l;
    return s;
  }
  double loss() {
    double s = 0;
    for (double v : model->forward_loss(tokens, targets).to_vector<double>()) s += v;
    return s;
  }
};

void check_adapter_gradients(const ModelConfig& c, const LoraConfig& l, const RecomputeConfig& rc) {
  LoraFixture f(c, l, rc, 11);
  f.adapters.grad_flat().zero_(Stream::cpu());
  double analytic = 0;
  for (double v : f.model->forward_backward(f.tokens, f.targets, 1.0f).to_vector<double>()) analytic += v;
  EXPECT_NEAR(analytic, f.loss(), 1e-12 * std::abs(analytic));
  const int checked = grad_test::check_store_gradients(
      f.adapters, [&] { return f.loss(); }, 10, 3);
  EXPECT_EQ(checked, 10 * static_cast<int>(f.adapters.entries().size()));
}

// Recompute none, selective, and full (every layer).
RecomputeConfig recompute(const std::string& mode) {
  RecomputeConfig rc;
  if (mode == "selective") rc.granularity = "selective";
  if (mode == "full") {
    rc.granularity = "full";
    rc.method = "uniform";
    rc.num_layers = 1;
  }
  return rc;
}

TEST(Lora, AdapterGradientsMatchFiniteDifferences) {
  for (const char* mode : {"none", "selective", "full"}) {
    SCOPED_TRACE(mode);
    check_adapter_gradients(tiny_model(/*qk_norm=*/true, /*qkv_bias=*/true, /*tied=*/false), lora(kAll),
                            recompute(mode));
  }
  // Odd sizes, tied embeddings, a subset of the projections.
  ModelConfig odd = tiny_model(false, false, true);
  odd.hidden_size = 31;
  odd.ffn_hidden_size = 33;
  check_adapter_gradients(odd, lora({"o_proj", "gate_up_proj"}, 5, 7), RecomputeConfig{});
}

// LoRA dropout (lora.dropout, position "pre"): the mask is keyed by the micro-batch's origin, so a training
// forward with the same origin is a deterministic function of the adapters and finite differences apply.
void check_dropout_gradients(const ModelConfig& c, const LoraConfig& l) {
  for (const char* mode : {"none", "full"}) {  // (full: the recomputed forward must draw the same mask)
    SCOPED_TRACE(mode);
    LoraFixture f(c, l, recompute(mode), 13);
    const BatchOrigin origin{99, false, 7};
    auto training_loss = [&](const BatchOrigin& o) {
      LlamaModel::ChunkState st;
      st.train = true;  // the head's backward runs too, into frozen (absent) gradients: the adapters' stay
      f.model->chunk_forward(f.model->whole_model(), st, Tensor(), f.tokens, f.targets, 1.0f, 0.0f, o);
      double sum = 0;
      for (double v : st.losses.to_vector<double>()) sum += v;
      return sum;
    };
    f.adapters.grad_flat().zero_(Stream::cpu());
    double analytic = 0;
    for (double v :
         f.model->forward_backward(f.tokens, f.targets, 1.0f, 0.0f, nullptr, origin).to_vector<double>())
      analytic += v;
    EXPECT_NEAR(analytic, training_loss(origin), 1e-12 * std::abs(analytic));
    // The dropout acts: evaluation (no dropout) and another micro-batch's mask give other losses.
    EXPECT_GT(std::abs(f.loss() - analytic), 1e-6 * std::abs(analytic));
    EXPECT_GT(std::abs(training_loss(BatchOrigin{99, false, 8}) - analytic), 1e-6 * std::abs(analytic));
    grad_test::check_store_gradients(
        f.adapters, [&] { return training_loss(origin); }, 8, 5);
  }
}

TEST(Lora, DropoutGradientsMatchFiniteDifferences) {
  LoraConfig l = lora(kAll, 3, 5);
  l.dropout = 0.3;
  check_dropout_gradients(tiny_model(/*qk_norm=*/false, /*qkv_bias=*/true, /*tied=*/false), l);
}

// The adapted model is the base model with W + (alpha / r) B A; `projections` adapters per layer.
void check_equals_merged(const ModelConfig& c, const LoraConfig& l, uint64_t seed, int projections) {
  LoraFixture f(c, l, RecomputeConfig{}, seed);
  const double adapted = f.loss();
  ParamStore merged(ModelSpec::from_config(c));
  merged.allocate(DType::kF64, Stream::cpu(), DType::kF64);
  for (int i = 0; i < static_cast<int>(merged.entries().size()); ++i)
    merged.master(i).copy_from(f.base.master(i), Stream::cpu());
  int merged_count = 0;
  for (int i = 0; i < static_cast<int>(f.adapters.entries().size()); ++i) {
    const std::string& name = f.adapters.entry(i).name;
    const size_t at = name.find(".lora_A.weight");
    if (at == std::string::npos) continue;
    const std::string proj = name.substr(0, at);
    Tensor a = f.adapters.master(i), b = f.adapters.master(f.adapters.find(proj + ".lora_B.weight"));
    Tensor w = merged.master(merged.find(proj + ".weight"));
    ops::gemm(b, false, a, false, w, static_cast<float>(l.scale()), 1.0f, Stream::cpu());
    ++merged_count;
  }
  EXPECT_EQ(merged_count, projections * c.num_layers);
  LlamaModel plain(c, RecomputeConfig{}, merged, Stream::cpu(), 8);
  double reference = 0;
  for (double v : plain.forward_loss(f.tokens, f.targets).to_vector<double>()) reference += v;
  EXPECT_NEAR(adapted, reference, 1e-12 * std::abs(reference));
}

TEST(Lora, AdaptedModelEqualsMergedWeights) {
  check_equals_merged(tiny_model(true, true, false), lora(kAll, 4, 6), 5, 4);
}

TEST(Lora, FreshAdaptersLeaveTheBaseModelUnchanged) {
  const ModelConfig c = tiny_model(false, false, false);
  LoraFixture f(c, lora(kAll), RecomputeConfig{}, 9, /*randomize_b=*/false);
  for (const auto& e : f.adapters.entries()) {
    if (e.name.find("lora_B") == std::string::npos) continue;
    for (double v : f.adapters.master(f.adapters.find(e.name)).to_vector<double>())
      ASSERT_EQ(v, 0.0) << e.name;
  }
  LlamaModel plain(c, RecomputeConfig{}, f.base, Stream::cpu(), 8);
  const std::vector<double> a = f.model->forward_loss(f.tokens, f.targets).to_vector<double>();
  const std::vector<double> b = plain.forward_loss(f.tokens, f.targets).to_vector<double>();
  EXPECT_EQ(a, b);  // bitwise: t B^T adds exact zeros
}

TEST(Lora, FrozenBaseHoldsWeightsOnly) {
  const ModelConfig c = tiny_model(false, false, false);
  LoraFixture f(c, lora({"qkv_proj", "down_proj"}, 2, 2), RecomputeConfig{}, 1);
  EXPECT_TRUE(f.base.frozen());
  EXPECT_FALSE(f.base.grad_flat().defined());
  EXPECT_FALSE(f.base.adam_m_flat().defined());
  for (int i = 0; i < static_cast<int>(f.base.entries().size()); ++i) EXPECT_FALSE(f.base.grad(i).defined());
  // Per layer: qkv A [2, 16] + B [qkv_dim, 2], down A [2, 24] + B [16, 2].
  const ModelSpec s = ModelSpec::from_config(c);
  EXPECT_EQ(f.adapters.parameter_count(),
            c.num_layers * (2 * s.hidden + s.qkv_dim() * 2 + 2 * s.ffn + s.hidden * 2));
  // The backward runs on the frozen store and fills the adapters' gradients only.
  f.adapters.grad_flat().zero_(Stream::cpu());
  f.model->forward_backward(f.tokens, f.targets, 1.0f);
  double norm = 0;
  for (double v : f.adapters.grad_flat().to_vector<double>()) norm += v * v;
  EXPECT_GT(norm, 0);
  // The embedding and head regions hold no adapters.
  const auto& regions = f.adapters.regions();
  EXPECT_EQ(regions.front().end - regions.front().begin, 0);
  EXPECT_EQ(regions[static_cast<size_t>(f.adapters.head_region())].end -
                regions[static_cast<size_t>(f.adapters.head_region())].begin,
            0);
}

// Multi-latent attention (DeepSeek): adapters on MLA's own projections, with and without a query latent,
// kv_a_proj_with_mqa's B split like its rows (the latent and the rotary key are separate GEMMs), in every
// recompute mode (selective drops the normed latents the up-projections' adapters read).
const std::vector<std::string> kMlaAll = {"q_proj",    "q_a_proj", "q_b_proj",     "kv_a_proj_with_mqa",
                                          "kv_b_proj", "o_proj",   "gate_up_proj", "down_proj"};

TEST(LoraMla, AdapterGradientsMatchFiniteDifferences) {
  for (const int64_t q_lora : {0, 6}) {
    for (const char* mode : {"none", "selective", "full"}) {
      SCOPED_TRACE(testing::Message() << "q_lora_rank " << q_lora << ", recompute " << mode);
      check_adapter_gradients(grad_test::tiny_mla(q_lora, /*tied=*/false), lora(kMlaAll), recompute(mode));
    }
  }
}

// Multi-token prediction: the depths run frozen on the base (no adapters of their own), and their loss
// reaches the trunk's adapters through the hidden states they read: finite differences of the loss with the
// MTP term match the adapters' gradients.
TEST(LoraMla, MtpDepthsRunFrozenAndTheirLossTrainsTheTrunksAdapters) {
  ModelConfig c = grad_test::tiny_mla(6, /*tied=*/false);
  c.mtp_num_layers = 1;
  c.mtp_loss_scaling_factor = 0.7;
  LoraFixture f(c, lora(kMlaAll), RecomputeConfig{}, 31);
  auto full_loss = [&] {
    double total = 0;
    for (double v : f.model->forward_loss(f.tokens, f.targets, /*with_mtp=*/true).to_vector<double>())
      total += v;
    int64_t counted = 0;
    for (int32_t t : f.targets.to_vector<int32_t>()) counted += t >= 0;
    const int64_t depth_counted = mtp_batch(f.tokens, f.targets, 1).counts[0];
    double mtp = 0;
    for (double v : f.model->mtp_losses()[0].to_vector<double>()) mtp += v;
    return total + c.mtp_loss_scaling_factor * static_cast<double>(counted) /
                       static_cast<double>(depth_counted) * mtp;
  };
  f.adapters.grad_flat().zero_(Stream::cpu());
  double main = 0;
  for (double v : f.model->forward_backward(f.tokens, f.targets, 1.0f).to_vector<double>()) main += v;
  EXPECT_GT(full_loss(), main + 1e-3);  // the MTP term is there
  EXPECT_EQ(grad_test::check_store_gradients(f.adapters, full_loss, 6, 9),
            6 * static_cast<int>(f.adapters.entries().size()));
  for (const auto& e : f.adapters.entries()) EXPECT_EQ(e.name.rfind("mtp.", 0), std::string::npos) << e.name;
}

// Dropout: the adapters whose input gradient joins one the frozen GEMMs already wrote (the direct query's
// and q_a's into dh after kv_a's) mask their own share only.
TEST(LoraMla, DropoutGradientsMatchFiniteDifferences) {
  for (const int64_t q_lora : {0, 6}) {
    SCOPED_TRACE(q_lora);
    LoraConfig l = lora(kMlaAll, 3, 5);
    l.dropout = 0.25;
    check_dropout_gradients(grad_test::tiny_mla(q_lora, /*tied=*/true), l);
  }
}

TEST(LoraMla, AdaptedModelEqualsMergedWeights) {
  for (const int64_t q_lora : {0, 6}) {
    SCOPED_TRACE(q_lora);
    // q (or q_a + q_b), kv_a, kv_b, o and the dense MLP's two, per layer.
    check_equals_merged(grad_test::tiny_mla(q_lora, false), lora(kMlaAll, 2, 3), 21, q_lora > 0 ? 7 : 6);
  }
}
}  // namespace
}  // namespace primus
