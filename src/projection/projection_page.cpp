#include "projection/projection_page.h"

#include <fmt/format.h>

#include <algorithm>

#include "projection/memory_report.h"
#include "projection/perf_report.h"
#include "report/svg_plot.h"

namespace primus::projection {
namespace {

const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                         "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

}  // namespace

std::string projection_page(const std::string& title, const Setup& s, const MemoryProjection* memory,
                            const PerformanceProjection* perf) {
  std::string html = fmt::format(
      "<!doctype html><html><head><meta "
      "charset=\"utf-8\"><title>{0}</title><style>body{{font-family:sans-serif;"
      "margin:24px}}pre{{background:#f6f6f6;padding:8px;overflow-x:auto}}</style></head><body><h1>{0}</h1>\n",
      report::html_escape(title));
  if (memory) {
    std::vector<std::string> bars;
    for (const RankMemory& r : memory->ranks) bars.push_back(fmt::format("pp {}", r.pp_rank));
    std::vector<report::BarSegment> segs;
    for (const RankMemory& r : memory->ranks)
      for (const MemoryItem& it : r.items)
        if (std::none_of(segs.begin(), segs.end(),
                         [&](const report::BarSegment& b) { return b.name == it.name; }))
          segs.push_back({it.name, kColors[segs.size() % std::size(kColors)], {}});
    for (report::BarSegment& seg : segs)
      for (const RankMemory& r : memory->ranks) {
        double v = 0;
        for (const MemoryItem& it : r.items)
          if (it.name == seg.name) v = it.bytes / 1e9;
        seg.values.push_back(v);
      }
    if (memory->outside_allocator_bytes > 0)
      segs.push_back({"CUDA context + NCCL", "#cccccc",
                      std::vector<double>(memory->ranks.size(), memory->outside_allocator_bytes / 1e9)});
    html += "<h2>Memory per pipeline rank</h2>\n" +
            report::stacked_bar_chart("Peak memory by holder", "GB", bars, segs, memory->capacity_bytes / 1e9,
                                      memory->capacity_bytes > 0 ? memory->device : "") +
            "<pre>" + report::html_escape(memory_text(*memory, s, "")) + "</pre>\n";
  }
  if (perf) {
    std::vector<std::string> bars;
    std::vector<report::BarSegment> segs = {{"forward", kColors[0], {}},
                                            {"backward (and recompute)", kColors[1], {}},
                                            {"pipeline bubble", "#dddddd", {}},
                                            {"exposed DP comm", kColors[2], {}},
                                            {"optimizer", kColors[4], {}}};
    const double mb = static_cast<double>(s.microbatches);
    for (const RankTime& r : perf->ranks) {
      bars.push_back(fmt::format("pp {}", r.pp_rank));
      const double busy = mb * (r.forward_s + r.backward_s);
      const double pipe = perf->compute_s + perf->bubble_s;
      segs[0].values.push_back(mb * r.forward_s * 1e3);
      segs[1].values.push_back(mb * r.backward_s * 1e3);
      segs[2].values.push_back(std::max(0.0, pipe - busy) * 1e3);
      segs[3].values.push_back(perf->exposed_comm_s * 1e3);
      segs[4].values.push_back(perf->optimizer_s * 1e3);
    }
    html += "<h2>Step time per pipeline rank</h2>\n" +
            report::stacked_bar_chart("Step time", "ms", bars, segs) + "<pre>" +
            report::html_escape(performance_text(*perf, s, "")) + "</pre>\n";
  }
  return html + "</body></html>\n";
}

}  // namespace primus::projection
