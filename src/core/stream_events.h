#pragma once
// Streams beside the compute stream (data parallelism's communication, the overlapped update, the MoE token
// exchange) and events that order one after the other. On the CPU (host communicators run synchronously)
// every call is a no-op.
#include <memory>

#include "core/device.h"

namespace primus {

// A recorded point on a stream (CUDA event); null on the CPU.
class StreamEvent {
 public:
  ~StreamEvent();
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;
  // Records an event on `s` (nullptr on the CPU). A timed event can be measured with elapsed_ms.
  static std::shared_ptr<StreamEvent> record(const Stream& s, bool timed = false);
  // Milliseconds from `from` to `to` (both timed and complete; negative when `to` came first). NaN when
  // either is null or not complete yet.
  static double elapsed_ms(const StreamEvent* from, const StreamEvent* to);
  // Makes `s` wait for the event (nothing on the host).
  void wait_on(const Stream& s) const;
  bool done() const;

 private:
  StreamEvent() = default;
  void* event_ = nullptr;
};

// `s` waits for `e` (no-op when e is null).
inline void stream_wait(const Stream& s, const std::shared_ptr<StreamEvent>& e) {
  if (e) e->wait_on(s);
}

// A new non-blocking stream on the compute stream's device (the CPU stream on the CPU).
Stream make_comm_stream(const Stream& compute);
// A new non-blocking stream at the lowest priority (below the compute stream's): its blocks take only SMs
// that the compute stream leaves free (the CPU stream on the CPU).
Stream make_background_stream(const Stream& compute);

}  // namespace primus
