// `primus projection memory | performance | plan` (issue #22) as a user runs them: the projections against
// the peaks and step times we measured on H100 / H200 (docs/performance.md; memory within 10%, time within
// 15%), the planner's best layout accepted unchanged by `train pretrain --overrides`, and bad input exiting 2
// with a message naming what is wrong.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli_process.h"
#include "scratch_dir.h"

namespace primus::cli_test {
namespace {

namespace fs = std::filesystem;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

std::string bench(const std::string& name) {
  return project_dir() + "/configs/examples/megatron/bench_" + name + ".yaml";
}

nlohmann::json projection_json(const std::string& what, std::vector<std::string> args,
                               bool dense_embedding_grad = false) {
  args.insert(args.begin(), {"projection", what});
  args.push_back("--json");
  // Peaks measured before the row-sparse embedding gradient (train/sparse_embedding.h) are projected for
  // the dense gradient those runs held.
  CliResult r = run_primus(
      args, dense_embedding_grad
                ? std::map<std::string, std::optional<std::string>>{{"PRIMUS_SPARSE_EMBEDDING_GRAD", "0"}}
                : std::map<std::string, std::optional<std::string>>{});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  return nlohmann::json::parse(r.out);
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
const std::vector<std::string> full = {"recompute_granularity=full", "recompute_method=uniform",
                                       "recompute_num_layers=1"};

struct Measured {
  const char* what;
  std::vector<std::string> args;
  double value;                       // peak GB (allocator) or step seconds
  bool dense_embedding_grad = false;  // measured with a dense input-embedding gradient (before 2026-11-28)
};

// Peaks measured by the trainer (`peak mem`, allocator bytes): one H100 for the single-GPU rows, two H100 /
// H200 for the others (docs/performance.md, 2026-11-25 .. 2026-11-27); the 8B-4L, 124M and 1B rows on one
// H200 on 2026-11-28 with the row-sparse embedding gradient. The single-GPU rows measured before it are
// projected with the dense gradient they held.
TEST(ProjectionModel, MemoryWithinTenPercentOfMeasuredGpuPeaks) {
  const std::vector<std::string> t32k = {"seq_length=32768", "max_position_embeddings=32768",
                                         "recompute_granularity=full", "recompute_method=uniform"};
  const std::vector<Measured> cases = {
      {"8B-4L", {"--config", bench("llama3-8B-4L")}, 34.63},
      // tools/device/projection-check.sh, H100, 2026-11-27 (docs/perf/projection_check_2026-11-27.jsonl)
      {"124M", {"--config", bench("llama-124M")}, 9.90},
      {"124M full recompute", with({"--config", bench("llama-124M")}, full), 4.25, true},
      {"1B", {"--config", bench("llama3.2-1B-shape")}, 44.21},
      {"1B full recompute", with({"--config", bench("llama3.2-1B-shape")}, full), 26.90, true},
      {"1B mbs 1 selective",
       {"--config", bench("llama3.2-1B-shape"), "micro_batch_size=1", "recompute_granularity=selective"},
       26.21,
       true},
      {"8B-4L full recompute", with({"--config", bench("llama3-8B-4L")}, full), 32.72, true},
      {"8B-4L mbs 4",
       {"--config", bench("llama3-8B-4L"), "global_batch_size=4", "micro_batch_size=4"},
       51.46,
       true},
      {"qwen3 full recompute", with({"--config", bench("qwen3-30B-A3B-4L")}, full), 50.67, true},
      {"mixtral full recompute", with({"--config", bench("mixtral-8x7B-2L")}, full), 52.20, true},
      {"qwen3 4L", {"--config", bench("qwen3-30B-A3B-4L")}, 52.94, true},
      {"mixtral 2L", {"--config", bench("mixtral-8x7B-2L")}, 53.22, true},
      {"8B-4L TP 2", {"--config", bench("llama3-8B-4L"), "tensor_model_parallel_size=2"}, 19.46},
      {"8B-4L TP 2 SP",
       {"--config", bench("llama3-8B-4L"), "tensor_model_parallel_size=2", "sequence_parallel=true"},
       19.16},
      {"8B-4L T32k full recompute", with({"--config", bench("llama3-8B-4L")}, t32k), 38.58, true},
      {"8B-4L T32k CP 2",
       with({"--config", bench("llama3-8B-4L"), "context_parallel_size=2", "cp_comm_type=all_gather"}, t32k),
       34.68},
      {"qwen3 EP 2",
       {"--config", bench("qwen3-30B-A3B-4L"), "--nnodes", "1", "--nproc-per-node", "2",
        "global_batch_size=2", "expert_model_parallel_size=2"},
       33.62},
      {"dsv2-lite EP 2",
       {"--config", bench("deepseek_v2_lite-4L"), "--nnodes", "1", "--nproc-per-node", "2",
        "global_batch_size=2", "expert_model_parallel_size=2"},
       26.03},
  };
  for (const Measured& c : cases) {
    const nlohmann::json j = projection_json("memory", c.args, c.dense_embedding_grad);
    const double gb = j["peak_bytes"].get<double>() / 1e9;
    EXPECT_NEAR(gb / c.value, 1.0, 0.10) << c.what << ": projected " << gb << " GB, measured " << c.value;
  }
}

// The row-sparse embedding gradient in the projection: the 8B-4L rank holds 8,192 slots of 4,096 f32 (+ the
// slots' rows and the map over V 128,256) instead of V x 4,096 f32; under DDP 2, 16,384.
TEST(ProjectionModel, RowSparseEmbeddingGradientIsCounted) {
  const std::vector<std::string> args = {"--config", bench("llama3-8B-4L")};
  const double sparse = projection_json("memory", args)["peak_bytes"].get<double>();
  const double dense =
      projection_json("memory", args, /*dense_embedding_grad=*/true)["peak_bytes"].get<double>();
  const double v = 128256, d = 4096, rows = 8192;
  EXPECT_NEAR(dense - sparse, 4 * v * d - 4 * (rows * (d + 1) + v), 1e3);
  // DDP 2 (one micro-batch each): every rank holds slots for both ranks' tokens (their union is reserved).
  const std::vector<std::string> ddp = {
      "--config", bench("llama3-8B-4L"), "--nnodes", "1", "--nproc-per-node", "2", "global_batch_size=2"};
  const double ddp_sparse = projection_json("memory", ddp)["peak_bytes"].get<double>();
  const double ddp_dense = projection_json("memory", ddp, true)["peak_bytes"].get<double>();
  EXPECT_NEAR(ddp_dense - ddp_sparse, 4 * v * d - 4 * (2 * rows * (d + 1) + v), 1e3);
}

// Step times measured with the same configs (medians; H100 for one GPU, 2 x H200 for the two-GPU rows).
TEST(ProjectionModel, StepTimeWithinFifteenPercentOfMeasured) {
  const std::string l8 = bench("llama3-8B-4L");
  const std::vector<Measured> cases = {
      {"8B-4L", {"--config", l8}, 0.1350},
      {"1B", {"--config", bench("llama3.2-1B-shape")}, 0.2350},
      {"qwen3 4L", {"--config", bench("qwen3-30B-A3B-4L")}, 0.0702},
      {"mixtral 2L", {"--config", bench("mixtral-8x7B-2L")}, 0.0710},
      // tools/device/projection-check.sh, H100, 2026-11-27
      {"124M", {"--config", bench("llama-124M")}, 0.0369},
      {"124M full recompute", with({"--config", bench("llama-124M")}, full), 0.0462},
      {"1B full recompute", with({"--config", bench("llama3.2-1B-shape")}, full), 0.3024},
      {"1B mbs 1", {"--config", bench("llama3.2-1B-shape"), "micro_batch_size=1"}, 0.2668},
      {"8B-4L full recompute", with({"--config", l8}, full), 0.1549},
      {"8B-4L gbs 4 mbs 2 selective",
       {"--config", l8, "global_batch_size=4", "micro_batch_size=2", "recompute_granularity=selective"},
       0.5100},
      {"qwen3 full recompute", with({"--config", bench("qwen3-30B-A3B-4L")}, full), 0.0877},
      {"mixtral full recompute", with({"--config", bench("mixtral-8x7B-2L")}, full), 0.0909},
      {"8B-4L TP 2 (H200)", {"--config", l8, "--gpu", "h200", "tensor_model_parallel_size=2"}, 0.0750},
      {"8B-4L DP 2 (H200)",
       {"--config", l8, "--gpu", "h200", "--nnodes", "1", "--nproc-per-node", "2", "global_batch_size=2",
        "overlap_grad_reduce=true"},
       0.1511},
      {"8B-8L PP 2 1F1B (H200)",
       {"--config", l8, "--gpu", "h200", "num_layers=8", "global_batch_size=8",
        "pipeline_model_parallel_size=2"},
       1.086},
      {"qwen3 EP 2",
       {"--config", bench("qwen3-30B-A3B-4L"), "--nnodes", "1", "--nproc-per-node", "2",
        "global_batch_size=2", "overlap_grad_reduce=true", "expert_model_parallel_size=2"},
       0.0616},
  };
  for (const Measured& c : cases) {
    // The roofline alone (a calibration cache on this machine would replace some op times).
    const nlohmann::json j = projection_json("performance", with(c.args, {"--no-calibration"}));
    const double s = j["step_time_s"].get<double>();
    EXPECT_NEAR(s / c.value, 1.0, 0.15) << c.what << ": projected " << s << " s, measured " << c.value;
    EXPECT_GT(j["tokens_per_s_per_gpu"].get<double>(), 0);
  }
}

// Issue #22's planner bar: on one GPU the plan's choice of micro-batch and recompute is within 5% of the
// fastest of a measured grid (H100, 2026-11-27, tools/device/projection-check.sh grid1b / grid8b: ms per
// step).
TEST(ProjectionModel, PlanPicksWithinFivePercentOfTheFastestMeasured) {
  struct Grid {
    std::string config;
    std::vector<std::string> args;
    std::map<std::string, double> ms;  // "mbs/recompute" -> measured
  };
  const std::vector<Grid> grids = {
      {bench("llama3.2-1B-shape"),
       {},
       {{"1/none", 266.8},
        {"1/selective", 273.0},
        {"1/full", 335.1},
        {"2/none", 252.9},
        {"2/selective", 259.5},
        {"2/full", 314.5},
        {"4/none", 239.5},
        {"4/selective", 249.5},
        {"4/full", 308.8},
        {"8/none", 234.3},
        {"8/selective", 241.8},
        {"8/full", 302.4}}},
      {bench("llama3-8B-4L"),
       {"global_batch_size=4"},
       {{"1/none", 505.9},
        {"1/selective", 518.8},
        {"1/full", 614.2},
        {"2/none", 501.6},
        {"2/selective", 510.0},
        {"2/full", 613.3},
        {"4/none", 497.2},
        {"4/selective", 502.8},
        {"4/full", 604.0}}},
  };
  for (const Grid& g : grids) {
    std::vector<std::string> args = {"--config",         g.config, "--nnodes",        "1",
                                     "--nproc-per-node", "1",      "--no-calibration"};
    args.insert(args.end(), g.args.begin(), g.args.end());
    const nlohmann::json j = projection_json("plan", args);
    const auto& o = j["top"][0]["overrides"];
    const std::string rg = o["recompute_granularity"].get<std::string>();
    const std::string key = o["micro_batch_size"].get<std::string>() + "/" + (rg == "None" ? "none" : rg);
    ASSERT_TRUE(g.ms.count(key)) << key;
    double fastest = 1e30;
    for (const auto& [k, v] : g.ms) fastest = std::min(fastest, v);
    EXPECT_LE(g.ms.at(key), 1.05 * fastest) << g.config << ": the plan picks " << key;
  }
}

class ProjectionModelCli : public ScratchDirTest {};

TEST_F(ProjectionModelCli, TablesPagesAndPerStageRows) {
  const std::string html = (dir_ / "m.html").string();
  CliResult r = run_primus({"projection", "memory", "--config", bench("llama3-8B-4L"), "--nnodes", "1",
                            "--nproc-per-node", "4", "pipeline_model_parallel_size=4", "global_batch_size=8",
                            "--output", html});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* part : {"pp 0", "pp 3", "optimizer state", "activations", "pipeline buffers", "headroom"})
    EXPECT_HAS(r.out, part);
  EXPECT_HAS(slurp(html), "<svg");
  const nlohmann::json j =
      projection_json("memory", {"--config", bench("llama3-8B-4L"), "--nnodes", "1", "--nproc-per-node", "4",
                                 "pipeline_model_parallel_size=4", "global_batch_size=8"});
  ASSERT_EQ(j["ranks"].size(), 4u);
  // 1F1B: stage 0 holds pp micro-batches in flight, the last stage one (and the output layer)
  EXPECT_GT(j["ranks"][0]["items"]["activations"].get<double>(),
            3 * j["ranks"][3]["items"]["activations"].get<double>());

  CliResult p = run_primus({"projection", "performance", "--config", bench("qwen3-30B-A3B-4L"), "--output",
                            (dir_ / "p.html").string()});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  for (const char* part : {"MoE grouped GEMMs", "optimizer", "MFU", "breakdown"}) EXPECT_HAS(p.out, part);
  EXPECT_HAS(slurp((dir_ / "p.html").string()), "Step time");
}

TEST_F(ProjectionModelCli, PlanWritesOverridesThatTrainPretrainTakes) {
  const std::string out = (dir_ / "plan.yaml").string();
  CliResult r = run_primus({"projection", "plan", "--config", bench("llama3.2-1B-shape"), "--nnodes", "1",
                            "--nproc-per-node", "1", "--output", out});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "12 layouts");
  const std::string plan = slurp(out);
  EXPECT_HAS(plan, "micro_batch_size: ");
  CliResult d = run_primus(
      {"train", "pretrain", "--config", bench("llama3.2-1B-shape"), "--overrides", out, "--dry-run"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_HAS(d.out, "== Memory (per rank, projected");

  // Eight GPUs: every listed layout fits, ranked fastest first, and the winner trains as written.
  const nlohmann::json j = projection_json(
      "plan", {"--config", project_dir() + "/configs/examples/megatron/llama3.1_8B-pretrain.yaml", "--nnodes",
               "1", "--nproc-per-node", "8"});
  ASSERT_GE(j["top"].size(), 3u);
  for (size_t i = 1; i < j["top"].size(); ++i)
    EXPECT_GE(j["top"][i - 1]["tokens_per_s_per_gpu"].get<double>(),
              j["top"][i]["tokens_per_s_per_gpu"].get<double>());
  for (const auto& t : j["top"]) EXPECT_LT(t["peak_bytes"].get<double>(), 85e9);
  EXPECT_GT(j["too_big"].get<int>(), 0);  // the config's own layout (DDP, no recompute) does not fit 80 GB
}

// Measured op times (`projection calibrate`'s cache for the GPU) replace the roofline for the shapes they
// hold; calibrating needs a GPU and says so.
TEST_F(ProjectionModelCli, CalibrationReplacesTheRooflineForItsShapes) {
  const std::string cache = (dir_ / "cache").string();
  fs::create_directories(cache);
  {
    std::ofstream f(cache + "/H100-SXM.json");
    f << R"({"gpu": "H100-SXM", "device": "test GPU", "date": "2026-11-27",
             "gemm": [{"m": 8192, "n": 6144, "k": 4096, "seconds": 0.05}],
             "attention": [{"batch": 1, "heads": 32, "kv_heads": 8, "seq": 8192, "head_dim": 128,
                            "forward_s": 0.01, "backward_s": 0.02}]})";
  }
  const std::string cfg = bench("llama3-8B-4L");
  CliResult roof = run_primus({"projection", "performance", "--config", cfg, "--json", "--no-calibration"},
                              {{"PRIMUS_PROJECTION_CACHE", cache}});
  CliResult cal =
      run_primus({"projection", "performance", "--config", cfg}, {{"PRIMUS_PROJECTION_CACHE", cache}});
  CliResult calj = run_primus({"projection", "performance", "--config", cfg, "--json"},
                              {{"PRIMUS_PROJECTION_CACHE", cache}});
  ASSERT_EQ(roof.exit_code, 0) << roof.err;
  ASSERT_EQ(cal.exit_code, 0) << cal.err;
  EXPECT_HAS(cal.out, "measured on test GPU");
  // 4 layers x (the qkv forward GEMM at 50 ms + attention at 30 ms) instead of ~1.5 + 4 ms each
  const double a = nlohmann::json::parse(roof.out)["step_time_s"].get<double>();
  const double b = nlohmann::json::parse(calj.out)["step_time_s"].get<double>();
  EXPECT_GT(b - a, 0.25) << a << " -> " << b;
  CliResult bad =
      run_primus({"projection", "performance", "--config", cfg, "--calibration", cache + "/none.json"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_HAS(bad.err, "none.json: cannot read it");
#ifndef PRIMUS_WITH_CUDA
  CliResult nogpu = run_primus({"projection", "calibrate", "--config", cfg});
  EXPECT_EQ(nogpu.exit_code, 2);
  EXPECT_HAS(nogpu.err, "none is visible");
#endif
}

TEST_F(ProjectionModelCli, BadInputNamesWhatIsWrong) {
  const std::string cfg = bench("llama3-8B-4L");
  CliResult g = run_primus({"projection", "memory", "--config", cfg, "--gpu", "tpu-v5"});
  EXPECT_EQ(g.exit_code, 2);
  EXPECT_HAS(g.err, "unknown GPU");
  EXPECT_HAS(g.err, "--gpu-memory-gb");
  CliResult ok =
      run_primus({"projection", "memory", "--config", cfg, "--gpu", "tpu-v5", "--gpu-memory-gb", "96"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_HAS(ok.out, "tpu-v5 (96.0 GB)");
  CliResult world = run_primus({"projection", "memory", "--config", cfg, "--nnodes", "1", "--nproc-per-node",
                                "6", "tensor_model_parallel_size=4"});
  EXPECT_EQ(world.exit_code, 2);
  EXPECT_HAS(world.err, "6");
  CliResult half = run_primus({"projection", "performance", "--config", cfg, "--nnodes", "2"});
  EXPECT_EQ(half.exit_code, 2);
  EXPECT_HAS(half.err, "--nproc-per-node");
  CliResult heads = run_primus({"projection", "memory", "--config", cfg, "tensor_model_parallel_size=3"});
  EXPECT_EQ(heads.exit_code, 2);
  EXPECT_HAS(heads.err, "tensor_model_parallel_size");
  CliResult dims = run_primus({"projection", "memory", "--config", cfg, "hidden_size=null"});
  EXPECT_EQ(dims.exit_code, 2);
  EXPECT_HAS(dims.err, "hidden_size");
  CliResult big = run_primus({"projection", "memory", "--config", cfg, "--gpu-memory-gb", "16"});
  EXPECT_EQ(big.exit_code, 3);
  EXPECT_HAS(big.out, "DOES NOT FIT");
  CliResult noplan = run_primus({"projection", "plan", "--config", cfg});
  EXPECT_EQ(noplan.exit_code, 2);
  EXPECT_HAS(noplan.err, "--nnodes N --nproc-per-node G are required");
  CliResult cpu_perf = run_primus({"projection", "performance", "--config", cfg, "--backend", "cpu"});
  EXPECT_EQ(cpu_perf.exit_code, 2);
  EXPECT_HAS(cpu_perf.err, "memory only");
}

}  // namespace
}  // namespace primus::cli_test
