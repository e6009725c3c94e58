// The key tables: every key of every Primus preset is declared (nothing is ignored silently), and the
// declarations themselves are complete.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <set>

#include "config/key_decl.h"
#include "config/yaml_reader.h"
#include "config_test_util.h"

namespace primus::config {
namespace {

namespace fs = std::filesystem;

// The leaf keys of a YAML map as the tables name them: Megatron keys are flat except the declared sections
// (lora, torch_compile, mock_dataset); TorchTitan keys are "section.key".
void collect(const Value& map, const std::string& prefix, const KeyTable& table, std::set<std::string>& out) {
  for (const auto& [key, value] : map.entries()) {
    if (prefix.empty() && key == "extends") continue;
    std::string name = prefix.empty() ? key : prefix + "." + key;
    const KeyDecl* d = table.find(name);
    if (d != nullptr && d->type == KeyType::kSection && value.is_map()) {
      collect(value, name, table, out);
    } else {
      out.insert(name);
    }
  }
}

std::vector<std::string> yaml_files(const fs::path& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

void expect_all_declared(const std::vector<std::string>& files, const KeyTable& table, size_t* count) {
  std::set<std::string> keys;
  for (const std::string& f : files) collect(read_yaml_file(f), "", table, keys);
  for (const std::string& k : keys)
    EXPECT_NE(table.find(k), nullptr) << "undeclared " << table.dialect() << " key: " << k;
  *count = keys.size();
}

TEST(ConfigKeys, EveryMegatronKeyInPrimusPresetsIsDeclared) {
  const std::string root = testing::primus_configs();
  std::vector<std::string> files = yaml_files(root + "/modules/megatron");
  for (const auto& f : yaml_files(root + "/models/megatron")) files.push_back(f);
  files.push_back(root + "/modules/module_base.yaml");
  size_t count = 0;
  expect_all_declared(files, megatron_keys(), &count);
  EXPECT_GT(count, 600u) << "the Primus Megatron presets hold ~640 distinct keys";
}

TEST(ConfigKeys, EveryTorchTitanKeyInPrimusPresetsIsDeclared) {
  const std::string root = testing::primus_configs();
  std::vector<std::string> files = yaml_files(root + "/modules/torchtitan");
  for (const auto& f : yaml_files(root + "/models/torchtitan")) files.push_back(f);
  files.push_back(root + "/modules/module_base.yaml");
  size_t count = 0;
  expect_all_declared(files, torchtitan_keys(), &count);
  EXPECT_GT(count, 120u);
}

TEST(ConfigKeys, EveryKeyInPrimusExperimentOverridesAndPlatformsIsDeclared) {
  for (const std::string fw : {"megatron", "torchtitan"}) {
    const KeyTable& table = keys_for_framework(fw);
    for (const auto& f : yaml_files(testing::primus_examples() + "/" + fw + "/configs/MI300X")) {
      Value exp = read_yaml_file(f);
      const Value* overrides = exp.find_path("modules.pre_trainer.overrides");
      ASSERT_NE(overrides, nullptr) << f;
      std::set<std::string> keys;
      collect(*overrides, "", table, keys);
      for (const auto& k : keys) EXPECT_NE(table.find(k), nullptr) << f << ": undeclared key " << k;
    }
  }
  std::set<std::string> platform;
  for (const auto& f : yaml_files(testing::primus_configs() + "/platforms"))
    collect(read_yaml_file(f), "", platform_keys(), platform);
  for (const auto& k : platform)
    EXPECT_NE(platform_keys().find(k), nullptr) << "undeclared platform key " << k;
}

TEST(ConfigKeys, DeclarationsAreComplete) {
  for (const KeyTable* table : {&megatron_keys(), &torchtitan_keys(), &platform_keys()}) {
    for (const KeyDecl& d : table->all()) {
      EXPECT_FALSE(d.doc.empty()) << d.name;
      if (d.type == KeyType::kSection) continue;
      EXPECT_FALSE(d.group.empty()) << d.name;
      if (d.status == KeyStatus::kNoEffect) EXPECT_FALSE(d.reason.empty()) << d.name << " needs its reason";
      if (d.status == KeyStatus::kNotSupported) EXPECT_TRUE(static_cast<bool>(d.supported)) << d.name;
      // A section's keys are declared with their section.
      size_t dot = d.name.rfind('.');
      if (dot != std::string::npos) {
        const KeyDecl* parent = table->find(d.name.substr(0, dot));
        ASSERT_NE(parent, nullptr) << d.name;
        EXPECT_EQ(parent->type, KeyType::kSection) << d.name;
      }
    }
  }
  // Extension keys are marked as such.
  for (const char* k : {"device", "text_data_path", "gemm_tuning_file"}) {
    EXPECT_TRUE(megatron_keys().find(k)->extension) << k;
    EXPECT_TRUE(torchtitan_keys().find(k)->extension) << k;
  }
}

TEST(ConfigKeys, StatusCounts) {
  for (const KeyTable* table : {&megatron_keys(), &torchtitan_keys()}) {
    size_t n[3] = {0, 0, 0};
    size_t leaves = 0;
    for (const KeyDecl& d : table->all()) {
      if (d.type == KeyType::kSection) continue;
      ++leaves;
      ++n[static_cast<int>(d.status)];
    }
    std::cout << table->dialect() << ": " << leaves << " keys: " << n[0] << " implemented, " << n[1]
              << " no effect here, " << n[2] << " not supported yet\n";
    EXPECT_GT(n[0], 20u);
    EXPECT_GT(n[1], 20u);
    EXPECT_GT(n[2], 5u);
  }
}

}  // namespace
}  // namespace primus::config
