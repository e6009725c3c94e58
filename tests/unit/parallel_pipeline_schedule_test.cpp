// Pipeline schedules as data (parallel/pipeline_schedule.h): the generated orders, the validator on every
// generated schedule of a grid, and the validator refusing schedules broken on purpose.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"
#include "pipeline_test_util.h"

namespace primus::parallel {
namespace {

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

using testing::joined;

TEST(PipelineSchedule, OneFOneBFollowsMegatron) {
  Schedule s = make_schedule(ScheduleKind::k1F1B, {.pp = 4, .microbatches = 6});
  // Rank r: pp - r - 1 warm-up forwards, then 1F1B, then the cool-down backwards.
  EXPECT_EQ(describe_order(s),
            "rank 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5\n"
            "rank 1: F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5\n"
            "rank 2: F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5\n"
            "rank 3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5\n");
  // Rank 1's list with its messages: receive before use, send right after producing.
  const std::vector<Action>& r1 = s.ranks[1];
  EXPECT_EQ(r1[0], (Action{ActionKind::kRecvF, 0, 0, 0}));
  EXPECT_EQ(r1[1], (Action{ActionKind::kF, 0, 0, -1}));
  EXPECT_EQ(r1[2], (Action{ActionKind::kSendF, 0, 0, 2}));
  EXPECT_EQ(r1[2].str(), "SEND_F(mb 0, chunk 0) -> rank 2");
}

TEST(PipelineSchedule, GPipeRunsAllForwardsFirst) {
  Schedule s = make_schedule(ScheduleKind::kGPipe, {.pp = 2, .microbatches = 3});
  EXPECT_EQ(describe_order(s), "rank 0: F0 F1 F2 B0 B1 B2\nrank 1: F0 F1 F2 B0 B1 B2\n");
}

TEST(PipelineSchedule, ZbH1DefersWeightGradientsByRank) {
  Schedule s = make_schedule(ScheduleKind::kZBH1, {.pp = 3, .microbatches = 4});
  EXPECT_EQ(describe_order(s),
            "rank 0: F0 F1 F2 BI0 BW0 F3 BI1 BW1 BI2 BW2 BI3 BW3\n"
            "rank 1: F0 F1 BI0 F2 BI1 BW0 F3 BI2 BW1 BI3 BW2 BW3\n"
            "rank 2: F0 BI0 F1 BI1 F2 BI2 BW0 F3 BI3 BW1 BW2 BW3\n");
}

TEST(PipelineSchedule, InterleavedUsesMegatronsTable) {
  // pp 2, vpp 2, 4 micro-batches: groups of 2; rank 0 warms up with (2-0-1)*2 + (2-1)*2 = 4 forwards.
  Schedule s = make_schedule(ScheduleKind::kInterleaved, {.pp = 2, .vpp = 2, .microbatches = 4});
  EXPECT_EQ(describe_order(s),
            "rank 0: F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0\n"
            "rank 1: F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0\n");
  // Chunk 1 of rank 0 follows chunk 0 of rank 1: rank 1 sends its chunk-0 output to rank 0.
  const auto& r1 = s.ranks[1];
  EXPECT_NE(std::find(r1.begin(), r1.end(), Action{ActionKind::kSendF, 0, 0, 0}), r1.end());
}

TEST(PipelineSchedule, ZbVRunsTwoChunksInAV) {
  Schedule s = make_schedule(ScheduleKind::kZBV, {.pp = 4, .vpp = 2, .microbatches = 8});
  EXPECT_TRUE(s.topo.v_shape);
  EXPECT_EQ(s.topo.stage_of(3, 1), 4);
  // Rank 3 holds the V's turn: its chunk 0 feeds its chunk 1 without a message.
  for (const Action& a : s.ranks[3])
    EXPECT_FALSE((a.kind == ActionKind::kSendF && a.chunk == 0) ||
                 (a.kind == ActionKind::kRecvF && a.chunk == 1))
        << a.str();
  // Rank 0 starts with forwards of chunk 0 and ends the step with weight gradients.
  EXPECT_EQ(s.ranks[0][0], (Action{ActionKind::kF, 0, 0, -1}));
  EXPECT_EQ(s.ranks[0].back().kind, ActionKind::kBW);
}

TEST(PipelineSchedule, BadParametersNameWhatWasExpected) {
  EXPECT_HAS(
      config_error([] { make_schedule(ScheduleKind::kInterleaved, {.pp = 4, .vpp = 2, .microbatches = 3}); }),
      "3 micro-batches (global_batch_size / (micro_batch_size x data-parallel size)) < "
      "pipeline_model_parallel_size 4");
  EXPECT_HAS(
      config_error([] { make_schedule(ScheduleKind::kInterleaved, {.pp = 4, .vpp = 2, .microbatches = 6}); }),
      "leave a last group of 2 < pipeline_model_parallel_size 4");
  EXPECT_HAS(
      config_error([] { make_schedule(ScheduleKind::kInterleaved, {.pp = 4, .vpp = 1, .microbatches = 8}); }),
      "needs at least 2 chunks per rank");
  EXPECT_HAS(
      config_error([] {
        make_schedule(ScheduleKind::kInterleaved, {.pp = 4, .vpp = 2, .microbatches = 8, .group_size = 3});
      }),
      "microbatch_group_size_per_vp_stage 3 must lie in [pipeline_model_parallel_size 4, micro-batches 8]");
  EXPECT_HAS(config_error([] { make_schedule(ScheduleKind::k1F1B, {.pp = 4, .vpp = 2, .microbatches = 8}); }),
             "schedule 1f1b runs 1 chunk(s) per rank, but virtual_pipeline_model_parallel_size gives 2");
  EXPECT_HAS(config_error([] { make_schedule(ScheduleKind::kZBV, {.pp = 4, .vpp = 1, .microbatches = 8}); }),
             "schedule zb-v runs 2 chunk(s) per rank");
  EXPECT_HAS(
      config_error([] { schedule_from_name("1F1B-interleaved"); }),
      "unknown pipeline schedule '1F1B-interleaved' (schedules: gpipe, 1f1b, interleaved, zb-h1, zb-v)");
  // A group size that leaves a last group of >= pp micro-batches is fine.
  EXPECT_NO_THROW(
      make_schedule(ScheduleKind::kInterleaved, {.pp = 2, .vpp = 2, .microbatches = 5, .group_size = 3}));
}

// Every generated schedule of the grid pp 1..8, vpp 1..4, micro-batches 1..3 pp is valid and deadlock-free.
TEST(PipelineSchedule, EveryGeneratedScheduleValidates) {
  int checked = 0, refused = 0;
  for (ScheduleKind kind : all_schedules())
    for (int pp = 1; pp <= 8; ++pp)
      for (int vpp = 1; vpp <= 4; ++vpp)
        for (int m = 1; m <= 3 * pp; ++m) {
          if ((kind == ScheduleKind::kZBV) != (vpp == 2) && kind != ScheduleKind::kInterleaved) continue;
          if (kind != ScheduleKind::kZBV && kind != ScheduleKind::kInterleaved && vpp != 1) continue;
          if (kind == ScheduleKind::kInterleaved && vpp == 1) continue;
          Schedule s;
          try {
            s = make_schedule(kind, {.pp = pp, .vpp = vpp, .microbatches = m});
          } catch (const ConfigError&) {
            // Only interleaved refuses parameters (fewer micro-batches than ranks, a short last group).
            EXPECT_EQ(kind, ScheduleKind::kInterleaved);
            EXPECT_TRUE(m < pp || m % pp != 0) << pp << " " << vpp << " " << m;
            ++refused;
            continue;
          }
          const std::vector<std::string> problems = validate_schedule(s);
          EXPECT_TRUE(problems.empty())
              << schedule_name(kind) << " pp " << pp << " vpp " << vpp << " m " << m << ":\n"
              << joined(problems);
          // Exactly one F and one backward (or BI + BW) per (rank, chunk, micro-batch).
          size_t compute = 0;
          for (const auto& r : s.ranks)
            compute += std::count_if(r.begin(), r.end(), [](const Action& a) { return is_compute(a.kind); });
          EXPECT_EQ(compute, static_cast<size_t>(pp * s.topo.vpp * m * (splits_backward(kind) ? 3 : 2)));
          ++checked;
        }
  // gpipe, 1f1b, zb-h1, zb-v: 4 x sum(3 pp) = 432; interleaved: m in {pp, 2 pp, 3 pp} x 3 vpp x 8 pp = 72.
  EXPECT_EQ(checked, 504);
  EXPECT_EQ(refused, 3 * 108 - 72);
}

// --- The validator refuses broken schedules -------------------------------------------------------------

Schedule one_f_one_b(int pp, int m) {
  return make_schedule(ScheduleKind::k1F1B, {.pp = pp, .microbatches = m});
}

size_t index_of(const std::vector<Action>& list, const Action& a) {
  auto it = std::find(list.begin(), list.end(), a);
  EXPECT_NE(it, list.end()) << a.str();
  return static_cast<size_t>(it - list.begin());
}

TEST(PipelineScheduleValidator, FindsADeadlock) {
  // Rank 0 waits for micro-batch 0's gradient before sending micro-batch 0's activation: each rank waits for
  // the other.
  Schedule s = one_f_one_b(2, 2);
  auto& r0 = s.ranks[0];
  const size_t send = index_of(r0, {ActionKind::kSendF, 0, 0, 1});
  const size_t recv = index_of(r0, {ActionKind::kRecvB, 0, 0, 1});
  const Action moved = r0[recv];
  r0.erase(r0.begin() + recv);
  r0.insert(r0.begin() + send, moved);
  const std::string p = joined(validate_schedule(s));
  EXPECT_HAS(
      p,
      "deadlock: rank 0 waits at #1 RECV_B(mb 0, chunk 0) <- rank 1 (rank 1 is itself at #0 RECV_F(mb 0, "
      "chunk 0) <- rank 0)");
  EXPECT_HAS(p, "rank 1 waits at #0 RECV_F(mb 0, chunk 0) <- rank 0");
}

TEST(PipelineScheduleValidator, FindsACrossRankCycleInAnInterleavedTable) {
  // Megatron's table with a last group shorter than pp (4 ranks, 3 chunks, 5 micro-batches in groups of 4)
  // deadlocks: rank 0's warm-up needs micro-batch 4 on chunk 2 before rank 3 has run it on chunk 1. This is
  // why compute_order refuses those parameters.
  const int pp = 4, v = 3, m = 5, G = 4;
  Schedule s;
  s.kind = ScheduleKind::kInterleaved;
  s.topo = {pp, v, false};
  s.microbatches = m;
  std::vector<std::pair<int, int>> table;
  for (int lo = 0; lo < m; lo += G)
    for (int c = 0; c < v; ++c)
      for (int k = lo; k < std::min(lo + G, m); ++k) table.emplace_back(k, c);
  s.ranks.resize(pp);
  for (int r = 0; r < pp; ++r) {
    const int total = m * v, warmup = std::min((pp - r - 1) * 2 + (v - 1) * G, total);
    auto f = [&](int i) { return Action{ActionKind::kF, table[i].first, table[i].second, -1}; };
    auto b = [&](int i) { return Action{ActionKind::kB, table[i].first, v - 1 - table[i].second, -1}; };
    for (int i = 0; i < warmup; ++i) s.ranks[r].push_back(f(i));
    for (int i = 0; i < total - warmup; ++i) {
      s.ranks[r].push_back(f(warmup + i));
      s.ranks[r].push_back(b(i));
    }
    for (int i = total - warmup; i < total; ++i) s.ranks[r].push_back(b(i));
  }
  add_p2p(s);
  EXPECT_HAS(joined(validate_schedule(s)), "deadlock: ");
}

TEST(PipelineScheduleValidator, FindsOrderAndCountProblems) {
  {  // The last rank runs backward before forward.
    Schedule s = one_f_one_b(2, 2);
    auto& r1 = s.ranks[1];
    std::swap(r1[index_of(r1, {ActionKind::kF, 0, 0, -1})], r1[index_of(r1, {ActionKind::kB, 0, 0, -1})]);
    EXPECT_HAS(joined(validate_schedule(s)), "rank 1 #1 B(mb 0, chunk 0) runs before its forward");
  }
  {  // A forward repeated, another missing.
    Schedule s = one_f_one_b(2, 3);
    s.ranks[0][index_of(s.ranks[0], {ActionKind::kF, 2, 0, -1})].microbatch = 1;
    const std::string p = joined(validate_schedule(s));
    EXPECT_HAS(p, "F(mb 1, chunk 0): forward repeated");
    EXPECT_HAS(p, "rank 0 chunk 0 micro-batch 2: no forward");
  }
  {  // A send dropped: its receive has no partner.
    Schedule s = one_f_one_b(3, 2);
    auto& r1 = s.ranks[1];
    r1.erase(r1.begin() + index_of(r1, {ActionKind::kSendF, 1, 0, 2}));
    const std::string p = joined(validate_schedule(s));
    EXPECT_HAS(p, "rank 1 chunk 0 micro-batch 1: the forward's output is never sent (SEND_F)");
    EXPECT_HAS(p, "activation of micro-batch 1 for model stage 2: received on rank 2 but never sent");
  }
  {  // A message to the wrong rank.
    Schedule s = one_f_one_b(3, 1);
    s.ranks[0][index_of(s.ranks[0], {ActionKind::kSendF, 0, 0, 1})].peer = 2;
    EXPECT_HAS(joined(validate_schedule(s)),
               "SEND_F(mb 0, chunk 0) -> rank 2: the peer is rank 1 (model stage 1)");
  }
  {  // A receive consumed before it is posted: the forward runs before its input arrives.
    Schedule s = one_f_one_b(2, 1);
    std::swap(s.ranks[1][0], s.ranks[1][1]);
    EXPECT_HAS(joined(validate_schedule(s)),
               "rank 1 #0 F(mb 0, chunk 0) runs before its input arrives (RECV_F)");
  }
  {  // Weight gradient before the input gradient, and a BI without its BW.
    Schedule s = make_schedule(ScheduleKind::kZBH1, {.pp = 2, .microbatches = 2});
    auto& r0 = s.ranks[0];
    std::swap(r0[index_of(r0, {ActionKind::kBI, 1, 0, -1})], r0[index_of(r0, {ActionKind::kBW, 1, 0, -1})]);
    EXPECT_HAS(joined(validate_schedule(s)), "BW(mb 1, chunk 0) runs before its input-gradient pass BI");
    Schedule t = make_schedule(ScheduleKind::kZBH1, {.pp = 2, .microbatches = 2});
    t.ranks[0].pop_back();
    EXPECT_HAS(joined(validate_schedule(t)), "rank 0 chunk 0 micro-batch 1: BI without its BW");
  }
  {  // A chunk out of range, and a send from the last stage.
    Schedule s = one_f_one_b(2, 1);
    s.ranks[1].push_back({ActionKind::kSendF, 0, 0, 0});
    s.ranks[0].push_back({ActionKind::kF, 0, 3, -1});
    const std::string p = joined(validate_schedule(s));
    EXPECT_HAS(p, "model stage 1 has no neighbour on another rank that way");
    EXPECT_HAS(p, "chunk or micro-batch out of range");
  }
}

}  // namespace
}  // namespace primus::parallel
