#include "parallel/pipeline_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.h"

namespace primus::parallel {

namespace {

ChunkCosts scaled(double f, const CostRatios& r) {
  return ChunkCosts{f, r.b * f, r.bi * f, r.bw * f};
}

}  // namespace

PipelineCosts uniform_costs(const PipelineTopology& topo, const CostRatios& ratios) {
  PipelineCosts c;
  c.p2p = ratios.p2p;
  c.chunk.assign(topo.pp, std::vector<ChunkCosts>(topo.vpp, scaled(1.0 / topo.vpp, ratios)));
  return c;
}

PipelineCosts layout_costs(const PipelineLayout& layout, const CostRatios& ratios, double embedding_layers,
                           double loss_layers) {
  std::vector<std::vector<double>> w(layout.pp(), std::vector<double>(layout.vpp(), 0));
  double total = 0;
  for (int r = 0; r < layout.pp(); ++r)
    for (int c = 0; c < layout.vpp(); ++c) {
      const StageModules& m = layout.at(r, c);
      w[r][c] = layout.layer_count(r, c) + (m.embedding ? embedding_layers : 0) + (m.loss ? loss_layers : 0);
      total += w[r][c];
    }
  PRIMUS_CHECK(total > 0, "pipeline layout without layers");
  const double per_rank = total / layout.pp();
  PipelineCosts c;
  c.p2p = ratios.p2p;
  c.chunk.assign(layout.pp(), std::vector<ChunkCosts>(layout.vpp()));
  for (int r = 0; r < layout.pp(); ++r) {
    int rank_layers = 0;
    for (int k = 0; k < layout.vpp(); ++k) rank_layers += layout.layer_count(r, k);
    for (int k = 0; k < layout.vpp(); ++k) {
      c.chunk[r][k] = scaled(w[r][k] / per_rank, ratios);
      // Uneven chunks hold uneven activations (a rank without layers keeps the even default).
      if (rank_layers > 0)
        c.chunk[r][k].activation = static_cast<double>(layout.layer_count(r, k)) / rank_layers;
    }
  }
  return c;
}

SimResult simulate(const Schedule& s, const PipelineCosts& costs) {
  const PipelineTopology& t = s.topo;
  PRIMUS_CHECK(static_cast<int>(costs.chunk.size()) == t.pp, "costs for {} ranks, schedule has {}",
               costs.chunk.size(), t.pp);
  for (const auto& r : costs.chunk)
    PRIMUS_CHECK(static_cast<int>(r.size()) == t.vpp, "costs for {} chunks, schedule has {}", r.size(),
                 t.vpp);
  SimResult out;
  out.ranks.assign(t.pp, {});
  out.busy.assign(t.pp, 0);
  out.peak_in_flight.assign(t.pp, 0);
  std::vector<double> clock(t.pp, 0);
  std::vector<int> in_flight(t.pp, 0);
  std::vector<double> held(t.pp, 0);  // in_flight weighted by the chunks' activation shares
  out.peak_microbatches.assign(t.pp, 0);
  std::vector<size_t> pos(t.pp, 0);
  // (activation?, micro-batch, receiving model stage) -> arrival time
  std::map<std::tuple<bool, int, int>, double> arrival;
  size_t remaining = 0;
  for (const auto& r : s.ranks) remaining += r.size();
  // Runs rank r's next action; false when it is a receive whose data has not been sent yet.
  auto run_next = [&](int r) -> bool {
    const Action& a = s.ranks[r][pos[r]];
    const int stage = t.stage_of(r, a.chunk);
    const ChunkCosts& cc = costs.chunk[r][a.chunk];
    TimedAction ta{a, clock[r], clock[r]};
    switch (a.kind) {
      case ActionKind::kSendF:
      case ActionKind::kSendB:
        arrival[{a.kind == ActionKind::kSendF, a.microbatch,
                 a.kind == ActionKind::kSendF ? stage + 1 : stage - 1}] = clock[r] + costs.p2p;
        if (!costs.overlap) ta.end = clock[r] + costs.p2p;
        break;
      case ActionKind::kRecvF:
      case ActionKind::kRecvB: {
        auto it = arrival.find({a.kind == ActionKind::kRecvF, a.microbatch, stage});
        if (it == arrival.end()) return false;
        ta.end = std::max(clock[r], it->second);
        break;
      }
      default: {
        const double d = a.kind == ActionKind::kF    ? cc.f
                         : a.kind == ActionKind::kB  ? cc.b
                         : a.kind == ActionKind::kBI ? cc.bi
                                                     : cc.bw;
        ta.end = clock[r] + d;
        out.busy[r] += d;
        // Activations live from the forward until the pass that last reads them.
        const double share = cc.activation >= 0 ? cc.activation : 1.0 / t.vpp;
        if (a.kind == ActionKind::kF) {
          out.peak_in_flight[r] = std::max(out.peak_in_flight[r], ++in_flight[r]);
          held[r] += share;
          out.peak_microbatches[r] = std::max(out.peak_microbatches[r], held[r]);
        }
        if (a.kind == ActionKind::kB || a.kind == ActionKind::kBW) {
          --in_flight[r];
          held[r] -= share;
        }
      }
    }
    clock[r] = ta.end;
    out.ranks[r].push_back(ta);
    return true;
  };
  while (remaining > 0) {
    bool progress = false;
    for (int r = 0; r < t.pp; ++r)
      for (; pos[r] < s.ranks[r].size() && run_next(r); ++pos[r], --remaining) progress = true;
    PRIMUS_CHECK(progress,
                 "pipeline simulation deadlocked ({} actions left); validate_schedule names the cycle",
                 remaining);
  }
  out.step_time = *std::max_element(clock.begin(), clock.end());
  double busy_total = 0;
  for (int r = 0; r < t.pp; ++r) {
    busy_total += out.busy[r];
    out.bubble.push_back(out.step_time > 0 ? 1 - out.busy[r] / out.step_time : 0);
  }
  out.bubble_fraction = out.step_time > 0 ? 1 - busy_total / (t.pp * out.step_time) : 0;
  return out;
}

}  // namespace primus::parallel
