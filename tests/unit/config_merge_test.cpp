// Deep merge, `extends` chains and the experiment merge priority:
// CLI > experiment overrides > module preset > model preset > extends parents.
#include <gtest/gtest.h>

#include "config/experiment.h"
#include "config/merge.h"
#include "config/preset_loader.h"
#include "config/yaml_reader.h"
#include "config_test_util.h"

namespace primus::config {
namespace {

using testing::config_error_of;
using testing::fake_env;
using testing::TempDir;

TEST(ConfigMerge, MapsRecurseAndEverythingElseReplacesWhole) {
  Value dst = read_yaml_text("a: {x: 1, y: 2}\nl: [1, 2, 3]\ns: old\nn: 5\n", "dst");
  Value src = read_yaml_text("a: {y: 20, z: 30}\nl: [9]\ns: ~\nnew: 1\n", "src");
  deep_merge(dst, src);
  EXPECT_EQ(dst.find("a")->repr(), "{x: 1, y: 20, z: 30}");
  EXPECT_EQ(dst.find("l")->repr(), "[9]");
  EXPECT_TRUE(dst.find("s")->is_null());
  EXPECT_EQ(dst.find("n")->as_int(), 5);
  EXPECT_EQ(dst.find("new")->as_int(), 1);
  EXPECT_EQ(dst.find_path("a.y")->origin().file, "src");
  EXPECT_EQ(dst.find_path("a.x")->origin().file, "dst");
}

TEST(ConfigMerge, ExtendsMergeLeftToRightAndTheFileBodyWins) {
  TempDir dir;
  dir.write("presets/first.yaml", "a: first\nb: first\nc: first\nnested: {p: 1, q: 1}\n");
  dir.write("presets/second.yaml", "b: second\nc: second\nnested: {q: 2}\n");
  dir.write("common/root.yaml", "r: root\na: root\n");
  dir.write("presets/first_parent.yaml", "extends: ../common/root.yaml\nz: 1\n");
  std::string file = dir.write("presets/child.yaml",
                               "extends:\n  - first_parent.yaml\n  - first.yaml\n  - second.yaml\nc: body\n");
  std::vector<std::string> files;
  Value v = load_preset(file, fake_env(), &files);
  EXPECT_EQ(v.find("a")->as_string(), "first") << "a later parent wins over an earlier one";
  EXPECT_EQ(v.find("b")->as_string(), "second");
  EXPECT_EQ(v.find("c")->as_string(), "body") << "the file's own keys win over every parent";
  EXPECT_EQ(v.find("r")->as_string(), "root") << "parents load their own extends, relative to themselves";
  EXPECT_EQ(v.find("nested")->repr(), "{p: 1, q: 2}");
  EXPECT_EQ(v.find("extends"), nullptr);
  EXPECT_EQ(files.size(), 5u);
}

TEST(ConfigMerge, CyclicAndMissingExtendsAreErrorsNamingTheFiles) {
  TempDir dir;
  dir.write("a.yaml", "extends: [b.yaml]\nx: 1\n");
  dir.write("b.yaml", "extends: [a.yaml]\ny: 1\n");
  std::string cyc = config_error_of([&] { load_preset(dir.path("a.yaml"), fake_env()); });
  EXPECT_NE(cyc.find("cyclic extends"), std::string::npos) << cyc;
  EXPECT_NE(cyc.find("a.yaml -> "), std::string::npos) << cyc;
  EXPECT_NE(cyc.find("b.yaml"), std::string::npos) << cyc;

  dir.write("c.yaml", "x: 1\nextends:\n  - nothere.yaml\n");
  std::string missing = config_error_of([&] { load_preset(dir.path("c.yaml"), fake_env()); });
  EXPECT_NE(missing.find("nothere.yaml"), std::string::npos) << missing;
  EXPECT_NE(missing.find("c.yaml:3:5"), std::string::npos) << missing;

  // A name the file system rejects (ENAMETOOLONG) is the same clear error, not an uncaught
  // std::filesystem_error (found by the YAML fuzzer in CI).
  dir.write("long.yaml", "extends: " + std::string(5000, 'n') + ".yaml\n");
  std::string too_long = config_error_of([&] { load_preset(dir.path("long.yaml"), fake_env()); });
  EXPECT_NE(too_long.find("not found"), std::string::npos) << too_long.substr(0, 300);
  EXPECT_NE(too_long.find("long.yaml:1:"), std::string::npos) << too_long.substr(0, 300);

  dir.write("self.yaml", "extends: self.yaml\n");
  EXPECT_NE(config_error_of([&] { load_preset(dir.path("self.yaml"), fake_env()); }).find("cyclic"),
            std::string::npos);
}

// A miniature config root: module preset with a parent, model preset with a parent, an experiment.
struct MiniRoot {
  TempDir dir;
  MiniRoot() {
    dir.write("root/modules/module_base.yaml", "trainable: false\nshared: module_base\n");
    dir.write("root/modules/megatron/trainer.yaml",
              "extends: [../module_base.yaml]\nlr: 1.0\ntrain_iters: 10\nseq_length: 64\nboth: module\n");
    dir.write("root/models/megatron/base_model.yaml", "hidden_size: 8\nnum_layers: 1\nname: ignored\n");
    dir.write("root/models/megatron/m.yaml",
              "extends: [base_model.yaml]\nnum_layers: 2\nboth: model\nseq_length: 999\n");
    dir.write("root/platforms/platform_azure.yaml", "name: azure\nworkspace: ./output\n");
  }
  std::string experiment(const std::string& overrides) {
    return dir.write("exp.yaml",
                     "work_group: g\nuser_name: u\nexp_name: e\nworkspace: ./w\nmodules:\n  pre_trainer:\n"
                     "    framework: megatron\n    config: trainer.yaml\n    model: m\n    overrides:\n" +
                         overrides);
  }
  ResolvedTree resolve(const std::string& overrides, std::vector<std::string> cli = {}) {
    ResolveOptions o;
    o.env = fake_env();
    o.roots = std::vector<std::string>{dir.path("root")};
    o.cli_overrides = std::move(cli);
    return resolve_experiment(experiment(overrides), o);
  }
};

TEST(ConfigMerge, PriorityIsCliThenOverridesThenModuleThenModelThenParents) {
  MiniRoot root;
  ResolvedTree t = root.resolve("      train_iters: 20\n      lr: 2.0\n", {"--lr", "3.0"});
  const Value& m = t.module;
  EXPECT_DOUBLE_EQ(m.find("lr")->as_float(), 3.0) << "CLI beats experiment overrides";
  EXPECT_EQ(m.find("lr")->origin().kind, Origin::Kind::kCommandLine);
  EXPECT_EQ(m.find("train_iters")->as_int(), 20) << "experiment overrides beat the module preset";
  EXPECT_EQ(m.find("both")->as_string(), "module") << "module preset beats the model preset";
  EXPECT_EQ(m.find("seq_length")->as_int(), 64) << "model keys only fill where the module has none";
  EXPECT_EQ(m.find("num_layers")->as_int(), 2) << "model preset beats its own parent";
  EXPECT_EQ(m.find("hidden_size")->as_int(), 8) << "the model's parent fills what the model lacks";
  EXPECT_EQ(m.find("shared")->as_string(), "module_base");
  EXPECT_EQ(m.find("model")->as_string(), "m") << "model is set to the experiment's model name";
  EXPECT_EQ(m.find("framework")->as_string(), "megatron");
  EXPECT_EQ(m.find("name")->as_string(), "pre_trainer") << "the model preset's name is skipped";
  EXPECT_EQ(t.platform.find("master_sink_level")->as_string(), "INFO")
      << "Primus's default platform override";
  // The model value that lost to the module is reported, not dropped silently.
  bool warned = false;
  for (const auto& w : t.info.warnings) warned = warned || w.find("seq_length=999") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST(ConfigMerge, ExperimentStructureErrors) {
  MiniRoot root;
  ResolveOptions o;
  o.env = fake_env();
  o.roots = std::vector<std::string>{root.dir.path("root")};
  auto resolve_text = [&](const std::string& text) {
    return config_error_of([&] { resolve_experiment(root.dir.write("bad.yaml", text), o); });
  };
  std::string head = "work_group: g\nuser_name: u\nexp_name: e\nworkspace: w\n";
  EXPECT_NE(resolve_text("user_name: u\nexp_name: e\nworkspace: w\nmodules: {}\n").find("'work_group'"),
            std::string::npos);
  EXPECT_NE(resolve_text(head + "modulez: {}\n").find("did you mean 'modules'"), std::string::npos);
  EXPECT_NE(
      resolve_text(head + "modules:\n  pre_trainer:\n    framework: megatrn\n    config: trainer.yaml\n")
          .find("did you mean 'megatron'"),
      std::string::npos);
  EXPECT_NE(
      resolve_text(head + "modules:\n  pre_trainer:\n    framework: megatron\n    confg: trainer.yaml\n")
          .find("did you mean 'config'"),
      std::string::npos);
  EXPECT_NE(
      resolve_text(head + "modules:\n  other_trainer:\n    framework: megatron\n    config: trainer.yaml\n")
          .find("no module 'pre_trainer'"),
      std::string::npos);
  // An experiment with only a post_trainer is an SFT run (Primus: `train posttrain`).
  EXPECT_NE(
      resolve_text(head + "modules:\n  post_trainer:\n    framework: megatron\n    config: trainer.yaml\n")
          .find("defines module post_trainer (supervised fine-tuning), which runs with `primus train "
                "posttrain`"),
      std::string::npos);
  std::string missing_model =
      resolve_text(head +
                   "modules:\n  pre_trainer:\n    framework: megatron\n    config: trainer.yaml\n"
                   "    model: mm.yaml\n");
  EXPECT_NE(missing_model.find("model preset 'mm.yaml' not found"), std::string::npos) << missing_model;
  EXPECT_NE(missing_model.find("did you mean 'm.yaml'"), std::string::npos) << missing_model;
  EXPECT_NE(missing_model.find("bad.yaml:9:5"), std::string::npos) << missing_model;
}

}  // namespace
}  // namespace primus::config
