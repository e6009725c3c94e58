#pragma once
// Chrome / Perfetto traces (reference.md §1.6): one JSON file per rank, pid = global rank, one track (tid)
// per role: the CPU thread (named ranges), each GPU stream's kernels, communication kernels (NCCL) on their
// own track, and memory copies/sets. GPU activity comes from CUPTI's activity API (libcupti loaded with
// dlopen; PRIMUS_CUPTI_LIB names the library when it is not on the loader path), mapped onto the host clock
// through one sync point at start. Without CUPTI (a CPU build, or no libcupti) a trace holds the CPU ranges
// only and says why in otherData.gpu_source.
//
//   profile::Tracer& t = profile::Tracer::get();
//   t.configure(rank, "rank 0 (host:gpu0)");
//   t.start();                                  // profile_step_start
//   { PRIMUS_TRACE_RANGE("forward_backward"); ... }
//   t.stop(); t.write("trace/rank0.json");      // profile_step_end
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace primus::profile {

// Track ids (tid) inside a rank's process.
inline constexpr int kTidCpu = 0;
inline constexpr int kTidComm = 1;      // NCCL kernels, whatever their stream
inline constexpr int kTidMemcpy = 2;    // memcpy / memset
inline constexpr int kTidStream0 = 10;  // compute kernels: kTidStream0 + CUDA stream id

struct TraceEvent {
  std::string name;
  std::string cat;  // "cpu_op" | "step" | "kernel" | "gpu_memcpy" | "gpu_memset" | "counter"
  char ph = 'X';
  double ts_us = 0, dur_us = 0;
  int pid = 0, tid = 0;
  nlohmann::json args;  // null when none
};

// Where GPU activity comes from; implemented with CUPTI in CUDA builds (cupti_source_cuda.cpp).
class GpuActivitySource {
 public:
  virtual ~GpuActivitySource() = default;
  virtual void start(double host_now_us) = 0;
  // Stops collecting and appends every record, on the host clock, to `out` (pid = rank).
  virtual void stop_and_collect(int rank, std::vector<TraceEvent>& out) = 0;
  virtual std::string describe() const = 0;
};
// The CUPTI source, or nullptr with `why` set (CPU build, no libcupti, CUPTI refused).
std::unique_ptr<GpuActivitySource> make_cupti_source(std::string& why);

class Tracer {
 public:
  static Tracer& get();
  // Process label shown by Perfetto, e.g. "rank 3 (node7:gpu3)".
  void configure(int rank, const std::string& label, bool gpu);
  bool recording() const { return recording_.load(std::memory_order_relaxed); }
  void start();
  void stop();  // collects the GPU records
  void add(TraceEvent e);
  void counter(const std::string& name, const nlohmann::json& series);  // ph C at now
  void instant(const std::string& name, const nlohmann::json& args = {});
  // Host clock in microseconds (steady clock).
  static double now_us();
  // The trace as Chrome JSON ({"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}).
  nlohmann::json to_json() const;
  void write(const std::string& path) const;  // creates parent directories
  void clear();
  std::string gpu_source() const { return gpu_source_; }
  int rank() const { return rank_; }

 private:
  Tracer() = default;
  mutable std::mutex mu_;
  std::vector<TraceEvent> events_;
  int rank_ = 0;
  std::string label_ = "rank 0";
  bool gpu_ = false;
  std::atomic<bool> recording_{false};
  std::unique_ptr<GpuActivitySource> source_;
  std::string gpu_source_ = "none";
};

// A CPU range on the calling thread's track, recorded only while the tracer records.
class Range {
 public:
  explicit Range(const char* name, const char* cat = "cpu_op");
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  const char* name_;
  const char* cat_;
  double start_ = -1;
};

}  // namespace primus::profile

#define PRIMUS_TRACE_CONCAT2(a, b) a##b
#define PRIMUS_TRACE_CONCAT(a, b) PRIMUS_TRACE_CONCAT2(a, b)
#define PRIMUS_TRACE_RANGE(name) \
  ::primus::profile::Range PRIMUS_TRACE_CONCAT(primus_trace_range_, __LINE__)(name)
