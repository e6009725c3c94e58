#include "report/pipeline_page.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "report/svg_plot.h"

namespace primus::report {
namespace {

using parallel::ActionKind;

const char* base_color(ActionKind k) {
  switch (k) {
    case ActionKind::kF:
      return "#4e79a7";  // blue
    case ActionKind::kB:
      return "#e15759";  // red
    case ActionKind::kBI:
      return "#59a14f";  // green
    case ActionKind::kBW:
      return "#b07aa1";  // purple
    default:
      return "#999999";
  }
}

// Later chunks of a rank are drawn lighter: mixes `hex` with white by t in [0, 1).
std::string lighten(const char* hex, double t) {
  const long v = std::strtol(hex + 1, nullptr, 16);
  auto mix = [&](long c) { return static_cast<int>(c + (255 - c) * t); };
  return fmt::format("#{:02x}{:02x}{:02x}", mix((v >> 16) & 255), mix((v >> 8) & 255), mix(v & 255));
}

// What a timeline draws: the projected schedule, or the same schedule with fewer micro-batches when the real
// one has too many boxes to see (or to keep the page small): 2 x max(pp, group) micro-batches show the
// warm-up, a steady state and the cool-down, which is all a longer step repeats.
struct Picture {
  parallel::Schedule schedule;
  parallel::SimResult sim;
  bool reduced = false;
};

Picture picture_of(const parallel::ScheduleProjection& s, const parallel::PipelineProjection& p) {
  constexpr size_t kMaxBoxes = 4000;
  size_t boxes = 0;
  for (const auto& list : s.schedule.ranks)
    boxes += std::count_if(list.begin(), list.end(),
                           [](const parallel::Action& a) { return parallel::is_compute(a.kind); });
  const int pp = s.schedule.topo.pp;
  const int group = std::max(pp, p.input.group_size);
  const int m = std::min<int>(s.schedule.microbatches, 2 * group);
  if (boxes <= kMaxBoxes || m == s.schedule.microbatches) return {s.schedule, s.sim, false};
  Picture pic;
  pic.schedule = parallel::make_schedule(
      s.kind, {.pp = pp, .vpp = s.schedule.topo.vpp, .microbatches = m, .group_size = p.input.group_size});
  pic.sim = parallel::simulate(pic.schedule, s.costs);
  pic.reduced = true;
  return pic;
}

std::string picture_title(const parallel::ScheduleProjection& s, const Picture& pic) {
  return fmt::format(
      "{}: bubble {:.2f}%, step {:.2f} F{}", parallel::schedule_name(s.kind), 100 * pic.sim.bubble_fraction,
      pic.sim.step_time,
      pic.reduced ? fmt::format(" (drawn with {} micro-batches)", pic.schedule.microbatches) : "");
}

}  // namespace

std::string pipeline_timeline_svg(const std::string& title, const parallel::Schedule& schedule,
                                  const parallel::SimResult& sim, double t_end, int width,
                                  const std::string& x_label) {
  const int vpp = schedule.topo.vpp;
  std::vector<std::string> lanes;
  std::vector<GanttBox> boxes;
  for (int r = 0; r < schedule.topo.pp; ++r) {
    lanes.push_back(fmt::format("rank {}", r));
    for (const parallel::TimedAction& a : sim.ranks[r]) {
      if (!parallel::is_compute(a.action.kind)) continue;
      const double shade = vpp > 1 ? 0.45 * a.action.chunk / (vpp - 1) : 0;
      boxes.push_back({r, a.start, a.end, lighten(base_color(a.action.kind), shade),
                       std::to_string(a.action.microbatch),
                       fmt::format("rank {}: {} {:.3g}-{:.3g} F", r, a.action.str(), a.start, a.end)});
    }
  }
  std::vector<LegendEntry> legend;
  for (ActionKind k : {ActionKind::kF, ActionKind::kB, ActionKind::kBI, ActionKind::kBW}) {
    const bool used = std::any_of(schedule.ranks.begin(), schedule.ranks.end(), [&](const auto& list) {
      return std::any_of(list.begin(), list.end(), [&](const parallel::Action& a) { return a.kind == k; });
    });
    static const char* kNames[] = {"forward F", "backward B", "input grad BI", "weight grad BW"};
    if (used) legend.push_back({kNames[static_cast<int>(k)], base_color(k)});
  }
  legend.push_back({"idle", "#e8e8e8"});
  if (vpp > 1)
    legend.push_back(
        {fmt::format("lighter: later chunk (of {})", vpp), lighten(base_color(ActionKind::kF), 0.45)});
  return gantt_chart(title, lanes, boxes, legend,
                     x_label.empty() ? "time (units of F: one rank's forward of one micro-batch)" : x_label,
                     t_end, width);
}

std::string pipeline_projection_html(const parallel::PipelineProjection& p, const std::string& title) {
  const parallel::PipelinePlanInput& in = p.input;
  std::vector<Picture> pictures;
  double t_end = 0;
  for (const auto& s : p.schedules) {
    if (!s.skipped.empty()) continue;
    pictures.push_back(picture_of(s, p));
    t_end = std::max(t_end, pictures.back().sim.step_time);
  }
  std::string h = fmt::format(
      "<!DOCTYPE html>\n<html><head><meta "
      "charset=\"utf-8\"><title>{0}</title>\n<style>body{{font-family:sans-serif;"
      "margin:24px;max-width:1060px}} table{{border-collapse:collapse;margin:8px 0}} td,th{{border:1px solid "
      "#ccc;"
      "padding:3px 8px;text-align:right}} th{{background:#f2f2f2}} "
      "td:first-child,th:first-child{{text-align:left}}"
      " .note{{color:#555}} svg{{margin:6px 0 18px}}</style></head><body>\n<h1>{0}</h1>\n",
      html_escape(title));
  h += fmt::format(
      "<p>pp {}, {} micro-batches ({}), {} decoder layers{}; p2p latency {} F. Configured schedule: "
      "<b>{}</b> ({}).</p>\n",
      in.split.pp, p.microbatches,
      html_escape(p.microbatches == in.microbatches ? in.microbatches_from : "--micro-batches"),
      in.split.num_layers,
      in.split.mtp_num_layers > 0 ? fmt::format(" + {} MTP", in.split.mtp_num_layers) : "", p.p2p,
      in.configured ? parallel::schedule_name(*in.configured) : "none generated",
      html_escape(in.configured_from));
  for (const std::string& n : in.notes) h += "<p class=\"note\">note: " + html_escape(n) + "</p>\n";
  h += "<table><tr><th>schedule</th><th>chunks per rank</th><th>bubble</th><th>step (F)</th>"
       "<th>peak micro-batches held (busiest rank)</th></tr>\n";
  for (const auto& s : p.schedules) {
    const std::string name =
        fmt::format("{}{}", parallel::schedule_name(s.kind), s.configured ? " (configured)" : "");
    if (!s.skipped.empty()) {
      h += fmt::format("<tr><td>{}</td><td colspan=\"4\" style=\"text-align:left\">skipped: {}</td></tr>\n",
                       html_escape(name), html_escape(s.skipped));
      continue;
    }
    h += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.2f}%</td><td>{:.2f}</td><td>{:g}</td></tr>\n",
                     html_escape(name), s.layout->vpp(), 100 * s.sim.bubble_fraction, s.sim.step_time,
                     *std::max_element(s.sim.peak_microbatches.begin(), s.sim.peak_microbatches.end()));
  }
  h += "</table>\n<p class=\"note\">Simulated with the cost model of docs/pipeline.md: F = one rank's "
       "forward of "
       "one micro-batch with an even split, chunks weighed by their layers, B = 2F, BI = BW = F (or Primus's "
       "pp_cost_f/b/w). Bubble = idle share of all ranks over the step. Peak = activations held at once, in "
       "micro-batches of a whole rank's layers.</p>\n";
  size_t shown = 0;
  for (const auto& s : p.schedules) {
    if (!s.skipped.empty()) continue;
    const Picture& pic = pictures[shown++];
    h += fmt::format("<h2>{}{}</h2>\n", parallel::schedule_name(s.kind), s.configured ? " (configured)" : "");
    if (!s.note.empty()) h += "<p class=\"note\">" + html_escape(s.note) + "</p>\n";
    if (pic.reduced)
      h += fmt::format(
          "<p class=\"note\">Drawn with {} micro-batches (bubble {:.2f}%, step {:.2f} F); the "
          "table below is for the step's {}.</p>\n",
          pic.schedule.microbatches, 100 * pic.sim.bubble_fraction, pic.sim.step_time, p.microbatches);
    h += pipeline_timeline_svg(picture_title(s, pic), pic.schedule, pic.sim, t_end);
    h += "<table><tr><th>rank</th>";
    for (int r = 0; r < s.layout->pp(); ++r) h += fmt::format("<th>{}</th>", r);
    h += "</tr>\n<tr><td>idle</td>";
    for (double b : s.sim.bubble) h += fmt::format("<td>{:.1f}%</td>", 100 * b);
    h += "</tr>\n<tr><td>peak micro-batches</td>";
    for (double x : s.sim.peak_microbatches) h += fmt::format("<td>{:g}</td>", x);
    h += "</tr>\n";
    for (int c = 0; c < s.layout->vpp(); ++c) {
      h += fmt::format("<tr><td>chunk {}</td>", c);
      for (int r = 0; r < s.layout->pp(); ++r)
        h += fmt::format("<td style=\"font-size:smaller\">{}</td>",
                         html_escape(s.layout->at(r, c).describe()));
      h += "</tr>\n";
    }
    h += "</table>\n";
  }
  h += "</body></html>\n";
  return h;
}

std::vector<std::pair<std::string, std::string>> pipeline_projection_svgs(
    const parallel::PipelineProjection& p) {
  std::vector<std::pair<const parallel::ScheduleProjection*, Picture>> pictures;
  double t_end = 0;
  for (const auto& s : p.schedules) {
    if (!s.skipped.empty()) continue;
    pictures.emplace_back(&s, picture_of(s, p));
    t_end = std::max(t_end, pictures.back().second.sim.step_time);
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [s, pic] : pictures)
    out.emplace_back(parallel::schedule_name(s->kind),
                     pipeline_timeline_svg(picture_title(*s, pic), pic.schedule, pic.sim, t_end));
  return out;
}

}  // namespace primus::report
