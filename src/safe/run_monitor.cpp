#include "safe/run_monitor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

#include "comm/bootstrap.h"
#include "core/error.h"
#include "core/log.h"
#include "profile/timeline.h"
#include "profile/trace.h"

namespace primus::safe {

MonitorContext monitor_context(const std::string& run_dir, const Stream& stream) {
  MonitorContext c;
  c.run_dir = run_dir;
  const comm::LaunchEnv env = comm::resolve_launch_env(comm::process_env_lookup());
  c.rank = env.rank;
  c.world = env.world_size;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  c.host = host;
  c.gpu = stream.device.is_cuda();
  c.gpu_index = stream.device.index;
  return c;
}

RunMonitor::RunMonitor(const StabilityConfig& cfg, MonitorContext ctx) : cfg_(cfg), ctx_(std::move(ctx)) {
  trace_rank_ = cfg_.profile && std::find(cfg_.profile_ranks.begin(), cfg_.profile_ranks.end(),
                                          static_cast<int64_t>(ctx_.rank)) != cfg_.profile_ranks.end();
  if (trace_rank_) {
    profile::Tracer::get().configure(ctx_.rank,
                                     fmt::format("rank {} ({}:{})", ctx_.rank, ctx_.host,
                                                 ctx_.gpu ? fmt::format("gpu{}", ctx_.gpu_index) : "cpu"),
                                     ctx_.gpu);
    log::info("profile: iterations {}..{} traced to {}", cfg_.profile_step_start, cfg_.profile_step_end,
              trace_path());
  }
  events_ = std::fopen((ctx_.run_dir + "/events.jsonl").c_str(), "a");
  if (const char* s = std::getenv("PRIMUS_INJECT_STALL"); s && *s) {
    if (std::sscanf(s, "%ld:%ld", &stall_rank_, &stall_iter_) != 2)
      throw ConfigError(
          fmt::format("environment: PRIMUS_INJECT_STALL='{}' (expected <rank>:<iteration>)", s));
  }
  if (cfg_.hang_timeout_s >= 0) {
    WatchdogOptions o;
    o.dir = ctx_.run_dir + "/heartbeat";
    o.rank = ctx_.rank;
    o.world = ctx_.world;
    o.host = ctx_.host;
    o.hang_timeout_s = cfg_.hang_timeout_s;
    watchdog_ = std::make_unique<HangWatchdog>(o);
    watchdog_->start();
  }
}

RunMonitor::~RunMonitor() {
  try {
    finish();
  } catch (const std::exception& e) {
    log::warn("profile: {}", e.what());
  }
  if (watchdog_) watchdog_->stop();
  if (events_) std::fclose(events_);
}

std::string RunMonitor::trace_path() const {
  return fmt::format("{}/trace/rank{}.json", ctx_.run_dir, ctx_.rank);
}

void RunMonitor::set_step_marks(StepMarks* marks) {
  if (watchdog_) watchdog_->set_step_marks(marks);
}

void RunMonitor::set_phase(const std::string& phase, bool in_step) {
  if (watchdog_) watchdog_->set_phase(phase, in_step);
}

void RunMonitor::step_begin(int64_t iter) {
  if (trace_rank_ && !traced_ && !tracing_ && iter >= cfg_.profile_step_start &&
      iter <= cfg_.profile_step_end) {
    profile::Tracer::get().clear();
    profile::Tracer::get().start();
    tracing_ = true;
  }
  step_start_us_ = profile::Tracer::now_us();
  set_phase(fmt::format("step {}", iter), /*in_step=*/true);
  if (stall_rank_ == ctx_.rank && stall_iter_ == iter) {
    log::error("PRIMUS_INJECT_STALL: rank {} stops at iteration {} (test hook)", ctx_.rank, iter);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

void RunMonitor::step_end(int64_t iter, double ms) {
  if (tracing_) {
    const double now = profile::Tracer::now_us();
    profile::Tracer::get().add({fmt::format("iteration {}", iter),
                                "step",
                                'X',
                                step_start_us_,
                                now - step_start_us_,
                                0,
                                profile::kTidCpu,
                                {{"iter_ms", ms}}});
    if (iter >= cfg_.profile_step_end) stop_trace();
  }
  if (watchdog_) watchdog_->progress(iter, ms);
  const double med = window_.median();
  if (window_.count() >= 5 && med > 0 && ms >= 3 * med)
    event(iter, "slow_step", fmt::format("{:.0f} ms, {:.1f}x the recent median {:.0f} ms", ms, ms / med, med),
          ms);
  window_.add(ms);
  if (ctx_.world > 1 && ctx_.rank == 0 && cfg_.straggler_interval > 0 && iter % cfg_.straggler_interval == 0)
    check_stragglers(iter);
}

void RunMonitor::check_stragglers(int64_t iter) {
  if (!watchdog_) return;
  std::vector<double> per_rank;
  for (const Heartbeat& b : watchdog_->read_all()) per_rank.push_back(b.missing ? 0 : b.window_ms);
  for (const StragglerFinding& f : find_stragglers(per_rank, cfg_.straggler_factor))
    event(
        iter, "straggler",
        fmt::format(
            "rank {}: {:.1f} ms of own work per step (its compute, not its waits for collectives) vs median "
            "{:.1f} ms (score {:.2f})",
            f.rank, f.step_ms, f.median_ms, f.score),
        f.score);
}

void RunMonitor::event(int64_t iter, const std::string& kind, const std::string& detail, double value) {
  const std::string line = fmt::format("{} at iteration {} on rank {}: {}", kind, iter, ctx_.rank, detail);
  if (kind != "nan_skip" && kind != "nan_halt" && kind != "loss_spike")
    log::warn("{}", line);  // guards log their own
  if (events_) {
    nlohmann::json j = {
        {"step", iter},
        {"kind", kind},
        {"rank", ctx_.rank},
        {"detail", detail},
        {"value", value},
        {"unix_time",
         std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()}};
    std::fputs((j.dump() + "\n").c_str(), events_);
    std::fflush(events_);
  }
  profile::Tracer::get().instant(kind, {{"detail", detail}});
}

void RunMonitor::finish() {
  if (tracing_) stop_trace();
}

void RunMonitor::stop_trace() {
  profile::Tracer& t = profile::Tracer::get();
  t.stop();
  tracing_ = false;
  traced_ = true;
  const std::string path = trace_path();
  t.write(path);
  log::info("profile: wrote {} (GPU source: {}); open it in https://ui.perfetto.dev", path, t.gpu_source());
  const nlohmann::json trace = t.to_json();
  t.clear();
  for (const profile::TimelineReport& r : profile::analyse_trace(trace, path))
    log::info("\n{}", profile::format_timeline_text(r));
}

}  // namespace primus::safe
