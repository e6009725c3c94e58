#include "projection/memory_report.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace primus::projection {
namespace {

// GB with two decimals; MB below 1 GB (the CPU tests' micro models)
std::string gb(double bytes) {
  return std::abs(bytes) >= 1e9 || bytes == 0 ? fmt::format("{:.2f} GB", bytes / 1e9)
                                              : fmt::format("{:.1f} MB", bytes / 1e6);
}

}  // namespace

std::string memory_text(const MemoryProjection& m, const Setup& s, const std::string& title) {
  std::string out = title + "\n";
  out += fmt::format(
      "layout   {} ({}), {} rank(s) of {}{}\n", s.layout.describe(),
      s.sequence_parallel() ? "sequence parallel" : "no sequence parallelism", s.world, m.device,
      s.pp() > 1 ? fmt::format(", schedule {} with {} micro-batches", s.schedule, s.microbatches) : "");
  constexpr int kName = 28, kCol = 12;
  out += fmt::format("{:<{}}", "per rank", kName);
  for (const RankMemory& r : m.ranks) out += fmt::format("{:>{}}", fmt::format("pp {}", r.pp_rank), kCol);
  out += "\n";
  // rows: every item name in the order of the first rank that has it
  std::vector<std::string> names;
  for (const RankMemory& r : m.ranks)
    for (const MemoryItem& it : r.items)
      if (std::find(names.begin(), names.end(), it.name) == names.end()) names.push_back(it.name);
  for (const std::string& name : names) {
    out += fmt::format("{:<{}}", name, kName);
    for (const RankMemory& r : m.ranks) {
      double b = 0;
      for (const MemoryItem& it : r.items)
        if (it.name == name) b = it.bytes;
      out += fmt::format("{:>{}}", b > 0 ? gb(b) : "-", kCol);
    }
    out += "\n";
  }
  out += fmt::format("{:<{}}", "peak (allocated)", kName);
  for (const RankMemory& r : m.ranks) out += fmt::format("{:>{}}", gb(r.peak_bytes), kCol);
  out += "\n";
  if (m.capacity_bytes > 0) {
    out += fmt::format("{:<{}}", "+ context and NCCL", kName);
    for (size_t i = 0; i < m.ranks.size(); ++i)
      out += fmt::format("{:>{}}", gb(m.outside_allocator_bytes), kCol);
    out += "\n";
    out += fmt::format("{:<{}}", "headroom", kName);
    for (const RankMemory& r : m.ranks)
      out += fmt::format("{:>{}}", gb(m.capacity_bytes - r.peak_bytes - m.outside_allocator_bytes), kCol);
    out += "\n";
  }
  out += fmt::format(
      "peak     {} on pp rank {}{}\n", gb(m.peak_bytes), m.peak_rank,
      m.capacity_bytes <= 0 ? ""
      : m.fits()
          ? fmt::format(": fits in {} with {} to spare", gb(m.capacity_bytes), gb(m.headroom_bytes()))
          : fmt::format(": DOES NOT FIT in {} ({} short)", gb(m.capacity_bytes), gb(-m.headroom_bytes())));
  for (const RankMemory& r : m.ranks) out += fmt::format("pp {:<6} {}\n", r.pp_rank, r.holds);
  // how each item was counted, on the rank with the peak
  for (const MemoryItem& it : m.ranks.at(m.peak_rank).items)
    if (!it.note.empty()) out += fmt::format("  {:<26}{}\n", it.name, it.note);
  for (const std::string& a : m.assumptions) out += "assumes  " + a + "\n";
  return out;
}

std::string memory_json(const MemoryProjection& m, const Setup& s) {
  nlohmann::ordered_json j;
  j["device"] = m.device;
  j["world_size"] = s.world;
  j["layout"] = s.layout.describe();
  j["schedule"] = s.schedule;
  j["peak_bytes"] = m.peak_bytes;
  j["peak_rank"] = m.peak_rank;
  j["outside_allocator_bytes"] = m.outside_allocator_bytes;
  j["capacity_bytes"] = m.capacity_bytes;
  j["fits"] = m.fits();
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const RankMemory& r : m.ranks) {
    nlohmann::ordered_json rj;
    rj["pp_rank"] = r.pp_rank;
    rj["holds"] = r.holds;
    rj["peak_bytes"] = r.peak_bytes;
    nlohmann::ordered_json items;
    for (const MemoryItem& it : r.items) items[it.name] = it.bytes;
    rj["items"] = items;
    ranks.push_back(rj);
  }
  j["ranks"] = ranks;
  j["assumptions"] = m.assumptions;
  return j.dump(1);
}

}  // namespace primus::projection
