#pragma once
// Pipeline schedules as data: for every pipeline rank, the list of actions it runs in one training step
// (forward / backward / input-gradient / weight-gradient of micro-batch m on model chunk c, and the
// point-to-point sends and receives between them). Each schedule is a pure function of (pp, vpp,
// micro-batches); one runtime executes any list, so a new schedule is a new list. docs/pipeline.md draws
// them.
//
//   gpipe        all forwards, then all backwards                                  (Huang et al. 2019)
//   1f1b         pp - rank - 1 warm-up forwards, then one forward / one backward   (Megatron, Narayanan 2021)
//   interleaved  1F1B over vpp chunks per rank, micro-batches in groups of pp      (Megatron, Narayanan 2021)
//   zb-h1        1F1B with backward split into input-gradient (BI) and weight-gradient (BW) passes, rank r
//                deferring its BW by r micro-batches to fill the cool-down        (Qi et al. 2023, ZB-H1)
//   zb-v         two chunks per rank in a V (ranks 0..pp-1, then back), BI/BW split, built by a greedy
//                list scheduler under 1F1B's activation budget                    (Qi et al. 2023, ZB-V)
//
// validate_schedule() proves a list runnable: every forward and backward once per (rank, chunk, micro-batch)
// in dependency order, every send matched by one receive on the peer, and no deadlock when each rank runs its
// list in order with receives blocking until the matching send is posted (sends are non-blocking).
//
//   Schedule s = make_schedule(ScheduleKind::k1F1B, {.pp = 4, .microbatches = 8});
//   std::vector<std::string> problems = validate_schedule(s);   // empty
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/pipeline_layout.h"

namespace primus::parallel {

enum class ActionKind : uint8_t {
  kF,      // forward
  kB,      // full backward (input and weight gradients together)
  kBI,     // backward, input gradient only (zero-bubble schedules)
  kBW,     // backward, weight gradient only (zero-bubble schedules)
  kSendF,  // send F's output activation to the next model stage
  kRecvF,  // receive F's input activation from the previous model stage
  kSendB,  // send B/BI's input gradient to the previous model stage
  kRecvB,  // receive B/BI's output gradient from the next model stage
};
const char* action_kind_name(ActionKind k);  // "F", "B", "BI", "BW", "SEND_F", "RECV_F", "SEND_B", "RECV_B"
inline bool is_compute(ActionKind k) {
  return k <= ActionKind::kBW;
}

struct Action {
  ActionKind kind = ActionKind::kF;
  int microbatch = 0;
  int chunk = 0;  // the rank's model chunk the action belongs to (send/recv: the chunk whose data it moves)
  int peer = -1;  // send/recv: the other rank
  bool operator==(const Action&) const = default;
  std::string str() const;  // "F(mb 3, chunk 1)", "SEND_F(mb 3, chunk 0) -> rank 2"
};

enum class ScheduleKind { kGPipe, k1F1B, kInterleaved, kZBH1, kZBV };
const char* schedule_name(ScheduleKind k);  // "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"
const std::vector<ScheduleKind>& all_schedules();
// Throws ConfigError for an unknown name, listing the known ones.
ScheduleKind schedule_from_name(const std::string& name);
// Whether the schedule splits backward into BI and BW.
bool splits_backward(ScheduleKind k);

struct ScheduleParams {
  int pp = 1;
  int vpp = 1;  // chunks per rank: interleaved >= 2, zb-v exactly 2, the others 1
  int microbatches = 1;
  int group_size = 0;  // interleaved: micro-batches per group (microbatch_group_size_per_vp_stage); 0 = pp
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::k1F1B;
  PipelineTopology topo;
  int microbatches = 1;
  std::vector<std::vector<Action>> ranks;  // per pipeline rank, in execution order
};

// The compute actions of each rank, in order (no send/recv). Throws ConfigError when the schedule cannot run
// with these parameters: interleaved with fewer micro-batches than ranks, a group size outside
// [pp, micro-batches] or a last group smaller than pp; a chunk count the schedule does not use.
std::vector<std::vector<Action>> compute_order(ScheduleKind kind, const ScheduleParams& p);

// Inserts the point-to-point actions: RECV right before the compute that needs a remote input, SEND right
// after the compute whose output another rank needs. Chunks that follow each other on one rank (the V's
// turn) pass data locally, without messages.
void add_p2p(Schedule& s);

// compute_order + add_p2p, then validate_schedule; a generator bug throws a runtime Error listing problems.
Schedule make_schedule(ScheduleKind kind, const ScheduleParams& p);

// Everything that makes a list unrunnable, one line each (empty = valid): a missing, repeated or out-of-range
// action; a compute before the action it depends on; a send or receive without its partner or with the wrong
// peer; a deadlock (each rank stuck at a receive whose send never comes, with the chain of waits).
std::vector<std::string> validate_schedule(const Schedule& s);

// One line per rank: "rank 0: F0 F1 F2 F3 B0 F4 B1 ..." (compute actions only; chunks as F0.1 when vpp > 1).
std::string describe_order(const Schedule& s);

}  // namespace primus::parallel
