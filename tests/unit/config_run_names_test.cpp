// The run names (config/run_names.h): work_group, user_name and exp_name are single directory names and the
// workspace a usable path, checked where the experiment is loaded (errors name key, value and origin), and
// the TensorBoard keys of both dialects reaching TensorBoardConfig.
#include <gtest/gtest.h>

#include "config/load_config.h"
#include "config/run_names.h"
#include "config_test_util.h"

namespace primus::config {
namespace {

using primus::config::testing::config_error_of;

ResolvedConfig load(const std::string& exp, std::map<std::string, std::string> env = {}) {
  ResolveOptions o;
  o.env = testing::fake_env(std::move(env));
  o.roots = std::vector<std::string>{testing::project_configs()};
  return load_config(exp, o);
}

const char* kMegatron =
    "work_group: g\nuser_name: u\nexp_name: ${PRIMUS_EXP_NAME:e}\nworkspace: "
    "${PRIMUS_WORKSPACE:w}\nmodules:\n"
    "  pre_trainer:\n    framework: megatron\n    config: pre_trainer.yaml\n    model: micro_llama.yaml\n"
    "    overrides:\n      mock_data: true\n";

TEST(ConfigRunNames, NamesAreSingleDirectoryNames) {
  for (const char* ok : {"e", "my-run_1.2", "Llama 3 8B", "..x", "x..", "a.b"})
    EXPECT_NO_THROW(check_run_name("exp_name", ok, "")) << ok;
  struct Bad {
    const char* value;
    const char* why;
  };
  for (const Bad& b :
       {Bad{"", "is empty"}, Bad{".", "relative directory"}, Bad{"..", "relative directory"},
        Bad{"a/b", "path separator"}, Bad{"../../etc", "path separator"}, Bad{"a\\b", "path separator"},
        Bad{"run\n2", "control character"}, Bad{"x\x7f", "control character"}}) {
    const std::string e = config_error_of([&] { check_run_name("user_name", b.value, "exp.yaml:3"); });
    EXPECT_NE(e.find("exp.yaml:3: user_name:"), std::string::npos) << b.value << ": " << e;
    EXPECT_NE(e.find(b.why), std::string::npos) << b.value << ": " << e;
  }
  // The message shows control characters escaped.
  EXPECT_NE(config_error_of([] { check_run_name("exp_name", "a\nb", ""); }).find("'a\\x0ab'"),
            std::string::npos);
  EXPECT_NO_THROW(check_workspace("/abs/../ws", ""));
  EXPECT_NO_THROW(check_workspace("./output", ""));
  EXPECT_NE(config_error_of([] { check_workspace("", "f:1"); }).find("f:1: workspace: '' is empty"),
            std::string::npos);
  RunInfo run;
  run.exp_name = "../escape";
  EXPECT_NE(config_error_of([&] { check_run_names(run); }).find("exp_name: '../escape'"), std::string::npos);
}

TEST(ConfigRunNames, LoadingRefusesANameFromTheEnvironmentNamingTheKey) {
  testing::TempDir dir;
  const std::string exp = dir.write("exp.yaml", kMegatron);
  EXPECT_EQ(load(exp, {{"PRIMUS_EXP_NAME", "fine"}}).train.run.exp_name, "fine");
  const std::string e = config_error_of([&] { load(exp, {{"PRIMUS_EXP_NAME", "../../other/run"}}); });
  EXPECT_NE(e.find("exp.yaml:3"), std::string::npos) << e;
  EXPECT_NE(e.find("exp_name: '../../other/run' holds a path separator"), std::string::npos) << e;
  EXPECT_NE(config_error_of([&] {
              load(exp, {{"PRIMUS_EXP_NAME", ".."}});
            }).find("exp_name: '..'"),
            std::string::npos);
  EXPECT_NO_THROW(load(exp, {{"PRIMUS_WORKSPACE", "/tmp/a/../b"}}));
}

TEST(ConfigTensorBoardKeys, MegatronKeysReachTheConfig) {
  testing::TempDir dir;
  const TensorBoardConfig off = load(dir.write("off.yaml", kMegatron)).train.logging.tensorboard;
  EXPECT_FALSE(off.enabled);  // Primus: disable_tensorboard defaults to true
  const std::string on = dir.write(
      "on.yaml", std::string(kMegatron) +
                     "      disable_tensorboard: false\n      tensorboard_log_interval: 5\n"
                     "      tensorboard_queue_size: 7\n      log_learning_rate_to_tensorboard: false\n"
                     "      log_loss_scale_to_tensorboard: false\n      log_batch_size_to_tensorboard: true\n"
                     "      log_world_size_to_tensorboard: true\n      log_memory_to_tensorboard: true\n"
                     "      log_timers_to_tensorboard: true\n      log_throughput: true\n"
                     "      log_validation_ppl_to_tensorboard: true\n");
  const TensorBoardConfig tb = load(on).train.logging.tensorboard;
  EXPECT_TRUE(tb.enabled);
  EXPECT_EQ(tb.dir, "");
  EXPECT_EQ(tb.subdir, "tensorboard");
  EXPECT_EQ(tb.tags, "megatron");
  EXPECT_EQ(tb.log_interval, 5);
  EXPECT_EQ(tb.queue_size, 7);
  EXPECT_FALSE(tb.learning_rate);
  EXPECT_FALSE(tb.loss_scale);
  EXPECT_TRUE(tb.batch_size && tb.world_size && tb.memory && tb.timers && tb.throughput && tb.validation_ppl);
  // tensorboard_dir alone turns it on (Megatron writes whenever the directory is set).
  const TensorBoardConfig dir_only =
      load(dir.write("dir.yaml", std::string(kMegatron) + "      tensorboard_dir: /tmp/tbx\n"))
          .train.logging.tensorboard;
  EXPECT_TRUE(dir_only.enabled);
  EXPECT_EQ(dir_only.dir, "/tmp/tbx");
  EXPECT_NE(config_error_of([&] {
              load(dir.write("bad.yaml", std::string(kMegatron) + "      tensorboard_log_interval: 0\n"));
            }).find("tensorboard_log_interval"),
            std::string::npos);
}

TEST(ConfigTensorBoardKeys, TorchTitanKeysReachTheConfig) {
  testing::TempDir dir;
  const std::string base =
      "work_group: g\nuser_name: u\nexp_name: e\nworkspace: w\nmodules:\n  pre_trainer:\n"
      "    framework: torchtitan\n    config: pre_trainer.yaml\n    model: micro_llama.yaml\n"
      "    overrides:\n      training:\n        mock_data: true\n      metrics:\n        log_freq: 4\n";
  const TensorBoardConfig tb =
      load(dir.write("tt.yaml", base + "        enable_tensorboard: true\n        save_tb_folder: boards\n"))
          .train.logging.tensorboard;
  EXPECT_TRUE(tb.enabled);
  EXPECT_EQ(tb.subdir, "boards");
  EXPECT_EQ(tb.tags, "torchtitan");
  EXPECT_EQ(tb.log_interval, 4);
  EXPECT_NE(
      config_error_of([&] {
        load(dir.write("up.yaml", base + "        enable_tensorboard: true\n        save_tb_folder: ../x\n"));
      }).find("metrics.save_tb_folder '../x' leaves the run directory"),
      std::string::npos);
}

}  // namespace
}  // namespace primus::config
