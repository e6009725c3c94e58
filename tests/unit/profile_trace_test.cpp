// Chrome/Perfetto trace output (profile/trace.h): the JSON is well formed and carries what Perfetto needs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "profile/timeline.h"
#include "profile/trace.h"

using namespace primus::profile;

TEST(ProfileTrace, RangesOnlyWhileRecording) {
  Tracer& t = Tracer::get();
  t.clear();
  t.configure(3, "rank 3 (test:cpu)", /*gpu=*/false);
  { PRIMUS_TRACE_RANGE("not recorded"); }
  t.start();
  {
    PRIMUS_TRACE_RANGE("outer");
    {
      PRIMUS_TRACE_RANGE("inner");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  t.counter("memory", {{"allocated_gb", 1.5}});
  t.instant("loss_spike", {{"detail", "x"}});
  t.stop();
  { PRIMUS_TRACE_RANGE("after stop"); }
  const nlohmann::json j = t.to_json();
  t.clear();

  ASSERT_TRUE(j.contains("traceEvents"));
  EXPECT_EQ(j["displayTimeUnit"], "ms");
  EXPECT_EQ(j["otherData"]["rank"], 3);
  int ranges = 0, meta = 0;
  double outer_ts = -1, outer_end = -1, inner_ts = -1, inner_end = -1;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name"));
    EXPECT_EQ(e["pid"], 3);
    const std::string ph = e["ph"];
    if (ph == "M") {
      ++meta;
      EXPECT_TRUE(e["args"].contains("name") || e["args"].contains("sort_index"));
      continue;
    }
    ASSERT_TRUE(e["ts"].is_number());
    EXPECT_GE(e["ts"].get<double>(), 0);
    if (ph == "X") {
      ++ranges;
      ASSERT_TRUE(e["dur"].is_number());
      EXPECT_GE(e["dur"].get<double>(), 0);
      if (e["name"] == "outer") {
        outer_ts = e["ts"];
        outer_end = outer_ts + e["dur"].get<double>();
      }
      if (e["name"] == "inner") {
        inner_ts = e["ts"];
        inner_end = inner_ts + e["dur"].get<double>();
      }
      EXPECT_NE(e["name"], "not recorded");
      EXPECT_NE(e["name"], "after stop");
    }
    if (ph == "i") EXPECT_EQ(e["s"], "t");
    if (ph == "C") EXPECT_TRUE(e["args"].contains("allocated_gb"));
  }
  EXPECT_EQ(ranges, 2);
  EXPECT_GE(meta, 4);  // process name + sort index, thread name + sort index
  EXPECT_LE(outer_ts, inner_ts);
  EXPECT_GE(outer_end, inner_end);
  EXPECT_GE(inner_end - inner_ts, 1000);  // >= 1 ms in microseconds
}

TEST(ProfileTrace, WrittenFileParsesAndAnalyses) {
  Tracer& t = Tracer::get();
  t.clear();
  t.configure(0, "rank 0", false);
  t.start();
  { PRIMUS_TRACE_RANGE("forward_backward"); }
  { PRIMUS_TRACE_RANGE("optimizer"); }
  t.stop();
  const std::string dir = (std::filesystem::temp_directory_path() /
                           (std::string("primus-trace-test-") + std::to_string(getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  t.write(dir + "/trace/rank0.json");
  t.clear();
  std::ifstream f(dir + "/trace/rank0.json");
  const nlohmann::json j = nlohmann::json::parse(f);  // throws on invalid JSON
  EXPECT_TRUE(j["traceEvents"].is_array());
  const auto reports = analyse_trace_file(dir + "/trace/rank0.json");
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].ops.size(), 2u);
  std::filesystem::remove_all(dir);
}
