#pragma once
// Helpers shared by the config unit tests: the test-data folders, a fake environment, scratch directories.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>

#include "config/env_subst.h"
#include "core/error.h"

namespace primus::config::testing {

// Primus's own YAML files (test data, never copied into the repo): ../shared/primus-configs beside the clone.
inline std::string primus_root() {
  return std::string(PRIMUS_SHARED_DIR) + "/primus-configs";
}
inline std::string primus_configs() {
  return primus_root() + "/primus/configs";
}
inline std::string primus_examples() {
  return primus_root() + "/examples";
}
// The project's own presets.
inline std::string project_configs() {
  return std::string(PRIMUS_SOURCE_DIR) + "/configs";
}

// An environment holding exactly these variables (so that tests do not depend on the caller's).
inline EnvLookup fake_env(std::map<std::string, std::string> vars = {}) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// A scratch directory, removed with its contents at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "primus-config-test-XXXXXX").string();
    char* made = mkdtemp(pattern.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    root_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `text` to root/relative (creating folders) and returns the full path.
  std::string write(const std::string& relative, const std::string& text) const {
    std::filesystem::path p = root_ / relative;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  std::string path(const std::string& relative = "") const { return (root_ / relative).string(); }

 private:
  std::filesystem::path root_;
};

// The message of the ConfigError `fn` throws (the test fails when it throws nothing or something else).
// Every one of `parts` appears in `text` (an error message, a dry-run listing).
inline void expect_has(const std::string& text, std::initializer_list<const char*> parts) {
  for (const char* p : parts)
    EXPECT_NE(text.find(p), std::string::npos) << "missing '" << p << "' in: " << text;
}

inline std::string config_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a ConfigError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected a ConfigError, nothing was thrown";
  return "";
}

}  // namespace primus::config::testing
