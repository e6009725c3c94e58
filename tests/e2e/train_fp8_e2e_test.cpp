// FP8 training through the real CLI on the CPU, which emulates every FP8 cast exactly (docs/fp8.md): each
// recipe trains a small Llama on the fortunes text and stays close to the full-precision run from the same
// initialisation and data; the log line and metrics name the recipe; delayed scaling's amax histories are
// checkpointed and a resumed run matches the uninterrupted one bit for bit; impossible recipes are refused
// with the key that asks for them.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "train_run_util.h"

namespace fs = std::filesystem;
using namespace primus::cli_test;

namespace {

// A Llama whose every projection dimension divides 128 (blockwise's need): d 128, 8 heads of 16, 4 KV heads,
// ffn 384, on 1024-token micro-batches.
std::string fp8_experiment(const std::string& dir, const std::string& extra) {
  const std::string path = dir + "/fp8.yaml";
  std::ofstream(path)
      << "work_group: amd\nuser_name: ${PRIMUS_USER:root}\nexp_name: ${PRIMUS_EXP_NAME:fp8}\n"
         "workspace: ${PRIMUS_WORKSPACE:./output}\nmodules:\n  pre_trainer:\n"
         "    framework: megatron\n    config: pre_trainer.yaml\n    model: micro_llama.yaml\n"
         "    overrides:\n      device: cpu\n"
         "      text_data_path: /usr/share/games/fortunes\n      mock_data: false\n"
         "      tokenizer_type: ByteTokenizer\n      make_vocab_size_divisible_by: 8\n"
         "      split: \"98,2,0\"\n      hidden_size: 128\n      ffn_hidden_size: 384\n"
         "      num_attention_heads: 8\n      num_query_groups: 4\n      seq_length: 128\n"
         "      micro_batch_size: 8\n      global_batch_size: 8\n      lr: 3.0e-3\n"
         "      min_lr: 3.0e-4\n      lr_warmup_iters: 5\n      clip_grad: 1.0\n"
         "      log_interval: 10\n      eval_interval: 0\n"
      << extra;
  return path;
}

std::vector<double> losses(const std::string& metrics) {
  std::vector<double> out;
  for (const nlohmann::json& j : steps_of(metrics)) out.push_back(j["loss"].get<double>());
  return out;
}

double tail_mean(const std::vector<double>& v, size_t n) {
  double s = 0;
  for (size_t i = v.size() - n; i < v.size(); ++i) s += v[i];
  return s / static_cast<double>(n);
}

}  // namespace

TEST(TrainFp8E2E, EveryRecipeTracksTheFullPrecisionRun) {
  if (!fs::exists("/usr/share/games/fortunes")) GTEST_SKIP() << "Debian's fortunes not installed";
  Scratch s("fp8-e2e");
  const std::string exp = fp8_experiment(s.dir, "");
  auto run = [&](const std::string& name, std::vector<std::string> extra) {
    // 30 steps: the byte entropy has fallen by ~2.4 nats by step 20 (2026-12-07), and each FP8 run costs
    // three f32 runs on the CPU (every cast emulated), so longer curves only cost CI time.
    std::vector<std::string> a = {"train", "pretrain", "--config", exp, "--train_iters", "30"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_primus(a, env_for(s.dir, name), s.dir);
  };
  CliResult base = run("f32", {});
  ASSERT_EQ(base.exit_code, 0) << base.err << base.out;
  const std::vector<double> ref = losses(s.dir + "/amd/ci/f32/metrics.jsonl");
  ASSERT_EQ(ref.size(), 30u);
  struct Case {
    const char* name;
    std::vector<std::string> args;
    const char* id;
  };
  const Case cases[] = {
      {"delayed", {"--fp8", "hybrid"}, "delayed-hybrid"},
      {"current", {"--fp8", "hybrid", "--fp8_recipe", "tensorwise"}, "tensorwise-hybrid"},
      {"rowwise", {"--fp8", "e4m3", "--fp8_recipe", "rowwise"}, "rowwise-e4m3"},
      {"blockwise", {"--fp8", "e4m3", "--fp8_recipe", "blockwise"}, "blockwise-e4m3"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CliResult r = run(c.name, c.args);
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    EXPECT_NE(r.out.find(std::string("| fp8 ") + c.id + " "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("8 projections on this rank"), std::string::npos) << r.out;
    const auto steps = steps_of(s.dir + "/amd/ci/" + c.name + "/metrics.jsonl");
    ASSERT_EQ(steps.size(), 30u);
    EXPECT_EQ(steps.back()["fp8_recipe"].get<std::string>(), c.id);
    // Every projection GEMM of the two layers is FP8; the output layer (d x vocab) is not.
    EXPECT_GT(steps.back()["fp8_gemm_share"].get<double>(), 0.7);
    EXPECT_LT(steps.back()["fp8_gemm_share"].get<double>(), 1.0);
    const std::vector<double> l = losses(s.dir + "/amd/ci/" + c.name + "/metrics.jsonl");
    for (double x : l) ASSERT_TRUE(std::isfinite(x));
    // It learns (byte entropy starts near ln 256 = 5.5) and ends near the f32 run: the FP8 casts perturb
    // each step by ~2^-4 relative, not the trajectory.
    EXPECT_LT(tail_mean(l, 10), l.front() - 1.5);
    EXPECT_NEAR(tail_mean(l, 10), tail_mean(ref, 10), 0.05 * tail_mean(ref, 10));
    // ... and it is not the f32 run itself (the casts happened).
    EXPECT_NE(l[5], ref[5]);
  }
  // The report draws the recipes' curves beside the full-precision run's, with their end points' differences.
  CliResult rep = run_primus({"report", s.dir + "/amd/ci/f32", "--compare", s.dir + "/amd/ci/delayed",
                              s.dir + "/amd/ci/blockwise", "-o", s.dir + "/cmp.html"},
                             {}, s.dir);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const std::string html = slurp(s.dir + "/cmp.html");
  EXPECT_NE(html.find("<h2>Compared runs</h2>"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>delayed</td><td>FP8 delayed-hybrid</td>"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>blockwise</td><td>FP8 blockwise-e4m3</td>"), std::string::npos);
  EXPECT_NE(html.find("Training loss (20-step mean)"), std::string::npos);
}

TEST(TrainFp8E2E, MoeExpertsTrainInFp8) {
  // The micro Llama with an MoE MLP in both layers (4 experts, top 2, a shared expert; every dimension a
  // multiple of 128): the routed experts' forward and input-gradient GEMMs and the shared expert's three run
  // in FP8 (model/fp8_experts.h), 6 projections per layer; the run tracks the full-precision one.
  if (!fs::exists("/usr/share/games/fortunes")) GTEST_SKIP() << "Debian's fortunes not installed";
  Scratch s("fp8-moe-e2e");
  const std::string exp = fp8_experiment(s.dir,
                                         "      num_experts: 4\n      moe_router_topk: 2\n"
                                         "      moe_ffn_hidden_size: 128\n"
                                         "      moe_shared_expert_intermediate_size: 128\n"
                                         "      moe_aux_loss_coeff: 1.0e-2\n");
  auto run = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> a = {"train", "pretrain", "--config", exp, "--train_iters", "20"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_primus(a, env_for(s.dir, name), s.dir);
  };
  CliResult base = run("f32", {});
  ASSERT_EQ(base.exit_code, 0) << base.err << base.out;
  const std::vector<double> ref = losses(s.dir + "/amd/ci/f32/metrics.jsonl");
  ASSERT_EQ(ref.size(), 20u);
  // Delayed scaling only here (CI time): the blockwise and rowwise expert paths are checked by the unit test
  // and, in training, by tools/device/fp8-moe-check.sh.
  for (const char* recipe : {"delayed"}) {
    SCOPED_TRACE(recipe);
    const std::string name = std::string("moe-") + recipe;
    CliResult r =
        run(name, {"--fp8", std::string(recipe) == "delayed" ? "hybrid" : "e4m3", "--fp8_recipe", recipe});
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    EXPECT_NE(r.out.find("12 projections on this rank"), std::string::npos) << r.out;
    const auto steps = steps_of(s.dir + "/amd/ci/" + name + "/metrics.jsonl");
    ASSERT_EQ(steps.size(), 20u);
    // Attention, experts (two thirds: their weight gradients stay BF16) and shared expert; not the router
    // or the output layer.
    EXPECT_GT(steps.back()["fp8_gemm_share"].get<double>(), 0.5);
    EXPECT_LT(steps.back()["fp8_gemm_share"].get<double>(), 0.9);
    const std::vector<double> l = losses(s.dir + "/amd/ci/" + name + "/metrics.jsonl");
    for (double x : l) ASSERT_TRUE(std::isfinite(x));
    EXPECT_LT(tail_mean(l, 5), l.front() - 1.0);
    EXPECT_NEAR(tail_mean(l, 5), tail_mean(ref, 5), 0.05 * tail_mean(ref, 5));
    EXPECT_NE(l[5], ref[5]);
  }
}

TEST(TrainFp8E2E, DelayedScalingResumesBitExactly) {
  if (!fs::exists("/usr/share/games/fortunes")) GTEST_SKIP() << "Debian's fortunes not installed";
  Scratch s("fp8-e2e");
  const std::string exp = fp8_experiment(s.dir, "      fp8: hybrid\n      fp8_amax_history_len: 4\n");
  auto run = [&](const std::string& name, const std::string& save, std::vector<std::string> extra) {
    std::vector<std::string> a = {"train",  "pretrain", "--config",        exp, "--train_iters",  "10",
                                  "--save", save,       "--save_interval", "6", "--log_interval", "1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_primus(a, env_for(s.dir, name), s.dir);
  };
  const std::string save_b = s.dir + "/ckpt-b";  // run_straight_and_split's split run saves here
  // Stopping at 6 leaves a history that has wrapped (6 steps > 4 entries): the resume must restore the ring.
  const StraightAndSplit runs = run_straight_and_split(run, s.dir, 6, 10);
  ASSERT_FALSE(runs.straight.empty());
  const auto& a = runs.straight;
  const auto& b = runs.split;
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>());
    EXPECT_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>());
  }
  // The checkpoint records the recipe and every projection's history.
  const nlohmann::json st = nlohmann::json::parse(slurp(save_b + "/iter_0000006/state.json"));
  ASSERT_TRUE(st.contains("fp8")) << st.dump();
  EXPECT_EQ(st["fp8"]["recipe"], "delayed-hybrid");
  EXPECT_EQ(st["fp8"]["steps"], 6);
  EXPECT_EQ(st["fp8"]["projections"].size(), 8u);
  EXPECT_EQ(st["fp8"]["projections"][0], "layers.0.self_attn.qkv_proj");
  EXPECT_EQ(st["fp8"]["history_f32_hex"].get<std::string>().size(), 8u * 3 * 4 * 8);
  // Resuming under another recipe is refused with what differs.
  CliResult other =
      run("split", save_b, {"--resume", "auto", "--fp8_recipe", "tensorwise", "--train_iters", "12"});
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(
      (other.out + other.err).find("trained with FP8 recipe delayed-hybrid, this run uses tensorwise-hybrid"),
      std::string::npos)
      << other.err;
}

TEST(TrainFp8E2E, RecipesThatCannotRunAreRefusedBeforeTraining) {
  Scratch s("fp8-e2e");
  const std::string exp = fp8_experiment(s.dir, "");
  auto refuse = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"train",         "pretrain", "--config",    exp,
                                  "--train_iters", "8",        "--mock_data", "true"};
    a.insert(a.end(), extra.begin(), extra.end());
    CliResult r = run_primus(a, env_for(s.dir, "bad"), s.dir);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    return r.err;
  };
  // Hopper has no MXFP8.
  EXPECT_NE(refuse({"--fp8", "e4m3", "--fp8_recipe", "mxfp8"}).find("Hopper"), std::string::npos);
  // Blockwise needs every GEMM dimension to divide 128: a 64-wide model names the layer and the sizes.
  const std::string narrow = refuse({"--fp8", "e4m3", "--fp8_recipe", "blockwise", "--hidden_size", "64",
                                     "--num_attention_heads", "4", "--num_query_groups", "2"});
  EXPECT_NE(narrow.find("layers.0.self_attn.qkv_proj input features = 64 is not a multiple of 128"),
            std::string::npos)
      << narrow;
  // ... and the tokens of a micro-batch are the weight gradient's K.
  const std::string tokens = refuse({"--fp8", "hybrid", "--seq_length", "100", "--micro_batch_size", "1"});
  EXPECT_NE(tokens.find("tokens per micro-batch"), std::string::npos) << tokens;
  EXPECT_NE(tokens.find("= 100 is not a multiple of 16"), std::string::npos) << tokens;
  // Keeping the offending layers in BF16 makes the narrow model run (first_last_layers_bf16 over both).
  CliResult ok = run_primus({"train",
                             "pretrain",
                             "--config",
                             exp,
                             "--train_iters",
                             "8",
                             "--mock_data",
                             "true",
                             "--fp8",
                             "e4m3",
                             "--fp8_recipe",
                             "blockwise",
                             "--first_last_layers_bf16",
                             "true",
                             "--hidden_size",
                             "64",
                             "--num_attention_heads",
                             "4",
                             "--num_query_groups",
                             "2"},
                            env_for(s.dir, "bf16-layers"), s.dir);
  EXPECT_EQ(ok.exit_code, 0) << ok.err << ok.out;
  EXPECT_NE(ok.out.find("0 projections on this rank"), std::string::npos) << ok.out;
}

TEST(TrainFp8E2E, TorchTitanFloat8ConverterTurnsItOn) {
  Scratch s("fp8-e2e");
  const std::string exp = s.dir + "/tt.yaml";
  std::ofstream(exp)
      << "work_group: amd\nuser_name: ci\nexp_name: tt\nworkspace: " << s.dir
      << "\nmodules:\n  pre_trainer:\n    framework: torchtitan\n    config: pre_trainer.yaml\n"
         "    model: llama3.1_8B.yaml\n    overrides:\n      model:\n"
         "        converters: [primus_turbo, quantize.linear.float8]\n"
         "      quantize:\n        linear:\n          float8:\n"
         "            recipe_name: rowwise_with_gw_hp\n            filter_fqns: [\"output\", "
         "\"down_proj\"]\n";
  CliResult r = run_primus({"train", "pretrain", "--config", exp, "--dry-run"},
                           {{"PRIMUS_CONFIG_PATH", primus_configs()}}, s.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(
      r.out.find("fp8            rowwise, e4m3 forward / e4m3 gradients, BF16 weight gradients, BF16 where "
                 "the name contains output|down_proj"),
      std::string::npos)
      << r.out;
  // mx needs Blackwell.
  const std::string mx_exp = s.dir + "/mx.yaml";
  std::ofstream(mx_exp)
      << "work_group: amd\nuser_name: ci\nexp_name: mx\nworkspace: " << s.dir
      << "\nmodules:\n  pre_trainer:\n    framework: torchtitan\n    config: pre_trainer.yaml\n"
         "    model: llama3.1_8B.yaml\n    overrides:\n      model:\n        converters: [mx]\n";
  CliResult mx = run_primus({"train", "pretrain", "--config", mx_exp, "--dry-run"},
                            {{"PRIMUS_CONFIG_PATH", primus_configs()}}, s.dir);
  EXPECT_EQ(mx.exit_code, 2) << mx.out;
  EXPECT_NE(mx.err.find("Blackwell"), std::string::npos) << mx.err;
}
