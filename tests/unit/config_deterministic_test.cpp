// deterministic_mode (Megatron) and debug.deterministic (TorchTitan) reach TrainConfig::deterministic, from
// the experiment file and from the command line; both default to off.
#include <gtest/gtest.h>

#include "config/load_config.h"
#include "config_test_util.h"

namespace primus::config {
namespace {

bool deterministic(const std::string& exp, std::vector<std::string> cli = {}) {
  ResolveOptions o;
  o.env = testing::fake_env();
  o.roots = std::vector<std::string>{testing::project_configs()};
  o.cli_overrides = std::move(cli);
  return load_config(exp, o).train.deterministic;
}

TEST(ConfigDeterministic, MegatronDeterministicModeFromFileAndCli) {
  testing::TempDir dir;
  auto exp = [&](const std::string& name, const std::string& extra) {
    return dir.write(name,
                     "work_group: g\nuser_name: u\nexp_name: e\nworkspace: w\nmodules:\n  pre_trainer:\n"
                     "    framework: megatron\n    config: pre_trainer.yaml\n    model: micro_llama.yaml\n"
                     "    overrides:\n      mock_data: true\n" +
                         extra);
  };
  const std::string plain = exp("plain.yaml", "");
  EXPECT_FALSE(deterministic(plain));
  EXPECT_TRUE(deterministic(exp("on.yaml", "      deterministic_mode: true\n")));
  EXPECT_TRUE(deterministic(plain, {"--deterministic_mode", "true"}));
  EXPECT_THROW(deterministic(plain, {"--deterministic_mode", "sometimes"}), ConfigError);
}

TEST(ConfigDeterministic, TorchTitanDebugDeterministic) {
  testing::TempDir dir;
  auto exp = [&](const std::string& name, const std::string& extra) {
    return dir.write(name,
                     "work_group: g\nuser_name: u\nexp_name: e\nworkspace: w\nmodules:\n  pre_trainer:\n"
                     "    framework: torchtitan\n    config: pre_trainer.yaml\n    model: micro_llama.yaml\n"
                     "    overrides:\n      training:\n        mock_data: true\n" +
                         extra);
  };
  EXPECT_FALSE(deterministic(exp("plain.yaml", "")));
  EXPECT_TRUE(deterministic(exp("on.yaml", "      debug:\n        deterministic: true\n")));
}

// Planning (projection, `--dry-run --nnodes`) keeps values training refuses as warnings; TorchTitan's FP8
// converter reached the mapper's "only primus_turbo" assertion and aborted the plan with an internal error
// (found by planning every Primus MI355X experiment for one node of 8).
TEST(ConfigPlanning, TorchTitanMxConverterIsAWarningWhenPlanning) {
  testing::TempDir dir;
  const std::string exp =
      dir.write("fp8.yaml",
                "work_group: g\nuser_name: u\nexp_name: e\nworkspace: w\nmodules:\n  pre_trainer:\n"
                "    framework: torchtitan\n    config: pre_trainer.yaml\n    model: micro_llama.yaml\n"
                "    overrides:\n      training:\n        mock_data: true\n      model:\n        converters: "
                "[mx]\n");
  ResolveOptions o;
  o.env = testing::fake_env();
  o.roots = std::vector<std::string>{testing::project_configs()};
  EXPECT_THROW(load_config(exp, o), ConfigError) << "training refuses the mx converter (Blackwell only)";
  o.planning = true;
  o.plan_world_size = 8;
  ResolvedConfig rc = load_config(exp, o);
  EXPECT_EQ(rc.world_size, 8);
  bool warned = false;
  for (const std::string& w : rc.warnings) warned |= w.find("model.converters") != std::string::npos;
  EXPECT_TRUE(warned);
}

}  // namespace
}  // namespace primus::config
