#include "config/run_names.h"

#include <fmt/format.h>

#include "core/error.h"

namespace primus::config {

namespace {

// The value as the message shows it: control characters escaped, so that a newline cannot hide in the error.
std::string shown(const std::string& value) {
  std::string out;
  for (unsigned char c : value) {
    if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

bool has_control(const std::string& value) {
  for (unsigned char c : value)
    if (c < 0x20 || c == 0x7F) return true;
  return false;
}

[[noreturn]] void fail(const std::string& key, const std::string& value, const std::string& where,
                       const std::string& why, const std::string& hint) {
  throw ConfigError(fmt::format("{}{}: '{}' {} (it names a directory of the run path "
                                "{{workspace}}/{{work_group}}/{{user_name}}/{{exp_name}})",
                                where.empty() ? "" : where + ": ", key, shown(value), why),
                    hint);
}

}  // namespace

void check_run_name(const std::string& key, const std::string& value, const std::string& where) {
  const std::string hint =
      fmt::format("set {} to a plain name such as my_run-1 (letters, digits, '-', '_', '.')", key);
  if (value.empty()) fail(key, value, where, "is empty", hint);
  if (value == "." || value == "..") fail(key, value, where, "is not a name but a relative directory", hint);
  if (value.find_first_of("/\\") != std::string::npos)
    fail(key, value, where, "holds a path separator; a name is one directory", hint);
  if (has_control(value)) fail(key, value, where, "holds a control character", hint);
}

void check_workspace(const std::string& value, const std::string& where) {
  const std::string hint = "set workspace to a directory, e.g. ./output";
  if (value.empty()) fail("workspace", value, where, "is empty", hint);
  if (has_control(value)) fail("workspace", value, where, "holds a control character", hint);
}

void check_run_names(const RunInfo& run) {
  check_workspace(run.workspace, "");
  check_run_name("work_group", run.work_group, "");
  check_run_name("user_name", run.user_name, "");
  check_run_name("exp_name", run.exp_name, "");
}

}  // namespace primus::config
