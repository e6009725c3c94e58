// GPU activity for traces through CUPTI's activity API, with libcupti loaded by dlopen so that the binary has
// no link dependency on it (the GPU machine may lack the library; the trace then holds CPU ranges only).
#include <cuda_runtime.h>
#include <cupti_activity.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <regex>

#include "core/log.h"
#include "profile/trace.h"

namespace primus::profile {

namespace {

struct CuptiApi {
  void* lib = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*timestamp)(uint64_t*) = nullptr;
};

// Completed buffers land here from CUPTI's thread; the source drains them at stop.
struct Buffers {
  std::mutex mu;
  std::vector<std::pair<uint8_t*, size_t>> done;
};
Buffers& buffers() {
  static Buffers* b = new Buffers();
  return *b;
}

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI on_request(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI on_complete(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(buffers().mu);
  buffers().done.emplace_back(buffer, valid);
}

bool is_comm_kernel(const char* name) {
  return std::strstr(name, "nccl") != nullptr || std::strstr(name, "NCCL") != nullptr;
}

const char* memcpy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "Memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "Memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "Memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "Memcpy PtoP";
    default:
      return "Memcpy";
  }
}

class CuptiSource : public GpuActivitySource {
 public:
  CuptiSource(CuptiApi api, std::string path) : api_(api), path_(std::move(path)) {}

  void start(double host_now_us) override {
    uint64_t ts = 0;
    api_.timestamp(&ts);
    offset_us_ = host_now_us - static_cast<double>(ts) / 1e3;
    if (!registered_) {
      api_.register_callbacks(&on_request, &on_complete);
      registered_ = true;
    }
    api_.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    api_.enable(CUPTI_ACTIVITY_KIND_MEMCPY);
    api_.enable(CUPTI_ACTIVITY_KIND_MEMSET);
    warm_up();
  }

  void stop_and_collect(int rank, std::vector<TraceEvent>& out) override {
    // The trainer returns from a step with its optimizer update still running; a forced flush would then
    // hand over records of unfinished kernels with no timestamps. Wait for the device first.
    const cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess)
      log::warn("profile: waiting for the GPU before collecting the trace failed: {}",
                cudaGetErrorString(err));
    api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    api_.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    api_.disable(CUPTI_ACTIVITY_KIND_MEMCPY);
    api_.disable(CUPTI_ACTIVITY_KIND_MEMSET);
    api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::vector<std::pair<uint8_t*, size_t>> done;
    {
      std::lock_guard<std::mutex> lock(buffers().mu);
      done.swap(buffers().done);
    }
    for (auto [buf, valid] : done) {
      CUpti_Activity* rec = nullptr;
      while (api_.next_record(buf, valid, &rec) == CUPTI_SUCCESS) convert(rank, rec, out);
      std::free(buf);
    }
  }

  std::string describe() const override { return "cupti (" + path_ + ")"; }

 private:
  void convert(int rank, const CUpti_Activity* rec, std::vector<TraceEvent>& out) const {
    auto host = [&](uint64_t ns) { return static_cast<double>(ns) / 1e3 + offset_us_; };
    // An activity that had not finished when collected carries zero timestamps: not an interval, skip it.
    // Records that began before the window opened are the warm-up's or the previous step's.
    auto outside_window = [&](uint64_t start, uint64_t end) {
      return start == 0 || end < start || start < window_start_ns_;
    };
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      if (outside_window(k->start, k->end)) return;
      const char* name = k->name ? k->name : "kernel";
      const bool comm = is_comm_kernel(name);
      TraceEvent e{name,
                   "kernel",
                   'X',
                   host(k->start),
                   static_cast<double>(k->end - k->start) / 1e3,
                   rank,
                   comm ? kTidComm : kTidStream0 + static_cast<int>(k->streamId),
                   nullptr};
      e.args = {{"stream", k->streamId},
                {"device", k->deviceId},
                {"correlation", k->correlationId},
                {"grid", {k->gridX, k->gridY, k->gridZ}},
                {"block", {k->blockX, k->blockY, k->blockZ}}};
      out.push_back(std::move(e));
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      if (outside_window(m->start, m->end)) return;
      TraceEvent e{memcpy_kind(m->copyKind),
                   "gpu_memcpy",
                   'X',
                   host(m->start),
                   static_cast<double>(m->end - m->start) / 1e3,
                   rank,
                   kTidMemcpy,
                   nullptr};
      e.args = {{"stream", m->streamId}, {"bytes", m->bytes}};
      out.push_back(std::move(e));
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      if (outside_window(m->start, m->end)) return;
      TraceEvent e{
          "Memset", "gpu_memset", 'X',    host(m->start), static_cast<double>(m->end - m->start) / 1e3,
          rank,     kTidMemcpy,   nullptr};
      e.args = {{"stream", m->streamId}, {"bytes", m->bytes}};
      out.push_back(std::move(e));
    }
  }

  // The first recorded operations after enabling stall the host for a few ms (measured 3.6-5.0 ms after the
  // first memset of a traced step, H100 and H200), which showed up as GPU idle time inside the traced steps.
  // A memset and a copy on a private stream take that stall before the window opens; records that start
  // before the window -- these, and the previous step's tail still running -- are dropped in convert().
  void warm_up() {
    if (!scratch_) {
      if (cudaStreamCreateWithFlags(&warm_stream_, cudaStreamNonBlocking) != cudaSuccess ||
          cudaMalloc(&scratch_, 256) != cudaSuccess) {
        log::warn("profile: no warm-up for CUPTI ({}); the first traced step may show a start-up gap",
                  cudaGetErrorString(cudaGetLastError()));
        scratch_ = nullptr;
        return;
      }
    }
    auto* bytes = static_cast<char*>(scratch_);
    const bool ok =
        cudaMemsetAsync(scratch_, 0, 256, warm_stream_) == cudaSuccess &&
        cudaMemcpyAsync(bytes + 128, bytes, 64, cudaMemcpyDeviceToDevice, warm_stream_) == cudaSuccess &&
        cudaStreamSynchronize(warm_stream_) == cudaSuccess;
    if (!ok) log::warn("profile: CUPTI warm-up failed: {}", cudaGetErrorString(cudaGetLastError()));
    uint64_t ts = 0;
    api_.timestamp(&ts);
    window_start_ns_ = ts;
  }

  CuptiApi api_;
  std::string path_;
  double offset_us_ = 0;
  bool registered_ = false;
  void* scratch_ = nullptr;  // kept for the process: freeing device memory would synchronize the device
  cudaStream_t warm_stream_ = nullptr;
  uint64_t window_start_ns_ = 0;
};

}  // namespace

std::unique_ptr<GpuActivitySource> make_cupti_source(std::string& why) {
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("PRIMUS_CUPTI_LIB"); p && *p) candidates.emplace_back(p);
  for (const char* c :
       {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/lib64/libcupti.so.13",
        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13", "/usr/local/cuda/lib64/libcupti.so"})
    candidates.emplace_back(c);
  CuptiApi api;
  std::string path;
  for (const std::string& c : candidates) {
    api.lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (api.lib) {
      path = c;
      break;
    }
  }
  if (!api.lib) {
    why = "libcupti.so.13 not found (set PRIMUS_CUPTI_LIB)";
    return nullptr;
  }
  auto sym = [&](const char* n) { return dlsym(api.lib, n); };
  api.enable = reinterpret_cast<decltype(api.enable)>(sym("cuptiActivityEnable"));
  api.disable = reinterpret_cast<decltype(api.disable)>(sym("cuptiActivityDisable"));
  api.register_callbacks =
      reinterpret_cast<decltype(api.register_callbacks)>(sym("cuptiActivityRegisterCallbacks"));
  api.flush_all = reinterpret_cast<decltype(api.flush_all)>(sym("cuptiActivityFlushAll"));
  api.next_record = reinterpret_cast<decltype(api.next_record)>(sym("cuptiActivityGetNextRecord"));
  api.timestamp = reinterpret_cast<decltype(api.timestamp)>(sym("cuptiGetTimestamp"));
  if (!api.enable || !api.disable || !api.register_callbacks || !api.flush_all || !api.next_record ||
      !api.timestamp) {
    why = path + " lacks the activity API symbols";
    return nullptr;
  }
  return std::make_unique<CuptiSource>(api, path);
}

}  // namespace primus::profile
