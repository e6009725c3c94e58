#pragma once
// GPU timeline analysis as TraceLens reports it (reference.md §4.11), for our traces and torch.profiler's.
//
// GPU events are the trace's "X" events of category kernel, gpu_memcpy or gpu_memset (the names
// torch.profiler uses too). Kernels whose names contain "nccl" are communication; memcpy events are memcpy;
// every other kernel and every memset is computation. With U = interval union:
//   computation = |U compute|, exposed comm = |U comm - U compute|,
//   exposed memcpy = |U memcpy - U compute - U comm|, busy = |U all|, total = last end - first start,
//   idle = total - busy; so computation + exposed comm + exposed memcpy + idle = total.
// A trace without GPU events (a CPU run) is analysed on its CPU ranges of category cpu_op instead, and says
// so. The op summary groups GPU events by op family (gemm, attention, norm, ...; op_family()) with count,
// total ms (sum of durations), percent of the summed time and cumulative percent, largest first.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace primus::profile {

struct Interval {
  double begin = 0, end = 0;
};
// Sorted, disjoint union.
std::vector<Interval> interval_union(std::vector<Interval> v);
double interval_length(const std::vector<Interval>& merged);
// a - b, both merged.
std::vector<Interval> interval_subtract(const std::vector<Interval>& a, const std::vector<Interval>& b);

struct GpuEvent {
  std::string name;
  std::string cat;  // kernel | gpu_memcpy | gpu_memset | cpu_op
  double ts_us = 0, dur_us = 0;
  int pid = 0;
};

enum class EventClass { kCompute, kComm, kMemcpy };
EventClass classify(const GpuEvent& e);
// Op family of a kernel name: gemm, attention, norm, rope, swiglu, loss, optimizer, embedding, elementwise,
// reduce, nccl, memcpy, memset, other (and the range name itself for CPU ranges).
std::string op_family(const GpuEvent& e);

struct TimelineBreakdown {
  double total_ms = 0, computation_ms = 0, comm_ms = 0, exposed_comm_ms = 0, memcpy_ms = 0,
         exposed_memcpy_ms = 0, busy_ms = 0, idle_ms = 0;
  double pct(double v) const { return total_ms > 0 ? 100.0 * v / total_ms : 0; }
};
TimelineBreakdown analyse_timeline(const std::vector<GpuEvent>& events);
// The rows of the timeline table, in TraceLens's order (name, ms), for every printed or rendered form.
std::vector<std::pair<std::string, double>> timeline_rows(const TimelineBreakdown& t);

// Where the GPU waits: the longest stretches with no GPU event, each with the GPU events on either side and
// the CPU ranges (cat cpu_op, e.g. our "optimizer", "data") that overlap it -- what the host was doing.
struct IdleGap {
  double start_ms = 0;  // from the first GPU event
  double ms = 0;
  std::string before, after;      // names of the GPU events ending / starting at the gap's edges
  std::vector<std::string> host;  // CPU ranges overlapping the gap, outermost first
};
std::vector<IdleGap> idle_gaps(const std::vector<GpuEvent>& gpu, const std::vector<GpuEvent>& cpu,
                               size_t top);

struct OpRow {
  std::string family;
  int64_t count = 0;
  double total_ms = 0, pct = 0, cum_pct = 0;
};
std::vector<OpRow> op_summary(const std::vector<GpuEvent>& events);
// The same by kernel name, the `top` largest.
std::vector<OpRow> kernel_summary(const std::vector<GpuEvent>& events, size_t top);

struct TimelineReport {
  std::string source;  // file or rank label
  std::string basis;   // "GPU events" | "CPU ranges (no GPU events in the trace)"
  int pid = 0;
  size_t events = 0;
  // The trainer's step ranges (cat "step") in the trace for this pid: with them the report states what one
  // step costs -- GPU launches (kernels, memsets, copies), busy and idle time -- the small-model regime's
  // numbers (issue #24). 0 for a trace without them (torch.profiler's).
  int steps = 0;
  double per_step(double v) const { return steps > 0 ? v / steps : 0; }
  TimelineBreakdown timeline;
  std::vector<OpRow> ops;
  std::vector<OpRow> kernels;
  std::vector<IdleGap> gaps;  // the 5 longest (GPU basis only)
};
// The GPU events of a Chrome trace (object with traceEvents, or a bare array), per pid; CPU ranges when the
// trace has no GPU events. Throws primus::Error naming `what` for malformed JSON.
std::map<int, std::vector<GpuEvent>> extract_events(
    const nlohmann::json& trace, const std::string& what, bool* cpu_fallback,
    std::map<int, std::vector<GpuEvent>>* cpu_ranges = nullptr);
std::vector<TimelineReport> analyse_trace(const nlohmann::json& trace, const std::string& what);
// The parsed file; throws primus::Error naming it when it cannot be opened or is not JSON.
nlohmann::json read_trace_file(const std::string& path);
std::vector<TimelineReport> analyse_trace_file(const std::string& path);

// Plain-text tables (for the console) and Markdown.
// "Per step (2 steps in the trace): 614 GPU launches, 36.2 ms, busy ... idle ..." (needs r.steps > 0).
std::string per_step_line(const TimelineReport& r);
std::string format_timeline_text(const TimelineReport& r);
std::string format_timeline_markdown(const TimelineReport& r);
nlohmann::json timeline_to_json(const TimelineReport& r);

}  // namespace primus::profile
