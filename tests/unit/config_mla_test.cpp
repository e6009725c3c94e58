// Multi-latent attention, YaRN and multi-token prediction in the config (docs/mla.md): the DeepSeek presets
// resolve to the published sizes, bad input is refused before any memory is touched with the key named, MLA
// sizes left behind by a DeepSeek preset under `multi_latent_attention: false` are inert with a warning,
// TorchTitan's deepseek_v3 flavors map onto the same ModelConfig, and the FLOP count carries MLA's Dqk != Dv
// attention and the MTP depths.
#include <gtest/gtest.h>

#include <cmath>

#include "config/load_config.h"
#include "config/plan.h"
#include "config/torchtitan_flavors.h"
#include "config_test_util.h"

namespace primus::config {
namespace {

struct Loader {
  testing::TempDir dir;
  ResolvedConfig load(const std::string& model, const std::string& overrides,
                      std::vector<std::string> cli = {}, const std::string& framework = "megatron") {
    const std::string text =
        "work_group: g\nuser_name: u\nexp_name: e\nworkspace: ./w\nmodules:\n  pre_trainer:\n"
        "    framework: " +
        framework + "\n    config: pre_trainer.yaml\n    model: " + model + "\n    overrides:\n" +
        (framework == "megatron" ? "      mock_data: true\n      seq_length: 256\n" : "      device: cpu\n") +
        overrides;
    ResolveOptions o;
    o.env = testing::fake_env();
    o.roots = std::vector<std::string>{testing::project_configs()};
    o.cli_overrides = std::move(cli);
    return load_config(dir.write("exp.yaml", text), o);
  }
  std::string error(const std::string& model, const std::string& overrides,
                    std::vector<std::string> cli = {}) {
    return testing::config_error_of([&] { load(model, overrides, std::move(cli)); });
  }
};

using testing::expect_has;

TEST(ConfigMla, DeepSeekPresetsHaveThePublishedSizes) {
  Loader l;
  // DeepSeek-V3 (HF model card): 671 B parameters without the MTP module, 37 B activated per token
  // (ours: 36.6 B non-embedding + 0.9 B embedding); with its one MTP depth (sharing the embedding and the
  // head) 682.6 B.
  ResolvedConfig v3 = l.load("deepseek_v3.yaml", "");
  const ModelConfig& m = v3.train.model;
  EXPECT_TRUE(m.mla.enabled);
  EXPECT_EQ(m.mla.q_lora_rank, 1536);
  EXPECT_EQ(m.mtp_num_layers, 1);
  EXPECT_EQ(m.family, "deepseek_v3");
  const ParamCounts with_mtp = count_parameters(m);
  ModelConfig main_only = m;
  main_only.mtp_num_layers = 0;
  const ParamCounts p = count_parameters(main_only);
  EXPECT_EQ(p.total, 671026419200);
  EXPECT_EQ(p.per_layer, 11507286272);  // one MLA + MoE layer
  EXPECT_NEAR((p.active_non_embedding + p.embedding) / 1e9, 37.5, 0.1);
  EXPECT_EQ(with_mtp.total - p.total, 2 * 7168LL * 7168 + 3 * 7168 + 11507286272);
  // DeepSeek-V2-Lite: 15.7 B parameters, 2.4 B activated (non-embedding); DeepSeek-V2: 236 B, 21 B.
  const ParamCounts lite = count_parameters(l.load("deepseek_v2_lite.yaml", "").train.model);
  EXPECT_NEAR(lite.total / 1e9, 15.71, 0.01);
  EXPECT_NEAR(lite.active_non_embedding / 1e9, 2.45, 0.01);
  const ParamCounts v2 = count_parameters(l.load("deepseek_v2.yaml", "").train.model);
  EXPECT_NEAR(v2.total / 1e9, 235.7, 0.1);
  EXPECT_NEAR(v2.active_non_embedding / 1e9, 20.9, 0.1);
  // The TorchTitan-16B-like preset: V2-Lite's sizes, balanced by the expert bias only.
  const ModelConfig t16 = l.load("deepseek_v3_16B.yaml", "").train.model;
  EXPECT_EQ(count_parameters(t16).total, lite.total + 26 * 64);  // + the expert bias
  EXPECT_TRUE(t16.moe.expert_bias);
  EXPECT_EQ(t16.moe.aux_loss_coeff, 0.0);
}

TEST(ConfigMla, YarnKeysAndDefaults) {
  Loader l;
  const MlaConfig a = l.load("deepseek_v2_lite.yaml", "").train.model.mla;
  EXPECT_TRUE(a.yarn);
  EXPECT_EQ(a.rotary_scaling_factor, 40.0);
  EXPECT_EQ(a.original_max_position, 4096);
  EXPECT_EQ(a.beta_fast, 32.0);
  EXPECT_EQ(a.beta_slow, 1.0);
  EXPECT_EQ(a.mscale, 0.707);
  EXPECT_EQ(a.mscale_all_dim, 0.707);
  // rope_type: rope keeps plain RoPE on the rotary slice; null original context is Megatron's 4096.
  ResolvedConfig r = l.load("deepseek_v2_lite.yaml",
                            "      rope_type: rope\n      original_max_position_embeddings: null\n");
  EXPECT_FALSE(r.train.model.mla.yarn);
  EXPECT_EQ(r.train.model.mla.original_max_position, 4096);
}

TEST(ConfigMla, BadInputNamesTheKey) {
  Loader l;
  // MLA sizes written by the experiment without turning MLA on.
  expect_has(l.error("micro_llama.yaml", "      q_lora_rank: 64\n"),
             {"q_lora_rank=64 is set but multi_latent_attention is false", "exp.yaml:", "rule"});
  expect_has(l.error("micro_llama.yaml", "", {"--kv_lora_rank", "64"}),
             {"kv_lora_rank=64 is set but multi_latent_attention is false", "command line"});
  // Non-positive or odd sizes.
  expect_has(l.error("micro_deepseek_mla.yaml", "      qk_pos_emb_head_dim: 7\n"),
             {"qk_pos_emb_head_dim 7 is odd"});
  expect_has(l.error("micro_deepseek_mla.yaml", "      kv_lora_rank: 0\n"), {"kv_lora_rank"});
  expect_has(l.error("micro_deepseek_mla.yaml", "      v_head_dim: -4\n"), {"v_head_dim"});
  expect_has(l.error("micro_deepseek_mla.yaml", "      qk_head_dim: null\n"),
             {"qk_head_dim is null with multi_latent_attention on"});
  expect_has(l.error("micro_deepseek_mla.yaml", "      q_lora_rank: 0\n"), {"q_lora_rank"});
  // Features around MLA that are not here.
  expect_has(l.error("micro_llama.yaml", "      rope_type: yarn\n"),
             {"not supported yet: rope_type yarn without multi_latent_attention"});
  expect_has(l.error("micro_deepseek_mla.yaml", "      qk_layernorm: false\n"),
             {"not supported yet: multi_latent_attention without the latent RMSNorms"});
  expect_has(l.error("micro_deepseek_mla.yaml", "      use_rope_scaling: true\n"), {"use_rope_scaling"});
  expect_has(l.error("micro_deepseek_mla.yaml", "      mla_use_output_gate: true\n"),
             {"not supported yet: mla_use_output_gate=true"});
  // MTP.
  expect_has(l.error("micro_deepseek_mla.yaml", "      mtp_loss_scaling_factor: 0\n"),
             {"mtp_loss_scaling_factor 0 with mtp_num_layers 1", "no gradient"});
  expect_has(l.error("micro_llama.yaml", "      mtp_num_layers: -1\n"), {"mtp_num_layers"});
  expect_has(l.error("micro_deepseek_mla.yaml", "      mtp_use_repeated_layer: true\n"),
             {"not supported yet: mtp_use_repeated_layer=true"});
}

TEST(ConfigMla, PresetSizesUnderMlaOffAreInertWithAWarning) {
  // Primus's DeepSeek experiments switch MLA off in their overrides on top of the MLA preset: standard
  // attention with the preset's kv_channels, the MLA sizes left behind (as Megatron ignores them).
  Loader l;
  ResolvedConfig r = l.load("deepseek_v2_lite.yaml", "      multi_latent_attention: false\n");
  EXPECT_FALSE(r.train.model.mla.enabled);
  EXPECT_EQ(r.train.model.kv_channels, 128);
  bool warned = false;
  for (const std::string& w : r.warnings) warned = warned || w.find("kv_lora_rank=512") != std::string::npos;
  EXPECT_TRUE(warned);
}

// LoRA target names on a multi-latent-attention model: Megatron's MLA module names and the HF DeepSeek ones
// map to MLA's projections; linear_qkv (in Primus's default list) and the query projection of the other
// q_lora_rank adapt nothing there, as Megatron's module matcher, with a warning; a name of no projection
// fails.
TEST(ConfigMla, LoraTargetsNameMlaProjections) {
  Loader l;
  const std::vector<std::string> dense = {"--num_experts", "null", "--mtp_num_layers", "0"};
  auto with = [](const std::string& targets) {
    return "      stage: sft\n      sft_dataset_name: ./sft.jsonl\n      lora:\n        enabled: true\n" +
           (targets.empty() ? std::string() : "        target_modules: " + targets + "\n");
  };
  using Names = std::vector<std::string>;
  const Names five = {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"};
  EXPECT_EQ(l.load("micro_deepseek_mla.yaml",
                   with("[linear_q_down_proj, linear_q_up_proj, linear_kv_down_proj, linear_kv_up_proj, "
                        "linear_proj]"),
                   dense)
                .train.lora.targets,
            five);
  EXPECT_EQ(l.load("micro_deepseek_mla.yaml",
                   with("[q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj]"), dense)
                .train.lora.targets,
            five);
  Names all = five;
  all.insert(all.end(), {"gate_up_proj", "down_proj"});
  EXPECT_EQ(l.load("micro_deepseek_mla.yaml", with(""), dense).train.lora.targets, all);
  // Without a query latent the query projection is q_proj.
  std::vector<std::string> direct = dense;
  direct.insert(direct.end(), {"--q_lora_rank", "null"});
  EXPECT_EQ(l.load("micro_deepseek_mla.yaml", with("[linear_q_proj, linear_kv_up_proj]"), direct)
                .train.lora.targets,
            (Names{"q_proj", "kv_b_proj"}));

  ResolvedConfig r = l.load("micro_deepseek_mla.yaml",
                            with("[linear_qkv, linear_q_proj, linear_proj, linear_fc1, linear_fc2]"), dense);
  EXPECT_EQ(r.train.lora.targets, (Names{"o_proj", "gate_up_proj", "down_proj"}));
  bool warned = false;
  for (const std::string& w : r.warnings)
    warned = warned ||
             (w.find("linear_q_proj, linear_qkv match no projection of this model") != std::string::npos &&
              w.find("linear_q_down_proj") != std::string::npos);
  EXPECT_TRUE(warned) << ::testing::PrintToString(r.warnings);

  expect_has(l.error("micro_deepseek_mla.yaml", with("[linear_qkv]"), dense),
             {"lora.target_modules [linear_qkv] adapts no projection of the model"});
  expect_has(l.error("micro_deepseek_mla.yaml", with("[linear_q_down_proj, wq]"), dense),
             {"'wq', which matches no projection"});
  expect_has(l.error("micro_llama.yaml", with("[linear_kv_down_proj]")),
             {"'linear_kv_down_proj', which matches no projection"});
  // With MTP depths (which run frozen) and the MoE layers' experts frozen: attention targets load.
  EXPECT_EQ(l.load("micro_deepseek_mla.yaml", with("[linear_proj]")).train.lora.targets, (Names{"o_proj"}));
}

TEST(ConfigMla, TorchTitanDeepSeekV3Flavors) {
  Loader l;
  auto tt = [&](const std::string& flavor, int64_t seq, const std::string& extra = "") {
    return l
        .load("micro_llama.yaml",
              "      model:\n        name: deepseek_v3\n        flavor: \"" + flavor +
                  "\"\n      training:\n        seq_len: " + std::to_string(seq) + "\n" + extra,
              {}, "torchtitan")
        .train.model;
  };
  const ModelConfig m = tt("16B", 4096);
  EXPECT_TRUE(m.mla.enabled);
  EXPECT_EQ(m.mla.q_lora_rank, 0);
  EXPECT_EQ(m.mla.kv_lora_rank, 512);
  EXPECT_EQ(m.num_layers, 27);
  EXPECT_EQ(m.moe.num_experts, 64);
  EXPECT_EQ(m.moe.topk, 6);
  EXPECT_EQ(m.moe.shared_ffn_hidden_size, 2816);
  EXPECT_FALSE(m.moe.is_moe_layer(0));
  EXPECT_TRUE(m.moe.is_moe_layer(26));
  EXPECT_FALSE(m.mla.yarn);  // TorchTitan scales only beyond the original 4096 positions
  EXPECT_EQ(m.mla.rotary_scaling_factor, 1.0);
  const ModelConfig long_ctx = tt("16B", 8192);
  EXPECT_TRUE(long_ctx.mla.yarn);
  EXPECT_EQ(long_ctx.mla.rotary_scaling_factor, 40.0);
  EXPECT_EQ(long_ctx.mla.mscale_all_dim, 0.70);
  const ModelConfig v3 = tt("671B", 4096);
  EXPECT_EQ(v3.moe.score_function, "sigmoid");
  EXPECT_FALSE(v3.moe.pre_softmax);  // the router refuses pre-softmax with sigmoid scores
  EXPECT_TRUE(m.moe.pre_softmax);
  EXPECT_TRUE(v3.moe.normalize_topk);
  EXPECT_EQ(v3.moe.num_groups, 8);
  EXPECT_EQ(v3.moe.group_topk, 4);
  EXPECT_EQ(v3.moe.moe_layers(), 58);
  EXPECT_EQ(v3.mla.q_lora_rank, 1536);
  EXPECT_EQ(tt("236B", 4096).moe.topk_scaling_factor, 16.0);
  // TorchTitan's balanced routing (Primus's DeepSeek examples turn it on): round-robin experts weighed by the
  // router's probabilities of them.
  EXPECT_EQ(m.moe.force_balance, "none");
  EXPECT_EQ(tt("16B", 4096, "      debug:\n        moe_force_load_balance: true\n").moe.force_balance,
            "round_robin");
  const std::string debug = testing::config_error_of([&] { tt("debugmodel", 256); });
  expect_has(debug, {"not supported yet: deepseek_v3 flavor 'debugmodel'", "16B, 236B and 671B"});
}

TEST(ConfigPlan, MlaAttentionAndMtpFlops) {
  ModelConfig m;
  m.num_layers = 3;
  m.hidden_size = 64;
  m.ffn_hidden_size = 128;
  m.num_attention_heads = 4;
  m.num_query_groups = 4;
  m.kv_channels = 16;
  m.vocab_size = m.padded_vocab_size = 1000;
  m.mla.enabled = true;
  m.mla.q_lora_rank = 0;
  m.mla.kv_lora_rank = 32;
  m.mla.qk_head_dim = 24;
  m.mla.qk_pos_emb_head_dim = 8;
  m.mla.v_head_dim = 16;
  const int64_t S = 512;
  const ParamCounts p = count_parameters(m);
  // q [4*32, 64], kv_a [32 + 8, 64] + norm 32, kv_b [4*40, 32], o [64, 4*16], 2 norms, SwiGLU MLP.
  EXPECT_EQ(p.per_layer, 128 * 64 + 40 * 64 + 32 + 160 * 32 + 64 * 64 + 2 * 64 + 3 * 64 * 128);
  FlopsPerToken f = flops_per_token(m, S);
  const double n = static_cast<double>(p.active_non_embedding);
  // QK^T over Dqk = 32 and PV over Dv = 16 per score: width H (Dqk + Dv) / 2 = 96.
  EXPECT_DOUBLE_EQ(f.causal, 6 * n + 6.0 * 3 * S * 96);
  EXPECT_DOUBLE_EQ(f.full, 6 * n + 12.0 * 3 * S * 96);
  // One MTP depth: its parameters, one more attention layer and one more pass of the output projection.
  m.mtp_num_layers = 1;
  const ParamCounts q = count_parameters(m);
  EXPECT_EQ(q.total - p.total, 2 * 64 * 64 + 3 * 64 + p.per_layer);
  FlopsPerToken g = flops_per_token(m, S);
  EXPECT_DOUBLE_EQ(g.causal, 6.0 * (q.active_non_embedding + 1000.0 * 64) + 6.0 * 4 * S * 96);
}

}  // namespace
}  // namespace primus::config
