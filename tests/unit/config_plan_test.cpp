// Parameter counts and FLOPs per token against published numbers (reference.md §3), and the size classes of
// the test models.
#include <gtest/gtest.h>

#include "config/load_config.h"
#include "config/plan.h"
#include "config_test_util.h"

namespace primus::config {
namespace {

ModelConfig llama3(int64_t h, int64_t layers, int64_t heads, int64_t ffn) {
  ModelConfig m;
  m.num_layers = layers;
  m.hidden_size = h;
  m.num_attention_heads = heads;
  m.num_query_groups = 8;
  m.kv_channels = h / heads;
  m.ffn_hidden_size = ffn;
  m.vocab_size = m.padded_vocab_size = 128256;
  return m;
}

TEST(ConfigPlan, Llama31_8BMatchesPublishedCounts) {
  ModelConfig m = llama3(4096, 32, 32, 14336);
  ParamCounts p = count_parameters(m);
  EXPECT_EQ(p.total, 8030261248);
  EXPECT_EQ(p.non_embedding, 7504924672);
  FlopsPerToken f = flops_per_token(m, 8192);
  EXPECT_NEAR(f.full / 1e9, 57.91, 0.01);
  EXPECT_NEAR(f.causal / 1e9, 51.47, 0.01);
}

TEST(ConfigPlan, Llama31_70BMatchesPublishedCounts) {
  ModelConfig m = llama3(8192, 80, 64, 28672);
  ParamCounts p = count_parameters(m);
  EXPECT_EQ(p.total, 70553706496);
  EXPECT_EQ(p.non_embedding, 69503033344);
  EXPECT_NEAR(flops_per_token(m, 8192).full / 1e9, 481.4, 0.1);
  EXPECT_NEAR(flops_per_token(m, 8192).causal / 1e9, 449.2, 0.1);
}

TEST(ConfigPlan, TiedEmbeddingsBiasesAndQkNorm) {
  ModelConfig m = llama3(64, 2, 4, 192);
  m.num_query_groups = 2;
  m.kv_channels = 16;
  m.vocab_size = m.padded_vocab_size = 100;
  ParamCounts base = count_parameters(m);
  m.untie_embeddings_and_output_weights = false;
  EXPECT_EQ(count_parameters(m).total, base.total - 100 * 64);
  EXPECT_EQ(count_parameters(m).lm_head, 0);
  m.add_qkv_bias = true;
  EXPECT_EQ(count_parameters(m).per_layer, base.per_layer + 4 * 16 + 2 * 2 * 16);
  m.qk_layernorm = true;
  EXPECT_EQ(count_parameters(m).per_layer, base.per_layer + 4 * 16 + 2 * 2 * 16 + 2 * 16);
}

TEST(ConfigPlan, BatchLayout) {
  TrainConfig t;
  t.model = llama3(4096, 32, 32, 14336);
  t.micro_batch_size = 1;
  t.global_batch_size = 16;
  t.data.seq_length = 8192;
  BatchLayout b = batch_layout(t);
  EXPECT_EQ(b.micro_batches, 16);
  EXPECT_EQ(b.tokens_per_step, 16 * 8192);
}

TEST(ConfigPlan, TestModelsHaveTheirSizeClass) {
  testing::TempDir dir;
  auto params_of = [&](const std::string& model) {
    std::string exp = dir.write(
        model + ".exp.yaml",
        "work_group: g\nuser_name: u\nexp_name: e\nworkspace: w\nmodules:\n  pre_trainer:\n"
        "    framework: megatron\n    config: pre_trainer.yaml\n    model: " +
            model + "\n    overrides:\n      mock_data: true\n      make_vocab_size_divisible_by: 8\n");
    ResolveOptions o;
    o.env = testing::fake_env();
    o.roots = std::vector<std::string>{testing::project_configs()};
    return count_parameters(load_config(exp, o).train.model).total;
  };
  for (const char* tiny : {"tiny_llama.yaml", "tiny_qwen3.yaml"}) {
    int64_t n = params_of(tiny);
    EXPECT_GE(n, 4000000) << tiny;
    EXPECT_LE(n, 20000000) << tiny;
  }
  for (const char* micro : {"micro_llama.yaml", "micro_qwen3.yaml"}) {
    int64_t n = params_of(micro);
    EXPECT_GE(n, 50000) << micro;
    EXPECT_LE(n, 1000000) << micro;
  }
  EXPECT_EQ(params_of("llama3.1_8B.yaml"), 8030261248);
  EXPECT_EQ(params_of("llama3.1_70B.yaml"), 70553706496);
  EXPECT_EQ(params_of("llama2_7B.yaml"), 6738415616);    // HF Llama-2-7b
  EXPECT_EQ(params_of("qwen2.5_7B.yaml"), 7615616512);   // HF Qwen2.5-7B
  EXPECT_EQ(params_of("qwen3_8B.yaml"), 8190735360);     // HF Qwen3-8B
  EXPECT_EQ(params_of("llama3.2_1B.yaml"), 1235814400);  // HF Llama-3.2-1B (tied)
}

}  // namespace
}  // namespace primus::config
