#pragma once
// Shared by the pipeline schedule and runtime tests.
#include <string>
#include <vector>

namespace primus::parallel::testing {

// One action (or event) per line: what a failed comparison of two orders prints.
inline std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

}  // namespace primus::parallel::testing
