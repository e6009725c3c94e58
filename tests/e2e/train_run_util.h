#pragma once
// Helpers of the training end-to-end tests (MoE, MLA): a scratch workspace removed on exit, the per-step
// records of a run's metrics.jsonl, and the environment that places a run in that workspace.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_process.h"
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

// A run split by a checkpoint beside the same run straight through, for bit-exact resume tests. `run(name,
// save_dir, extra_args)` runs `primus train` as the test wants it; the straight run saves into dir/ckpt-a,
// the split one into dir/ckpt-b, stops after `exit_at` iterations (--exit_interval) and resumes (--resume
// auto). The runs' experiments name `work_group`. Returns both runs' step records, checked to hold `steps`
// each; a failed run or a missing resume is a test failure (and empty records).
struct StraightAndSplit {
  std::vector<nlohmann::json> straight, split;
};
template <typename Run>
StraightAndSplit run_straight_and_split(Run&& run, const std::string& dir, int exit_at, size_t steps,
                                        const std::string& work_group = "amd") {
  auto ok = [](const CliResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
    return r.exit_code == 0;
  };
  if (!ok(run("straight", dir + "/ckpt-a", std::vector<std::string>{})) ||
      !ok(run("split", dir + "/ckpt-b",
              std::vector<std::string>{"--exit_interval", std::to_string(exit_at)})))
    return {};
  const CliResult second = run("split", dir + "/ckpt-b", std::vector<std::string>{"--resume", "auto"});
  if (!ok(second)) return {};
  EXPECT_NE(second.out.find("resuming from"), std::string::npos) << second.out;
  StraightAndSplit r{steps_of(dir + "/" + work_group + "/ci/straight/metrics.jsonl"),
                     steps_of(dir + "/" + work_group + "/ci/split/metrics.jsonl")};
  EXPECT_EQ(r.straight.size(), steps);
  EXPECT_EQ(r.split.size(), steps);
  if (r.straight.size() != steps || r.split.size() != steps) return {};
  return r;
}

}  // namespace primus::cli_test
