// Typed checks and cross-key rules: each bad configuration is a ConfigError naming the key, the value, the
// rule and where the value came from.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "config/load_config.h"
#include "config/vocab.h"
#include "config_test_util.h"
#include "model/model_spec.h"

namespace primus::config {
namespace {

using testing::config_error_of;
using testing::fake_env;
using testing::TempDir;

// An experiment over the project's presets: model `model`, `overrides` (YAML lines under overrides:), CLI
// tokens.
struct Fixture {
  TempDir dir;
  std::map<std::string, std::string> env;
  ResolvedConfig load(const std::string& model, const std::string& overrides,
                      std::vector<std::string> cli = {}, const std::string& framework = "megatron") {
    std::string text =
        "work_group: g\nuser_name: u\nexp_name: e\nworkspace: ./w\nmodules:\n  pre_trainer:\n"
        "    framework: " +
        framework + "\n    config: pre_trainer.yaml\n    model: " + model + "\n    overrides:\n" +
        (framework == "megatron" ? "      mock_data: true\n" : "      device: cpu\n") + overrides;
    ResolveOptions o;
    o.env = fake_env(env);
    o.roots = std::vector<std::string>{testing::project_configs()};
    o.cli_overrides = std::move(cli);
    return load_config(dir.write("exp.yaml", text), o);
  }
  std::string error(const std::string& model, const std::string& overrides,
                    std::vector<std::string> cli = {}) {
    return config_error_of([&] { load(model, overrides, cli); });
  }
};

using testing::expect_has;

TEST(ConfigValidate, TinyLlamaLoadsWithDerivedValues) {
  Fixture f;
  ResolvedConfig rc = f.load("tiny_llama.yaml", "      make_vocab_size_divisible_by: 8\n");
  const TrainConfig& t = rc.train;
  EXPECT_EQ(t.model.vocab_size, 257);
  EXPECT_EQ(t.model.padded_vocab_size, 264);
  EXPECT_EQ(t.model.kv_channels, 64);
  EXPECT_EQ(t.model.num_query_groups, 2);
  EXPECT_EQ(t.model.name, "tiny_llama");
  EXPECT_EQ(t.data.seq_length, 2048);
  EXPECT_EQ(t.model.max_position_embeddings, 2048) << "null: = seq_length";
  EXPECT_EQ(t.run.run_dir(), "./w/g/u/e");
  EXPECT_TRUE(t.data.mock_data);
  EXPECT_EQ(rc.keys.origin("mock_data").line, 11);
}

TEST(ConfigValidate, UnknownKeyNamesFileLineColumnAndSuggests) {
  Fixture f;
  std::string msg = f.error("micro_llama.yaml", "      trian_iters: 5\n");
  expect_has(msg, {"exp.yaml:12:7", "unknown key 'trian_iters'", "did you mean 'train_iters'"});
  std::string cli = f.error("micro_llama.yaml", "", {"--micro_batch_sise", "2"});
  expect_has(cli, {"command line (--micro_batch_sise 2)", "did you mean 'micro_batch_size'"});
}

TEST(ConfigValidate, WrongTypesAndInvalidValues) {
  Fixture f;
  expect_has(f.error("micro_llama.yaml", "      train_iters: lots\n"),
             {"train_iters", "wrong type", "expected an integer", "exp.yaml:12:7"});
  expect_has(f.error("micro_llama.yaml", "      micro_batch_size: -4\n"),
             {"micro_batch_size=-4", "must be > 0", "exp.yaml:12:7"});
  expect_has(f.error("micro_llama.yaml", "      lr_decay_style: exotic\n"),
             {"lr_decay_style=exotic", "one of"});
  expect_has(f.error("micro_llama.yaml", "      adam_beta2: 1.5\n"), {"adam_beta2=1.5", "must be in [0, 1]"});
  expect_has(f.error("micro_llama.yaml", "      device: tpu\n"), {"device=tpu", "auto, cpu, cuda"});
  expect_has(f.error("micro_llama.yaml", "      num_layers: null\n"), {"num_layers", "must not be null"});
  // Several problems are reported together.
  std::string both = f.error("micro_llama.yaml", "      seq_lenght: 5\n      hidden_size: wide\n");
  expect_has(both, {"2 problems", "seq_lenght", "hidden_size"});
}

TEST(ConfigValidate, CrossKeyRulesNameKeysValuesAndRule) {
  Fixture f;
  expect_has(f.error("micro_llama.yaml", "      global_batch_size: 10\n      micro_batch_size: 4\n"),
             {"global_batch_size=10", "micro_batch_size=4",
              "global_batch_size % (micro_batch_size * DP) == 0", "exp.yaml:12:7"});
  expect_has(f.error("micro_llama.yaml", "      num_query_groups: 3\n"),
             {"num_attention_heads=4", "num_query_groups=3", "num_attention_heads % num_query_groups == 0"});
  expect_has(f.error("micro_llama.yaml", "      seq_length: 1024\n      max_position_embeddings: 256\n"),
             {"seq_length=1024", "max_position_embeddings=256", "seq_length <= max_position_embeddings"});
  expect_has(f.error("micro_llama.yaml", "      lr: 1.0e-5\n      min_lr: 1.0e-4\n"), {"lr >= min_lr"});
  expect_has(f.error("micro_llama.yaml", "      hidden_size: 66\n"),
             {"hidden_size=66", "num_attention_heads=4"});
  expect_has(f.error("micro_llama.yaml", "      recompute_granularity: full\n"), {"recompute_method"});
  expect_has(f.error("micro_llama.yaml", "      recompute_method: block\n"),
             {"recompute_method=block", "only to recompute_granularity full"});
  expect_has(f.error("micro_llama.yaml", "      lr_warmup_iters: 2000\n      train_iters: 100\n"),
             {"lr_warmup_iters=2000", "lr_warmup_iters < lr_decay_iters"});
  expect_has(f.error("micro_llama.yaml", "      group_query_attention: true\n      num_query_groups: null\n"),
             {"num_query_groups is null"});
}

TEST(ConfigValidate, WorldSizeGivesTheDataParallelSize) {
  Fixture f;
  f.env["WORLD_SIZE"] = "4";
  ResolvedConfig rc = f.load("micro_llama.yaml", "      global_batch_size: 16\n      micro_batch_size: 2\n");
  EXPECT_EQ(rc.train.parallel.data_parallel_size, 4);
  expect_has(f.error("micro_llama.yaml", "      global_batch_size: 12\n      micro_batch_size: 2\n"),
             {"data-parallel size 4", "global_batch_size=12"});
  f.env["WORLD_SIZE"] = "zero";
  expect_has(f.error("micro_llama.yaml", ""), {"WORLD_SIZE='zero'"});
}

TEST(ConfigValidate, NotSupportedYetNamesKeyAndValue) {
  Fixture f;
  expect_has(f.error("micro_llama.yaml", "      fp4: e2m1\n      mtp_use_repeated_layer: true\n"),
             {"2 problems", "not supported yet: fp4=e2m1", "not supported yet: mtp_use_repeated_layer=true",
              "exp.yaml:12:7"});
  // FP8 trains; MX formats need Blackwell.
  expect_has(f.error("micro_llama.yaml", "      fp8: e4m3\n      fp8_recipe: mxfp8\n"),
             {"not supported yet: fp8_recipe=mxfp8", "Hopper has none"});
  // Async TP overlaps the sequence-parallel collectives: without sequence parallelism there are none.
  expect_has(
      f.error("micro_llama.yaml", "      tensor_model_parallel_size: 2\n      tp_comm_overlap: true\n"),
      {"tp_comm_overlap needs sequence_parallel: true", "exp.yaml:13:7"});
  expect_has(f.error("micro_llama.yaml", "      normalization: LayerNorm\n"),
             {"not supported yet: normalization=LayerNorm", "only RMSNorm"});
  expect_has(f.error("micro_llama.yaml", "      hidden_dropout: 0.1\n"),
             {"not supported yet: hidden_dropout=0.1"});
  expect_has(f.error("micro_llama.yaml", "      lr_decay_style: WSD\n"),
             {"lr_decay_style WSD needs lr_wsd_decay_iters"});
  expect_has(f.error("micro_llama.yaml", "      lr_decay_style: inverse-square-root\n"),
             {"not supported yet: lr_decay_style=inverse-square-root"});
  // Inert values pass: sequence_parallel at TP 1 has no effect, dropout 0, fp8 null.
  ResolvedConfig rc = f.load("micro_llama.yaml",
                             "      sequence_parallel: true\n      hidden_dropout: 0\n      fp8: null\n"
                             "      use_turbo_attention: true\n      mtp_num_layers: 0\n");
  EXPECT_EQ(rc.keys.entry("use_turbo_attention")->decl->status, KeyStatus::kNoEffect);
}

// Partial rotary: Megatron's rotary_percent rotates int(head_dim x percent) dimensions, which must be even.
TEST(ConfigValidate, PartialRotaryPercentOfTheHead) {
  Fixture f;
  ResolvedConfig rc = f.load("micro_llama.yaml", "      rotary_percent: 0.5\n");  // head_dim 16
  EXPECT_EQ(rc.train.model.rotary_percent, 0.5);
  EXPECT_EQ(ModelSpec::from_config(rc.train.model).rope_dim(), 8);
  expect_has(f.error("micro_llama.yaml", "      rotary_percent: 0.1\n"),
             {"rotary_percent=0.1", "rotates 1 dimensions", "must be even and at least 2"});
  expect_has(f.error("micro_llama.yaml", "      rotary_percent: 1.5\n"), {"rotary_percent"});
  expect_has(f.error("micro_deepseek_mla.yaml", "      rotary_percent: 0.5\n"),
             {"not supported yet: rotary_percent 0.5 with multi_latent_attention"});
}

// Grok-2's soft-caps: the output logits' (ModelSpec::logit_softcap) and the router's; positive or null.
TEST(ConfigValidate, SoftcappingKeysMapToTheModel) {
  Fixture f;
  ResolvedConfig rc = f.load("micro_mixtral.yaml",
                             "      final_logit_softcapping: 30.0\n      router_logit_softcapping: 5.0\n");
  EXPECT_EQ(rc.train.model.final_logit_softcap, 30.0);
  EXPECT_EQ(rc.train.model.moe.router_softcap, 5.0);
  EXPECT_EQ(ModelSpec::from_config(rc.train.model).logit_softcap, 30.0f);
  rc = f.load("micro_llama.yaml", "");
  EXPECT_EQ(rc.train.model.final_logit_softcap, 0.0);
  expect_has(f.error("micro_llama.yaml", "      final_logit_softcapping: -1.0\n"),
             {"final_logit_softcapping"});
  rc = f.load("micro_mixtral.yaml", "      router_logit_softcapping: 0\n");  // Primus: 0 is off
  EXPECT_EQ(rc.train.model.moe.router_softcap, 0.0);
  expect_has(f.error("micro_mixtral.yaml", "      router_logit_softcapping: -2.0\n"),
             {"router_logit_softcapping"});
}

// Megatron's precision-aware optimizer: the moments' dtypes map to the optimizer (bf16 or fp32), the other
// values are refused as not supported yet, every dtype must be fp32 without the switch (Megatron asserts it),
// and the two deviations a user should know of are warnings.
TEST(ConfigValidate, PrecisionAwareOptimizerDtypes) {
  Fixture f;
  const std::string on = "      use_precision_aware_optimizer: true\n";
  ResolvedConfig rc =
      f.load("micro_llama.yaml", on + "      exp_avg_dtype: bf16\n      exp_avg_sq_dtype: bf16\n"
                                      "      adam_beta2: 0.95\n");
  EXPECT_EQ(rc.train.optim.exp_avg_dtype, DType::kBF16);
  EXPECT_EQ(rc.train.optim.exp_avg_sq_dtype, DType::kBF16);
  EXPECT_TRUE(rc.warnings.empty()) << rc.warnings.front();
  rc = f.load("micro_llama.yaml", on + "      exp_avg_dtype: bf16\n");
  EXPECT_EQ(rc.train.optim.exp_avg_dtype, DType::kBF16);
  EXPECT_EQ(rc.train.optim.exp_avg_sq_dtype, DType::kF32);
  rc = f.load("micro_llama.yaml", "");
  EXPECT_EQ(rc.train.optim.exp_avg_dtype, DType::kF32);
  // bf16 gradients are kept in fp32 (said); a bf16 second moment with beta2 0.999 cannot decay (said).
  rc = f.load("micro_llama.yaml", on + "      main_grads_dtype: bf16\n      exp_avg_sq_dtype: bf16\n"
                                       "      adam_beta2: 0.999\n");
  const std::string warned = fmt::format("{}", fmt::join(rc.warnings, "\n"));
  expect_has(warned, {"main_grads_dtype=bf16: gradients are accumulated and reduced in fp32 here",
                      "exp_avg_sq_dtype=bf16 with adam_beta2=0.999", "at all values"});
  expect_has(f.error("micro_llama.yaml", "      exp_avg_dtype: bf16\n"),
             {"exp_avg_dtype=bf16 needs use_precision_aware_optimizer: true", "can only be fp32"});
  expect_has(f.error("micro_llama.yaml", on + "      exp_avg_sq_dtype: fp16\n"),
             {"not supported yet", "exp_avg_sq_dtype", "fp16"});
  expect_has(f.error("micro_llama.yaml", on + "      main_params_dtype: fp16\n"),
             {"not supported yet", "main_params_dtype", "fp16"});
  expect_has(f.error("micro_llama.yaml", on + "      exp_avg_dtype: int4\n"), {"exp_avg_dtype", "int4"});
}

// Primus's recompute_layer_ids: a list or a comma-separated string of global layer ids (MTP depths after the
// decoder's), sorted and unique, with full recomputation and no method.
TEST(ConfigValidate, RecomputeLayerIdsAsPrimusChecksThem) {
  Fixture f;  // micro_llama: 2 layers
  const std::string full = "      recompute_granularity: full\n";
  ResolvedConfig rc = f.load("micro_llama.yaml", full + "      recompute_layer_ids: \"1, 0,1\"\n");
  EXPECT_EQ(rc.train.recompute.layer_ids, (std::vector<int64_t>{0, 1}));
  rc = f.load("micro_llama.yaml", full + "      recompute_layer_ids: [1]\n");
  EXPECT_EQ(rc.train.recompute.layer_ids, (std::vector<int64_t>{1}));
  rc = f.load("micro_llama.yaml",
              full + "      recompute_layer_ids: 1\n");  // one layer, as `--recompute_layer_ids 1`
  EXPECT_EQ(rc.train.recompute.layer_ids, (std::vector<int64_t>{1}));
  rc = f.load("micro_llama.yaml", full + "      mtp_num_layers: 1\n      recompute_layer_ids: \"2\"\n");
  EXPECT_EQ(rc.train.recompute.layer_ids, (std::vector<int64_t>{2}));  // the MTP depth
  expect_has(f.error("micro_llama.yaml", "      recompute_layer_ids: \"0\"\n"),
             {"recompute_layer_ids=0", "recompute_granularity=null", "to be full"});
  expect_has(
      f.error("micro_llama.yaml", full + "      recompute_method: uniform\n      recompute_layer_ids: [0]\n"),
      {"recompute_method=uniform", "takes recompute_method null"});
  expect_has(f.error("micro_llama.yaml", full + "      recompute_layer_ids: \"0,2\"\n"),
             {"layer 2 does not exist", "0..1 are the decoder layers"});
  expect_has(f.error("micro_llama.yaml", full + "      recompute_layer_ids: []\n"), {"lists no layer"});
  expect_has(f.error("micro_llama.yaml", full + "      recompute_layer_ids: \"a,1\"\n"),
             {"recompute_layer_ids", "a list of layer indices"});
}

// The padded vocabulary is the same table for every TP that divides make_vocab_size_divisible_by (checkpoints
// move between TP degrees) and always divides TP.
TEST(ConfigValidate, PaddedVocabularyDoesNotDependOnTensorParallelism) {
  for (int64_t tp : {1, 2, 4, 8, 128}) EXPECT_EQ(padded_vocab_size(257, 128, tp), 384) << tp;
  EXPECT_EQ(padded_vocab_size(128256, 128, 8), 128256);
  EXPECT_EQ(padded_vocab_size(257, 128, 3), 384);  // lcm 384
  EXPECT_EQ(padded_vocab_size(257, 128, 6), 384);  // lcm 384
  EXPECT_EQ(padded_vocab_size(257, 128, 5), 640);  // lcm 640
  EXPECT_EQ(padded_vocab_size(100, 1, 3), 102);
}

TEST(ConfigValidate, VocabularyFromTokenizer) {
  Fixture f;
  ResolvedConfig l3 =
      f.load("micro_llama.yaml",
             "      tokenizer_type: HuggingFaceTokenizer\n      tokenizer_model: meta-llama/Llama-3.1-8B\n");
  EXPECT_EQ(l3.train.model.vocab_size, 128256);
  EXPECT_EQ(l3.train.model.padded_vocab_size, 128256);
  ResolvedConfig q =
      f.load("micro_llama.yaml",
             "      tokenizer_type: HuggingFaceTokenizer\n      tokenizer_model: Qwen/Qwen2.5-7B\n");
  EXPECT_EQ(q.train.model.vocab_size, 151665);
  EXPECT_EQ(q.train.model.padded_vocab_size, 151680);
  expect_has(
      f.error("micro_llama.yaml",
              "      tokenizer_type: HuggingFaceTokenizer\n      tokenizer_model: my-org/secret-model\n"),
      {"my-org/secret-model", "set vocab_size"});
  expect_has(f.error("micro_llama.yaml", "      tokenizer_type: ByteTokeniser\n"),
             {"unknown tokenizer_type 'ByteTokeniser'", "did you mean 'ByteTokenizer'"});
  expect_has(f.error("micro_llama.yaml", "      vocab_size: 100\n"), {"vocab_size=100", ">= 257"});
}

TEST(ConfigValidate, LrWarmupFractionAndDefaultsOfTheSchedule) {
  Fixture f;
  ResolvedConfig rc =
      f.load("micro_llama.yaml",
             "      train_iters: 200\n      lr_warmup_iters: 0\n      lr_warmup_fraction: 0.1\n");
  EXPECT_EQ(rc.train.optim.lr_warmup_iters, 20);
  EXPECT_FALSE(rc.train.optim.lr_decay_iters.has_value());
  expect_has(f.error("micro_llama.yaml", "      lr_warmup_iters: 5\n      lr_warmup_fraction: 0.1\n"),
             {"lr_warmup_fraction", "lr_warmup_iters=5", "set only one"});
}

// WSD in both dialects: Megatron's lr_wsd_* keys, and TorchTitan's decay_ratio (and its sqrt decay, which
// only WSD's minus_sqrt expresses); an anneal longer than what follows the warm-up is refused or shortened.
TEST(ConfigValidate, WarmupStableDecayInBothDialects) {
  Fixture f;
  ResolvedConfig m = f.load("micro_llama.yaml",
                            "      train_iters: 100\n      lr_warmup_iters: 10\n      lr_decay_style: WSD\n"
                            "      lr_wsd_decay_iters: 20\n      lr_wsd_decay_style: minus_sqrt\n");
  EXPECT_EQ(m.train.optim.lr_decay_style, "WSD");
  EXPECT_EQ(m.train.optim.lr_wsd_decay_iters, 20);
  EXPECT_EQ(m.train.optim.lr_wsd_decay_style, "minus_sqrt");
  expect_has(f.error("micro_llama.yaml",
                     "      train_iters: 100\n      lr_warmup_iters: 10\n      lr_decay_style: WSD\n"
                     "      lr_wsd_decay_iters: 91\n"),
             {"lr_wsd_decay_iters=91", "must lie in [1, lr_decay_iters 100 - lr_warmup_iters 10]"});
  expect_has(f.error("micro_llama.yaml",
                     "      lr_decay_style: WSD\n      lr_wsd_decay_iters: 5\n"
                     "      lr_wsd_decay_style: square\n"),
             {"lr_wsd_decay_style"});
  auto titan = [&](const std::string& schedule) {
    return f.load(
        "micro_llama.yaml",
        "      training:\n        steps: 100\n      lr_scheduler:\n        warmup_steps: 10\n" + schedule, {},
        "torchtitan");
  };
  const ResolvedConfig wsd = titan("        decay_ratio: 0.25\n        decay_type: cosine\n");
  EXPECT_EQ(wsd.train.optim.lr_decay_style, "WSD");
  EXPECT_EQ(wsd.train.optim.lr_wsd_decay_iters, 25) << "round(100 x 0.25)";
  EXPECT_EQ(wsd.train.optim.lr_wsd_decay_style, "cosine");
  EXPECT_EQ(wsd.train.optim.lr_decay_iters.value_or(0), 100);
  const ResolvedConfig sq = titan("        decay_type: sqrt\n");
  EXPECT_EQ(sq.train.optim.lr_decay_style, "WSD");
  EXPECT_EQ(sq.train.optim.lr_wsd_decay_iters, 90) << "every step after the warm-up";
  EXPECT_EQ(sq.train.optim.lr_wsd_decay_style, "minus_sqrt");
  const ResolvedConfig none = titan("        decay_ratio: 0.0\n");
  EXPECT_EQ(none.train.optim.lr_decay_style, "constant");
  const ResolvedConfig longer = titan("        decay_ratio: 0.95\n");
  EXPECT_EQ(longer.train.optim.lr_wsd_decay_iters, 90);
  bool warned = false;
  for (const std::string& w : longer.warnings)
    warned = warned || w.find("more than the 90 after") != std::string::npos;
  EXPECT_TRUE(warned);
  EXPECT_EQ(titan("        decay_type: linear\n").train.optim.lr_decay_style, "linear");
}

// The vocabulary sizes known by tokenizer name (config/vocab.h): the HF tokenizer names Primus's experiments
// use, including TorchTitan's DeepSeek 16B flavor (DeepSeekMoE's tokenizer).
TEST(ConfigValidate, KnownTokenizersGiveTheirVocabularySize) {
  EXPECT_EQ(known_vocab_size("meta-llama/Llama-3.1-8B"), 128256);
  EXPECT_EQ(known_vocab_size("deepseek-ai/deepseek-moe-16b-base"), 102400);
  EXPECT_EQ(known_vocab_size("deepseek-ai/DeepSeek-V2-Lite/"), 102400);
  EXPECT_EQ(known_vocab_size("deepseek-ai/DeepSeek-V3"), 129280);
  EXPECT_EQ(known_vocab_size("THUDM/glm-4-9b"), 151552);  // Primus's GLM-5 experiments use its tokenizer
  EXPECT_EQ(known_vocab_size("MiniMaxAI/MiniMax-M2.5"), 200064);
  EXPECT_FALSE(known_vocab_size("someone/unknown-model").has_value());
}

TEST(ConfigValidate, TorchTitanDialectMapsSections) {
  Fixture f;
  ResolvedConfig rc =
      f.load("micro_llama.yaml",
             "      training:\n        local_batch_size: 3\n        seq_len: 32\n        steps: 7\n"
             "      lr_scheduler:\n        warmup_steps: 2\n        decay_type: cosine\n"
             "        min_lr_factor: 0.1\n      optimizer:\n        lr: 0.002\n"
             "      activation_checkpoint:\n        mode: full\n",
             {}, "torchtitan");
  const TrainConfig& t = rc.train;
  EXPECT_EQ(t.micro_batch_size, 3);
  EXPECT_EQ(t.global_batch_size, 3);
  EXPECT_EQ(t.data.seq_length, 32);
  EXPECT_EQ(t.train_iters, 7);
  EXPECT_EQ(t.optim.lr_decay_style, "cosine");
  EXPECT_DOUBLE_EQ(t.optim.min_lr, 0.002 * 0.1);
  EXPECT_EQ(t.optim.lr_decay_iters.value_or(0), 7);
  EXPECT_EQ(t.recompute.granularity, "full");
  EXPECT_EQ(t.model.hidden_size, 64);
  EXPECT_EQ(t.model.vocab_size, 257);
  EXPECT_EQ(t.model.padded_vocab_size, 257) << "TorchTitan does not pad";
  EXPECT_EQ(t.run.framework, "torchtitan");
  std::string bad = config_error_of(
      [&] { f.load("micro_llama.yaml", "      training:\n        seq_lne: 5\n", {}, "torchtitan"); });
  expect_has(bad, {"unknown key 'training.seq_lne'", "did you mean 'training.seq_len'"});
  std::string dotted =
      config_error_of([&] { f.load("micro_llama.yaml", "      training.seq_len: 5\n", {}, "torchtitan"); });
  expect_has(dotted, {"'training.seq_len' contains a dot", "exp.yaml:12:7"});
  // On the command line dots nest.
  EXPECT_EQ(f.load("micro_llama.yaml", "", {"--training.seq_len", "16"}, "torchtitan").train.data.seq_length,
            16);
}

}  // namespace
}  // namespace primus::config
