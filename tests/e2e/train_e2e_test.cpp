// End-to-end training on the CPU through the real CLI: the byte-level models learn the fortunes corpus, the
// Qwen-3-style model trains, runs are bitwise reproducible, and both key dialects drive the same trainer.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_process.h"
#include "train/metrics.h"
#include "train_run_util.h"

using namespace primus::cli_test;

namespace {

struct RunOutput {
  CliResult cli;
  std::vector<nlohmann::json> steps;  // metrics.jsonl records with a "loss"
  std::vector<nlohmann::json> evals;  // records with a "val_loss"
  std::string run_dir;
};

// Per process (concurrent ctest runs on one machine must not share run directories), removed at exit.
const std::string& e2e_workspace() {
  struct Workspace {
    std::string path =
        (std::filesystem::temp_directory_path() / ("primus-e2e-" + std::to_string(getpid()))).string();
    ~Workspace() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Workspace w;
  return w.path;
}

RunOutput train(const std::string& experiment, const std::string& exp_name,
                std::vector<std::string> overrides,
                std::map<std::string, std::optional<std::string>> env = {}) {
  const std::string workspace = e2e_workspace();
  env["PRIMUS_WORKSPACE"] = workspace;
  env["PRIMUS_EXP_NAME"] = exp_name;
  env["PRIMUS_USER"] = "ci";
  std::vector<std::string> args = {"train", "pretrain", "--config", project_dir() + "/" + experiment};
  args.insert(args.end(), overrides.begin(), overrides.end());
  RunOutput r;
  r.cli = run_primus(args, env);
  // The run directory is {workspace}/{work_group}/{user_name}/{exp_name}; work_group differs per experiment.
  for (const auto& group : std::filesystem::directory_iterator(workspace)) {
    auto dir = group.path() / "ci" / exp_name;
    if (std::filesystem::exists(dir / "metrics.jsonl")) r.run_dir = dir.string();
  }
  if (r.run_dir.empty()) return r;
  for (nlohmann::json& j : primus::read_jsonl_records(r.run_dir + "/metrics.jsonl"))
    (j.contains("loss") ? r.steps : r.evals).push_back(j);
  return r;
}

// The micro Llama trained 10 steps straight and as 5 + a resume from the step-5 checkpoint + 5, with `args`
// and `env` added to every run: the two curves must be bitwise equal.
void expect_resume_is_bit_exact(const std::string& tag, const std::vector<std::string>& args,
                                const std::map<std::string, std::optional<std::string>>& env) {
  primus::cli_test::Scratch s(tag);
  auto run = [&](const std::string& name, const std::string& save, std::vector<std::string> extra) {
    std::vector<std::string> a = {"train",
                                  "pretrain",
                                  "--config",
                                  project_dir() + "/tests/e2e/configs/fortunes_micro_llama.yaml",
                                  "--train_iters",
                                  "10",
                                  "--eval_interval",
                                  "0",
                                  "--lr_warmup_iters",
                                  "2",
                                  "--save",
                                  save,
                                  "--save_interval",
                                  "5"};
    a.insert(a.end(), args.begin(), args.end());
    a.insert(a.end(), extra.begin(), extra.end());
    auto e = primus::cli_test::env_for(s.dir, name);
    for (const auto& [k, v] : env) e[k] = v;
    return run_primus(a, e, s.dir);
  };
  const primus::cli_test::StraightAndSplit runs =
      primus::cli_test::run_straight_and_split(run, s.dir, 5, 10, "e2e");
  ASSERT_FALSE(runs.straight.empty());
  for (size_t i = 0; i < runs.straight.size(); ++i) {
    EXPECT_EQ(runs.straight[i]["loss"].dump(), runs.split[i]["loss"].dump()) << "step " << i + 1;
    EXPECT_EQ(runs.straight[i]["grad_norm"].dump(), runs.split[i]["grad_norm"].dump()) << "step " << i + 1;
  }
}

double mean_last(const std::vector<nlohmann::json>& steps, size_t n) {
  double s = 0;
  for (size_t i = steps.size() - n; i < steps.size(); ++i) s += steps[i]["loss"].get<double>();
  return s / static_cast<double>(n);
}

}  // namespace

TEST(TrainE2E, TinyLlamaLearnsFortunesIn300Steps) {
  if (!std::filesystem::exists(kFortunes)) GTEST_SKIP() << "Debian fortunes not installed";
  RunOutput r = train("tests/e2e/configs/fortunes_micro_llama.yaml", "llama300", {});
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err << r.cli.out;
  ASSERT_EQ(r.steps.size(), 300u);
  const double first = r.steps.front()["loss"].get<double>();
  EXPECT_NEAR(first, std::log(264.0), 0.25);  // uniform over the padded byte vocabulary at init
  EXPECT_LT(mean_last(r.steps, 10), 3.0);
  for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens_per_s"}) {
    EXPECT_TRUE(r.steps.back().contains(key)) << key;
  }
  ASSERT_EQ(r.evals.size(), 1u);
  EXPECT_LT(r.evals[0]["val_loss"].get<double>(), 3.5);
  // The log line of design.md §3, with progress and ETA.
  EXPECT_NE(r.cli.out.find("iter 300/300 | loss"), std::string::npos) << r.cli.out;
  EXPECT_NE(r.cli.out.find("| ETA"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(r.run_dir + "/config.yaml"));
  EXPECT_TRUE(std::filesystem::exists(r.run_dir + "/summary.json"));
}

TEST(TrainE2E, TinyQwen3StyleModelTrains) {
  if (!std::filesystem::exists(kFortunes)) GTEST_SKIP() << "Debian fortunes not installed";
  RunOutput r = train("tests/e2e/configs/fortunes_micro_llama.yaml", "qwen3", {"--train_iters", "120"},
                      {{"PRIMUS_E2E_MODEL", "micro_qwen3.yaml"}});
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err << r.cli.out;
  ASSERT_EQ(r.steps.size(), 120u);
  EXPECT_GT(r.steps.front()["loss"].get<double>(), 5.0);
  EXPECT_LT(mean_last(r.steps, 10), 3.2);
  EXPECT_NE(r.cli.out.find("qk-norm"), std::string::npos) << "model line should show the Qwen-3 flags";
}

TEST(TrainE2E, SameSeedGivesBitwiseIdenticalLosses) {
  if (!std::filesystem::exists(kFortunes)) GTEST_SKIP() << "Debian fortunes not installed";
  const std::vector<std::string> ov = {"--train_iters",   "25", "--lr_warmup_iters", "5",
                                       "--eval_interval", "0"};
  RunOutput a = train("tests/e2e/configs/fortunes_micro_llama.yaml", "det_a", ov);
  RunOutput b = train("tests/e2e/configs/fortunes_micro_llama.yaml", "det_b", ov);
  ASSERT_EQ(a.cli.exit_code, 0) << a.cli.err;
  ASSERT_EQ(b.cli.exit_code, 0) << b.cli.err;
  ASSERT_EQ(a.steps.size(), 25u);
  ASSERT_EQ(b.steps.size(), 25u);
  for (size_t i = 0; i < a.steps.size(); ++i) {
    // JSON doubles print round-trip exact, so equal text means bitwise-equal losses.
    EXPECT_EQ(a.steps[i]["loss"].dump(), b.steps[i]["loss"].dump()) << "step " << i + 1;
    EXPECT_EQ(a.steps[i]["grad_norm"].dump(), b.steps[i]["grad_norm"].dump()) << "step " << i + 1;
  }
  std::vector<std::string> ov_seed = ov;
  ov_seed.insert(ov_seed.end(), {"--seed", "4321"});
  RunOutput c = train("tests/e2e/configs/fortunes_micro_llama.yaml", "det_c", ov_seed);
  ASSERT_EQ(c.cli.exit_code, 0) << c.cli.err;
  EXPECT_NE(a.steps[0]["loss"].dump(), c.steps[0]["loss"].dump()) << "a different seed must change the run";
}

// The input embedding's gradient held row-sparse (train/sparse_embedding.h; forced with mode 2, since the
// byte vocabulary is smaller than a step's tokens) trains exactly like the dense one: without clipping the
// updates are bitwise the same (losses and gradient norms equal to the last bit; the norm sums the same
// squares in another order only when the zero rows are left out, which changes no bit here or changes the
// last one); with clipping the clip coefficient may differ in its last bit, so the losses agree within f32
// rounding. Two micro-batches per step: the second accumulates into the first one's slots.
TEST(TrainE2E, RowSparseEmbeddingGradientTrainsLikeDense) {
  if (!std::filesystem::exists(kFortunes)) GTEST_SKIP() << "Debian fortunes not installed";
  for (const char* clip : {"0", "1.0"}) {
    const std::vector<std::string> ov = {"--train_iters",   "20", "--lr_warmup_iters", "5",
                                         "--eval_interval", "0",  "--clip_grad",       clip};
    RunOutput dense = train("tests/e2e/configs/fortunes_micro_llama.yaml", std::string("dense_") + clip, ov,
                            {{"PRIMUS_SPARSE_EMBEDDING_GRAD", "0"}, {"OMP_NUM_THREADS", "1"}});
    RunOutput sparse = train("tests/e2e/configs/fortunes_micro_llama.yaml", std::string("sparse_") + clip, ov,
                             {{"PRIMUS_SPARSE_EMBEDDING_GRAD", "2"}, {"OMP_NUM_THREADS", "1"}});
    ASSERT_EQ(dense.cli.exit_code, 0) << dense.cli.err;
    ASSERT_EQ(sparse.cli.exit_code, 0) << sparse.cli.err;
    EXPECT_NE(sparse.cli.out.find("input embedding gradient: row-sparse, 264 rows of 264"), std::string::npos)
        << sparse.cli.out;
    EXPECT_EQ(dense.cli.out.find("row-sparse"), std::string::npos);
    ASSERT_EQ(dense.steps.size(), 20u);
    ASSERT_EQ(sparse.steps.size(), 20u);
    for (size_t i = 0; i < dense.steps.size(); ++i) {
      const double a = dense.steps[i]["loss"].get<double>(), b = sparse.steps[i]["loss"].get<double>();
      if (std::string(clip) == "0") {
        EXPECT_EQ(dense.steps[i]["loss"].dump(), sparse.steps[i]["loss"].dump()) << "step " << i + 1;
      } else {
        EXPECT_NEAR(a, b, 1e-5 * std::abs(a)) << "step " << i + 1;
      }
      const double ga = dense.steps[i]["grad_norm"].get<double>(),
                   gb = sparse.steps[i]["grad_norm"].get<double>();
      EXPECT_NEAR(ga, gb, 1e-5 * ga) << "step " << i + 1;
    }
  }
}

// A run with the row-sparse embedding gradient saved at step 5 and resumed continues bit-exactly (the
// deferred embedding update and the slots' clearing leave nothing behind in the checkpoint).
TEST(TrainE2E, RowSparseEmbeddingGradientResumesBitExactly) {
  if (!std::filesystem::exists(kFortunes)) GTEST_SKIP() << "Debian fortunes not installed";
  expect_resume_is_bit_exact("sparse-resume", {}, {{"PRIMUS_SPARSE_EMBEDDING_GRAD", "2"}});
}

// Megatron's precision-aware optimizer with bf16 moments: the run says so, tracks the f32-moment run closely
// without being it, and a run saved at step 5 and resumed continues bit-exactly (the checkpoint holds the
// moments as the store does).
TEST(TrainE2E, Bf16AdamMomentsTrackF32AndResumeBitExactly) {
  if (!std::filesystem::exists(kFortunes)) GTEST_SKIP() << "Debian fortunes not installed";
  const std::vector<std::string> bf16 = {
      "--use_precision_aware_optimizer", "true", "--exp_avg_dtype", "bf16", "--exp_avg_sq_dtype", "bf16"};
  std::vector<std::string> ov = {"--train_iters", "12", "--lr_warmup_iters", "2", "--eval_interval", "0"};
  RunOutput f32 =
      train("tests/e2e/configs/fortunes_micro_llama.yaml", "moments_f32", ov, {{"OMP_NUM_THREADS", "1"}});
  ov.insert(ov.end(), bf16.begin(), bf16.end());
  RunOutput low =
      train("tests/e2e/configs/fortunes_micro_llama.yaml", "moments_bf16", ov, {{"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(f32.cli.exit_code, 0) << f32.cli.err;
  ASSERT_EQ(low.cli.exit_code, 0) << low.cli.err;
  EXPECT_NE(low.cli.out.find("optimizer: AdamW with the precision-aware state: exp_avg bf16, exp_avg_sq bf16 "
                             "(4 bytes per parameter instead of 8"),
            std::string::npos)
      << low.cli.out;
  ASSERT_EQ(f32.steps.size(), 12u);
  ASSERT_EQ(low.steps.size(), 12u);
  bool differ = false;
  for (size_t i = 0; i < f32.steps.size(); ++i) {
    const double a = f32.steps[i]["loss"].get<double>(), b = low.steps[i]["loss"].get<double>();
    EXPECT_NEAR(a, b, 5e-3 * a) << "step " << i + 1;
    differ = differ || a != b;
  }
  EXPECT_TRUE(differ) << "bf16 moments gave the f32 run's losses bit for bit: were they used?";

  expect_resume_is_bit_exact("moments-resume", bf16, {});
}

TEST(TrainE2E, TorchTitanDialectDrivesTheSameTrainer) {
  RunOutput r = train("configs/examples/torchtitan/micro_llama-cpu.yaml", "tt", {"--training.steps", "8"});
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err << r.cli.out;
  ASSERT_EQ(r.steps.size(), 8u);
  EXPECT_LT(r.steps.back()["loss"].get<double>(), r.steps.front()["loss"].get<double>());
}

TEST(TrainE2E, BadDataPathFailsBeforeTraining) {
  RunOutput r = train("tests/e2e/configs/fortunes_micro_llama.yaml", "baddata", {},
                      {{"PRIMUS_QUICKSTART_DATA", "/nonexistent/corpus"}});
  EXPECT_EQ(r.cli.exit_code, 2);
  EXPECT_NE(r.cli.err.find("/nonexistent/corpus"), std::string::npos) << r.cli.err;
  EXPECT_TRUE(r.steps.empty());
}
