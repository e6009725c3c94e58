// Primus's own files load unchanged: every example experiment resolves against Primus's presets; the dense
// ones validate, the MoE and FP8 ones fail with "not supported yet" naming the keys. Every Primus model
// preset (and the SFT module preset) loads as far as its features allow, never tripping over an unknown key.
// Our own presets all load.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include <filesystem>
#include <set>

#include "config/load_config.h"
#include "config/plan.h"
#include "config_test_util.h"

namespace primus::config {
namespace {

namespace fs = std::filesystem;
using testing::config_error_of;
using testing::fake_env;

ResolveOptions primus_options() {
  ResolveOptions o;
  o.env = fake_env();
  o.roots = std::vector<std::string>{testing::primus_configs()};
  return o;
}

std::string example(const std::string& fw, const std::string& name) {
  return testing::primus_examples() + "/" + fw + "/configs/MI300X/" + name;
}

TEST(ConfigPrimusExamples, DenseExperimentsValidate) {
  for (const auto& [fw, name] :
       std::vector<std::pair<std::string, std::string>>{{"megatron", "llama2_7B-BF16-pretrain.yaml"},
                                                        {"megatron", "llama3.1_8B-BF16-pretrain.yaml"},
                                                        {"megatron", "llama3.1_70B-BF16-pretrain.yaml"},
                                                        {"megatron", "qwen2.5_7B-BF16-pretrain.yaml"},
                                                        {"torchtitan", "llama3.1_8B-BF16-pretrain.yaml"},
                                                        {"torchtitan", "llama3.1_70B-BF16-pretrain.yaml"}}) {
    SCOPED_TRACE(name);
    ResolvedConfig rc = load_config(example(fw, name), primus_options());
    EXPECT_EQ(rc.info.framework, fw);
    EXPECT_GT(rc.train.model.num_layers, 0);
    if (fw == "megatron") {
      // ~627 keys per merged Megatron experiment; every one is declared and has a status.
      size_t from_files = 0;
      for (const KeyEntry& e : rc.keys.entries) from_files += e.value.origin().kind != Origin::Kind::kDefault;
      EXPECT_GE(from_files, 620u);
    }
  }
}

TEST(ConfigPrimusExamples, Llama31_8BResolvesToTheRightModel) {
  ResolvedConfig rc = load_config(example("megatron", "llama3.1_8B-BF16-pretrain.yaml"), primus_options());
  const TrainConfig& t = rc.train;
  EXPECT_EQ(t.model.name, "llama3.1_8B");
  EXPECT_EQ(t.model.num_layers, 32);
  EXPECT_EQ(t.model.num_query_groups, 8);
  EXPECT_EQ(t.model.ffn_hidden_size, 14336);
  EXPECT_EQ(t.model.vocab_size, 128256);
  EXPECT_EQ(t.data.seq_length, 8192);
  EXPECT_EQ(t.micro_batch_size, 2);
  EXPECT_EQ(t.global_batch_size, 128);
  EXPECT_DOUBLE_EQ(t.optim.lr, 1e-5);
  EXPECT_DOUBLE_EQ(t.model.norm_epsilon, 1e-6) << "the experiment override wins over the model preset";
  EXPECT_EQ(count_parameters(t.model).total, 8030261248);
  // Primus's own loader gives this experiment 627 keys (framework, name and model included): all of them are
  // here with their origin, the rest of the table at its defaults.
  std::set<std::string> top_level;  // sections (torch_compile.*, mock_dataset.*) count once, as in Primus
  for (const KeyEntry& e : rc.keys.entries)
    if (!e.is_default()) top_level.insert(e.decl->name.substr(0, e.decl->name.find('.')));
  EXPECT_EQ(top_level.size(), 627u);
  EXPECT_EQ(rc.keys.origin("micro_batch_size").line, 24);
  EXPECT_NE(rc.keys.origin("num_layers").file.find("models/megatron/llama3_8B.yaml"), std::string::npos);
}

TEST(ConfigPrimusExamples, EnvironmentOverridesTheDefaults) {
  ResolveOptions o = primus_options();
  o.env = fake_env({{"PRIMUS_SEQ_LENGTH", "1024"}, {"PRIMUS_EXP_NAME", "mine"}});
  ResolvedConfig rc = load_config(example("megatron", "qwen2.5_7B-BF16-pretrain.yaml"), o);
  EXPECT_EQ(rc.train.data.seq_length, 1024);
  EXPECT_EQ(rc.train.run.exp_name, "mine");
  EXPECT_FALSE(rc.train.checkpoint.auto_continue_train) << "${CONTI_PARAMS:0} is int 0, a false flag";
}

TEST(ConfigPrimusExamples, TorchTitanExampleMapsSections) {
  ResolvedConfig rc = load_config(example("torchtitan", "llama3.1_8B-BF16-pretrain.yaml"), primus_options());
  const TrainConfig& t = rc.train;
  EXPECT_EQ(t.model.hidden_size, 4096);
  EXPECT_EQ(t.model.ffn_hidden_size, 14336);
  EXPECT_EQ(t.micro_batch_size, 4);
  EXPECT_EQ(t.global_batch_size, 4);
  EXPECT_EQ(t.data.seq_length, 8192);
  EXPECT_EQ(t.train_iters, 50);
  EXPECT_EQ(t.optim.lr_warmup_iters, 10);
  EXPECT_DOUBLE_EQ(t.optim.lr, 8e-4);
  EXPECT_FALSE(t.data.mock_data);
  bool warned = false;
  for (const auto& w : rc.warnings) warned = warned || w.find("training.dataset 'c4'") != std::string::npos;
  EXPECT_TRUE(warned) << "a HuggingFace dataset name is accepted but flagged";
}

TEST(ConfigPrimusExamples, TorchTitanExperimentHasPrimusTopLevelKeys) {
  ResolvedTree tree =
      resolve_experiment(example("torchtitan", "llama3.1_8B-BF16-pretrain.yaml"), primus_options());
  EXPECT_EQ(tree.module.entries().size(), 25u) << "as Primus's loader: 25 top-level keys";
}

TEST(ConfigPrimusExamples, MoEExperimentsLoadWithTheirExpertParallelismAndFp8ExperimentsWithTheirRecipe) {
  // Primus's MoE examples are written for 8 GPUs of expert parallelism and benchmark with forced balancing.
  // The configuration loads as written; whether a world fits its layout is the layout's check
  // (ParallelDims, the CLI tests).
  EXPECT_EQ(load_config(example("megatron", "mixtral_8x7B_v0.1-BF16-pretrain.yaml"), primus_options())
                .train.parallel.expert_model_parallel_size,
            8);
  // On one rank the MoE layer is there: Mixtral 8x7B (8 experts, top-2) resolves, with forced balancing of
  // Primus's default type (primus_megatron_module.yaml: even), uniform on request, and real routing.
  ResolveOptions one = primus_options();
  one.cli_overrides = {"--expert_model_parallel_size", "1"};
  EXPECT_EQ(load_config(example("megatron", "mixtral_8x7B_v0.1-BF16-pretrain.yaml"), one)
                .train.model.moe.force_balance,
            "even");
  ResolveOptions uniform = one;
  uniform.cli_overrides.insert(uniform.cli_overrides.end(),
                               {"--moe_router_force_load_balancing_type", "uniform"});
  EXPECT_EQ(load_config(example("megatron", "mixtral_8x7B_v0.1-BF16-pretrain.yaml"), uniform)
                .train.model.moe.force_balance,
            "uniform");
  ResolveOptions bad = one;
  bad.cli_overrides.insert(bad.cli_overrides.end(), {"--moe_router_force_load_balancing_type", "random"});
  const std::string bad_type =
      config_error_of([&] { load_config(example("megatron", "mixtral_8x7B_v0.1-BF16-pretrain.yaml"), bad); });
  EXPECT_NE(bad_type.find("moe_router_force_load_balancing_type"), std::string::npos) << bad_type;
  EXPECT_NE(bad_type.find("random"), std::string::npos) << bad_type;
  one.cli_overrides.insert(one.cli_overrides.end(), {"--moe_router_force_load_balancing", "false"});
  ResolvedConfig rc = load_config(example("megatron", "mixtral_8x7B_v0.1-BF16-pretrain.yaml"), one);
  EXPECT_EQ(rc.train.model.moe.force_balance, "none");
  EXPECT_EQ(rc.train.model.moe.num_experts, 8);
  EXPECT_EQ(rc.train.model.moe.topk, 2);
  EXPECT_EQ(rc.train.model.moe.ffn_hidden_size, 14336);
  EXPECT_EQ(rc.train.model.moe.moe_layers(), 32);
  EXPECT_EQ(count_parameters(rc.train.model).total, 46702792704);  // HF Mixtral-8x7B: 46.7 B
  // Primus's DeepSeek-V2-Lite example turns multi-latent attention off (multi_latent_attention: false):
  // as written it is a 64-expert top-6 model with a shared expert and a dense first layer.
  ResolvedConfig ds = load_config(example("megatron", "deepseek_v2_lite-BF16-pretrain.yaml"), one);
  EXPECT_EQ(ds.train.model.moe.num_experts, 64);
  EXPECT_EQ(ds.train.model.moe.topk, 6);
  EXPECT_EQ(ds.train.model.moe.shared_ffn_hidden_size, 2816);
  EXPECT_FALSE(ds.train.model.moe.is_moe_layer(0));
  EXPECT_TRUE(ds.train.model.moe.is_moe_layer(1));
  EXPECT_FALSE(ds.train.model.mla.enabled);
  // With MLA on (the preset's own setting) it is DeepSeek-V2-Lite: MLA without the low-rank query, YaRN.
  ResolveOptions mla = one;
  mla.cli_overrides.insert(mla.cli_overrides.end(), {"--multi_latent_attention", "true"});
  ResolvedConfig v2 = load_config(example("megatron", "deepseek_v2_lite-BF16-pretrain.yaml"), mla);
  EXPECT_TRUE(v2.train.model.mla.enabled);
  EXPECT_EQ(v2.train.model.mla.q_lora_rank, 0);
  EXPECT_EQ(v2.train.model.mla.kv_lora_rank, 512);
  EXPECT_TRUE(v2.train.model.mla.yarn);
  EXPECT_EQ(v2.train.model.mla.rotary_scaling_factor, 40.0);
  EXPECT_EQ(v2.train.model.num_query_groups, 16);
  // FP8: Primus's trainer defaults (delayed scaling, history 1024) under the experiment's fp8: hybrid.
  ResolvedConfig fp8 = load_config(example("megatron", "llama3.1_8B-FP8-pretrain.yaml"), primus_options());
  EXPECT_TRUE(fp8.train.fp8.enabled);
  EXPECT_EQ(fp8.train.fp8.format, "hybrid");
  EXPECT_EQ(fp8.train.fp8.recipe, "delayed");
  EXPECT_EQ(fp8.train.fp8.amax_history_len, 1024);
  EXPECT_FALSE(fp8.train.fp8.output_layer);
  EXPECT_NE(fp8.train.fp8.source.find("llama3.1_8B-FP8-pretrain.yaml:79:7"), std::string::npos)
      << fp8.train.fp8.source;
}

// An experiment over Primus's presets for any module/model pair.
std::string load_pair(const std::string& fw, const std::string& module, const std::string& model) {
  testing::TempDir dir;
  std::string exp = dir.write("exp.yaml",
                              "work_group: g\nuser_name: u\nexp_name: e\nworkspace: w\nmodules:\n"
                              "  pre_trainer:\n    framework: " +
                                  fw + "\n    config: " + module + "\n    model: " + model + "\n");
  try {
    load_config(exp, primus_options());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigPrimusExamples, EveryPrimusModelPresetLoadsWithoutUnknownKeys) {
  for (const auto& entry : fs::directory_iterator(testing::primus_configs() + "/models/megatron")) {
    std::string model = entry.path().filename().string();
    SCOPED_TRACE(model);
    std::string error = load_pair("megatron", "pre_trainer.yaml", model);
    EXPECT_EQ(error.find("unknown key"), std::string::npos) << error;
    EXPECT_EQ(error.find("wrong type"), std::string::npos) << error;
    // Dense, MoE and MLA models load; the others stop at a feature we do not have yet (or at a preset's own
    // gap: the bases leave the tokenizer unset, which makes the vocabulary unknown).
    // The DeepSeek presets ask for 8-way expert parallelism (V4 also for features beyond MLA): refused as not
    // supported yet, never for multi-latent attention or MTP themselves.
    const bool deepseek =
        model.find("deepseek") != std::string::npos && model.find("base") == std::string::npos;
    if (deepseek && !error.empty()) {
      EXPECT_NE(error.find("not supported yet"), std::string::npos) << error;
      EXPECT_EQ(error.find("multi_latent_attention"), std::string::npos) << error;
      EXPECT_EQ(error.find("mtp_num_layers"), std::string::npos) << error;
    } else if (!error.empty()) {
      bool base = model.find("base") != std::string::npos || model == "language_model.yaml" ||
                  model == "primus_megatron_model.yaml";
      EXPECT_TRUE(base) << error;
    }
  }
  for (const char* model : {"llama3.1_8B.yaml", "llama3.1_70B.yaml"})
    EXPECT_EQ(load_pair("torchtitan", "pre_trainer.yaml", model), "") << model;
}

// Primus's SFT module preset loads as an SFT run: stage sft, its hub dataset name kept for the start of
// training (which refuses a name that is no local file), packing off, its LoRA block off.
TEST(ConfigPrimusExamples, SftModulePresetLoadsAsSft) {
  EXPECT_EQ(load_pair("megatron", "sft_trainer.yaml", "llama3.1_8B.yaml"), "");
  testing::TempDir dir;
  std::string exp = dir.write("exp.yaml",
                              "work_group: g\nuser_name: u\nexp_name: e\nworkspace: w\nmodules:\n"
                              "  post_trainer:\n    framework: megatron\n    config: sft_trainer.yaml\n"
                              "    model: llama3.1_8B.yaml\n");
  ResolveOptions o = primus_options();
  o.module_name = "post_trainer";
  const ResolvedConfig rc = load_config(exp, o);
  EXPECT_TRUE(rc.train.sft.enabled);
  EXPECT_EQ(rc.train.sft.data, std::vector<std::string>{"tatsu-lab/alpaca"});
  EXPECT_EQ(rc.train.sft.format, "alpaca");
  EXPECT_FALSE(rc.train.sft.pack);
}

TEST(ConfigProjectPresets, EveryModelPresetLoadsWithOurModulePreset) {
  for (const std::string fw : {"megatron", "torchtitan"}) {
    for (const auto& entry : fs::directory_iterator(testing::project_configs() + "/models/" + fw)) {
      std::string model = entry.path().filename().string();
      if (model.find("_base") != std::string::npos) continue;
      SCOPED_TRACE(fw + "/" + model);
      testing::TempDir dir;
      std::string exp = dir.write("exp.yaml",
                                  "work_group: g\nuser_name: u\nexp_name: e\nworkspace: w\nmodules:\n"
                                  "  pre_trainer:\n    framework: " +
                                      fw + "\n    config: pre_trainer.yaml\n    model: " + model + "\n");
      ResolveOptions o;
      o.env = fake_env();
      o.roots = std::vector<std::string>{testing::project_configs()};
      ResolvedConfig rc = load_config(exp, o);
      EXPECT_GT(count_parameters(rc.train.model).total, 0);
      EXPECT_TRUE(rc.warnings.empty() || fw == "torchtitan") << rc.warnings.front();
    }
  }
}

TEST(ConfigProjectPresets, ExamplesAndQuickstartLoad) {
  ResolveOptions o;
  o.env = fake_env();
  o.roots = std::vector<std::string>{testing::project_configs()};
  std::vector<std::string> files = {testing::project_configs() + "/quickstart.yaml"};
  for (const std::string fw : {"megatron", "torchtitan"})
    for (const auto& e : fs::directory_iterator(testing::project_configs() + "/examples/" + fw))
      files.push_back(e.path().string());
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    ResolveOptions of = o;
    // SFT examples define a post_trainer module (`train posttrain`).
    std::ifstream in(f);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find("  post_trainer:") != std::string::npos) of.module_name = "post_trainer";
#ifndef PRIMUS_WITH_CUDA
    // The GPU benchmark examples pin `device: cuda`, which a CPU-only build rightly refuses: check the rest
    // of their configuration with the CPU device.
    of.cli_overrides = {"--device", "cpu"};
#endif
    ResolvedConfig rc = load_config(f, of);
    EXPECT_GT(rc.train.train_iters, 0);
  }
  ResolvedConfig quick = load_config(testing::project_configs() + "/quickstart.yaml", o);
  // BPE tokens of the fortunes corpus prepared by `primus data` (scripts/quickstart.sh).
  EXPECT_EQ(quick.train.model.padded_vocab_size, 2048);
  EXPECT_EQ(quick.train.data.tokenizer_type, "HuggingFaceTokenizer");
  EXPECT_EQ(quick.train.data.data_path,
            std::vector<std::string>{"./output/quickstart_data/fortunes_text_document"});
  int64_t n = count_parameters(quick.train.model).total;
  EXPECT_GE(n, 5000000);
  EXPECT_LE(n, 20000000);
}

}  // namespace
}  // namespace primus::config
