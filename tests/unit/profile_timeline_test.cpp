// GPU timeline math (profile/timeline.h) on synthetic traces with known answers.
#include <gtest/gtest.h>

#include "core/error.h"
#include "profile/timeline.h"

using namespace primus::profile;

namespace {

GpuEvent kernel(const std::string& name, double begin_ms, double end_ms, const std::string& cat = "kernel") {
  return GpuEvent{name, cat, begin_ms * 1e3, (end_ms - begin_ms) * 1e3, 0};
}

}  // namespace

TEST(ProfileTimeline, IntervalUnionAndSubtract) {
  auto u = interval_union({{5, 7}, {0, 2}, {1, 3}, {7, 8}, {10, 10}});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_DOUBLE_EQ(u[0].begin, 0);
  EXPECT_DOUBLE_EQ(u[0].end, 3);
  EXPECT_DOUBLE_EQ(u[1].begin, 5);
  EXPECT_DOUBLE_EQ(u[1].end, 8);
  EXPECT_DOUBLE_EQ(interval_length(u), 6);
  auto d = interval_subtract({{0, 10}, {20, 30}}, {{2, 3}, {5, 22}, {25, 26}});
  EXPECT_DOUBLE_EQ(interval_length(d), 2 + 2 + 3 + 4);  // [0,2] [3,5] [22,25] [26,30]
  ASSERT_EQ(d.size(), 4u);
  EXPECT_DOUBLE_EQ(d[2].begin, 22);
  EXPECT_DOUBLE_EQ(interval_length(interval_subtract({{0, 5}}, {})), 5);
  EXPECT_DOUBLE_EQ(interval_length(interval_subtract({{0, 5}}, {{-1, 9}})), 0);
}

TEST(ProfileTimeline, BreakdownHasTheKnownAnswer) {
  // compute [0,10] [5,15] [28,30]; comm [12,20] (nccl); memcpy [18,25]; in ms.
  std::vector<GpuEvent> ev = {
      kernel("sm90_xmma_gemm_bf16", 0, 10), kernel("rmsnorm_fwd", 5, 15), kernel("adam_kernel", 28, 30),
      kernel("ncclDevKernel_AllReduce_Sum_bf16", 12, 20), kernel("Memcpy DtoD", 18, 25, "gpu_memcpy")};
  const TimelineBreakdown b = analyse_timeline(ev);
  EXPECT_NEAR(b.total_ms, 30, 1e-9);
  EXPECT_NEAR(b.computation_ms, 17, 1e-9);
  EXPECT_NEAR(b.comm_ms, 8, 1e-9);
  EXPECT_NEAR(b.exposed_comm_ms, 5, 1e-9);
  EXPECT_NEAR(b.memcpy_ms, 7, 1e-9);
  EXPECT_NEAR(b.exposed_memcpy_ms, 5, 1e-9);
  EXPECT_NEAR(b.busy_ms, 27, 1e-9);
  EXPECT_NEAR(b.idle_ms, 3, 1e-9);
  // TraceLens's invariant.
  EXPECT_NEAR(b.computation_ms + b.exposed_comm_ms + b.exposed_memcpy_ms + b.idle_ms, b.total_ms, 1e-9);
  EXPECT_NEAR(b.pct(b.computation_ms), 100.0 * 17 / 30, 1e-9);
}

TEST(ProfileTimeline, FullyOverlappedCommunicationIsNotExposed) {
  std::vector<GpuEvent> ev = {kernel("gemm", 0, 10), kernel("ncclKernel_AllGather", 2, 8)};
  const TimelineBreakdown b = analyse_timeline(ev);
  EXPECT_NEAR(b.exposed_comm_ms, 0, 1e-12);
  EXPECT_NEAR(b.comm_ms, 6, 1e-12);
  EXPECT_NEAR(b.idle_ms, 0, 1e-12);
}

TEST(ProfileTimeline, OpFamilies) {
  auto fam = [](const std::string& n, const std::string& cat = "kernel") {
    return op_family(GpuEvent{n, cat, 0, 1, 0});
  };
  EXPECT_EQ(fam("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64"), "gemm");
  EXPECT_EQ(fam("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT"), "gemm");
  EXPECT_EQ(fam("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3"), "attention");
  EXPECT_EQ(fam("_ZN5cudnn6fusion28compute_dot_do_o_specializedILb1ELi64EEEvPKvS3_PvS4_"), "attention");
  EXPECT_EQ(fam("_ZN5cudnn6fusion20convert_dq_to_16bitsILb1EEEvPKvPvjjjj"), "attention");
  EXPECT_EQ(fam("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"), "nccl");
  EXPECT_EQ(fam("void primus::ops::cuda::rmsnorm_forward_kernel<256>"), "norm");
  EXPECT_EQ(fam("multi_tensor_apply_kernel<AdamFunctor>"), "optimizer");
  EXPECT_EQ(fam("rope_forward"), "rope");
  EXPECT_EQ(fam("swiglu_backward"), "swiglu");
  EXPECT_EQ(fam("softmax_cross_entropy_fwd_bwd"), "loss/softmax");
  EXPECT_EQ(fam("void at::native::vectorized_elementwise_kernel<4>"), "elementwise");
  EXPECT_EQ(fam("Memcpy HtoD", "gpu_memcpy"), "memcpy");
  EXPECT_EQ(fam("Memset", "gpu_memset"), "memset");
  EXPECT_EQ(fam("mystery_kernel"), "other");
}

TEST(ProfileTimeline, OpSummarySortsAndAccumulates) {
  std::vector<GpuEvent> ev = {kernel("gemm_a", 0, 6), kernel("gemm_b", 6, 9), kernel("rmsnorm", 9, 10),
                              kernel("flash_fwd", 10, 16)};
  const std::vector<OpRow> rows = op_summary(ev);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].family, "gemm");
  EXPECT_EQ(rows[0].count, 2);
  EXPECT_NEAR(rows[0].total_ms, 9, 1e-12);
  EXPECT_NEAR(rows[0].pct, 56.25, 1e-9);
  EXPECT_EQ(rows[1].family, "attention");
  EXPECT_NEAR(rows[1].cum_pct, 93.75, 1e-9);
  EXPECT_NEAR(rows[2].cum_pct, 100, 1e-9);
  const std::vector<OpRow> k = kernel_summary(ev, 2);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].family, "flash_fwd");  // 6 ms each: ties go by name
  EXPECT_EQ(k[1].family, "gemm_a");
}

TEST(ProfileTimeline, ReadsTorchProfilerStyleTraces) {
  // torch.profiler's export: CPU ops, runtime calls and kernels in one traceEvents array, pid = device.
  nlohmann::json t = {
      {"traceEvents",
       {{{"ph", "X"},
         {"cat", "cpu_op"},
         {"name", "aten::mm"},
         {"ts", 0},
         {"dur", 50},
         {"pid", 1234},
         {"tid", 1}},
        {{"ph", "X"},
         {"cat", "cuda_runtime"},
         {"name", "cudaLaunchKernel"},
         {"ts", 1},
         {"dur", 2},
         {"pid", 1234}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "sm90_xmma_gemm"}, {"ts", 100}, {"dur", 40}, {"pid", 0}},
        {{"ph", "X"},
         {"cat", "kernel"},
         {"name", "ncclDevKernel_AllReduce"},
         {"ts", 120},
         {"dur", 40},
         {"pid", 0}},
        {{"ph", "X"}, {"cat", "gpu_memcpy"}, {"name", "Memcpy DtoH"}, {"ts", 170}, {"dur", 10}, {"pid", 0}},
        {{"ph", "M"}, {"name", "process_name"}, {"pid", 0}, {"args", {{"name", "GPU 0"}}}}}}};
  const auto reports = analyse_trace(t, "torch.json");
  ASSERT_EQ(reports.size(), 1u);  // GPU events only; the CPU ops are ignored when kernels exist
  const TimelineBreakdown& b = reports[0].timeline;
  EXPECT_EQ(reports[0].basis, "GPU events");
  EXPECT_NEAR(b.total_ms, 0.080, 1e-12);
  EXPECT_NEAR(b.computation_ms, 0.040, 1e-12);
  EXPECT_NEAR(b.exposed_comm_ms, 0.020, 1e-12);
  EXPECT_NEAR(b.exposed_memcpy_ms, 0.010, 1e-12);
  EXPECT_NEAR(b.idle_ms, 0.010, 1e-12);
  // A bare array loads too.
  EXPECT_EQ(analyse_trace(t["traceEvents"], "bare").size(), 1u);
}

TEST(ProfileTimeline, PerStepFiguresComeFromTheTrainersStepRanges) {
  // Two trainer steps (cat "step") over three kernels and a memset: 2 launches per step, busy 0.035 ms per
  // step (70 us of the 100 us span), idle 0.015 ms.
  nlohmann::json ev = nlohmann::json::array();
  ev.push_back({{"ph", "X"}, {"cat", "step"}, {"name", "iteration 1"}, {"ts", 0}, {"dur", 50}, {"pid", 0}});
  ev.push_back({{"ph", "X"}, {"cat", "step"}, {"name", "iteration 2"}, {"ts", 50}, {"dur", 50}, {"pid", 0}});
  ev.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", "gemm"}, {"ts", 0}, {"dur", 30}, {"pid", 0}});
  ev.push_back({{"ph", "X"}, {"cat", "gpu_memset"}, {"name", "Memset"}, {"ts", 30}, {"dur", 5}, {"pid", 0}});
  ev.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", "gemm"}, {"ts", 50}, {"dur", 30}, {"pid", 0}});
  ev.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", "norm"}, {"ts", 95}, {"dur", 5}, {"pid", 0}});
  const auto reports = analyse_trace({{"traceEvents", ev}}, "steps.json");
  ASSERT_EQ(reports.size(), 1u);
  const TimelineReport& r = reports[0];
  EXPECT_EQ(r.steps, 2);
  EXPECT_DOUBLE_EQ(r.per_step(static_cast<double>(r.events)), 2.0);
  EXPECT_NEAR(r.per_step(r.timeline.busy_ms), 0.035, 1e-12);
  EXPECT_NEAR(r.per_step(r.timeline.idle_ms), 0.015, 1e-12);
  const std::string line = per_step_line(r);
  EXPECT_NE(line.find("2 steps in the trace"), std::string::npos) << line;
  EXPECT_NE(line.find("2 GPU launches"), std::string::npos) << line;
  EXPECT_NE(format_timeline_text(r).find(line), std::string::npos);
  EXPECT_EQ(timeline_to_json(r)["launches_per_step"].get<double>(), 2.0);
  // A trace without step ranges (torch.profiler's) says nothing per step.
  ev.erase(ev.begin(), ev.begin() + 2);
  const auto none = analyse_trace({{"traceEvents", ev}}, "torch.json");
  EXPECT_EQ(none[0].steps, 0);
  EXPECT_EQ(format_timeline_text(none[0]).find("Per step"), std::string::npos);
  EXPECT_FALSE(timeline_to_json(none[0]).contains("launches_per_step"));
}

TEST(ProfileTimeline, CpuOnlyTracesUseTheCpuRanges) {
  nlohmann::json t = {
      {"traceEvents",
       {{{"ph", "X"}, {"cat", "cpu_op"}, {"name", "forward_backward"}, {"ts", 0}, {"dur", 800}},
        {{"ph", "X"}, {"cat", "cpu_op"}, {"name", "optimizer"}, {"ts", 900}, {"dur", 100}}}}};
  const auto reports = analyse_trace(t, "cpu");
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].basis.find("CPU ranges"), std::string::npos);
  EXPECT_NEAR(reports[0].timeline.idle_ms, 0.1, 1e-12);
  EXPECT_EQ(reports[0].ops[0].family, "forward_backward");
}

TEST(ProfileTimeline, MalformedTracesNameTheProblem) {
  EXPECT_THROW(analyse_trace(nlohmann::json{{"foo", 1}}, "x.json"), primus::Error);
  nlohmann::json bad = {{"traceEvents", {{{"ph", "X"}, {"cat", "kernel"}, {"name", "k"}, {"ts", "soon"}}}}};
  try {
    analyse_trace(bad, "bad.json");
    FAIL() << "expected an error";
  } catch (const primus::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("traceEvents[0]"), std::string::npos);
  }
}

TEST(ProfileTimeline, IdleGapsNameTheirNeighboursAndTheHost) {
  // GPU: [0,10] gemm, [12,20] adam (gap 2 ms), [20.5,30] gemm2 (gap 0.5 ms), [35,36] norm (gap 5 ms).
  std::vector<GpuEvent> gpu = {kernel("gemm", 0, 10), kernel("adamw_kernel", 12, 20),
                               kernel("gemm2", 20.5, 30), kernel("rmsnorm", 35, 36)};
  std::vector<GpuEvent> cpu = {kernel("forward_backward", 29, 40, "cpu_op"), kernel("data", 31, 34, "cpu_op"),
                               kernel("optimizer", 9, 11, "cpu_op")};
  const std::vector<IdleGap> g = idle_gaps(gpu, cpu, 2);
  ASSERT_EQ(g.size(), 2u);  // the two longest of three
  EXPECT_NEAR(g[0].ms, 5, 1e-9);
  EXPECT_NEAR(g[0].start_ms, 30, 1e-9);
  EXPECT_EQ(g[0].before, "gemm2");
  EXPECT_EQ(g[0].after, "rmsnorm");
  EXPECT_EQ(g[0].host, (std::vector<std::string>{"forward_backward", "data"}));
  EXPECT_NEAR(g[1].ms, 2, 1e-9);
  EXPECT_EQ(g[1].before, "gemm");
  EXPECT_EQ(g[1].after, "adamw_kernel");
  EXPECT_EQ(g[1].host, (std::vector<std::string>{"optimizer"}));
  // Overlapping GPU events leave no gap; the gaps add up to the breakdown's idle time.
  EXPECT_TRUE(idle_gaps({kernel("a", 0, 5), kernel("b", 4, 9)}, {}, 5).empty());
  double sum = 0;
  for (const IdleGap& x : idle_gaps(gpu, cpu, 10)) sum += x.ms;
  EXPECT_NEAR(sum, analyse_timeline(gpu).idle_ms, 1e-9);
}
