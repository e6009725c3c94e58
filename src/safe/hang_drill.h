#pragma once
// `primus preflight --hang-drill`: a training-shaped loop (sleep, then a small all_reduce per step) under a
// launcher, with the hang watchdog on. With PRIMUS_INJECT_STALL="<rank>:<step>" one rank stops before its
// collective at that step; every rank's watchdog must then name it and end the job with kExitHang. Used by
// the MPI watchdog test, and on a cluster to see that hangs are caught before a long run depends on it.
// PRIMUS_INJECT_SLOW="<rank>:<factor>" makes one rank's work per step that much longer: rank 0's straggler
// check (every 5 steps, from the heartbeats) must name it.
#include <string>

namespace primus::safe {

struct HangDrillOptions {
  std::string backend = "auto";
  int steps = 20;
  double step_ms = 50;
  double hang_timeout_s = 5;
  std::string dir = "output/hang-drill";  // heartbeat directory (shared by the ranks)
  double straggler_factor = 1.2;
};
int run_hang_drill(const HangDrillOptions& o);

}  // namespace primus::safe
