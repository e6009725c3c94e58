#include "train/step_marks.h"

namespace primus {

void CudaStepMarks::step_start() {
  start_ = StreamEvent::record(compute_, /*timed=*/true);
  first_ = nullptr;
}

void CudaStepMarks::first_collective() {
  first_ = StreamEvent::record(compute_, /*timed=*/true);
}

double CudaStepMarks::own_ms() {
  return StreamEvent::elapsed_ms(start_.get(), first_.get());  // NaN unless both were recorded and passed
}

}  // namespace primus
