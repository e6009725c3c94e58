// Stability and insight end to end on the CPU: a profiled run writes a valid trace and guard events, `primus
// report` turns the run directory into HTML, `primus report timeline` analyses the trace, and the hang
// watchdog ends a stalled run naming the rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_process.h"

using namespace primus::cli_test;

namespace {

std::string run_dir_of(const std::string& workspace, const std::string& exp) {
  return workspace + "/e2e/ci/" + exp;
}

CliResult train_micro(const std::string& workspace, const std::string& exp,
                      const std::vector<std::string>& overrides,
                      std::map<std::string, std::optional<std::string>> env = {}) {
  env["PRIMUS_WORKSPACE"] = workspace;
  env["PRIMUS_EXP_NAME"] = exp;
  env["PRIMUS_USER"] = "ci";
  std::vector<std::string> args = {"train", "pretrain", "--config",
                                   project_dir() + "/tests/e2e/configs/fortunes_micro_llama.yaml"};
  args.insert(args.end(), overrides.begin(), overrides.end());
  return run_primus(args, env);
}

}  // namespace

TEST(ReportE2E, ProfiledRunToHtmlReport) {
  if (!std::filesystem::exists(kFortunes)) GTEST_SKIP() << "Debian fortunes not installed";
  const std::string ws = (std::filesystem::temp_directory_path() /
                          (std::string("primus-e2e-report-") + std::to_string(getpid())))
                             .string();
  std::filesystem::remove_all(ws);
  CliResult r =
      train_micro(ws, "profiled",
                  {"train_iters=12", "lr_warmup_iters=2", "eval_interval=6", "log_interval=4", "profile=true",
                   "profile_step_start=3", "profile_step_end=4", "check_for_spiky_loss=true"},
                  {{"PRIMUS_INJECT_LOSS_SPIKE", "9:100"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string dir = run_dir_of(ws, "profiled");
  // The trace: valid JSON, CPU ranges of steps 3 and 4, and the timeline printed after the profiled steps.
  const nlohmann::json trace = nlohmann::json::parse(slurp(dir + "/trace/rank0.json"));
  int steps = 0, fwd = 0, memory = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "step") ++steps;
    if (e["ph"] == "X" && e["name"] == "forward_backward") ++fwd;
    if (e["ph"] == "C" && e["name"] == "device memory" && e["args"]["allocated_gb"].get<double>() > 0)
      ++memory;
  }
  EXPECT_EQ(steps, 2);
  EXPECT_EQ(fwd, 4);     // 2 steps x 2 micro-batches
  EXPECT_GT(memory, 2);  // the memory timeline
  EXPECT_NE((r.out + r.err).find("Op summary by family"), std::string::npos);
  // The guard event.
  const std::string events = slurp(dir + "/events.jsonl");
  EXPECT_NE(events.find("\"loss_spike\""), std::string::npos) << events;

  CliResult rep = run_primus({"report", dir});
  ASSERT_EQ(rep.exit_code, 0) << rep.out << rep.err;
  const std::string html = slurp(dir + "/report.html");
  for (const char* s : {"<svg", "validation loss", "loss_spike", "forward_backward", "Guard events",
                        "<h2>Memory</h2>", "optimizer state", "Memory at the peak", "Memory timeline"})
    EXPECT_NE(html.find(s), std::string::npos) << s;

  CliResult tl =
      run_primus({"report", "timeline", dir + "/trace/rank0.json", "--json", dir + "/timeline.json"});
  ASSERT_EQ(tl.exit_code, 0) << tl.out << tl.err;
  EXPECT_NE(tl.out.find("computation"), std::string::npos);
  const nlohmann::json tj = nlohmann::json::parse(slurp(dir + "/timeline.json"));
  EXPECT_EQ(tj[0]["gpu_timeline"][0]["type"], "computation");
  std::filesystem::remove_all(ws);
}

TEST(ReportE2E, ReportOfAMissingRunNamesIt) {
  CliResult r = run_primus({"report", "/nonexistent/run/dir"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/run/dir/metrics.jsonl"), std::string::npos) << r.err;
}

TEST(ReportE2E, WatchdogEndsAStalledRunNamingTheRank) {
  if (!std::filesystem::exists(kFortunes)) GTEST_SKIP() << "Debian fortunes not installed";
  const std::string ws =
      (std::filesystem::temp_directory_path() / (std::string("primus-e2e-stall-") + std::to_string(getpid())))
          .string();
  std::filesystem::remove_all(ws);
  CliResult r = train_micro(ws, "stalled", {"train_iters=50", "lr_warmup_iters=2", "hang_timeout_s=2"},
                            {{"PRIMUS_INJECT_STALL", "0:4"}});
  EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
  EXPECT_NE(r.err.find("stuck rank(s): 0"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 30);
  EXPECT_TRUE(std::filesystem::exists(run_dir_of(ws, "stalled") + "/heartbeat/hang-rank-0.json"));
  std::filesystem::remove_all(ws);
}
