// Key statuses tell the truth (issue #17 item 3): for every shipped experiment, every model preset of ours
// and every Primus example experiment that loads, each key declared implemented is read by the dialect mapper
// and no key declared "no effect here" is (config/key_use.h). Then one CPU step of the CPU examples with the
// same check switched on inside the binary (PRIMUS_CHECK_KEY_USE=1), and the check itself must catch a broken
// label.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include <filesystem>

#include "config/key_use.h"
#include "config/load_config.h"
#include "config/not_supported.h"
#include "e2e/cli_process.h"
#include "unit/config_test_util.h"

namespace primus::config {
namespace {

namespace fs = std::filesystem;
using testing::fake_env;

std::vector<std::string> yaml_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".yaml") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Loads and returns the violations; `loaded` counts the files that resolved (the others were refused as not
// supported yet, which is checked elsewhere).
std::string slurp_file(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::vector<std::string> violations_of(const std::string& file, const ResolveOptions& given, int* loaded) {
  ResolveOptions o = given;
  // A post-training experiment (module post_trainer) is loaded as `train posttrain` loads it.
  if (slurp_file(file).find("  post_trainer:") != std::string::npos) o.module_name = "post_trainer";
  try {
    ResolvedConfig rc = load_config(file, o);
    ++*loaded;
    return key_use_violations(rc.keys);
  } catch (const NotSupportedError&) {
    return {};
  }
}

TEST(ConfigKeyUse, ReadsThroughTheMapperShorthandsAreRecorded) {
  testing::TempDir dir;
  std::string exp =
      dir.write("exp.yaml",
                "work_group: g\nuser_name: u\nexp_name: e\nworkspace: w\nmodules:\n  pre_trainer:\n"
                "    framework: megatron\n    config: pre_trainer.yaml\n    model: tiny_llama.yaml\n");
  ResolveOptions o;
  o.env = fake_env();
  o.roots = std::vector<std::string>{testing::project_configs()};
  ResolvedConfig rc = load_config(exp, o);
  EXPECT_TRUE(rc.keys.consumed("num_layers"));
  EXPECT_TRUE(rc.keys.consumed("seq_length"));
  // A key declared inert and never read; then reading it is reported.
  const std::string inert = "use_sharp";
  ASSERT_EQ(rc.keys.entry(inert)->decl->status, KeyStatus::kNoEffect);
  EXPECT_FALSE(rc.keys.consumed(inert));
  (void)rc.keys.get(inert);  // a lookup by a rule or a report is not a use
  EXPECT_FALSE(rc.keys.consumed(inert));
  (void)rc.keys.b(inert);
  std::vector<std::string> bad = key_use_violations(rc.keys);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0], "use_sharp: declared no effect here but read");
}

TEST(ConfigKeyUse, ShippedExperimentsAndPresets) {
  ResolveOptions o;
  o.env = fake_env();
  o.roots = std::vector<std::string>{testing::project_configs()};
#ifndef PRIMUS_WITH_CUDA
  o.cli_overrides = {"--device", "cpu"};  // the GPU benchmark examples pin device: cuda
#endif
  int loaded = 0;
  std::vector<std::string> files = yaml_files(testing::project_configs() + "/examples");
  files.push_back(testing::project_configs() + "/quickstart.yaml");
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    for (const std::string& v : violations_of(f, o, &loaded)) ADD_FAILURE() << v;
  }
  for (const std::string fw : {"megatron", "torchtitan"}) {
    for (const std::string& preset : yaml_files(testing::project_configs() + "/models/" + fw)) {
      std::string model = fs::path(preset).filename().string();
      if (model.find("_base") != std::string::npos) continue;
      SCOPED_TRACE(fw + "/" + model);
      testing::TempDir dir;
      std::string exp = dir.write("exp.yaml",
                                  "work_group: g\nuser_name: u\nexp_name: e\nworkspace: w\nmodules:\n"
                                  "  pre_trainer:\n    framework: " +
                                      fw + "\n    config: pre_trainer.yaml\n    model: " + model + "\n");
      for (const std::string& v : violations_of(exp, o, &loaded)) ADD_FAILURE() << v;
    }
  }
  EXPECT_GE(loaded, 30);
}

TEST(ConfigKeyUse, PrimusExampleExperiments) {
  ResolveOptions o;
  o.env = fake_env();
  o.roots = std::vector<std::string>{testing::primus_configs()};
  int loaded = 0, files = 0;
  for (const std::string& f : yaml_files(testing::primus_examples())) {
    if (f.find("/configs/") == std::string::npos) continue;
    ++files;
    SCOPED_TRACE(f);
    for (const std::string& v : violations_of(f, o, &loaded)) ADD_FAILURE() << v;
  }
  EXPECT_GT(files, 0);
  EXPECT_GE(loaded, 6);  // the dense Llama / Qwen ones of both dialects
}

TEST(ConfigKeyUse, OneCpuStepOfTheCpuExamplesWithTheCheckInside) {
  // Three steps: past the examples' warm-up, which must stay below the schedule's length.
  for (const auto& [name, steps] : std::vector<std::pair<std::string, std::string>>{
           {"megatron/micro_qwen3-cpu.yaml", "--train_iters"},
           {"torchtitan/micro_llama-cpu.yaml", "--training.steps"}}) {
    SCOPED_TRACE(name);
    testing::TempDir dir;
    cli_test::CliResult r = cli_test::run_primus(
        {"train", "pretrain", "--config", testing::project_configs() + "/examples/" + name, steps, "3",
         "--device", "cpu"},
        {{"PRIMUS_CHECK_KEY_USE", "1"}, {"PRIMUS_WORKSPACE", dir.path()}, {"OMP_NUM_THREADS", "1"}},
        dir.path());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("key statuses disagree"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace primus::config
