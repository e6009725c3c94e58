#pragma once
// CUDA events on the compute stream for the straggler measure (safe::StepMarks): the device time from where a
// step's work begins to where its first collective is enqueued -- the rank's own GPU work before it can wait
// for peers. Read at the step's end, after the gradient-norm read has passed both events.
#include <memory>

#include "core/device.h"
#include "safe/hang_watchdog.h"
#include "train/dp_streams.h"

namespace primus {

class CudaStepMarks : public safe::StepMarks {
 public:
  explicit CudaStepMarks(const Stream& compute) : compute_(compute) {}
  void step_start() override;
  void first_collective() override;
  double own_ms() override;

 private:
  Stream compute_;
  std::shared_ptr<StreamEvent> start_, first_;
};

}  // namespace primus
