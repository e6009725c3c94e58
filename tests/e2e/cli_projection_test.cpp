// `primus projection pipeline` as a user runs it: the table and the HTML page for a shipped experiment, bad
// input exits 2 naming the key, the key-status self-check holds in planning mode, and training still refuses
// pipeline parallelism (the runtime does not exist yet).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "cli_process.h"
#include "scratch_dir.h"

namespace primus::cli_test {
namespace {

namespace fs = std::filesystem;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

class ProjectionCli : public ScratchDirTest {
 protected:
  std::string quickstart() const { return project_dir() + "/configs/quickstart.yaml"; }
};

TEST_F(ProjectionCli, PrintsEveryScheduleAndWritesThePage) {
  const std::string html = (dir_ / "pp.html").string();
  CliResult r = run_primus({"projection", "pipeline", "--config", quickstart(), "--pp", "4",
                            "--micro-batches", "8", "--output", html, "--svg", (dir_ / "svg").string()},
                           {{"PRIMUS_CHECK_KEY_USE", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* part : {"gpipe", "1f1b *", "interleaved", "zb-h1", "zb-v", "27.27%", "split (1f1b):"})
    EXPECT_HAS(r.out, part);
  // PP 4 trains now: nothing about it is listed as what training would refuse.
  EXPECT_EQ(r.err.find("training would refuse this value: pipeline_model_parallel_size"), std::string::npos)
      << r.err;
  const std::string page = slurp(html);
  EXPECT_HAS(page, "<svg");
  EXPECT_HAS(page, "input grad BI");
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"})
    EXPECT_HAS(slurp((dir_ / "svg" / (std::string(name) + ".svg")).string()), "<svg");
  EXPECT_LT(r.cpu_seconds, 5.0);

  CliResult j = run_primus({"projection", "pipeline", "--config", quickstart(), "--pp", "2", "--schedule",
                            "zb-v", "--json", "--output", ""});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_HAS(j.out, "\"name\": \"zb-v\"");
  EXPECT_FALSE(fs::exists(dir_ / "pipeline_projection.html"));
}

TEST_F(ProjectionCli, BadInputExitsTwoNamingTheKey) {
  CliResult r = run_primus({"projection", "pipeline", "--config", quickstart(), "--pp", "3", "--output", ""});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_HAS(r.err, "num_layers=8 (");
  EXPECT_HAS(r.err, "is not divisible by pipeline_model_parallel_size=3 (command line");
  // The same split from an explicit layout plans fine.
  r = run_primus({"projection", "pipeline", "--config", quickstart(), "--pp", "3", "--output", "",
                  "pipeline_model_parallel_layout=Et*2|t*3|t*3L"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "rank 2: layers 5-7 + loss");
}

TEST_F(ProjectionCli, LayoutAndScheduleErrors) {
  CliResult r = run_primus({"projection", "pipeline", "--config", quickstart(), "--pp", "2", "--output", "",
                            "pipeline_model_parallel_layout=Et*3|t*4L"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_HAS(r.err, "places 7 decoder layers (t) but num_layers=8");
  r = run_primus({"projection", "pipeline", "--config", quickstart(), "--pp", "4", "--schedule",
                  "interleaved", "--micro-batches", "3", "--output", ""});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_HAS(r.err,
             "3 micro-batches (global_batch_size / (micro_batch_size x data-parallel size)) < "
             "pipeline_model_parallel_size 4");
  r = run_primus({"projection", "pipeline", "--config", quickstart(), "--schedule", "zbv", "--output", ""});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_HAS(r.err, "unknown pipeline schedule 'zbv'");
  r = run_primus({"projection", "pipeline", "--config", quickstart(), "--micro-batchs", "4"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_HAS(r.err, "did you mean '--micro-batches'?");
}

TEST_F(ProjectionCli, DryRunPrintsTheTrainingPlan) {
  // The plan a training run would execute, for the world it is given: the schedule and each stage's modules.
  CliResult r = run_primus({"train", "pretrain", "--config", quickstart(), "--dry-run", "--nnodes", "1",
                            "--nproc-per-node", "2", "pipeline_model_parallel_size=2",
                            "virtual_pipeline_model_parallel_size=2", "micro_batch_size=2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out,
             "pipeline       schedule interleaved (Megatron: virtual pipeline stages select interleaved");
  EXPECT_HAS(r.out, "pp rank 0 | chunk 0: embedding + layers 0-1 | chunk 1: layers 4-5");
  // A schedule Primus selects that is not generated: refused when the config loads.
  CliResult z = run_primus({"train", "pretrain", "--config", quickstart(), "--dry-run", "--nnodes", "1",
                            "--nproc-per-node", "2", "pipeline_model_parallel_size=2",
                            "patch_zero_bubble=true", "num_seq_splits=2"});
  EXPECT_EQ(z.exit_code, 2);
  EXPECT_HAS(z.err, "not supported yet: the pipeline schedule that patch_zero_bubble selects");
}

}  // namespace
}  // namespace primus::cli_test
