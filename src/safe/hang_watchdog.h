#pragma once
// Hang watchdog: a thread per rank that declares a hang when this rank has made no step progress for the
// hang timeout, names the stuck rank(s), aborts the communicators and ends the process with kExitHang.
//
// Timeout inside a training step: hang_timeout_s when set (> 0); otherwise max(3 x p99 step time, 60 s)
// once steps have been timed, and startup_timeout_s (600 s) before the first step completes (the first
// step's plan building and allocation). Between steps (evaluation, checkpoint saves, start-up) the limit is
// at least startup_timeout_s, since those phases are not step-shaped; entering a step restarts the clock.
//
// Each rank keeps a heartbeat file <dir>/rank-<r>.json (written by the watchdog thread about every second,
// atomically by rename): step completed, current phase, the last collective it entered (group, op, label,
// sequence number; recorded through comm::set_op_observer) and its recent step time. On a hang every rank
// reads all heartbeats and names the ranks that are furthest behind: the smallest (step, collectives
// entered). A rank that stopped before a collective the others are blocked in is behind them; if every rank
// is at the same point, all are named (a communication or device hang: NVLink faults stall kernels without
// an error code). The verdict goes to the log and to <dir>/hang-rank-<r>.json.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "safe/straggler.h"

namespace primus::safe {

// Exit code of a run ended by the hang watchdog (0 ok, 1 runtime, 2 config, 3 preflight, 4 guard halt).
inline constexpr int kExitHang = 5;

struct Heartbeat {
  int rank = 0;
  std::string host;
  int64_t step = 0;             // last completed step
  std::string phase;            // what the rank is doing ("step 12", "evaluation", ...)
  std::string last_collective;  // "group dp, op all_reduce 'grads' (seq 41)"
  uint64_t collectives = 0;     // collectives entered so far
  // Median over recent steps of a rank's own work per step: on the GPU its device compute without the waits
  // for collectives (StepMarks), on the host the time from the step's start to its first collective (the
  // whole step when it has none). A synchronous step's wall time is the same on every rank, so the straggler
  // check compares this instead.
  double window_ms = 0;
  double updated_unix = 0;  // wall clock of the write
  bool missing = false;     // no heartbeat file
};

// Ranks furthest behind (see above); every rank when all are at the same point.
std::vector<int> stuck_ranks(const std::vector<Heartbeat>& beats);
std::string describe_hang(const std::vector<Heartbeat>& beats, const std::vector<int>& stuck);

// Device-side marks of a step, for the straggler measure: a rank's own GPU work in the step, without the time
// its compute waited for collectives. The host reaches its first collective long before its GPU does (steps
// are enqueued ahead), so host times cannot tell a slow GPU; the trainer supplies CUDA events
// (train/step_marks.h). Without marks (CPU runs) the host times up to the first collective are used.
class StepMarks {
 public:
  virtual ~StepMarks() = default;
  virtual void step_start() = 0;        // the step's work begins (host enqueue position)
  virtual void first_collective() = 0;  // the step's first collective is being enqueued
  virtual double own_ms() = 0;          // the step's own device work (train/step_marks.h); NaN: not measured
};

struct WatchdogOptions {
  std::string dir;  // heartbeat directory (shared by the ranks)
  int rank = 0, world = 1;
  std::string host;
  double hang_timeout_s = 0;  // 0: automatic
  double min_timeout_s = 60;
  double p99_factor = 3;
  double startup_timeout_s = 600;
  double poll_s = 0.25;
  // Called on a hang (tests); when unset the watchdog aborts all communicators and _Exit(kExitHang).
  std::function<void(const std::vector<int>& stuck, const std::string& message)> on_hang;
};

class HangWatchdog {
 public:
  explicit HangWatchdog(WatchdogOptions o);
  ~HangWatchdog();
  void start();
  void stop();
  void progress(int64_t step, double step_ms);  // a step completed
  // in_step: the phase is a training step (the step timeout applies; the clock restarts), else a phase
  // between steps (evaluation, checkpointing) with the longer limit.
  void set_phase(const std::string& phase, bool in_step = true);
  void collective(const std::string& description);  // entering a collective
  void set_step_marks(StepMarks* marks);            // not owned; nullptr = host times
  double timeout_s() const;
  std::vector<Heartbeat> read_all() const;
  const StepWindow& window() const { return window_; }

 private:
  void loop();
  void write_beat();

  WatchdogOptions o_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
  Heartbeat beat_;
  bool dirty_ = true;
  StepWindow window_{20};          // step wall times (the timeout)
  StepWindow compute_window_{20};  // own work per step (stragglers): device marks, else host times
  double step_start_ = 0;          // steady seconds
  double first_collective_ = -1;   // steady seconds of the step's first collective, -1 none yet
  double last_progress_ = 0;       // steady seconds
  bool stepped_ = false;
  bool in_step_ = false;
  StepMarks* marks_ = nullptr;
};

// The process's watchdog that comm::set_op_observer feeds (the last one started; null when none).
HangWatchdog* active_watchdog();

}  // namespace primus::safe
