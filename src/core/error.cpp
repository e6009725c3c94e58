#include "core/error.h"

#include <cstring>

namespace primus::detail {

void throw_check_failure(const char* file, int line, const char* cond, const std::string& msg) {
  const char* base = std::strrchr(file, '/');
  std::string where = fmt::format("{}:{}", base ? base + 1 : file, line);
  std::string text = msg.empty() && cond ? fmt::format("check failed: {}", cond) : msg;
  throw Error(ErrorKind::kRuntime, text, where);
}

}  // namespace primus::detail
