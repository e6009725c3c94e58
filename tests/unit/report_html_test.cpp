// The post-flight report (report/run_report.h) from a saved run directory, and its SVG charts.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "report/run_report.h"
#include "report/svg_plot.h"

using namespace primus::report;

namespace {

std::string make_run(const char* name) {
  const std::string d =
      (std::filesystem::temp_directory_path() / (std::string(name) + "-" + std::to_string(getpid())))
          .string();
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d + "/trace");
  std::ofstream m(d + "/metrics.jsonl");
  for (int s = 1; s <= 20; ++s)
    m << nlohmann::json{{"step", s},          {"loss", 5.0 - 0.1 * s}, {"lr", 1e-3}, {"grad_norm", 1.0},
                        {"iter_ms", 100 + s}, {"tok_s_gpu", 4000.0},   {"mfu", 0.4}, {"mem_gb", 10.0}}
             .dump()
      << "\n";
  m << nlohmann::json{{"step", 10}, {"val_loss", 4.2}}.dump() << "\n";
  m << "not json\n";
  std::ofstream(d + "/events.jsonl") << nlohmann::json{{"step", 7},
                                                       {"kind", "nan_skip"},
                                                       {"rank", 0},
                                                       {"detail", "loss of micro-batch 1 is nan"}}
                                            .dump()
                                     << "\n"
                                     << nlohmann::json{{"step", 12},
                                                       {"kind", "straggler"},
                                                       {"rank", 0},
                                                       {"detail", "rank 3: 130 ms vs median 100 ms"}}
                                            .dump()
                                     << "\n";
  std::ofstream(d + "/summary.json") << R"({"steps": 20, "last_loss": 3.0})";
  std::ofstream(d + "/config.yaml") << "train_iters: 20\nseq_length: <128>\n";
  std::ofstream(d + "/trace/rank0.json")
      << R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"sm90_xmma_gemm","ts":0,"dur":700,"pid":0,"tid":10},)"
         R"({"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce","ts":600,"dur":300,"pid":0,"tid":1},)"
         R"({"ph":"X","cat":"cpu_op","name":"waiting_for_norm","ts":950,"dur":400,"pid":0,"tid":0},)"
         R"({"ph":"X","cat":"kernel","name":"adamw_kernel","ts":1500,"dur":100,"pid":0,"tid":10}]})";
  return d;
}

}  // namespace

TEST(ReportHtml, RendersEverySection) {
  const std::string d = make_run("primus-report-test");
  const RunData run = load_run(d);
  EXPECT_EQ(run.steps.size(), 20u);
  EXPECT_EQ(run.validation.size(), 1u);
  EXPECT_EQ(run.events.size(), 2u);
  ASSERT_EQ(run.timelines.size(), 1u);
  EXPECT_NEAR(run.timelines[0].timeline.exposed_comm_ms, 0.2, 1e-12);
  EXPECT_EQ(run.warnings.size(), 1u);  // the "not json" line
  const std::string path = write_run_report(d, "");
  EXPECT_EQ(path, d + "/report.html");
  std::ifstream f(path);
  const std::string html((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (const char* s : {"<!DOCTYPE html>",
                        "<svg",
                        "Loss",
                        "Throughput",
                        "MFU",
                        "Memory",
                        "validation loss",
                        "Guard events",
                        "nan_skip",
                        "straggler",
                        "exposed communication",
                        "op family",
                        "gemm",
                        "nccl",
                        "Longest idle gaps",
                        "waiting_for_norm",
                        "adamw_kernel",
                        "Last steps",
                        "&lt;128&gt;",
                        "</html>"})
    EXPECT_NE(html.find(s), std::string::npos) << s;
  EXPECT_EQ(html.find("<script"), std::string::npos);  // nothing to fetch, nothing to run
  std::filesystem::remove_all(d);
}

TEST(ReportHtml, MissingMetricsNamesThePath) {
  try {
    load_run("/nonexistent/run");
    FAIL() << "expected an error";
  } catch (const primus::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/run/metrics.jsonl"), std::string::npos);
  }
}

TEST(ReportHtml, ChartsAndTicks) {
  auto t = nice_ticks(0, 10, 5);
  ASSERT_FALSE(t.empty());
  EXPECT_DOUBLE_EQ(t.front(), 0);
  EXPECT_DOUBLE_EQ(t.back(), 10);
  const std::string svg =
      line_chart("T", "y", {{"a", "#000", {1, 2, 3}, {1, 4, 9}, false}}, {{2, "spike <x>", "#f00"}});
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("spike &lt;x&gt;"), std::string::npos);
  EXPECT_NE(line_chart("E", "y", {}).find("no data"), std::string::npos);
  EXPECT_EQ(html_escape("a<b>&\""), "a&lt;b&gt;&amp;&quot;");
}

TEST(ReportHtml, MemorySectionShowsTheHoldersAndTheTimeline) {
  const std::string d = make_run("primus-report-memory-test");
  nlohmann::json holders = nlohmann::json::array();
  holders.push_back({{"owner", "optimizer state"}, {"bytes", 6000000000}});
  holders.push_back({{"owner", "parameters"}, {"bytes", 3000000000}});
  holders.push_back({{"owner", "layer 3 forward"}, {"bytes", 1000000000}});
  for (int i = 0; i < 14; ++i) holders.push_back({{"owner", fmt::format("small {}", i)}, {"bytes", 1000}});
  std::ofstream(d + "/summary.json") << nlohmann::json{{"steps", 20}, {"memory_at_peak", holders}}.dump();
  nlohmann::json events = nlohmann::json::array();
  events.push_back(
      {{"ph", "X"}, {"cat", "kernel"}, {"name", "gemm"}, {"ts", 1000}, {"dur", 50}, {"pid", 0}, {"tid", 10}});
  for (int i = 0; i < 5; ++i)  // out of time order, as several threads may write them
    events.push_back({{"ph", "C"},
                      {"name", "device memory"},
                      {"ts", 5000 - 1000 * i},
                      {"pid", 0},
                      {"tid", 0},
                      {"args", {{"allocated_gb", i == 2 ? 9.5 : 8.0 + 0.1 * i}}}});
  std::ofstream(d + "/trace/rank0.json") << nlohmann::json{{"traceEvents", events}}.dump();
  const RunData run = load_run(d);
  ASSERT_EQ(run.memory_ms.size(), 5u);
  EXPECT_DOUBLE_EQ(run.memory_ms.front(), 0.0);  // the counter's first sample is the trace's first event
  EXPECT_DOUBLE_EQ(run.memory_ms.back(), 4.0);
  EXPECT_DOUBLE_EQ(run.memory_gb[2], 9.5);
  const std::string html = render_html(run);
  const size_t memory = html.find("<h2>Memory</h2>");
  ASSERT_NE(memory, std::string::npos);
  const std::string section = html.substr(memory, html.find("<h2>", memory + 1) - memory);
  for (const char* s :
       {"Peak allocated: 10.000 GB", "optimizer state", "60.0%", "layer 3 forward", "Memory at the peak",
        "others", "Memory timeline", "9.500 GB at sample 2", "in the order they were enqueued"})
    EXPECT_NE(section.find(s), std::string::npos) << s;
  EXPECT_EQ(section.find("small 13"), std::string::npos);  // past the first 12 rows: summed as "others"
  // The holders are the section's, not a JSON dump in the summary table.
  EXPECT_EQ(html.find("&quot;owner&quot;"), std::string::npos);
  std::filesystem::remove_all(d);
}

TEST(ReportHtml, MemorySectionWithoutHoldersOrTrace) {
  const std::string d = make_run("primus-report-memory-none");
  std::filesystem::remove_all(d + "/trace");
  const std::string html = render_html(load_run(d));
  EXPECT_NE(html.find("<h2>Memory</h2>"), std::string::npos);
  EXPECT_NE(html.find("records no holders of the peak"), std::string::npos);
  EXPECT_NE(html.find("No memory timeline"), std::string::npos);
  std::filesystem::remove_all(d);
}
