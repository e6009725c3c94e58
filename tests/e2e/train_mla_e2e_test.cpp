// Multi-latent attention and multi-token prediction through the real CLI on the CPU (docs/mla.md): the micro
// DeepSeek-V3-style model (MLA with YaRN, MoE with a dense first layer, one MTP depth) learns byte-level text
// and logs its MTP loss beside the LM loss; a run split by a checkpoint resumes bit-exactly (weights, Adam
// state, the expert bias and the MTP module all restored).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "train/metrics.h"
#include "train_run_util.h"

namespace fs = std::filesystem;
using namespace primus::cli_test;

TEST(TrainMlaE2E, MicroDeepSeekLearnsAndLogsItsMtpLoss) {
  Scratch s("mla-e2e");
  std::map<std::string, std::optional<std::string>> env = env_for(s.dir, "mla");
  env["PRIMUS_E2E_MODEL"] = "micro_deepseek_mla.yaml";
  if (!fs::exists("/usr/share/games/fortunes")) GTEST_SKIP() << "Debian's fortunes not installed";
  CliResult r = run_primus(
      {"train", "pretrain", "--config", project_dir() + "/tests/e2e/configs/fortunes_micro_llama.yaml",
       "--train_iters", "30", "--log_interval", "10", "--lr_warmup_iters", "3", "--eval_interval", "0"},
      env);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("mla(q_lora=32 kv_lora=24 qk=16+8 v=16 yarn x4) mtp=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| mtp "), std::string::npos) << r.out;
  const std::vector<nlohmann::json> steps = steps_of(s.dir + "/e2e/ci/mla/metrics.jsonl");
  ASSERT_EQ(steps.size(), 30u);
  const double first = steps.front()["loss"].get<double>(), last = steps.back()["loss"].get<double>();
  EXPECT_LT(last, first - 1.0);
  for (const nlohmann::json& j : steps) {
    ASSERT_TRUE(j.contains("mtp_loss")) << j.dump();
    ASSERT_EQ(j["mtp_losses"].size(), 1u);
    EXPECT_EQ(j["mtp_loss"].get<double>(), j["mtp_losses"][0].get<double>());
    ASSERT_EQ(j["moe_layers"].size(), 3u);  // two main MoE layers and the MTP depth's
  }
  // The MTP head learns too: predicting two bytes ahead is harder than one, but far from chance (ln 257).
  EXPECT_LT(steps.back()["mtp_loss"].get<double>(), steps.front()["mtp_loss"].get<double>() - 1.0);
  EXPECT_GT(steps.back()["mtp_loss"].get<double>(), last - 0.5);
}

TEST(TrainMlaE2E, MlaWithMtpResumesBitExactly) {
  Scratch s("mla-e2e");
  const std::string exp = s.dir + "/exp.yaml";
  std::ofstream(exp)
      << "work_group: amd\nuser_name: ${PRIMUS_USER:root}\nexp_name: ${PRIMUS_EXP_NAME:ds}\n"
         "workspace: ${PRIMUS_WORKSPACE:./output}\nmodules:\n  pre_trainer:\n"
         "    framework: megatron\n    config: pre_trainer.yaml\n    model: micro_deepseek_mla.yaml\n"
         "    overrides:\n      device: cpu\n      mock_data: true\n      make_vocab_size_divisible_by: 8\n"
         "      micro_batch_size: 2\n      global_batch_size: 4\n      seq_length: 48\n"
         "      lr: 1.0e-3\n      lr_warmup_iters: 1\n      log_interval: 1\n      eval_interval: 0\n"
         "      moe_router_bias_update_rate: 0.01\n      recompute_granularity: selective\n";
  const std::string save_b = s.dir + "/ckpt-b";  // run_straight_and_split's split run saves here
  auto run = [&](const std::string& name, const std::string& save, std::vector<std::string> extra) {
    std::vector<std::string> a = {"train",  "pretrain", "--config",        exp, "--train_iters", "8",
                                  "--save", save,       "--save_interval", "4"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_primus(a, env_for(s.dir, name), s.dir);
  };
  const StraightAndSplit runs = run_straight_and_split(run, s.dir, 4, 8);
  ASSERT_FALSE(runs.straight.empty());
  const auto& a = runs.straight;
  const auto& b = runs.split;
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>());
    EXPECT_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>());
    EXPECT_EQ(a[i]["mtp_loss"].get<double>(), b[i]["mtp_loss"].get<double>());
    EXPECT_EQ(a[i]["moe_aux_loss"].get<double>(), b[i]["moe_aux_loss"].get<double>());
  }
  // A resume into a different architecture is refused with the key that differs.
  CliResult other = run("split", save_b, {"--resume", "auto", "--mtp_num_layers", "2", "--train_iters", "9"});
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE((other.out + other.err).find("mtp_num_layers"), std::string::npos) << other.err;
}
