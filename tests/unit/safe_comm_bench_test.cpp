// The collective benchmark's definitions (bench/comm_bench.h), which preflight's collective rows rely on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/comm_bench.h"
#include "core/error.h"

using namespace primus::bench;

TEST(SafeCommBench, BusBandwidthFactorsAsNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor("all_reduce", 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_factor("reduce_scatter", 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor("all_gather", 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_factor("all_to_all", 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor("all_to_all_v", 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor("sendrecv", 8), 1);
  EXPECT_DOUBLE_EQ(bus_factor("broadcast", 8), 1);
  EXPECT_DOUBLE_EQ(bus_factor("all_reduce", 1), 0);
}

TEST(SafeCommBench, SizesAndUnits) {
  const auto s = power_of_two_sizes(1 << 10, int64_t{1} << 30);
  ASSERT_EQ(s.size(), 21u);  // 1 KiB .. 1 GiB
  EXPECT_EQ(s.front(), 1024);
  EXPECT_EQ(s.back(), int64_t{1} << 30);
  EXPECT_EQ(parse_bytes("1K"), 1024);
  EXPECT_EQ(parse_bytes("64M"), 64 << 20);
  EXPECT_EQ(parse_bytes("1G"), int64_t{1} << 30);
  EXPECT_EQ(parse_bytes("4096"), 4096);
  EXPECT_EQ(parse_bytes("16MB"), 16 << 20);
  EXPECT_THROW(parse_bytes("12X"), primus::ConfigError);
  EXPECT_THROW(parse_bytes("big"), primus::ConfigError);
  EXPECT_THROW(power_of_two_sizes(0, 10), primus::ConfigError);
}

TEST(SafeCommBench, ReportFormats) {
  const std::string d = (std::filesystem::temp_directory_path() /
                         (std::string("primus-comm-bench-test-") + std::to_string(getpid())))
                            .string();
  std::filesystem::create_directories(d);
  std::vector<CommBenchRow> rows = {{"all_reduce", "bf16", 8, 1 << 20, 1 << 19, 50.0, 20.97, 36.7, "ok"}};
  write_comm_report(d + "/r.jsonl", rows);
  write_comm_report(d + "/r.csv", rows);
  write_comm_report(d + "/r.md", rows);
  std::ifstream j(d + "/r.jsonl");
  const nlohmann::json row = nlohmann::json::parse(j);
  EXPECT_EQ(row["op"], "all_reduce");
  EXPECT_EQ(row["ranks"], 8);
  EXPECT_DOUBLE_EQ(row["busbw_gbps"].get<double>(), 36.7);
  std::stringstream csv;
  csv << std::ifstream(d + "/r.csv").rdbuf();
  EXPECT_EQ(csv.str().rfind("op,bytes,count,dtype,ranks,time_us,algbw_gbps,busbw_gbps,check\n", 0), 0u);
  std::stringstream md;
  md << std::ifstream(d + "/r.md").rdbuf();
  EXPECT_NE(md.str().find("| all_reduce | 1048576 |"), std::string::npos);
  EXPECT_THROW(write_comm_report(d + "/r.txt", rows), primus::ConfigError);
  std::filesystem::remove_all(d);
}
