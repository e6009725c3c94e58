// End-to-end on real data through the CLI: `primus data train-tokenizer` + `primus data preprocess` turn the
// fortunes corpus into BPE tokens in Megatron .bin/.idx files, and the trainer learns them from data_path
// with split, seq_length, the tokenizer and validation every eval_interval (log lines and metrics.jsonl); a
// blend of two datasets trains; a damaged dataset stops the run before training with the file and byte
// offset.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "train/metrics.h"

using namespace primus::cli_test;

namespace {

class TrainDataE2E : public ::testing::Test {
 protected:
  // One tokenizer and one dataset for the whole suite (preprocessing takes a few seconds).
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kFortunes)) return;
    // A fresh directory per process: ctest runs each test of this suite in its own process, in parallel.
    std::string pattern = (std::filesystem::temp_directory_path() / "primus-data-e2e-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) return;
    dir_ = pattern;
    setup_ = run_primus(
        {"data", "train-tokenizer", "--input", kFortunes, "--vocab-size", "512", "--output", dir_ + "/tok"});
    if (setup_.exit_code != 0) return;
    setup_ = run_primus({"data", "preprocess", "--input", kFortunes, "--output-prefix", dir_ + "/fortunes",
                         "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", dir_ + "/tok",
                         "--workers", "2", "--append-eod", "--quiet"});
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  void SetUp() override {
    if (!std::filesystem::exists(kFortunes)) GTEST_SKIP() << "Debian fortunes not installed";
    ASSERT_FALSE(dir_.empty()) << "mkdtemp failed";
    ASSERT_EQ(setup_.exit_code, 0) << setup_.err << setup_.out;
  }

  struct Run {
    CliResult cli;
    std::vector<nlohmann::json> steps, evals;
  };
  Run train(const std::string& name, const std::string& data_path, std::vector<std::string> overrides = {}) {
    const std::string workspace = dir_ + "/runs";
    std::vector<std::string> args = {"train", "pretrain", "--config",
                                     project_dir() + "/tests/e2e/configs/fortunes_bpe_micro_llama.yaml"};
    args.insert(args.end(), overrides.begin(), overrides.end());
    Run r;
    r.cli = run_primus(args, {{"PRIMUS_WORKSPACE", workspace},
                              {"PRIMUS_EXP_NAME", name},
                              {"PRIMUS_USER", "ci"},
                              {"PRIMUS_E2E_DATA", data_path},
                              {"PRIMUS_E2E_CACHE", dir_ + "/cache"},
                              {"PRIMUS_E2E_TOKENIZER", dir_ + "/tok"}});
    const std::string metrics = workspace + "/e2e/ci/" + name + "/metrics.jsonl";
    for (nlohmann::json& j : primus::read_jsonl_records(metrics))
      (j.contains("loss") ? r.steps : r.evals).push_back(j);
    return r;
  }
  static std::string prefix() { return dir_ + "/fortunes_text_document"; }

  static inline std::string dir_;
  static inline CliResult setup_;
};

TEST_F(TrainDataE2E, PreprocessedFortunesAreAMegatronDataset) {
  const CliResult r =
      run_primus({"data", "inspect", prefix(), "--show", "1", "--tokenizer-model", dir_ + "/tok"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("dtype      uint16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[0] ["), std::string::npos) << r.out;
}

TEST_F(TrainDataE2E, MicroLlamaLearnsBpeFortunesWithValidation) {
  Run r = train("bpe40", prefix());
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err << r.cli.out;
  ASSERT_EQ(r.steps.size(), 40u);
  const double first = r.steps.front()["loss"].get<double>();
  EXPECT_NEAR(first, std::log(512.0), 0.3);  // uniform over the BPE vocabulary at init
  double last = 0;
  for (size_t i = 35; i < 40; ++i) last += r.steps[i]["loss"].get<double>() / 5;
  EXPECT_LT(last, first - 0.8) << "the loss must clearly fall";
  // Validation every eval_interval (20) for eval_iters batches: logged and in metrics.jsonl.
  ASSERT_EQ(r.evals.size(), 2u);
  EXPECT_EQ(r.evals[0]["step"].get<int64_t>(), 20);
  EXPECT_EQ(r.evals[1]["step"].get<int64_t>(), 40);
  EXPECT_LT(r.evals[1]["val_loss"].get<double>(), r.evals[0]["val_loss"].get<double>() + 0.1);
  EXPECT_NE(r.cli.out.find("validation at iter 20 | loss"), std::string::npos) << r.cli.out;
  EXPECT_NE(r.cli.out.find("Megatron indexed data"), std::string::npos) << r.cli.out;
  // The index caches were written under data_cache_path, and a second run reads them.
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/cache"));
  int descriptions = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir_ + "/cache"))
    descriptions += f.path().string().ends_with("-description.txt") ? 1 : 0;
  EXPECT_EQ(descriptions, 2);  // train and valid
  Run again = train("bpe40b", prefix(), {"--train_iters", "3", "--lr_warmup_iters", "1"});
  ASSERT_EQ(again.cli.exit_code, 0) << again.cli.err;
}

TEST_F(TrainDataE2E, ResumeContinuesTheSampleStream) {
  // Uninterrupted 24 steps vs 12 steps + checkpoint + resume to 24: the data position is the consumed-sample
  // count saved in the checkpoint, so steps 13..24 see the same samples and (same layout) the same losses
  // bit for bit. A resume with another micro-batch layout (4 x 4 instead of 2 x 8, same global batch) sees
  // the same samples; its losses agree up to summation order.
  const std::vector<std::string> base = {"--train_iters", "24", "--eval_interval", "0"};
  Run full = train("full24", prefix(), base);
  ASSERT_EQ(full.cli.exit_code, 0) << full.cli.err;
  for (const auto& [name, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"same", {}}, {"mbs4", {"--micro_batch_size", "4"}}}) {
    const std::string save = dir_ + "/ckpt_" + name;
    std::vector<std::string> first = base;
    first.insert(first.end(), {"--save", save, "--save_interval", "12", "--exit_interval", "12"});
    Run a = train("resume_a_" + name, prefix(), first);
    ASSERT_EQ(a.cli.exit_code, 0) << a.cli.err << a.cli.out;
    ASSERT_EQ(a.steps.size(), 12u);
    std::vector<std::string> second = base;
    second.insert(second.end(), {"--save", save, "--auto_continue_train", "true"});
    second.insert(second.end(), extra.begin(), extra.end());
    Run b = train("resume_b_" + name, prefix(), second);
    ASSERT_EQ(b.cli.exit_code, 0) << b.cli.err << b.cli.out;
    ASSERT_EQ(b.steps.size(), 12u) << b.cli.out;
    for (size_t i = 0; i < 12; ++i) {
      const auto& want = full.steps[12 + i];
      EXPECT_EQ(b.steps[i]["step"], want["step"]);
      if (name == "same") {
        EXPECT_EQ(b.steps[i]["loss"].get<double>(), want["loss"].get<double>()) << "step " << 13 + i;
      } else {
        EXPECT_NEAR(b.steps[i]["loss"].get<double>(), want["loss"].get<double>(), 2e-3) << "step " << 13 + i;
      }
      if (want.contains("consumed_samples"))
        EXPECT_EQ(b.steps[i]["consumed_samples"], want["consumed_samples"]);
    }
  }
}

TEST_F(TrainDataE2E, IndexCachesEqualNumpysMegatronAlgorithm) {
  // A 99/1 split with 4 eval batches needs 3 epochs of the validation documents and shuffles the last one
  // separately; numpy (tests/data/gpt_indices_numpy.py, written from the algorithm's description) must
  // produce the same document, sample and shuffle indices as our cache files, for train and valid.
  const std::string cache = dir_ + "/cache_numpy";
  Run r =
      train("numpy", prefix(),
            {"--split", "99,1,0", "--eval_iters", "4", "--exit_interval", "1", "--data_cache_path", cache});
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err << r.cli.out;
  const std::string cmd = "/usr/bin/python3 " + project_dir() + "/tests/data/gpt_indices_numpy.py " + cache;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST_F(TrainDataE2E, WeightedBlendTrains) {
  // The same dataset twice under two names (a copy) blended 0.3 / 0.7.
  for (const char* ext : {".bin", ".idx"})
    std::filesystem::copy_file(prefix() + ext, dir_ + "/copy_text_document" + ext,
                               std::filesystem::copy_options::overwrite_existing);
  Run r = train("blend", "0.3 " + prefix() + " 0.7 " + dir_ + "/copy_text_document", {"--train_iters", "6"});
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err << r.cli.out;
  EXPECT_EQ(r.steps.size(), 6u);
  EXPECT_NE(r.cli.out.find("a blend of 2 datasets"), std::string::npos) << r.cli.out;
}

TEST_F(TrainDataE2E, DamagedDatasetStopsBeforeTrainingWithFileAndOffset) {
  const std::string bad = dir_ + "/bad_text_document";
  std::filesystem::copy_file(prefix() + ".bin", bad + ".bin",
                             std::filesystem::copy_options::overwrite_existing);
  std::string idx = slurp(prefix() + ".idx");
  idx[17] = 42;  // dtype code
  std::ofstream(bad + ".idx", std::ios::binary | std::ios::trunc) << idx;
  Run r = train("bad", bad);
  EXPECT_EQ(r.cli.exit_code, 1) << r.cli.out;
  EXPECT_NE(r.cli.err.find(bad + ".idx: byte offset 17: unknown dtype code 42"), std::string::npos)
      << r.cli.err;
  EXPECT_TRUE(r.steps.empty());
}

}  // namespace
