// `primus train pretrain --dry-run` on Primus's own example experiments and on ours.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_process.h"

namespace primus::cli_test {
namespace {

namespace fs = std::filesystem;

bool dense(const std::string& file) {
  return file.find("mixtral") == std::string::npos && file.find("deepseek") == std::string::npos &&
         file.find("FP8") == std::string::npos;
}

TEST(ConfigCliDryRun, EveryPrimusExampleEitherPlansOrSaysWhatIsNotSupported) {
  int dense_count = 0, other_count = 0, fp8_count = 0;
  for (const std::string fw : {"megatron", "torchtitan"}) {
    for (const auto& e : fs::directory_iterator(primus_examples() + "/" + fw + "/configs/MI300X")) {
      const std::string file = e.path().string();
      SCOPED_TRACE(file);
      CliResult r = run_primus({"train", "pretrain", "--config", file, "--dry-run"},
                               {{"PRIMUS_CONFIG_PATH", primus_configs()}});
      if (dense(file)) {
        ++dense_count;
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_NE(r.out.find("== Plan =="), std::string::npos);
        EXPECT_NE(r.out.find("parameters"), std::string::npos);
        EXPECT_NE(r.out.find("FLOPs/token"), std::string::npos);
        EXPECT_NE(r.out.find("== Memory (per rank, projected"), std::string::npos);
        EXPECT_NE(r.out.find("no effect here"), std::string::npos);
      } else if (file.find("FP8") != std::string::npos) {
        // FP8 experiments plan with their recipe: Primus's trainer defaults (delayed scaling, amax history
        // 1024) under the experiment's fp8: hybrid.
        ++fp8_count;
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_NE(
            r.out.find("fp8            delayed tensorwise (amax history 1024, max, margin 0), e4m3 forward "
                       "/ e5m2 gradients"),
            std::string::npos)
            << r.out;
        EXPECT_NE(r.out.find("of the step's GEMM FLOPs in FP8"), std::string::npos) << r.out;
      } else {
        // MoE experiments of 8-way expert parallelism: one rank cannot hold their layout; the error names the
        // key and the world that fits, and that world plans.
        ++other_count;
        EXPECT_EQ(r.exit_code, 2) << r.out;
        EXPECT_NE(r.err.find("expert_model_parallel_size / parallelism.expert_parallel_degree = 8"),
                  std::string::npos)
            << r.err;
        EXPECT_NE(r.err.find("a multiple of 8 ranks"), std::string::npos) << r.err;
        EXPECT_EQ(r.out, "") << "nothing is printed on stdout when the config is refused";
        CliResult eight = run_primus(
            {"train", "pretrain", "--config", file, "--dry-run", "--nnodes", "1", "--nproc-per-node", "8"},
            {{"PRIMUS_CONFIG_PATH", primus_configs()}});
        EXPECT_EQ(eight.exit_code, 0) << eight.err;
        EXPECT_NE(eight.out.find("(ep 8) = 8 ranks"), std::string::npos) << eight.out;
      }
      EXPECT_LT(r.cpu_seconds, 1.0);
    }
  }
  EXPECT_EQ(dense_count, 6);
  EXPECT_EQ(fp8_count, 1);
  EXPECT_EQ(other_count, 2);
}

TEST(ConfigCliDryRun, PlanForLlama31_8B) {
  CliResult r =
      run_primus({"train", "pretrain", "--config",
                  primus_examples() + "/megatron/configs/MI300X/llama3.1_8B-BF16-pretrain.yaml", "--dry-run"},
                 {{"PRIMUS_CONFIG_PATH", primus_configs()}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("8,030,261,248"), std::string::npos);
  EXPECT_NE(r.out.find("51.5 GFLOP"), std::string::npos);
  EXPECT_NE(r.out.find("57.9 GFLOP"), std::string::npos);
  EXPECT_NE(r.out.find("global 128 = micro 2 x 64 micro-batches"), std::string::npos);
  // The resolved configuration cites where each value came from.
  EXPECT_NE(r.out.find("micro_batch_size = 2"), std::string::npos);
  EXPECT_NE(r.out.find("llama3.1_8B-BF16-pretrain.yaml:24:7"), std::string::npos);
  // Keys with no effect are listed with the reason.
  EXPECT_NE(r.out.find("torch_compile.enable"), std::string::npos);
  EXPECT_NE(r.out.find("PyTorch-specific"), std::string::npos);
  EXPECT_NE(r.out.find("enable_primus_turbo=true"), std::string::npos);
}

// `train posttrain` plans a world too (it once knew no --nnodes and suggested the very option it refused).
TEST(ConfigCliDryRun, PosttrainPlansAWorldItIsNotIn) {
  CliResult r = run_primus({"train", "posttrain", "--config",
                            project_dir() + "/tests/e2e/configs/sft_lora_micro_llama.yaml", "--dry-run",
                            "--nnodes", "1", "--nproc-per-node", "4", "--tensor_model_parallel_size", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("world          4 rank(s) = 1 node(s) x 4 process(es)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("x tp 2 x"), std::string::npos) << r.out;
  r = run_primus({"train", "posttrain", "--config",
                  project_dir() + "/tests/e2e/configs/sft_lora_micro_llama.yaml", "--nnodes", "1",
                  "--nproc-per-node", "4"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--nnodes / --nproc-per-node plan a world for --dry-run only"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("train posttrain ..."), std::string::npos) << r.err;
}

// A planned world (--nnodes) accepts a tokenizer whose vocabulary is not known here (Primus's GLM-5
// experiments name one): the plan says what it cannot size instead of failing on an empty vocabulary -- the
// DDP layout's row-sparse embedding decision and the FP8 recipe's size check both needed the model's sizes.
TEST(ConfigCliDryRun, APlanWithAnUnknownVocabularySaysWhatItCannotSize) {
  CliResult r = run_primus({"train",
                            "pretrain",
                            "--exp",
                            project_dir() + "/configs/quickstart.yaml",
                            "--dry-run",
                            "--nnodes",
                            "1",
                            "--nproc-per-node",
                            "8",
                            "--global_batch_size",
                            "64",
                            "--tokenizer_type",
                            "HuggingFaceTokenizer",
                            "--tokenizer_model",
                            "someone/unknown-model",
                            "--vocab_size",
                            "null",
                            "--fp8",
                            "hybrid",
                            "--hidden_size",
                            "128",
                            "--ffn_hidden_size",
                            "384"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(
      r.out.find("its GEMM sizes are checked when training starts (the vocabulary size is unknown here)"),
      std::string::npos)
      << r.out;
}

TEST(ConfigCliDryRun, OverridesFromTheCommandLineWinAndAreCited) {
  CliResult r =
      run_primus({"train", "pretrain", "--exp", project_dir() + "/configs/quickstart.yaml", "--dry-run",
                  "--train_iters", "7", "lr=2.0e-3", "--lr_warmup_iters=3", "--min_lr", "1e-5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("train_iters = 7"), std::string::npos);
  EXPECT_NE(r.out.find("command line (--train_iters 7)"), std::string::npos);
  EXPECT_NE(r.out.find("lr = 0.002"), std::string::npos);
  EXPECT_NE(r.out.find("min_lr = 1.0e-05"), std::string::npos)
      << "--min_lr 1e-5 arrives as a string; coerced";
  EXPECT_NE(r.out.find("padded 2048"), std::string::npos) << r.out;
}

TEST(ConfigCliDryRun, OurExamplesAndQuickstartPlan) {
  std::vector<std::string> files = {project_dir() + "/configs/quickstart.yaml"};
  for (const std::string fw : {"megatron", "torchtitan"})
    for (const auto& e : fs::directory_iterator(project_dir() + "/configs/examples/" + fw))
      files.push_back(e.path().string());
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    const bool sft = slurp(f).find("  post_trainer:") != std::string::npos;
    CliResult r = run_primus({"train", sft ? "posttrain" : "pretrain", "--config", f, "--dry-run"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("== Plan =="), std::string::npos);
  }
}

// The parallel layout of a world the run is not in (#19): Primus's Mixtral experiment is written for 8 GPUs
// with expert parallelism 8; planned for one node of 8, the layout and every rank's coordinates print, and
// what training would still refuse is a warning.
TEST(ConfigCliDryRun, PlansTheLayoutOfAWorldItIsNotIn) {
  CliResult r =
      run_primus({"train", "pretrain", "--config",
                  primus_examples() + "/megatron/configs/MI300X/mixtral_8x7B_v0.1-BF16-pretrain.yaml",
                  "--dry-run", "--nnodes", "1", "--nproc-per-node", "8"},
                 {{"PRIMUS_CONFIG_PATH", primus_configs()}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("== Parallel layout =="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("world          8 rank(s) = 1 node(s) x 8 process(es)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dp_replicate 8 x dp_shard 1 x cp 1 x tp 1 x pp 1 (ep 8) = 8 ranks"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("experts        1 per expert-parallel rank (8 / ep 8); expert data-parallel 1"),
            std::string::npos)
      << r.out;
  // Expert parallelism trains: nothing left that training would refuse.
  EXPECT_EQ(r.out.find("training would refuse"), std::string::npos) << r.out;
  // One row per rank: rank 7 is node 0, local 7, dp 7, ep 7.
  EXPECT_NE(r.out.find("    7     0      7 |   0   0   7 (    7.0)       0 |   7    0"), std::string::npos)
      << r.out;

  // Two nodes of 8 with TP 2 on our 8B example: 8 data-parallel ranks, TP pairs on one node.
  r = run_primus({"train", "pretrain", "--config",
                  project_dir() + "/configs/examples/megatron/llama3.1_8B-pretrain.yaml", "--dry-run",
                  "--nnodes", "2", "--nproc-per-node", "8", "--tensor_model_parallel_size", "2",
                  "--global_batch_size", "64"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("dp_replicate 8 x dp_shard 1 x cp 1 x tp 2 x pp 1 (ep 1) = 16 ranks"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("groups of rank 0: tp [0 1] (2)"), std::string::npos) << r.out;
  // What each tp rank holds (8B: 32 heads, 8 kv heads, ffn 14336, vocabulary 128256).
  EXPECT_NE(
      r.out.find("tensor         per tp rank: 16 of 32 heads, 4 kv head(s), ffn 7168 of 14336, vocabulary "
                 "64128 of 128256"),
      std::string::npos)
      << r.out;

  EXPECT_NE(r.out.find("   15     1      7 |   1   0   7"), std::string::npos) << r.out;

  // EP x TP (Megatron's etp x ep grid, expert TP = TP): TP 2 x DP 4 with EP 4 folded over dp; each tp rank
  // holds its half of the columns of its 2 experts, and tp_ep is the 8 ranks that hold the stage's experts.
  r = run_primus({"train", "pretrain", "--config",
                  project_dir() + "/configs/examples/megatron/bench_mixtral-8x7B-2L.yaml", "--dry-run",
                  "--nnodes", "1", "--nproc-per-node", "8", "--tensor_model_parallel_size", "2",
                  "--expert_model_parallel_size", "4", "--global_batch_size", "4", "--sequence_parallel",
                  "true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("dp_replicate 4 x dp_shard 1 x cp 1 x tp 2 x pp 1 (ep 4) = 8 ranks"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("experts        2 per expert-parallel rank (8 / ep 4); expert data-parallel 1; expert "
                       "tensor-parallel 2 (= tp): expert ffn 7168 of 14336 per tp rank"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" ep [0 2 4 6] (4) tp_ep [0 1 2 3 4 5 6 7] (8)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("    7     0      7 |   1   0   3 (    3.0)       0 |   3    0"), std::string::npos)
      << r.out;

  // Context parallelism: the chunks of a sequence, and the exchange the run will use.
  r = run_primus({"train", "pretrain", "--config",
                  project_dir() + "/configs/examples/megatron/llama3.1_8B-pretrain.yaml", "--dry-run",
                  "--nnodes", "1", "--nproc-per-node", "8", "--context_parallel_size", "4",
                  "--global_batch_size", "16"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("sequence       8192 tokens in 8 chunks of 1024: cp rank i holds chunks i and 7 - i"),
            std::string::npos)
      << r.out;

  // An uneven pipeline split (32 layers as 10 | 12 | 10) is the pipeline layout's to check, not layers % pp.
  r = run_primus({"train", "pretrain", "--config",
                  project_dir() + "/configs/examples/megatron/llama3.1_8B-pretrain.yaml", "--dry-run",
                  "--nnodes", "1", "--nproc-per-node", "3", "--pipeline_model_parallel_size", "3",
                  "--decoder_first_pipeline_num_layers", "10", "--decoder_last_pipeline_num_layers", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("pipeline       schedule 1f1b (Megatron's default), 16 micro-batches per step"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("pp rank 0: embedding + layers 0-9\n               pp rank 1: layers 10-21\n"
                       "               pp rank 2: layers 22-31 + loss"),
            std::string::npos)
      << r.out;
  r = run_primus({"train", "pretrain", "--config",
                  project_dir() + "/configs/examples/megatron/llama3.1_8B-pretrain.yaml", "--dry-run",
                  "--nnodes", "1", "--nproc-per-node", "3", "--pipeline_model_parallel_size", "3"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("pipeline_model_parallel_size"), std::string::npos) << r.err;
}

TEST(ConfigCliDryRun, APlannedWorldTheLayoutDoesNotFitIsRefusedNamingTheKey) {
  const std::string cfg = project_dir() + "/configs/examples/megatron/llama3.1_8B-pretrain.yaml";
  CliResult r = run_primus({"train", "pretrain", "--config", cfg, "--dry-run", "--nnodes", "1",
                            "--nproc-per-node", "8", "--tensor_model_parallel_size", "3"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("tensor_model_parallel_size"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a multiple of 3 ranks"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--nnodes 3 --nproc-per-node 8"), std::string::npos) << r.err;
  r = run_primus({"train", "pretrain", "--config", cfg, "--dry-run", "--nnodes", "1", "--nproc-per-node", "8",
                  "--expert_model_parallel_size", "2"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("but the model has no experts"), std::string::npos) << r.err;
  r = run_primus({"train", "pretrain", "--config", cfg, "--nnodes", "2", "--nproc-per-node", "8"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("--dry-run only"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("primus launch"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace primus::cli_test
