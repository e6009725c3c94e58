#pragma once
// In-flight guards of the training loop: which tensor went non-finite, the loss-spike detector, and the test
// hooks that inject faults (PRIMUS_INJECT_NAN, PRIMUS_INJECT_LOSS_SPIKE; unset in normal runs).
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "model/param_store.h"

namespace primus {

// Exit code of a run halted by a guard (nan_policy: halt). 0 ok, 1 runtime failure, 2 configuration, 3
// pre-flight (design.md), 4 halted by a guard.
inline constexpr int kExitGuardHalt = 4;

struct NonFiniteReport {
  std::string first_tensor;  // "" when every gradient is finite
  int layer = -1;            // decoder layer of the first tensor (-1: embedding / head)
  int64_t first_index = -1;  // element index inside that tensor
  int64_t tensors = 0;       // tensors holding a non-finite gradient
  int64_t elements = 0;
  std::string describe() const;
};

// Scans the gradients tensor by tensor (in parameter order) for NaN/Inf. Runs only after the global norm came
// out non-finite, so its cost (one device-to-host copy of the gradients) is paid only on failure.
NonFiniteReport locate_non_finite_grad(ParamStore& params, const Stream& s);

// Megatron's spiky-loss rule: a loss >= factor x the reference (the max of the last `window` accepted
// losses).
class SpikeDetector {
 public:
  explicit SpikeDetector(double factor, size_t window = 100) : factor_(factor), window_(window) {}
  // True when `loss` is a spike against the losses seen so far (false while there is no reference yet).
  bool is_spike(double loss) const;
  double reference() const;
  void accept(double loss);  // a loss of an applied update joins the reference window
  // The window, oldest first (saved in checkpoints so that a resumed run detects spikes identically).
  std::vector<double> window() const { return {recent_.begin(), recent_.end()}; }
  void restore(const std::vector<double>& losses);

 private:
  double factor_;
  size_t window_;
  std::deque<double> recent_;
};

// Test hooks, read from the environment once per run.
struct FaultInjection {
  // PRIMUS_INJECT_NAN="<iteration>:<parameter name>[:<element>]": NaN into that gradient element after
  // backward.
  std::optional<int64_t> nan_iter;
  bool poisons_grad(int64_t iter) const { return nan_iter && *nan_iter == iter; }
  std::string nan_param;
  int64_t nan_index = 0;
  // PRIMUS_INJECT_LOSS_SPIKE="<iteration>:<factor>": the step's loss is reported multiplied by factor.
  std::optional<int64_t> spike_iter;
  double spike_factor = 1;
  // PRIMUS_INJECT_SLOW_GPU="<rank>:<SMs>": that rank's GEMMs leave <SMs> SMs idle for the whole run
  // (cuBLASLt's SM count target), a GPU that computes slower than its peers (straggler drills on GPUs;
  // data-parallel runs, where no overlapped update sets the target).
  int64_t slow_gpu_rank = -1;
  int slow_gpu_sms = 0;
  static FaultInjection from_env();
  // Writes the NaN when `iter` is the injection iteration.
  void maybe_poison_grad(int64_t iter, ParamStore& params, const Stream& s) const;
};

}  // namespace primus
