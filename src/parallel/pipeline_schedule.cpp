#include "parallel/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <optional>
#include <tuple>

#include "core/error.h"

namespace primus::parallel {

const char* action_kind_name(ActionKind k) {
  switch (k) {
    case ActionKind::kF:
      return "F";
    case ActionKind::kB:
      return "B";
    case ActionKind::kBI:
      return "BI";
    case ActionKind::kBW:
      return "BW";
    case ActionKind::kSendF:
      return "SEND_F";
    case ActionKind::kRecvF:
      return "RECV_F";
    case ActionKind::kSendB:
      return "SEND_B";
    case ActionKind::kRecvB:
      return "RECV_B";
  }
  return "?";
}

std::string Action::str() const {
  std::string s = fmt::format("{}(mb {}, chunk {})", action_kind_name(kind), microbatch, chunk);
  if (kind == ActionKind::kSendF || kind == ActionKind::kSendB) s += fmt::format(" -> rank {}", peer);
  if (kind == ActionKind::kRecvF || kind == ActionKind::kRecvB) s += fmt::format(" <- rank {}", peer);
  return s;
}

const char* schedule_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
    case ScheduleKind::kZBH1:
      return "zb-h1";
    case ScheduleKind::kZBV:
      return "zb-v";
  }
  return "?";
}

const std::vector<ScheduleKind>& all_schedules() {
  static const std::vector<ScheduleKind> kAll = {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
                                                 ScheduleKind::kInterleaved, ScheduleKind::kZBH1,
                                                 ScheduleKind::kZBV};
  return kAll;
}

ScheduleKind schedule_from_name(const std::string& name) {
  std::string known;
  for (ScheduleKind k : all_schedules()) {
    if (name == schedule_name(k)) return k;
    known += (known.empty() ? "" : ", ") + std::string(schedule_name(k));
  }
  throw ConfigError(fmt::format("unknown pipeline schedule '{}' (schedules: {})", name, known));
}

bool splits_backward(ScheduleKind k) {
  return k == ScheduleKind::kZBH1 || k == ScheduleKind::kZBV;
}

namespace {

Action compute(ActionKind k, int mb, int chunk) {
  return Action{k, mb, chunk, -1};
}

std::vector<std::vector<Action>> gpipe_order(int pp, int m) {
  std::vector<std::vector<Action>> out(pp);
  for (int r = 0; r < pp; ++r) {
    for (int k = 0; k < m; ++k) out[r].push_back(compute(ActionKind::kF, k, 0));
    for (int k = 0; k < m; ++k) out[r].push_back(compute(ActionKind::kB, k, 0));
  }
  return out;
}

// Megatron's forward_backward_pipelining_without_interleaving: rank r runs min(pp - r - 1, m) warm-up
// forwards, then alternates one forward and one backward, then drains the remaining backwards.
std::vector<std::vector<Action>> one_f_one_b_order(int pp, int m) {
  std::vector<std::vector<Action>> out(pp);
  for (int r = 0; r < pp; ++r) {
    const int warmup = std::min(pp - r - 1, m);
    for (int k = 0; k < warmup; ++k) out[r].push_back(compute(ActionKind::kF, k, 0));
    for (int k = 0; k < m - warmup; ++k) {
      out[r].push_back(compute(ActionKind::kF, k + warmup, 0));
      out[r].push_back(compute(ActionKind::kB, k, 0));
    }
    for (int k = m - warmup; k < m; ++k) out[r].push_back(compute(ActionKind::kB, k, 0));
  }
  return out;
}

// ZB-H1 (Qi et al. 2023, section 3): 1F1B's order of forwards and input-gradient passes, with the
// weight-gradient pass of micro-batch j placed right after the input-gradient pass of micro-batch j + r on
// rank r. Later ranks (which start their backwards earliest) thus keep r weight-gradient passes in hand and
// spend them in the cool-down, where 1F1B leaves them idle. Every rank holds at most pp micro-batches
// (counted from F until BW), 1F1B's peak on rank 0; with equal F, BI, BW times the bubble is
// (pp - 1) / (3m + pp - 1), a third of 1F1B's.
std::vector<std::vector<Action>> zb_h1_order(int pp, int m) {
  std::vector<std::vector<Action>> base = one_f_one_b_order(pp, m), out(pp);
  for (int r = 0; r < pp; ++r) {
    int done_bi = 0, next_w = 0;
    for (const Action& a : base[r]) {
      if (a.kind != ActionKind::kB) {
        out[r].push_back(a);
        continue;
      }
      out[r].push_back(compute(ActionKind::kBI, a.microbatch, 0));
      ++done_bi;
      if (done_bi - 1 - r >= 0) out[r].push_back(compute(ActionKind::kBW, next_w++, 0));
    }
    while (next_w < m) out[r].push_back(compute(ActionKind::kBW, next_w++, 0));
  }
  return out;
}

// Megatron's get_schedule_table: micro-batches in groups of G; each group runs chunk 0 for all its
// micro-batches, then chunk 1, ... Backward walks the same table with the chunks reversed.
// Warm-up (Megatron): (pp - r - 1) * 2 + (vpp - 1) * G virtual micro-batches, all of them when m == pp.
std::vector<std::vector<Action>> interleaved_order(int pp, int v, int m, int G) {
  std::vector<std::pair<int, int>> table;  // (micro-batch, chunk)
  for (int lo = 0; lo < m; lo += G) {
    const int hi = lo + G >= m ? m : lo + G;
    for (int c = 0; c < v; ++c)
      for (int k = lo; k < hi; ++k) table.emplace_back(k, c);
  }
  const int total = m * v;
  std::vector<std::vector<Action>> out(pp);
  for (int r = 0; r < pp; ++r) {
    const int warmup = m == pp ? total : std::min((pp - r - 1) * 2 + (v - 1) * G, total);
    auto fwd = [&](int i) { return compute(ActionKind::kF, table[i].first, table[i].second); };
    auto bwd = [&](int i) { return compute(ActionKind::kB, table[i].first, v - 1 - table[i].second); };
    for (int i = 0; i < warmup; ++i) out[r].push_back(fwd(i));
    for (int i = 0; i < total - warmup; ++i) {
      out[r].push_back(fwd(warmup + i));
      out[r].push_back(bwd(i));
    }
    for (int i = total - warmup; i < total; ++i) out[r].push_back(bwd(i));
  }
  return out;
}

// ZB-V (Qi et al. 2023, section 4): two chunks per rank in a V, backward split into BI and BW. The order is
// built by a greedy list scheduler that plays the pipeline in unit time (F = BI = BW = 1 per chunk, no
// latency): whenever a rank is free it runs, among the actions whose inputs have arrived, a chunk-1 forward,
// then a chunk-0 forward, then a chunk-0 input gradient, then a chunk-1 input gradient (earliest micro-batch
// first), and a deferred weight gradient only when nothing else can run, i.e. to fill what would be a
// bubble. Forwards stop at 1F1B's activation budget: 2 * pp chunk activations (pp micro-batches of a rank's
// layers) counted from F until BW, with one kept free for chunk 1 so that the V's turn can always proceed.
// The priorities were chosen by trying forwards-first and input-gradients-first, each with the four chunk
// preferences, over pp 2..8 and m = 2 pp..3 pp (spot checks at pp 9, 12, 16 up to 64 micro-batches): this
// one had the lowest mean bubble (5.1%, worst 6.8%), below ZB-H1's at the same peak everywhere.
std::vector<std::vector<Action>> zb_v_order(int pp, int m) {
  const PipelineTopology topo{pp, 2, true};
  const int stages = 2 * pp;
  const int cap = 2 * pp;
  std::vector<std::vector<int64_t>> f_end(stages, std::vector<int64_t>(m, -1));
  std::vector<std::vector<int64_t>> g_end(stages, std::vector<int64_t>(m, -1));
  struct RankState {
    int64_t t = 0;
    std::array<int, 2> next_f{0, 0}, next_b{0, 0};
    std::deque<std::pair<int, int>> pending_w;  // (micro-batch, chunk) with BI done, BW not yet
    int in_flight = 0, in_flight_chunk0 = 0;
  };
  std::vector<RankState> st(pp);
  std::vector<std::vector<Action>> out(pp);
  // (start, priority, micro-batch, chunk, kind)
  using Cand = std::tuple<int64_t, int, int, int, ActionKind>;
  const int64_t total = int64_t{6} * pp * m;
  for (int64_t placed = 0; placed < total; ++placed) {
    std::optional<std::pair<int, Cand>> best;
    for (int r = 0; r < pp; ++r) {
      RankState& rs = st[r];
      std::vector<Cand> cands;
      for (int c = 0; c < 2; ++c) {
        const int s = topo.stage_of(r, c);
        if (int k = rs.next_f[c]; k < m) {
          const int64_t dep = s == 0 ? 0 : f_end[s - 1][k];
          const bool room = rs.in_flight + 1 <= cap && (c == 1 || rs.in_flight_chunk0 + 1 <= cap - 1);
          if (dep >= 0 && room) cands.emplace_back(std::max(rs.t, dep), c == 1 ? 0 : 1, k, c, ActionKind::kF);
        }
        if (int k = rs.next_b[c]; k < m && f_end[s][k] >= 0) {
          const int64_t dep = s == stages - 1 ? f_end[s][k] : g_end[s + 1][k];
          if (dep >= 0)
            cands.emplace_back(std::max({rs.t, f_end[s][k], dep}), c == 0 ? 2 : 3, k, c, ActionKind::kBI);
        }
      }
      if (!rs.pending_w.empty())
        cands.emplace_back(rs.t, 4, rs.pending_w.front().first, rs.pending_w.front().second, ActionKind::kBW);
      if (cands.empty()) continue;
      // What can start now goes by priority; otherwise the earliest to become ready.
      std::optional<Cand> pick;
      for (const Cand& c : cands)
        if (std::get<0>(c) <= rs.t && (!pick || std::tie(std::get<1>(c), std::get<2>(c)) <
                                                    std::tie(std::get<1>(*pick), std::get<2>(*pick))))
          pick = c;
      if (!pick) pick = *std::min_element(cands.begin(), cands.end());
      if (!best || std::get<0>(*pick) < std::get<0>(best->second)) best = std::pair{r, *pick};
    }
    PRIMUS_CHECK(best.has_value(), "zb-v builder stuck (pp {}, {} micro-batches)", pp, m);
    const auto [r, cand] = *best;
    const auto [start, prio, k, c, kind] = cand;
    RankState& rs = st[r];
    const int s = topo.stage_of(r, c);
    rs.t = start + 1;
    out[r].push_back(compute(kind, k, c));
    if (kind == ActionKind::kF) {
      f_end[s][k] = rs.t;
      ++rs.next_f[c];
      ++rs.in_flight;
      if (c == 0) ++rs.in_flight_chunk0;
    } else if (kind == ActionKind::kBI) {
      g_end[s][k] = rs.t;
      ++rs.next_b[c];
      rs.pending_w.emplace_back(k, c);
    } else {
      rs.pending_w.pop_front();
      --rs.in_flight;
      if (c == 0) --rs.in_flight_chunk0;
    }
  }
  return out;
}

std::string params_text(const ScheduleParams& p) {
  return fmt::format("pp {}, {} chunk(s) per rank, {} micro-batches", p.pp, p.vpp, p.microbatches);
}

}  // namespace

std::vector<std::vector<Action>> compute_order(ScheduleKind kind, const ScheduleParams& p) {
  const char* name = schedule_name(kind);
  if (p.pp < 1 || p.microbatches < 1 || p.vpp < 1)
    throw ConfigError(fmt::format("schedule {}: pp, chunks per rank and micro-batches must be >= 1 ({})",
                                  name, params_text(p)));
  const int want_v = kind == ScheduleKind::kZBV ? 2 : 1;
  if (kind != ScheduleKind::kInterleaved && p.vpp != want_v)
    throw ConfigError(
        fmt::format("schedule {} runs {} chunk(s) per rank, but virtual_pipeline_model_parallel_size "
                    "gives {}",
                    name, want_v, p.vpp),
        p.vpp > 1 ? "use the interleaved schedule for several chunks per rank" : "");
  switch (kind) {
    case ScheduleKind::kGPipe:
      return gpipe_order(p.pp, p.microbatches);
    case ScheduleKind::k1F1B:
      return one_f_one_b_order(p.pp, p.microbatches);
    case ScheduleKind::kZBH1:
      return zb_h1_order(p.pp, p.microbatches);
    case ScheduleKind::kZBV:
      return zb_v_order(p.pp, p.microbatches);
    case ScheduleKind::kInterleaved:
      break;
  }
  if (p.vpp < 2)
    throw ConfigError(
        fmt::format("schedule interleaved needs at least 2 chunks per rank "
                    "(virtual_pipeline_model_parallel_size or num_layers_per_virtual_pipeline_stage), "
                    "got {}",
                    p.vpp));
  const int G = p.group_size > 0 ? p.group_size : p.pp;
  if (p.microbatches < p.pp)
    throw ConfigError(fmt::format(
        "schedule interleaved needs at least as many micro-batches as pipeline ranks: {} micro-batches "
        "(global_batch_size / (micro_batch_size x data-parallel size)) < pipeline_model_parallel_size {}",
        p.microbatches, p.pp));
  if (G < p.pp || G > p.microbatches)
    throw ConfigError(
        fmt::format("microbatch_group_size_per_vp_stage {} must lie in [pipeline_model_parallel_size {}, "
                    "micro-batches {}]",
                    G, p.pp, p.microbatches));
  // A last group of fewer than pp micro-batches deadlocks Megatron's warm-up rule (the validator finds the
  // cycle); with the default group size this is Megatron's "micro-batches % pp == 0".
  if (p.microbatches % G != 0 && p.microbatches % G < p.pp)
    throw ConfigError(fmt::format(
        "schedule interleaved: {} micro-batches in groups of {} (microbatch_group_size_per_vp_stage, default "
        "pp) leave a last group of {} < pipeline_model_parallel_size {} (rule: micro-batches % group == 0 or "
        ">= pp; with the default group: micro-batches % pp == 0)",
        p.microbatches, G, p.microbatches % G, p.pp));
  return interleaved_order(p.pp, p.vpp, p.microbatches, G);
}

void add_p2p(Schedule& s) {
  const PipelineTopology& t = s.topo;
  const int last = t.num_stages() - 1;
  for (int r = 0; r < t.pp; ++r) {
    std::vector<Action> out;
    for (const Action& a : s.ranks[r]) {
      if (!is_compute(a.kind)) {
        out.push_back(a);
        continue;
      }
      const int stage = t.stage_of(r, a.chunk);
      const bool fwd = a.kind == ActionKind::kF;
      const bool bwd = a.kind == ActionKind::kB || a.kind == ActionKind::kBI;
      if (fwd && stage > 0 && t.rank_chunk_of(stage - 1).first != r)
        out.push_back({ActionKind::kRecvF, a.microbatch, a.chunk, t.rank_chunk_of(stage - 1).first});
      if (bwd && stage < last && t.rank_chunk_of(stage + 1).first != r)
        out.push_back({ActionKind::kRecvB, a.microbatch, a.chunk, t.rank_chunk_of(stage + 1).first});
      out.push_back(a);
      if (fwd && stage < last && t.rank_chunk_of(stage + 1).first != r)
        out.push_back({ActionKind::kSendF, a.microbatch, a.chunk, t.rank_chunk_of(stage + 1).first});
      if (bwd && stage > 0 && t.rank_chunk_of(stage - 1).first != r)
        out.push_back({ActionKind::kSendB, a.microbatch, a.chunk, t.rank_chunk_of(stage - 1).first});
    }
    s.ranks[r] = std::move(out);
  }
}

Schedule make_schedule(ScheduleKind kind, const ScheduleParams& p) {
  Schedule s;
  s.kind = kind;
  s.topo = PipelineTopology{p.pp, p.vpp, kind == ScheduleKind::kZBV};
  s.microbatches = p.microbatches;
  s.ranks = compute_order(kind, p);
  add_p2p(s);
  const std::vector<std::string> problems = validate_schedule(s);
  if (!problems.empty()) {
    std::string msg =
        fmt::format("generated schedule {} ({}) is not runnable:", schedule_name(kind), params_text(p));
    for (size_t i = 0; i < problems.size() && i < 10; ++i) msg += "\n  - " + problems[i];
    PRIMUS_FAIL("{}", msg);
  }
  return s;
}

std::string describe_order(const Schedule& s) {
  std::string out;
  for (int r = 0; r < s.topo.pp; ++r) {
    out += fmt::format("rank {}:", r);
    for (const Action& a : s.ranks[r]) {
      if (!is_compute(a.kind)) continue;
      out += fmt::format(" {}{}", action_kind_name(a.kind), a.microbatch);
      if (s.topo.vpp > 1) out += fmt::format(".{}", a.chunk);
    }
    out += "\n";
  }
  return out;
}

}  // namespace primus::parallel
