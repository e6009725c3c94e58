#include "core/stream_events.h"

#include <limits>

#include "core/error.h"

#ifdef PRIMUS_WITH_CUDA
#include "core/cuda_check.h"
#endif

namespace primus {

StreamEvent::~StreamEvent() {
#ifdef PRIMUS_WITH_CUDA
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
#endif
}

std::shared_ptr<StreamEvent> StreamEvent::record(const Stream& s, bool timed) {
  if (!s.device.is_cuda()) return nullptr;
#ifdef PRIMUS_WITH_CUDA
  std::shared_ptr<StreamEvent> e(new StreamEvent());
  cudaEvent_t ev;
  PRIMUS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, timed ? cudaEventDefault : cudaEventDisableTiming));
  e->event_ = ev;
  PRIMUS_CUDA_CHECK(cudaEventRecord(ev, cuda_stream(s)));
  return e;
#else
  throw Error(ErrorKind::kRuntime, "CUDA stream event in a build without CUDA");
#endif
}

void StreamEvent::wait_on(const Stream& s) const {
#ifdef PRIMUS_WITH_CUDA
  if (event_ && s.device.is_cuda())
    PRIMUS_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(s), static_cast<cudaEvent_t>(event_), 0));
#else
  (void)s;
#endif
}

double StreamEvent::elapsed_ms(const StreamEvent* from, const StreamEvent* to) {
  if (!from || !to || !from->event_ || !to->event_ || !from->done() || !to->done())
    return std::numeric_limits<double>::quiet_NaN();
#ifdef PRIMUS_WITH_CUDA
  float ms = 0;
  PRIMUS_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from->event_),
                                         static_cast<cudaEvent_t>(to->event_)));
  return ms;
#else
  return std::numeric_limits<double>::quiet_NaN();
#endif
}

bool StreamEvent::done() const {
#ifdef PRIMUS_WITH_CUDA
  return !event_ || cudaEventQuery(static_cast<cudaEvent_t>(event_)) == cudaSuccess;
#else
  return true;
#endif
}

namespace {
// A non-blocking stream on compute's device at the highest (or lowest) priority the device offers; it lives
// as long as the process (one or two per trainer). The CPU stream on the CPU.
Stream make_stream_at_priority(const Stream& compute, bool highest) {
  if (!compute.device.is_cuda()) return compute;
#ifdef PRIMUS_WITH_CUDA
  PRIMUS_CUDA_CHECK(cudaSetDevice(compute.device.index));
  int least = 0, greatest = 0;
  PRIMUS_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t st;
  PRIMUS_CUDA_CHECK(cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking, highest ? greatest : least));
  return Stream{compute.device, st};
#else
  (void)highest;
  throw Error(ErrorKind::kRuntime, "CUDA stream in a build without CUDA");
#endif
}
}  // namespace

Stream make_comm_stream(const Stream& compute) {
  // The highest priority, so that a gradient bucket's NCCL kernel is scheduled ahead of queued backward GEMM
  // blocks. Measured on 2 H200s (docs/performance.md, 04:28Z): within run-to-run noise (+0.5% on the 1B
  // shape); kept because a late bucket can only delay the step.
  return make_stream_at_priority(compute, /*highest=*/true);
}

Stream make_background_stream(const Stream& compute) {
  return make_stream_at_priority(compute, /*highest=*/false);
}

}  // namespace primus
