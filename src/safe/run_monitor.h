#pragma once
// What the trainer calls for insight and stability (docs/stability.md), behind one object so that the
// training loop needs only a few calls:
//   step_begin(iter)       starts the trace at profile_step_start; a CPU range per step while tracing
//   step_end(iter, ms)     heartbeat for the hang watchdog; straggler check every straggler_interval steps
//                          (rank 0, from the ranks' heartbeats); stops the trace after profile_step_end,
//                          writes trace/rank<r>.json and prints the GPU timeline and op summary
//   event(iter, kind, ..)  a guard event (nan_skip, nan_halt, loss_spike, slow_step, straggler, hang) into
//                          <run_dir>/events.jsonl, the log and the trace
// Slow steps: a step >= 3 x the median of the recent window (after 5 steps) is an event.
// Test hook: PRIMUS_INJECT_STALL="<rank>:<iteration>" makes that rank stop (sleep) at the start of the
// iteration, for the watchdog tests.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "config/train_config.h"
#include "core/device.h"
#include "safe/hang_watchdog.h"
#include "safe/straggler.h"

namespace primus::safe {

struct MonitorContext {
  std::string run_dir;
  int rank = 0, world = 1;
  std::string host;
  bool gpu = false;
  int gpu_index = 0;
};

// Rank and world from the launch environment (torchrun, mpirun, Slurm, primus launch), the host name, and the
// device of `stream`.
MonitorContext monitor_context(const std::string& run_dir, const Stream& stream);

class RunMonitor {
 public:
  RunMonitor(const StabilityConfig& cfg, MonitorContext ctx);
  ~RunMonitor();
  void step_begin(int64_t iter);
  void step_end(int64_t iter, double ms);
  // Device marks for the straggler measure (see HangWatchdog); nothing without a watchdog (one process).
  void set_step_marks(StepMarks* marks);
  void set_phase(const std::string& phase, bool in_step = false);  // a phase between steps by default
  void event(int64_t iter, const std::string& kind, const std::string& detail, double value = 0);
  // Ends the trace early (the run stops inside the profiled window).
  void finish();
  std::string trace_path() const;

 private:
  void stop_trace();
  void check_stragglers(int64_t iter);

  StabilityConfig cfg_;
  MonitorContext ctx_;
  bool trace_rank_ = false;
  bool tracing_ = false;
  bool traced_ = false;
  double step_start_us_ = 0;
  std::unique_ptr<HangWatchdog> watchdog_;
  StepWindow window_{20};
  int64_t stall_rank_ = -1, stall_iter_ = -1;
  std::FILE* events_ = nullptr;
};

}  // namespace primus::safe
