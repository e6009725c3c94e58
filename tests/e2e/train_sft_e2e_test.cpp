// `primus train posttrain` (issue #23) through the real CLI on the CPU: a micro Llama fine-tunes on
// alpaca-style JSONL through the ChatML fallback template with the loss on the answers only — packed with
// isolated samples, packed with shared attention, and one sample per row; a run split by a checkpoint
// resumes bit for bit (the rows' epoch order included); the stage and data keys are refused with the key
// when they cannot work.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "sft_test_data.h"
#include "train_run_util.h"

using namespace primus::cli_test;

namespace {

std::string sft_experiment(const std::string& dir, const std::string& extra,
                           const std::string& model = "micro_llama.yaml") {
  const std::string path = dir + "/sft.yaml";
  std::ofstream(path)
      << "work_group: amd\nuser_name: ${PRIMUS_USER:root}\nexp_name: ${PRIMUS_EXP_NAME:sft}\n"
         "workspace: ${PRIMUS_WORKSPACE:./output}\nmodules:\n  post_trainer:\n"
         "    framework: megatron\n    config: sft_trainer.yaml\n    model: "
      << model
      << "\n"
         "    overrides:\n      device: cpu\n      load: null\n"
         "      sft_dataset_name: "
      << dir
      << "/data\n"
         "      tokenizer_type: ByteTokenizer\n      make_vocab_size_divisible_by: 8\n"
         "      seq_length: 128\n      micro_batch_size: 4\n      global_batch_size: 8\n"
         "      train_iters: 20\n      lr: 3.0e-3\n      min_lr: 3.0e-4\n      lr_warmup_iters: 3\n"
         "      log_interval: 5\n      eval_interval: 10\n      eval_iters: 2\n"
      << extra;
  return path;
}

struct Sft : ::testing::Test {
  Scratch s{"sft"};
  void SetUp() override {
    std::filesystem::create_directories(s.dir + "/data");
    write_jsonl(s.dir + "/data/train.jsonl", 400, 1);
    write_jsonl(s.dir + "/data/validation.jsonl", 40, 2);
  }
  CliResult posttrain(const std::string& name, const std::string& extra, std::vector<std::string> args = {},
                      const std::string& model = "micro_llama.yaml") {
    std::vector<std::string> a = {"train", "posttrain", "--config", sft_experiment(s.dir, extra, model)};
    a.insert(a.end(), args.begin(), args.end());
    return run_primus(a, env_for(s.dir, name));
  }
  std::vector<nlohmann::json> steps(const std::string& name) {
    return steps_of(s.dir + "/amd/ci/" + name + "/metrics.jsonl");
  }
};

TEST_F(Sft, EveryRowLayoutLearnsTheAnswers) {
  for (const auto& [name, extra] : std::vector<std::pair<std::string, std::string>>{
           {"isolated", "      enable_packed_sequences: true\n      use_packed_attention: true\n"},
           {"shared", "      enable_packed_sequences: true\n      use_packed_attention: false\n"},
           {"padded", "      enable_packed_sequences: false\n"}}) {
    SCOPED_TRACE(name);
    CliResult r = posttrain(name, extra);
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    EXPECT_NE(r.out.find(name == "padded"   ? "one sample per row"
                         : name == "shared" ? "see each other"
                                            : "isolated"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("validation at iter 10"), std::string::npos) << r.out;
    const auto st = steps(name);
    ASSERT_EQ(st.size(), 20u);
    const double first = st.front()["loss"].get<double>(), last = st.back()["loss"].get<double>();
    EXPECT_TRUE(std::isfinite(last));
    // Byte-level answers start near ln 256 = 5.5 nats and fall as the model learns them.
    EXPECT_LT(last, 0.7 * first) << first << " -> " << last;
  }
}

TEST_F(Sft, PackedRunResumesBitExact) {
  auto run = [&](const std::string& name, const std::string& save, std::vector<std::string> extra) {
    std::vector<std::string> args = {"--save", save, "--save_interval", "5", "--train_iters", "12"};
    args.insert(args.end(), extra.begin(), extra.end());
    return posttrain(name, "      enable_packed_sequences: true\n      use_packed_attention: true\n", args);
  };
  const StraightAndSplit runs = run_straight_and_split(run, s.dir, 6, 12);
  ASSERT_FALSE(runs.straight.empty());
  for (size_t i = 0; i < runs.straight.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(runs.straight[i]["loss"].get<double>(), runs.split[i]["loss"].get<double>());
    EXPECT_EQ(runs.straight[i]["grad_norm"].get<double>(), runs.split[i]["grad_norm"].get<double>());
  }
}

// Full fine-tuning of an MoE family through the same data path (the experts do not see positions).
TEST_F(Sft, MoeModelFineTunes) {
  CliResult r = posttrain("moe", "      enable_packed_sequences: true\n      use_packed_attention: true\n",
                          {"--train_iters", "12"}, "micro_mixtral.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const auto st = steps("moe");
  ASSERT_EQ(st.size(), 12u);
  EXPECT_LT(st.back()["loss"].get<double>(), 0.8 * st.front()["loss"].get<double>());
  EXPECT_TRUE(st.back().contains("moe_aux_loss")) << st.back().dump();
}

// Fine-tuning starts from a Hugging Face directory: a run's checkpoint exported with `convert primus-to-hf`
// loads (finetune: weights only, iteration 0) and starts where that run ended, well below a fresh model.
TEST_F(Sft, FineTunesFromAHuggingFaceDirectory) {
  const std::string packed = "      enable_packed_sequences: true\n      use_packed_attention: true\n";
  CliResult first = posttrain("base", packed, {"--save", s.dir + "/base-ckpt", "--train_iters", "20"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  CliResult conv = run_primus(
      {"convert", "primus-to-hf", "-i", s.dir + "/base-ckpt", "-o", s.dir + "/hf", "--dtype", "float32"});
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  CliResult tuned =
      posttrain("tuned", packed, {"--load", s.dir + "/hf", "--train_iters", "3", "--lr_warmup_iters", "0"});
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err << tuned.out;
  const auto base = steps("base"), again = steps("tuned");
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again.front()["step"].get<int>(), 1);
  // Starting from the trained weights: the first loss is near where the base run ended, far below its start.
  EXPECT_LT(again.front()["loss"].get<double>(), 0.8 * base.front()["loss"].get<double>());
}

TEST_F(Sft, WrongStageDataOrFeatureIsRefusedNamingTheKey) {
  CliResult pretrain_stage = posttrain("a", "      stage: pretrain\n");
  EXPECT_EQ(pretrain_stage.exit_code, 2);
  EXPECT_NE(pretrain_stage.err.find("post-training needs stage: sft"), std::string::npos)
      << pretrain_stage.err;

  CliResult via_pretrain =
      run_primus({"train", "pretrain", "--config", sft_experiment(s.dir, "")}, env_for(s.dir, "b"));
  EXPECT_EQ(via_pretrain.exit_code, 2);
  EXPECT_NE(via_pretrain.err.find("runs with `primus train posttrain`"), std::string::npos)
      << via_pretrain.err;

  CliResult missing = posttrain("c", "", {"--sft_dataset_name", "tatsu-lab/alpaca"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("sft_dataset_name 'tatsu-lab/alpaca' is not a local file"), std::string::npos)
      << missing.err;
  EXPECT_NE(missing.err.find("Hugging Face hub name"), std::string::npos) << missing.err;

  CliResult format = posttrain("d", "      sft_conversation_format: sharegpt\n");
  EXPECT_EQ(format.exit_code, 2);
  EXPECT_NE(format.err.find("sft_conversation_format 'sharegpt'"), std::string::npos) << format.err;

  // SQuAD records are read (data/sft_sample.h); chat records under `squad` are refused naming the line and
  // key.
  CliResult squad = posttrain("e", "      sft_conversation_format: squad\n");
  EXPECT_EQ(squad.exit_code, 2);
  EXPECT_NE(squad.err.find("squad record without 'question' (keys found: messages)"), std::string::npos)
      << squad.err;

  CliResult cp = posttrain("f",
                           "      enable_packed_sequences: true\n      use_packed_attention: true\n"
                           "      context_parallel_size: 2\n",
                           {});
  EXPECT_EQ(cp.exit_code, 2);
  EXPECT_NE(cp.err.find("packed attention (use_packed_attention) with context parallelism"),
            std::string::npos)
      << cp.err;
}

}  // namespace
