#include "safe/hang_watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "comm/rank_names.h"
#include "core/log.h"

namespace primus::safe {

namespace {

double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double wall_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::atomic<HangWatchdog*> g_active{nullptr};

void observe_op(const std::string& group, const char* op, std::string_view label, uint64_t seq) {
  if (HangWatchdog* w = g_active.load())
    w->collective(fmt::format("group {}, op {} '{}' (seq {})", group, op, label, seq));
}

std::string beat_path(const std::string& dir, int r) {
  return fmt::format("{}/rank-{}.json", dir, r);
}

}  // namespace

HangWatchdog* active_watchdog() {
  return g_active.load();
}

std::vector<int> stuck_ranks(const std::vector<Heartbeat>& beats) {
  std::vector<int> out;
  bool any_missing = false;
  for (const Heartbeat& b : beats)
    if (b.missing) {
      out.push_back(b.rank);
      any_missing = true;
    }
  if (any_missing) return out;  // a rank that never wrote a heartbeat is the first suspect
  if (beats.empty()) return out;
  auto key = [](const Heartbeat& b) { return std::make_pair(b.step, b.collectives); };
  auto least = key(beats.front());
  for (const Heartbeat& b : beats) least = std::min(least, key(b));
  for (const Heartbeat& b : beats)
    if (key(b) == least) out.push_back(b.rank);
  return out;
}

std::string describe_hang(const std::vector<Heartbeat>& beats, const std::vector<int>& stuck) {
  std::string who;
  for (int r : stuck) who += (who.empty() ? "" : ", ") + std::to_string(r);
  std::string s =
      stuck.size() == beats.size() && beats.size() > 1
          ? fmt::format("every rank ({}) is stuck at the same point (communication or device hang)", who)
          : fmt::format("stuck rank(s): {}", who);
  for (const Heartbeat& b : beats) {
    if (b.missing) {
      s += fmt::format("; {}: no heartbeat", comm::rank_name(b.rank));
      continue;
    }
    s += fmt::format("; {}{}: step {}, {}, last collective {}", comm::rank_name(b.rank),
                     b.host.empty() ? "" : " (" + b.host + ")", b.step, b.phase.empty() ? "-" : b.phase,
                     b.last_collective.empty() ? "none" : b.last_collective);
  }
  return s;
}

HangWatchdog::HangWatchdog(WatchdogOptions o) : o_(std::move(o)) {
  beat_.rank = o_.rank;
  beat_.host = o_.host;
  beat_.phase = "starting";
}

HangWatchdog::~HangWatchdog() {
  stop();
}

void HangWatchdog::start() {
  std::error_code ec;
  std::filesystem::create_directories(o_.dir, ec);
  if (ec) throw Error(ErrorKind::kRuntime, "hang watchdog: cannot create " + o_.dir + ": " + ec.message());
  last_progress_ = steady_s();
  write_beat();
  g_active.store(this);
  comm::set_op_observer(&observe_op);
  thread_ = std::thread([this] { loop(); });
}

void HangWatchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  HangWatchdog* self = this;
  g_active.compare_exchange_strong(self, nullptr);
}

void HangWatchdog::progress(int64_t step, double step_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  beat_.step = step;
  window_.add(step_ms);
  const double device_own = marks_ && first_collective_ >= 0 ? marks_->own_ms() : std::nan("");
  compute_window_.add(std::isfinite(device_own) ? device_own
                      : first_collective_ >= 0  ? (first_collective_ - step_start_) * 1e3
                                                : step_ms);
  first_collective_ = -1;
  beat_.window_ms = compute_window_.median();
  last_progress_ = steady_s();
  stepped_ = true;
  in_step_ = false;
  beat_.phase = fmt::format("after step {}", step);
  dirty_ = true;
}

void HangWatchdog::set_phase(const std::string& phase, bool in_step) {
  std::lock_guard<std::mutex> lock(mu_);
  beat_.phase = phase;
  if (in_step && !in_step_) {
    last_progress_ = step_start_ = steady_s();
    first_collective_ = -1;
    if (marks_) marks_->step_start();
  }
  in_step_ = in_step;
  dirty_ = true;
}

void HangWatchdog::collective(const std::string& description) {
  std::lock_guard<std::mutex> lock(mu_);
  beat_.last_collective = description;
  ++beat_.collectives;
  if (in_step_ && first_collective_ < 0) {
    first_collective_ = steady_s();
    if (marks_) marks_->first_collective();
  }
  dirty_ = true;
}

void HangWatchdog::set_step_marks(StepMarks* marks) {
  std::lock_guard<std::mutex> lock(mu_);
  marks_ = marks;
}

double HangWatchdog::timeout_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  double t = 0;
  if (o_.hang_timeout_s > 0) {
    t = o_.hang_timeout_s;
  } else if (!stepped_) {
    t = std::max(o_.startup_timeout_s, o_.min_timeout_s);
  } else {
    t = std::max(o_.p99_factor * window_.p99() / 1e3, o_.min_timeout_s);
  }
  return in_step_ ? t : std::max(t, o_.startup_timeout_s);
}

void HangWatchdog::write_beat() {
  Heartbeat b;
  {
    std::lock_guard<std::mutex> lock(mu_);
    b = beat_;
    dirty_ = false;
  }
  nlohmann::json j = {{"rank", b.rank},
                      {"host", b.host},
                      {"pid", static_cast<int>(getpid())},
                      {"step", b.step},
                      {"phase", b.phase},
                      {"last_collective", b.last_collective},
                      {"collectives", b.collectives},
                      {"window_ms", b.window_ms},
                      {"updated_unix", wall_s()}};
  const std::string path = beat_path(o_.dir, o_.rank), tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) return;  // best effort: a missing heartbeat is itself reported
    f << j.dump() << '\n';
  }
  std::rename(tmp.c_str(), path.c_str());
}

std::vector<Heartbeat> HangWatchdog::read_all() const {
  std::vector<Heartbeat> out;
  for (int r = 0; r < o_.world; ++r) {
    Heartbeat b;
    b.rank = r;
    std::ifstream f(beat_path(o_.dir, r));
    try {
      if (!f) throw std::runtime_error("missing");
      nlohmann::json j = nlohmann::json::parse(f);
      b.host = j.value("host", "");
      b.step = j.value("step", int64_t{0});
      b.phase = j.value("phase", "");
      b.last_collective = j.value("last_collective", "");
      b.collectives = j.value("collectives", uint64_t{0});
      b.window_ms = j.value("window_ms", 0.0);
      b.updated_unix = j.value("updated_unix", 0.0);
    } catch (const std::exception&) {
      b.missing = true;
    }
    out.push_back(b);
  }
  return out;
}

void HangWatchdog::loop() {
  double last_write = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::duration<double>(o_.poll_s), [&] { return stop_; });
      if (stop_) return;
    }
    const double now = steady_s();
    bool dirty;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dirty = dirty_;
    }
    if (dirty || now - last_write > 1.0) {
      write_beat();
      last_write = now;
    }
    double since;
    {
      std::lock_guard<std::mutex> lock(mu_);
      since = now - last_progress_;
    }
    const double limit = timeout_s();
    if (since < limit) continue;
    // Give the other ranks one more heartbeat period to publish their state, then decide.
    write_beat();
    std::this_thread::sleep_for(std::chrono::duration<double>(std::max(1.2, 2 * o_.poll_s)));
    const std::vector<Heartbeat> beats = read_all();
    const std::vector<int> stuck = stuck_ranks(beats);
    const std::string msg =
        fmt::format("hang watchdog on rank {}: no step progress for {:.1f} s (timeout {:.1f} s); {}", o_.rank,
                    since, limit, describe_hang(beats, stuck));
    nlohmann::json report = {{"rank", o_.rank},
                             {"seconds_without_progress", since},
                             {"timeout_s", limit},
                             {"stuck_ranks", stuck},
                             {"message", msg}};
    std::ofstream(fmt::format("{}/hang-rank-{}.json", o_.dir, o_.rank)) << report.dump(1) << '\n';
    if (o_.on_hang) {
      o_.on_hang(stuck, msg);
      std::lock_guard<std::mutex> lock(mu_);
      last_progress_ = steady_s();  // report once per timeout period in tests
      continue;
    }
    log::error("{}", msg);
    comm::abort_all_communicators("hang watchdog: " + msg);
    log::error("hang watchdog: communicators aborted; exiting with code {}", kExitHang);
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(kExitHang);
  }
}

}  // namespace primus::safe
