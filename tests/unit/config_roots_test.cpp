// Preset search path: PRIMUS_CONFIG_PATH entries first (left to right), then the project's configs/; the
// first root that holds a preset wins.
#include <gtest/gtest.h>

#include "config/config_roots.h"
#include "config/experiment.h"
#include "config_test_util.h"

namespace primus::config {
namespace {

using testing::config_error_of;
using testing::fake_env;
using testing::TempDir;

TEST(ConfigRoots, SearchPathOrderAndProjectDirectory) {
  TempDir a, b;
  std::vector<std::string> roots =
      config_search_path(fake_env({{"PRIMUS_CONFIG_PATH", a.path() + ":/does/not/exist:" + b.path()}}));
  ASSERT_GE(roots.size(), 3u);
  EXPECT_NE(roots[0].find("primus-config-test"), std::string::npos);
  EXPECT_EQ(roots[0], std::filesystem::canonical(a.path()).string());
  EXPECT_EQ(roots[1], std::filesystem::canonical(b.path()).string());
  EXPECT_EQ(roots.back(), std::filesystem::canonical(testing::project_configs()).string())
      << "the project's configs/ come last";
  EXPECT_EQ(project_config_dir(fake_env({{"PRIMUS_HOME", "/nonexistent"}})),
            std::filesystem::canonical(testing::project_configs()).string())
      << "a PRIMUS_HOME without configs/ falls through to the next candidate";
}

TEST(ConfigRoots, EarlierRootWins) {
  TempDir first, second;
  first.write("models/megatron/m.yaml", "num_layers: 1\n");
  second.write("models/megatron/m.yaml", "num_layers: 2\n");
  second.write("models/megatron/only_second.yaml", "num_layers: 3\n");
  std::vector<std::string> roots = {first.path(), second.path()};
  EXPECT_EQ(find_preset(roots, "models/megatron", "m", "model preset", {}),
            first.path("models/megatron/m.yaml"));
  EXPECT_EQ(find_preset(roots, "models/megatron", "only_second.yaml", "model preset", {}),
            second.path("models/megatron/only_second.yaml"));
  std::string msg = config_error_of([&] {
    find_preset(roots, "models/megatron", "only_secnd.yaml", "model preset", Origin::in_file("e.yaml", 3, 5));
  });
  EXPECT_NE(msg.find("e.yaml:3:5: model preset 'only_secnd.yaml' not found"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'only_second.yaml'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(first.path("models/megatron/only_secnd.yaml")), std::string::npos) << msg;
  EXPECT_NE(msg.find(second.path("models/megatron/only_secnd.yaml")), std::string::npos) << msg;
}

TEST(ConfigRoots, PrimusConfigPathShadowsTheProjectPresets) {
  // With Primus's configs first, `config: pre_trainer.yaml` is Primus's (hundreds of keys), not ours.
  std::vector<std::string> roots =
      config_search_path(fake_env({{"PRIMUS_CONFIG_PATH", testing::primus_configs()}}));
  std::string found = find_preset(roots, "modules/megatron", "pre_trainer.yaml", "module preset", {});
  EXPECT_NE(found.find("primus-configs"), std::string::npos) << found;
  std::string ours = find_preset(roots, "models/megatron", "tiny_llama.yaml", "model preset", {});
  EXPECT_EQ(ours.find("primus-configs"), std::string::npos) << "presets only we have still resolve: " << ours;
}

}  // namespace
}  // namespace primus::config
