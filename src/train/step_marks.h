#pragma once
// CUDA events on the compute stream for the straggler measure (safe::StepMarks): the device time of a rank's
// own work in a step, without the time its compute stream sat waiting for collectives.
//
// Every wait of the compute stream on the communication stream goes through wait(): a timed event before the
// wait and one after it bracket the exposed wait. At the step's end (after the gradient-norm read, which the
// host waits for) own_ms() takes the span from the step's start to the last wait that has begun on the device
// and subtracts the waits before it: the forward and backward compute of DDP, ZeRO and FSDP alike, however
// many parameter gathers or gradient reductions interleave with it. With no completed wait it falls back to
// the span from the step's start to its first collective.
#include <memory>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/stream_events.h"
#include "safe/hang_watchdog.h"

namespace primus {

class CudaStepMarks : public safe::StepMarks {
 public:
  explicit CudaStepMarks(const Stream& compute) : compute_(compute) {}
  void step_start() override;
  void first_collective() override;
  double own_ms() override;
  // The compute stream waits for `e` (an event on another stream), the wait bracketed by timed events.
  void wait(const std::shared_ptr<StreamEvent>& e);

 private:
  Stream compute_;
  std::shared_ptr<StreamEvent> start_, first_;
  std::vector<std::pair<std::shared_ptr<StreamEvent>, std::shared_ptr<StreamEvent>>> waits_;  // before, after
};

}  // namespace primus
