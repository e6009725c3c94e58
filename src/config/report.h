#pragma once
// Text forms of a resolved configuration: the YAML saved in the run directory and the `--dry-run` report.
#include <string>

#include "config/load_config.h"

namespace primus::config {

// Every key of the module with its value and, as a comment, where the value came from. Valid YAML in the
// module layout (TorchTitan keys nested in their sections), readable by Primus's loader.
std::string resolved_yaml(const ResolvedConfig& rc);

// The device a run would use, decided without touching any GPU: "cpu", "cuda", each with the reason.
struct DeviceGuess {
  bool gpu = false;
  std::string text;
};
DeviceGuess guess_device(const std::string& device_key);

// The `--dry-run` report: resolved configuration (key = value  # origin) grouped, derived values, keys with
// no effect (by reason), inert not-supported keys, warnings, and the plan (parameters, FLOPs/token, memory,
// batch, device).
std::string dry_run_report(const ResolvedConfig& rc);

}  // namespace primus::config
