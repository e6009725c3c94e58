#pragma once
// Problems: the configuration errors a check collects before it throws, so that one run reports every bad key
// at once ("3 problems in <what>:" and a line each) instead of the first one only.
#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace primus::config {

struct Problems {
  std::vector<std::string> lines;
  void add(std::string s) { lines.push_back(std::move(s)); }
  // One problem is thrown as it is; several as one message listing them, headed by `what`.
  template <class ErrorType = ConfigError>
  void throw_if_any(const std::string& what, const std::string& hint = {}) const {
    if (lines.empty()) return;
    if (lines.size() == 1) throw ErrorType(lines[0], hint);
    std::string msg = fmt::format("{} problems in {}:", lines.size(), what);
    for (const auto& l : lines) msg += "\n  - " + l;
    throw ErrorType(msg, hint);
  }
};

}  // namespace primus::config
