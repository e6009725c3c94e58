#include "core/env.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace primus {

int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || errno == ERANGE || x < lo || x > hi) {
    const std::string range =
        lo == INT_MIN && hi == INT_MAX ? "an integer" : fmt::format("an integer from {} to {}", lo, hi);
    throw ConfigError(fmt::format("environment: {}='{}' (expected {})", name, v, range));
  }
  return static_cast<int>(x);
}

}  // namespace primus
