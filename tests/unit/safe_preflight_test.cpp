// Preflight (safe/preflight.h): thresholds per GPU model and from YAML, host checks, the report, and the
// info mode on a host without a GPU (CI): it says so and exits 3.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "e2e/cli_process.h"
#include "safe/preflight.h"
#include "safe/subprocess.h"

using namespace primus::safe;

namespace {
std::string temp_dir(const char* name) {
  const std::string d =
      (std::filesystem::temp_directory_path() / (std::string(name) + "-" + std::to_string(getpid())))
          .string();
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}
}  // namespace

TEST(SafePreflight, ThresholdsPerModel) {
  Thresholds h100 = default_thresholds("NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100.model, "H100");
  EXPECT_EQ(h100.gemm_tflops_min, 600);
  EXPECT_EQ(h100.hbm_copy_gbps_min, 2500);
  EXPECT_EQ(default_thresholds("NVIDIA H200").model, "H200");
  EXPECT_EQ(default_thresholds("NVIDIA H200").gemm_tflops_min, 600);
  Thresholds other = default_thresholds("Tesla T4");
  EXPECT_EQ(other.gemm_tflops_min, 0);  // unknown model: measured, not judged
}

TEST(SafePreflight, ThresholdsFromYaml) {
  const std::string d = temp_dir("primus-preflight-yaml");
  std::ofstream(d + "/t.yaml")
      << "gemm_tflops_min: 500\nshm_gib_min: 1\nmodels:\n  H100:\n    hbm_copy_gbps_min: 2800\n"
         "  H200:\n    hbm_copy_gbps_min: 4000\n";
  Thresholds t = default_thresholds("NVIDIA H100 80GB HBM3");
  apply_threshold_file(t, d + "/t.yaml", "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(t.gemm_tflops_min, 500);
  EXPECT_EQ(t.shm_gib_min, 1);
  EXPECT_EQ(t.hbm_copy_gbps_min, 2800);
  std::ofstream(d + "/bad.yaml") << "gemm_tflop_min: 500\n";
  try {
    apply_threshold_file(t, d + "/bad.yaml", "x");
    FAIL() << "expected a ConfigError";
  } catch (const primus::ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad.yaml"), std::string::npos);
    EXPECT_NE(m.find("gemm_tflop_min"), std::string::npos);
  }
  std::ofstream(d + "/nan.yaml") << "gemm_tflops_min: fast\n";
  EXPECT_THROW(apply_threshold_file(t, d + "/nan.yaml", "x"), primus::ConfigError);
  std::filesystem::remove_all(d);
}

TEST(SafePreflight, HostChecksAndReport) {
  PreflightReport r;
  r.host = "testhost";
  Thresholds t;
  t.shm_gib_min = 1e9;  // impossible: /dev/shm must fail
  host_checks(r, t);
  bool cpu = false, shm_fail = false;
  for (const Finding& f : r.findings) {
    cpu |= f.check == "host.cpu";
    shm_fail |= f.check == "host.shm" && f.level == Level::kFail;
  }
  EXPECT_TRUE(cpu);
  EXPECT_TRUE(shm_fail);
  EXPECT_EQ(r.exit_code(), 3);
  const std::string md = r.markdown();
  EXPECT_NE(md.find("# Preflight: testhost"), std::string::npos);
  EXPECT_NE(md.find("FAIL"), std::string::npos);
  EXPECT_EQ(r.json()["result"], "fail");
}

TEST(SafePreflight, NcclEnvironmentSanity) {
  setenv("NCCL_SOCKET_IFNAME", "definitely_not_an_interface0", 1);
  PreflightReport r;
  nccl_env_checks(r, 8);
  unsetenv("NCCL_SOCKET_IFNAME");
  bool flagged = false;
  for (const Finding& f : r.findings) flagged |= f.check == "nccl.socket_ifname" && f.level == Level::kFail;
  EXPECT_TRUE(flagged);
}

TEST(SafePreflight, InfoModeWithoutGpuSaysSoAndExits3) {
  if (std::filesystem::exists("/dev/nvidiactl")) GTEST_SKIP() << "this host has an NVIDIA driver";
  const std::string d = temp_dir("primus-preflight-nogpu");
  auto r = primus::cli_test::run_primus({"preflight", "--output-dir", d});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("no NVIDIA GPU"), std::string::npos) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("preflight FAILED"), std::string::npos);
  const std::string failing = primus::cli_test::slurp(d + "/failing.txt");
  EXPECT_NE(failing.find("- gpu.count"), std::string::npos) << failing;
  bool md = false, json = false;
  for (const auto& e : std::filesystem::directory_iterator(d)) {
    md |= e.path().extension() == ".md";
    json |= e.path().extension() == ".json";
  }
  EXPECT_TRUE(md && json);
  // --allow-no-gpu (with host thresholds this CI container meets) passes.
  std::ofstream(d + "/t.yaml") << "shm_gib_min: 0\nmem_available_pct_min: 0\n";
  auto ok = primus::cli_test::run_primus(
      {"preflight", "--allow-no-gpu", "--thresholds", d + "/t.yaml", "--output-dir", d});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  std::filesystem::remove_all(d);
}

TEST(SafePreflight, ChildProcessesAreKilledAtTheTimeout) {
  // What keeps one hung GPU from hanging preflight: every worker runs under a hard timeout.
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<ChildResult> r = run_children(
      {{{"/bin/sleep", "30"}, {}}, {{"/bin/sh", "-c", "echo hi $PRIMUS_X; exit 3"}, {{"PRIMUS_X", "7"}}}},
      1.0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(r[0].timed_out);
  EXPECT_FALSE(r[1].timed_out);
  EXPECT_EQ(r[1].exit_code, 3);
  EXPECT_EQ(r[1].output, "hi 7\n");
  EXPECT_LT(s, 5.0);
}
