// Who holds the memory at the peak (core/memory_owner.h), end to end on the CPU: a short run logs the holders
// after its last line and records them in summary.json, summing to the peak it reports.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "train_run_util.h"

namespace fs = std::filesystem;
using namespace primus::cli_test;

TEST(MemoryAtPeakE2E, SummaryNamesTheHoldersOfThePeak) {
  if (!fs::exists("/usr/share/games/fortunes")) GTEST_SKIP() << "Debian's fortunes not installed";
  Scratch s("memory-e2e");
  CliResult r = run_primus(
      {"train", "pretrain", "--config", project_dir() + "/tests/e2e/configs/fortunes_micro_llama.yaml",
       "--train_iters", "3", "--lr_warmup_iters", "1", "--eval_interval", "0", "--log_interval", "1"},
      env_for(s.dir, "memory"));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const size_t done = r.out.find("done: ");
  ASSERT_NE(done, std::string::npos) << r.out;
  const size_t line = r.out.find("memory at peak: ", done);
  ASSERT_NE(line, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parameters ", line), std::string::npos) << r.out.substr(line);

  const nlohmann::json summary = nlohmann::json::parse(slurp(s.dir + "/e2e/ci/memory/summary.json"));
  ASSERT_TRUE(summary.contains("memory_at_peak")) << summary.dump(1);
  std::map<std::string, size_t> held;
  size_t sum = 0, previous = SIZE_MAX;
  int layer_forward = 0;
  for (const nlohmann::json& h : summary["memory_at_peak"]) {
    const std::string owner = h["owner"].get<std::string>();
    const size_t bytes = h["bytes"].get<size_t>();
    EXPECT_LE(bytes, previous) << "largest first";
    previous = bytes;
    EXPECT_EQ(held.count(owner), 0u) << owner << " listed twice";
    held[owner] = bytes;
    sum += bytes;
    if (owner.rfind("layer ", 0) == 0 && owner.size() > 8 && owner.substr(owner.size() - 8) == " forward")
      ++layer_forward;
  }
  EXPECT_DOUBLE_EQ(static_cast<double>(sum) / 1e9, summary["peak_mem_gb"].get<double>());
  for (const char* owner : {"parameters", "gradients", "optimizer state"})
    EXPECT_GT(held[owner], 0u) << owner << " in " << summary["memory_at_peak"].dump();
  // On the CPU the f32 weights are the master weights: the Adam moments are twice the parameters.
  EXPECT_EQ(held["optimizer state"], 2 * held["parameters"]);
  EXPECT_EQ(held["gradients"], held["parameters"]);
  EXPECT_GE(layer_forward, 1) << summary["memory_at_peak"].dump();
}
