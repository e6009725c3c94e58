#pragma once
// SIGTERM / SIGINT (Slurm preemption, Ctrl-C) ask the training loop to stop: it finishes the current step,
// saves a checkpoint when `save` is set, and exits 0. A second signal of the same kind kills the process at
// once (the handler is one-shot), so an impatient Ctrl-C still works; the previous checkpoint stays valid.
#include <atomic>

namespace primus {

class StopSignal {
 public:
  StopSignal();   // installs the handlers
  ~StopSignal();  // restores the previous handlers
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;
  // 0 when no stop was requested, else the signal number.
  static int requested();
};

}  // namespace primus
