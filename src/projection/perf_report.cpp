#include "projection/perf_report.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace primus::projection {

std::string performance_text(const PerformanceProjection& p, const Setup& s, const std::string& title) {
  std::string out = title + "\n";
  out +=
      fmt::format("layout      {}, {} rank(s), {} micro-batch(es) of {} x {} tokens per step per DP rank{}\n",
                  s.layout.describe(), s.world, s.microbatches, s.train.micro_batch_size,
                  s.train.data.seq_length, s.pp() > 1 ? ", schedule " + s.schedule : "");
  out += fmt::format("step        {:.1f} ms | {:.0f} tokens/s/GPU | {:.0f} TFLOP/s/GPU | MFU {:.1f}%\n",
                     p.step_time_s * 1e3, p.tokens_per_s_per_gpu, p.model_tflops_per_gpu, p.mfu * 100);
  auto pct = [&](double x) { return p.step_time_s > 0 ? 100 * x / p.step_time_s : 0; };
  out += fmt::format(
      "breakdown   compute {:.1f} ms ({:.0f}%, of which TP/CP/EP collectives {:.1f} ms) | exposed "
      "DP comm {:.1f} ms ({:.0f}%) | pipeline bubble {:.1f} ms ({:.0f}%) | optimizer {:.1f} ms "
      "({:.0f}%)\n",
      p.compute_s * 1e3, pct(p.compute_s), p.comm_in_compute_s * 1e3, p.exposed_comm_s * 1e3,
      pct(p.exposed_comm_s), p.bubble_s * 1e3, pct(p.bubble_s), p.optimizer_s * 1e3, pct(p.optimizer_s));
  if (p.ranks.size() > 1) {
    out += "per rank    ";
    for (const RankTime& r : p.ranks)
      out +=
          fmt::format("pp {}: F {:.1f} + B {:.1f} ms | ", r.pp_rank, r.forward_s * 1e3, r.backward_s * 1e3);
    out += "\n";
  }
  const RankTime& r = p.ranks.at(p.slowest_rank);
  out += fmt::format("ops of pp rank {} per step (on the critical path or beside it):\n", r.pp_rank);
  out += fmt::format("  {:<34}{:>10}{:>10}{:>12}\n", "op", "ms", "kind", "TFLOP/s");
  for (const OpTime& op : r.ops)
    out += fmt::format("  {:<34}{:>10.2f}{:>10}{:>12}\n", op.name, op.seconds * 1e3, op.kind,
                       op.flops > 0 ? fmt::format("{:.0f}", op.flops / op.seconds / 1e12) : "-");
  for (const std::string& a : p.assumptions) out += "assumes     " + a + "\n";
  return out;
}

std::string performance_json(const PerformanceProjection& p, const Setup& s) {
  nlohmann::ordered_json j;
  j["world_size"] = s.world;
  j["layout"] = s.layout.describe();
  j["schedule"] = s.schedule;
  j["step_time_s"] = p.step_time_s;
  j["tokens_per_s_per_gpu"] = p.tokens_per_s_per_gpu;
  j["model_tflops_per_gpu"] = p.model_tflops_per_gpu;
  j["mfu"] = p.mfu;
  j["breakdown_s"] = {{"compute", p.compute_s},
                      {"exposed_comm", p.exposed_comm_s},
                      {"bubble", p.bubble_s},
                      {"optimizer", p.optimizer_s},
                      {"tp_cp_ep_comm_inside_compute", p.comm_in_compute_s}};
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const RankTime& r : p.ranks) {
    nlohmann::ordered_json rj;
    rj["pp_rank"] = r.pp_rank;
    rj["forward_s"] = r.forward_s;
    rj["backward_s"] = r.backward_s;
    nlohmann::ordered_json ops;
    for (const OpTime& op : r.ops) ops[op.name] = op.seconds;
    rj["ops_s"] = ops;
    ranks.push_back(rj);
  }
  j["ranks"] = ranks;
  j["assumptions"] = p.assumptions;
  return j.dump(1);
}

}  // namespace primus::projection
