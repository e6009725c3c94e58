// validate_schedule (parallel/pipeline_schedule.h): what makes a list of pipeline actions runnable.
#include <fmt/format.h>

#include <map>
#include <set>
#include <tuple>

#include "parallel/pipeline_schedule.h"

namespace primus::parallel {
namespace {

// A message on the wire: (forward activation or backward gradient, micro-batch, model stage that receives
// it).
using MessageKey = std::tuple<bool, int, int>;

struct Slot {  // what one (chunk, micro-batch) of a rank has done so far
  int f = 0, b = 0, bi = 0, bw = 0, recv_f = 0, recv_b = 0, send_f = 0, send_b = 0;
  bool grad_done() const { return b + bi > 0; }
};

}  // namespace

std::vector<std::string> validate_schedule(const Schedule& s) {
  std::vector<std::string> problems;
  const PipelineTopology& t = s.topo;
  const int m = s.microbatches;
  const int last = t.num_stages() - 1;
  if (static_cast<int>(s.ranks.size()) != t.pp) {
    problems.push_back(fmt::format("the schedule has {} rank lists for pp {}", s.ranks.size(), t.pp));
    return problems;
  }
  std::map<MessageKey, std::vector<std::pair<int, int>>> sends, recvs;  // key -> (rank, position)

  for (int r = 0; r < t.pp; ++r) {
    std::vector<std::vector<Slot>> slot(t.vpp, std::vector<Slot>(m));
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      const std::string at = fmt::format("rank {} #{} {}", r, i, a.str());
      if (a.chunk < 0 || a.chunk >= t.vpp || a.microbatch < 0 || a.microbatch >= m) {
        problems.push_back(
            fmt::format("{}: chunk or micro-batch out of range (vpp {}, {} micro-batches)", at, t.vpp, m));
        continue;
      }
      Slot& me = slot[a.chunk][a.microbatch];
      const int stage = t.stage_of(r, a.chunk);
      // The neighbours in model order: (rank, chunk), or (-1, -1) at either end.
      const auto prev = stage > 0 ? t.rank_chunk_of(stage - 1) : std::pair{-1, -1};
      const auto next = stage < last ? t.rank_chunk_of(stage + 1) : std::pair{-1, -1};
      auto need = [&](bool ok, const std::string& what) {
        if (!ok) problems.push_back(fmt::format("{} runs before {}", at, what));
      };
      auto once = [&](int& count, const char* what) {
        if (count++ > 0) problems.push_back(fmt::format("{}: {} repeated", at, what));
      };
      switch (a.kind) {
        case ActionKind::kF:
          once(me.f, "forward");
          if (prev.first == r)
            need(slot[prev.second][a.microbatch].f > 0, "the forward of its previous chunk");
          if (prev.first >= 0 && prev.first != r) need(me.recv_f > 0, "its input arrives (RECV_F)");
          break;
        case ActionKind::kB:
        case ActionKind::kBI:
          once(a.kind == ActionKind::kB ? me.b : me.bi, action_kind_name(a.kind));
          if (me.b > 0 && me.bi > 0)
            problems.push_back(fmt::format("{}: both B and BI for one micro-batch", at));
          need(me.f > 0, "its forward");
          if (next.first == r)
            need(slot[next.second][a.microbatch].grad_done(), "the backward of its next chunk");
          if (next.first >= 0 && next.first != r) need(me.recv_b > 0, "its output gradient arrives (RECV_B)");
          break;
        case ActionKind::kBW:
          once(me.bw, "BW");
          need(me.bi > 0, "its input-gradient pass BI");
          break;
        case ActionKind::kSendF:
        case ActionKind::kRecvB:
        case ActionKind::kSendB:
        case ActionKind::kRecvF: {
          const bool fwd = a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvF;
          const bool send = a.kind == ActionKind::kSendF || a.kind == ActionKind::kSendB;
          // Activations go to the next stage and come from the previous; gradients the other way.
          const auto peer = (fwd == send) ? next : prev;
          if (peer.first < 0 || peer.first == r) {
            problems.push_back(
                fmt::format("{}: model stage {} has no neighbour on another rank that way", at, stage));
            break;
          }
          if (a.peer != peer.first)
            problems.push_back(fmt::format("{}: the peer is rank {} (model stage {})", at, peer.first,
                                           fwd == send ? stage + 1 : stage - 1));
          if (a.kind == ActionKind::kSendF) {
            once(me.send_f, "SEND_F");
            need(me.f > 0, "the forward that produces the activation");
          } else if (a.kind == ActionKind::kSendB) {
            once(me.send_b, "SEND_B");
            need(me.grad_done(), "the backward that produces the gradient");
          } else {
            once(fwd ? me.recv_f : me.recv_b, action_kind_name(a.kind));
          }
          const MessageKey key{fwd, a.microbatch, send ? (fwd ? stage + 1 : stage - 1) : stage};
          (send ? sends : recvs)[key].emplace_back(r, i);
          break;
        }
      }
    }
    // Completeness: every (chunk, micro-batch) ran forward and backward exactly once, and sent what the
    // neighbouring ranks wait for.
    for (int c = 0; c < t.vpp; ++c)
      for (int k = 0; k < m; ++k) {
        const Slot& me = slot[c][k];
        const std::string what = fmt::format("rank {} chunk {} micro-batch {}", r, c, k);
        if (me.f == 0) problems.push_back(fmt::format("{}: no forward", what));
        if (me.b + me.bi == 0) problems.push_back(fmt::format("{}: no backward", what));
        if (me.bi > 0 && me.bw == 0) problems.push_back(fmt::format("{}: BI without its BW", what));
        if (me.bw > 0 && me.bi == 0) problems.push_back(fmt::format("{}: BW without BI", what));
        const int stage = t.stage_of(r, c);
        if (stage < last && t.rank_chunk_of(stage + 1).first != r && me.f > 0 && me.send_f == 0)
          problems.push_back(fmt::format("{}: the forward's output is never sent (SEND_F)", what));
        if (stage > 0 && t.rank_chunk_of(stage - 1).first != r && me.grad_done() && me.send_b == 0)
          problems.push_back(fmt::format("{}: the input gradient is never sent (SEND_B)", what));
      }
  }
  // Every send has exactly one receive on its peer, and every receive one send.
  auto key_text = [](const MessageKey& k) {
    return fmt::format("{} of micro-batch {} for model stage {}", std::get<0>(k) ? "activation" : "gradient",
                       std::get<1>(k), std::get<2>(k));
  };
  for (const auto& [key, where] : sends) {
    auto it = recvs.find(key);
    const size_t n_recv = it == recvs.end() ? 0 : it->second.size();
    if (where.size() != 1 || n_recv != 1)
      problems.push_back(fmt::format("{}: {} send(s) (first on rank {}) and {} receive(s)", key_text(key),
                                     where.size(), where[0].first, n_recv));
  }
  for (const auto& [key, where] : recvs)
    if (sends.find(key) == sends.end())
      problems.push_back(
          fmt::format("{}: received on rank {} but never sent", key_text(key), where[0].first));
  if (!problems.empty()) return problems;

  // Deadlock: every rank runs its list in order; a send is posted without waiting (non-blocking), a receive
  // waits until its send is posted. The schedule is deadlock-free iff this play reaches every list's end.
  std::vector<size_t> pos(t.pp, 0);
  std::set<MessageKey> posted;
  auto key_of = [&](int r, const Action& a) -> MessageKey {
    const int stage = t.stage_of(r, a.chunk);
    if (a.kind == ActionKind::kSendF) return {true, a.microbatch, stage + 1};
    if (a.kind == ActionKind::kSendB) return {false, a.microbatch, stage - 1};
    return {a.kind == ActionKind::kRecvF, a.microbatch, stage};
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < t.pp; ++r)
      for (; pos[r] < s.ranks[r].size(); ++pos[r], progress = true) {
        const Action& a = s.ranks[r][pos[r]];
        if (a.kind == ActionKind::kSendF || a.kind == ActionKind::kSendB) posted.insert(key_of(r, a));
        if ((a.kind == ActionKind::kRecvF || a.kind == ActionKind::kRecvB) && !posted.count(key_of(r, a)))
          break;
      }
  }
  std::string stuck;
  for (int r = 0; r < t.pp; ++r)
    if (pos[r] < s.ranks[r].size()) {
      const Action& a = s.ranks[r][pos[r]];
      stuck += fmt::format("{}rank {} waits at #{} {}", stuck.empty() ? "" : "; ", r, pos[r], a.str());
      if (a.peer >= 0 && a.peer < t.pp && pos[a.peer] < s.ranks[a.peer].size())
        stuck += fmt::format(" (rank {} is itself at #{} {})", a.peer, pos[a.peer],
                             s.ranks[a.peer][pos[a.peer]].str());
    }
  if (!stuck.empty()) problems.push_back("deadlock: " + stuck);
  return problems;
}

}  // namespace primus::parallel
