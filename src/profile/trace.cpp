#include "profile/trace.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/log.h"

namespace primus::profile {

#ifndef PRIMUS_WITH_CUDA
std::unique_ptr<GpuActivitySource> make_cupti_source(std::string& why) {
  why = "CPU build (no CUDA)";
  return nullptr;
}
#endif

Tracer& Tracer::get() {
  static Tracer* t = new Tracer();  // never destroyed: ranges may close during static destruction
  return *t;
}

double Tracer::now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Tracer::configure(int rank, const std::string& label, bool gpu) {
  std::lock_guard<std::mutex> lock(mu_);
  rank_ = rank;
  label_ = label;
  gpu_ = gpu;
}

namespace {

// The "device memory" counter: at most two samples per interval (the level a quiet spell starts from, then
// the new one) plus every new peak, so a long profile of a step with thousands of allocations stays small.
constexpr double kMemorySampleIntervalUs = 20;

struct MemorySampler {
  std::mutex mu;
  double sampled_us = -1e300;
  bool pending = false;  // a level not written yet: the latest inside the current interval
  double pending_us = 0;
  size_t pending_bytes = 0;
};
MemorySampler& memory_sampler() {
  static MemorySampler m;
  return m;
}

TraceEvent memory_sample(double ts_us, size_t bytes) {
  return {.name = "device memory",
          .cat = "counter",
          .ph = 'C',
          .ts_us = ts_us,
          .tid = kTidCpu,
          .args = {{"allocated_gb", static_cast<double>(bytes) / 1e9}}};
}

void observe_memory(size_t bytes, bool new_peak) {
  Tracer& t = Tracer::get();
  if (!t.recording()) return;
  const double now = Tracer::now_us();
  std::vector<TraceEvent> out;
  {
    MemorySampler& m = memory_sampler();
    std::lock_guard<std::mutex> lock(m.mu);
    if (!new_peak && now - m.sampled_us < kMemorySampleIntervalUs) {
      m.pending = true;
      m.pending_us = now;
      m.pending_bytes = bytes;
      return;
    }
    if (m.pending) out.push_back(memory_sample(m.pending_us, m.pending_bytes));
    out.push_back(memory_sample(now, bytes));
    m.pending = false;
    m.sampled_us = now;
  }
  for (TraceEvent& e : out) t.add(std::move(e));
}

}  // namespace

void Tracer::start() {
  if (recording_) return;
  {
    MemorySampler& m = memory_sampler();  // a level from before this window does not belong in it
    std::lock_guard<std::mutex> lock(m.mu);
    m.pending = false;
    m.sampled_us = -1e300;
  }
  set_memory_observer(&observe_memory);
  if (gpu_ && !source_) {
    std::string why;
    source_ = make_cupti_source(why);
    gpu_source_ = source_ ? source_->describe() : "none: " + why;
    if (!source_) log::warn("profile: no GPU kernels in the trace ({}); CPU ranges only", why);
  } else if (!gpu_) {
    gpu_source_ = "none: the run is on the CPU";
  }
  if (source_) source_->start(now_us());
  recording_ = true;
}

void Tracer::stop() {
  if (!recording_) return;
  recording_ = false;
  set_memory_observer(nullptr);
  if (source_) {
    std::vector<TraceEvent> gpu;
    source_->stop_and_collect(rank_, gpu);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : gpu) events_.push_back(std::move(e));
  }
}

void Tracer::add(TraceEvent e) {
  std::lock_guard<std::mutex> lock(mu_);
  e.pid = rank_;
  events_.push_back(std::move(e));
}

void Tracer::counter(const std::string& name, const nlohmann::json& series) {
  if (!recording_) return;
  add(TraceEvent{name, "counter", 'C', now_us(), 0, 0, kTidCpu, series});
}

void Tracer::instant(const std::string& name, const nlohmann::json& args) {
  if (!recording_) return;
  add(TraceEvent{name, "instant", 'i', now_us(), 0, 0, kTidCpu, args});
}

void Tracer::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  events_.clear();
}

namespace {

std::string track_name(int tid) {
  if (tid == kTidCpu) return "cpu";
  if (tid == kTidComm) return "gpu comm (nccl)";
  if (tid == kTidMemcpy) return "gpu memcpy/memset";
  return fmt::format("gpu stream {}", tid - kTidStream0);
}

}  // namespace

nlohmann::json Tracer::to_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json evs = nlohmann::json::array();
  std::set<int> tids;
  double t0 = 0;
  bool have_t0 = false;
  for (const TraceEvent& e : events_) {
    if (!have_t0 || e.ts_us < t0) t0 = e.ts_us;
    have_t0 = true;
  }
  evs.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 0}, {"args", {{"name", label_}}}});
  evs.push_back({{"name", "process_sort_index"},
                 {"ph", "M"},
                 {"pid", rank_},
                 {"tid", 0},
                 {"args", {{"sort_index", rank_}}}});
  for (const TraceEvent& e : events_) {
    nlohmann::json j = {{"name", e.name}, {"cat", e.cat}, {"ph", std::string(1, e.ph)},
                        {"pid", e.pid},   {"tid", e.tid}, {"ts", e.ts_us - t0}};
    if (e.ph == 'X') j["dur"] = e.dur_us;
    if (e.ph == 'i') j["s"] = "t";
    if (!e.args.is_null()) j["args"] = e.args;
    evs.push_back(std::move(j));
    tids.insert(e.tid);
  }
  tids.insert(kTidCpu);
  for (int tid : tids) {
    evs.push_back({{"name", "thread_name"},
                   {"ph", "M"},
                   {"pid", rank_},
                   {"tid", tid},
                   {"args", {{"name", track_name(tid)}}}});
    evs.push_back({{"name", "thread_sort_index"},
                   {"ph", "M"},
                   {"pid", rank_},
                   {"tid", tid},
                   {"args", {{"sort_index", tid}}}});
  }
  nlohmann::json out;
  out["traceEvents"] = std::move(evs);
  out["displayTimeUnit"] = "ms";
  out["otherData"] = {{"producer", std::string("primus ") + PRIMUS_VERSION},
                      {"rank", rank_},
                      {"gpu_source", gpu_source_},
                      {"host_clock_origin_us", t0}};
  return out;
}

void Tracer::write(const std::string& path) const {
  std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::ofstream f(path);
  if (!f) throw Error(ErrorKind::kRuntime, "profile: cannot write trace " + path);
  f << to_json().dump() << '\n';
  if (!f) throw Error(ErrorKind::kRuntime, "profile: writing trace " + path + " failed");
}

Range::Range(const char* name, const char* cat) : name_(name), cat_(cat) {
  if (Tracer::get().recording()) start_ = Tracer::now_us();
}

Range::~Range() {
  if (start_ < 0 || !Tracer::get().recording()) return;
  const double end = Tracer::now_us();
  Tracer::get().add(TraceEvent{name_, cat_, 'X', start_, end - start_, 0, kTidCpu, nullptr});
}

}  // namespace primus::profile
