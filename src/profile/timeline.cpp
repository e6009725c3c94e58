#include "profile/timeline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <fstream>

#include "core/error.h"

namespace primus::profile {

std::vector<Interval> interval_union(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (i.end <= i.begin) continue;
    if (!out.empty() && i.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, i.end);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

double interval_length(const std::vector<Interval>& merged) {
  double s = 0;
  for (const Interval& i : merged) s += i.end - i.begin;
  return s;
}

std::vector<Interval> interval_subtract(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t j = 0;
  for (const Interval& x : a) {
    double cur = x.begin;
    while (j < b.size() && b[j].end <= cur) ++j;
    size_t k = j;
    while (k < b.size() && b[k].begin < x.end) {
      if (b[k].begin > cur) out.push_back({cur, b[k].begin});
      cur = std::max(cur, b[k].end);
      if (cur >= x.end) break;
      ++k;
    }
    if (cur < x.end) out.push_back({cur, x.end});
  }
  return out;
}

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool has(const std::string& s, const char* what) {
  return s.find(what) != std::string::npos;
}

}  // namespace

EventClass classify(const GpuEvent& e) {
  if (e.cat == "gpu_memcpy") return EventClass::kMemcpy;
  const std::string n = lower(e.name);
  if (e.cat == "kernel" && has(n, "nccl")) return EventClass::kComm;
  if (e.cat == "cpu_op" && (has(n, "all_reduce") || has(n, "allreduce") || has(n, "reduce_scatter") ||
                            has(n, "all_gather") || has(n, "all_to_all") || has(n, "nccl")))
    return EventClass::kComm;
  return EventClass::kCompute;
}

std::string op_family(const GpuEvent& e) {
  if (e.cat == "gpu_memcpy") return "memcpy";
  if (e.cat == "gpu_memset") return "memset";
  if (e.cat == "cpu_op") return e.name;
  const std::string n = lower(e.name);
  if (has(n, "nccl")) return "nccl";
  // cuDNN's fused attention backward runs two helper kernels beside the flash kernel: the row sums of dO * O
  // before it and the f32 -> bf16 conversion of the dQ accumulator after it.
  if (has(n, "flash") || has(n, "fmha") || has(n, "sdpa") || has(n, "attention") || has(n, "attn") ||
      has(n, "dot_do_o") || has(n, "convert_dq"))
    return "attention";
  if (has(n, "gemm") || has(n, "xmma") || has(n, "cutlass") || has(n, "nvjet") || has(n, "cublas") ||
      has(n, "matmul") || has(n, "wgmma") || has(n, "sm90_") || has(n, "gemv"))
    return "gemm";
  if (has(n, "adam") || has(n, "multi_tensor") || has(n, "optimizer") || has(n, "grad_norm") ||
      has(n, "clip"))
    return "optimizer";
  if (has(n, "rms") || has(n, "norm")) return "norm";
  if (has(n, "rope") || has(n, "rotary")) return "rope";
  if (has(n, "swiglu") || has(n, "silu") || has(n, "glu")) return "swiglu";
  if (has(n, "softmax") || has(n, "cross_entropy") || has(n, "crossentropy") || has(n, "loss") ||
      has(n, "nll"))
    return "loss/softmax";
  if (has(n, "embedding") || has(n, "index_select") || has(n, "gather") || has(n, "scatter"))
    return "embedding/gather";
  if (has(n, "reduce") || has(n, "sum")) return "reduce";
  if (has(n, "elementwise") || has(n, "vectorized") || has(n, "copy") || has(n, "fill") || has(n, "cast") ||
      has(n, "add") || has(n, "mul") || has(n, "scale"))
    return "elementwise";
  return "other";
}

TimelineBreakdown analyse_timeline(const std::vector<GpuEvent>& events) {
  TimelineBreakdown b;
  if (events.empty()) return b;
  std::vector<Interval> comp, comm, mem, all;
  double first = events.front().ts_us, last = events.front().ts_us;
  for (const GpuEvent& e : events) {
    const Interval i{e.ts_us, e.ts_us + e.dur_us};
    first = std::min(first, i.begin);
    last = std::max(last, i.end);
    all.push_back(i);
    switch (classify(e)) {
      case EventClass::kCompute:
        comp.push_back(i);
        break;
      case EventClass::kComm:
        comm.push_back(i);
        break;
      case EventClass::kMemcpy:
        mem.push_back(i);
        break;
    }
  }
  const auto uc = interval_union(comp), um = interval_union(comm), ume = interval_union(mem),
             ua = interval_union(all);
  const auto comp_or_comm = interval_union([&] {
    std::vector<Interval> v = uc;
    v.insert(v.end(), um.begin(), um.end());
    return v;
  }());
  b.total_ms = (last - first) / 1e3;
  b.computation_ms = interval_length(uc) / 1e3;
  b.comm_ms = interval_length(um) / 1e3;
  b.exposed_comm_ms = interval_length(interval_subtract(um, uc)) / 1e3;
  b.memcpy_ms = interval_length(ume) / 1e3;
  b.exposed_memcpy_ms = interval_length(interval_subtract(ume, comp_or_comm)) / 1e3;
  b.busy_ms = interval_length(ua) / 1e3;
  b.idle_ms = std::max(0.0, b.total_ms - b.busy_ms);
  return b;
}

namespace {

std::vector<OpRow> summarise(const std::vector<GpuEvent>& events, bool by_family, size_t top) {
  std::map<std::string, OpRow> rows;
  double total = 0;
  for (const GpuEvent& e : events) {
    const std::string key = by_family ? op_family(e) : e.name;
    OpRow& r = rows[key];
    r.family = key;
    ++r.count;
    r.total_ms += e.dur_us / 1e3;
    total += e.dur_us / 1e3;
  }
  std::vector<OpRow> out;
  for (auto& [k, r] : rows) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const OpRow& a, const OpRow& b) {
    return a.total_ms != b.total_ms ? a.total_ms > b.total_ms : a.family < b.family;
  });
  double cum = 0;
  for (OpRow& r : out) {
    r.pct = total > 0 ? 100.0 * r.total_ms / total : 0;
    cum += r.pct;
    r.cum_pct = cum;
  }
  if (top > 0 && out.size() > top) out.resize(top);
  return out;
}

}  // namespace

std::vector<OpRow> op_summary(const std::vector<GpuEvent>& events) {
  return summarise(events, true, 0);
}
std::vector<OpRow> kernel_summary(const std::vector<GpuEvent>& events, size_t top) {
  return summarise(events, false, top);
}

std::map<int, std::vector<GpuEvent>> extract_events(const nlohmann::json& trace, const std::string& what,
                                                    bool* cpu_fallback,
                                                    std::map<int, std::vector<GpuEvent>>* cpu_ranges) {
  const nlohmann::json* evs = &trace;
  if (trace.is_object()) {
    if (!trace.contains("traceEvents") || !trace["traceEvents"].is_array())
      throw Error(ErrorKind::kRuntime, what + ": not a Chrome trace (no traceEvents array)");
    evs = &trace["traceEvents"];
  } else if (!trace.is_array()) {
    throw Error(ErrorKind::kRuntime, what + ": not a Chrome trace (expected an object or an array)");
  }
  std::map<int, std::vector<GpuEvent>> gpu, cpu;
  size_t index = 0;
  for (const nlohmann::json& e : *evs) {
    ++index;
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    const std::string cat = e.value("cat", "");
    const bool is_gpu = cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset";
    if (!is_gpu && cat != "cpu_op") continue;
    if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number())
      throw Error(ErrorKind::kRuntime,
                  fmt::format("{}: traceEvents[{}] ({}) has no numeric ts/dur", what, index - 1, cat));
    int pid = 0;
    if (e.contains("pid") && e["pid"].is_number_integer()) pid = e["pid"].get<int>();
    GpuEvent g{e.value("name", "?"), cat, e["ts"].get<double>(), e["dur"].get<double>(), pid};
    (is_gpu ? gpu : cpu)[pid].push_back(std::move(g));
  }
  if (cpu_fallback) *cpu_fallback = gpu.empty();
  if (cpu_ranges) *cpu_ranges = cpu;
  return gpu.empty() ? cpu : gpu;
}

std::vector<TimelineReport> analyse_trace(const nlohmann::json& trace, const std::string& what) {
  bool cpu = false;
  std::map<int, std::vector<GpuEvent>> ranges;
  auto by_pid = extract_events(trace, what, &cpu, &ranges);
  std::map<int, int> steps;  // extract_events checked the shape
  const nlohmann::json& all = trace.is_array() ? trace : trace["traceEvents"];
  for (const nlohmann::json& e : all)
    if (e.is_object() && e.value("cat", "") == "step" && e.value("ph", "") == "X") ++steps[e.value("pid", 0)];
  std::vector<TimelineReport> out;
  for (auto& [pid, evs] : by_pid) {
    TimelineReport r;
    r.source = what;
    r.pid = pid;
    r.basis = cpu ? "CPU ranges (the trace has no GPU events)" : "GPU events";
    r.events = evs.size();
    r.steps = cpu ? 0 : steps[pid];
    r.timeline = analyse_timeline(evs);
    r.ops = op_summary(evs);
    r.kernels = kernel_summary(evs, 15);
    if (!cpu) r.gaps = idle_gaps(evs, ranges[pid], 5);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<IdleGap> idle_gaps(const std::vector<GpuEvent>& gpu, const std::vector<GpuEvent>& cpu,
                               size_t top) {
  std::vector<Interval> all;
  for (const GpuEvent& e : gpu) all.push_back({e.ts_us, e.ts_us + e.dur_us});
  const std::vector<Interval> busy = interval_union(all);
  if (busy.size() < 2) return {};
  // Every gap between busy intervals, the longest `top` kept (stable: earlier first among equals); only those
  // are described, so a trace with 10^5 kernels costs O(top x events), not O(gaps x events).
  std::vector<Interval> holes;
  for (size_t i = 1; i < busy.size(); ++i) holes.push_back({busy[i - 1].end, busy[i].begin});
  std::stable_sort(holes.begin(), holes.end(),
                   [](const Interval& x, const Interval& y) { return x.end - x.begin > y.end - y.begin; });
  if (holes.size() > top) holes.resize(top);
  std::vector<IdleGap> gaps;
  for (const auto& [b, e] : holes) {
    IdleGap g;
    g.start_ms = (b - busy.front().begin) / 1e3;
    g.ms = (e - b) / 1e3;
    double before_end = -1e300, after_start = 1e300;
    for (const GpuEvent& ev : gpu) {
      const double end = ev.ts_us + ev.dur_us;
      if (end <= b && end > before_end) {
        before_end = end;
        g.before = ev.name;
      }
      if (ev.ts_us >= e && ev.ts_us < after_start) {
        after_start = ev.ts_us;
        g.after = ev.name;
      }
    }
    std::vector<const GpuEvent*> over;
    for (const GpuEvent& r : cpu)
      if (r.ts_us < e && r.ts_us + r.dur_us > b) over.push_back(&r);
    // Outermost first: earlier start, then longer.
    std::sort(over.begin(), over.end(), [](const GpuEvent* x, const GpuEvent* y) {
      return x->ts_us != y->ts_us ? x->ts_us < y->ts_us : x->dur_us > y->dur_us;
    });
    for (const GpuEvent* r : over) g.host.push_back(r->name);
    gaps.push_back(std::move(g));
  }
  return gaps;
}

nlohmann::json read_trace_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error(ErrorKind::kRuntime, "cannot open trace " + path);
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kRuntime, fmt::format("{}: invalid JSON: {}", path, e.what()));
  }
}

std::vector<TimelineReport> analyse_trace_file(const std::string& path) {
  return analyse_trace(read_trace_file(path), path);
}

std::vector<std::pair<std::string, double>> timeline_rows(const TimelineBreakdown& t) {
  return {{"computation", t.computation_ms},
          {"exposed communication", t.exposed_comm_ms},
          {"exposed memcpy", t.exposed_memcpy_ms},
          {"idle", t.idle_ms},
          {"total", t.total_ms},
          {"busy", t.busy_ms},
          {"communication (all)", t.comm_ms},
          {"memcpy (all)", t.memcpy_ms}};
}

namespace {

std::string shorten(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

}  // namespace

std::string per_step_line(const TimelineReport& r) {
  const TimelineBreakdown& t = r.timeline;
  return fmt::format(
      "Per step ({} steps in the trace): {:.0f} GPU launches, {:.3f} ms, busy {:.3f} ms ({:.1f}%), "
      "idle {:.3f} ms",
      r.steps, r.per_step(static_cast<double>(r.events)), r.per_step(t.total_ms), r.per_step(t.busy_ms),
      t.pct(t.busy_ms), r.per_step(t.idle_ms));
}

std::string format_timeline_text(const TimelineReport& r) {
  std::string s =
      fmt::format("GPU timeline of {} (pid {}, {} events, basis: {})\n", r.source, r.pid, r.events, r.basis);
  s += fmt::format("  {:<24} {:>12} {:>9}\n", "type", "time ms", "percent");
  for (auto& [name, ms] : timeline_rows(r.timeline))
    s += fmt::format("  {:<24} {:>12.3f} {:>8.2f}%\n", name, ms, r.timeline.pct(ms));
  if (r.steps > 0) s += per_step_line(r) + "\n";
  s += fmt::format("Op summary by family\n  {:<20} {:>8} {:>12} {:>8} {:>8}\n", "op family", "count",
                   "total ms", "%", "cum %");
  for (const OpRow& o : r.ops)
    s += fmt::format("  {:<20} {:>8} {:>12.3f} {:>7.2f}% {:>7.2f}%\n", shorten(o.family, 20), o.count,
                     o.total_ms, o.pct, o.cum_pct);
  s += "Top kernels\n";
  for (const OpRow& o : r.kernels)
    s += fmt::format("  {:>8} {:>12.3f} {:>7.2f}%  {}\n", o.count, o.total_ms, o.pct, shorten(o.family, 90));
  if (!r.gaps.empty())
    s += "Longest idle gaps (at ms from the first GPU event: length; GPU before -> after; host)\n";
  for (const IdleGap& g : r.gaps)
    s += fmt::format("  at {:>10.3f}: {:>8.3f} ms; {} -> {}; host: {}\n", g.start_ms, g.ms,
                     shorten(g.before, 40), shorten(g.after, 40),
                     g.host.empty() ? std::string("-") : fmt::format("{}", fmt::join(g.host, " > ")));
  return s;
}

std::string format_timeline_markdown(const TimelineReport& r) {
  std::string s = fmt::format(
      "### GPU timeline: {} (pid {}; basis: {})\n\n| type | time ms | percent |\n|---|---:|---:|\n", r.source,
      r.pid, r.basis);
  for (auto& [name, ms] : timeline_rows(r.timeline))
    s += fmt::format("| {} | {:.3f} | {:.2f} |\n", name, ms, r.timeline.pct(ms));
  if (r.steps > 0) s += "\n" + per_step_line(r) + ".\n";
  s += "\n| op family | count | total ms | % | cumulative % |\n|---|---:|---:|---:|---:|\n";
  for (const OpRow& o : r.ops)
    s += fmt::format("| {} | {} | {:.3f} | {:.2f} | {:.2f} |\n", o.family, o.count, o.total_ms, o.pct,
                     o.cum_pct);
  if (!r.gaps.empty())
    s += "\n| idle gap at ms | length ms | GPU before | GPU after | host |\n|---:|---:|---|---|---|\n";
  for (const IdleGap& g : r.gaps)
    s += fmt::format("| {:.3f} | {:.3f} | {} | {} | {} |\n", g.start_ms, g.ms, shorten(g.before, 60),
                     shorten(g.after, 60),
                     g.host.empty() ? std::string("-") : fmt::format("{}", fmt::join(g.host, " > ")));
  return s;
}

nlohmann::json timeline_to_json(const TimelineReport& r) {
  nlohmann::json j;
  j["source"] = r.source;
  j["pid"] = r.pid;
  j["basis"] = r.basis;
  j["events"] = r.events;
  j["steps"] = r.steps;
  if (r.steps > 0) {
    j["launches_per_step"] = r.per_step(static_cast<double>(r.events));
    j["busy_ms_per_step"] = r.per_step(r.timeline.busy_ms);
    j["idle_ms_per_step"] = r.per_step(r.timeline.idle_ms);
  }
  nlohmann::json t = nlohmann::json::array();
  for (auto& [name, ms] : timeline_rows(r.timeline))
    t.push_back({{"type", name}, {"time_ms", ms}, {"percent", r.timeline.pct(ms)}});
  j["gpu_timeline"] = t;
  auto rows = [](const std::vector<OpRow>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const OpRow& o : v)
      a.push_back({{"name", o.family},
                   {"count", o.count},
                   {"total_ms", o.total_ms},
                   {"percent", o.pct},
                   {"cumulative_percent", o.cum_pct}});
    return a;
  };
  j["ops_summary_by_family"] = rows(r.ops);
  j["top_kernels"] = rows(r.kernels);
  nlohmann::json gaps = nlohmann::json::array();
  for (const IdleGap& g : r.gaps)
    gaps.push_back(
        {{"start_ms", g.start_ms}, {"ms", g.ms}, {"before", g.before}, {"after", g.after}, {"host", g.host}});
  j["idle_gaps"] = gaps;
  return j;
}

}  // namespace primus::profile
