#pragma once
// Helpers of the training end-to-end tests (MoE, MLA): a scratch workspace removed on exit, the per-step
// records of a run's metrics.jsonl, and the environment that places a run in that workspace.
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "train/metrics.h"

namespace primus::cli_test {

struct Scratch {
  std::string dir;
  explicit Scratch(const std::string& tag) {
    dir = (std::filesystem::temp_directory_path() / ("primus-" + tag + "-XXXXXX")).string();
    if (mkdtemp(dir.data()) == nullptr) dir.clear();
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

// The step records (those with a loss) of a metrics.jsonl, in order.
inline std::vector<nlohmann::json> steps_of(const std::string& metrics) {
  std::vector<nlohmann::json> out;
  for (nlohmann::json& j : primus::read_jsonl_records(metrics))
    if (j.contains("loss")) out.push_back(std::move(j));
  return out;
}

// A run under workspace `ws` with experiment name `exp`, one OpenMP thread (bitwise-comparable runs).
inline std::map<std::string, std::optional<std::string>> env_for(const std::string& ws,
                                                                 const std::string& exp) {
  return {
      {"PRIMUS_WORKSPACE", ws}, {"PRIMUS_EXP_NAME", exp}, {"PRIMUS_USER", "ci"}, {"OMP_NUM_THREADS", "1"}};
}

}  // namespace primus::cli_test
