#include "train/step_marks.h"

#include <cmath>

namespace primus {

void CudaStepMarks::step_start() {
  start_ = StreamEvent::record(compute_, /*timed=*/true);
  first_ = nullptr;
  waits_.clear();
}

void CudaStepMarks::first_collective() {
  first_ = StreamEvent::record(compute_, /*timed=*/true);
}

void CudaStepMarks::wait(const std::shared_ptr<StreamEvent>& e) {
  auto before = StreamEvent::record(compute_, /*timed=*/true);
  stream_wait(compute_, e);
  waits_.emplace_back(std::move(before), StreamEvent::record(compute_, /*timed=*/true));
}

double CudaStepMarks::own_ms() {
  // elapsed_ms is NaN for an event not recorded or not yet passed on the device.
  double span = std::nan(""), waited = 0, waited_before = 0;
  for (const auto& [before, after] : waits_) {
    const double to_wait = StreamEvent::elapsed_ms(start_.get(), before.get());
    if (!std::isfinite(to_wait)) break;  // this wait (and every later one) has not begun yet
    span = to_wait;
    waited_before = waited;
    const double w = StreamEvent::elapsed_ms(before.get(), after.get());
    if (!std::isfinite(w)) break;
    waited += w;
  }
  if (std::isfinite(span)) return span - waited_before;
  return StreamEvent::elapsed_ms(start_.get(), first_.get());  // NaN unless both were recorded and passed
}

}  // namespace primus
