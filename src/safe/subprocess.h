#pragma once
// Child processes with a hard timeout (preflight runs each GPU check in its own process so that one dead GPU
// cannot hang the check). Each child gets its own process group; on timeout the whole group is SIGKILLed.
#include <string>
#include <utility>
#include <vector>

namespace primus::safe {

struct ChildSpec {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>>
      env;  // added to (or replacing in) the inherited environment
};

struct ChildResult {
  int exit_code = -1;  // -1 when killed by a signal or the timeout
  int signal = 0;
  bool timed_out = false;
  double seconds = 0;
  std::string output;  // stdout and stderr together
};

// Runs every child at once and waits for all of them, at most `timeout_s` each (from the common start).
std::vector<ChildResult> run_children(const std::vector<ChildSpec>& children, double timeout_s);

// The path of the running executable (/proc/self/exe).
std::string self_executable();

}  // namespace primus::safe
