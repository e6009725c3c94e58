#pragma once
// Errors are exceptions that carry a kind (which maps to the CLI's exit code), a message, the source location
// that raised them and an optional hint. They survive release builds, unlike assert.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace primus {

enum class ErrorKind {
  kRuntime = 1,    // a failure while running (CUDA error, I/O error, non-finite loss under `halt`, ...)
  kConfig = 2,     // bad configuration or command-line arguments
  kPreflight = 3,  // a pre-flight check failed
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, std::string where = {}, std::string hint = {})
      : std::runtime_error(message), kind_(kind), where_(std::move(where)), hint_(std::move(hint)) {}
  ErrorKind kind() const { return kind_; }
  const std::string& where() const { return where_; }
  const std::string& hint() const { return hint_; }
  int exit_code() const { return static_cast<int>(kind_); }

 private:
  ErrorKind kind_;
  std::string where_;
  std::string hint_;
};

// A configuration or argument error (exit code 2).
class ConfigError : public Error {
 public:
  explicit ConfigError(std::string message, std::string hint = {})
      : Error(ErrorKind::kConfig, std::move(message), {}, std::move(hint)) {}
};

namespace detail {
[[noreturn]] void throw_check_failure(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace primus

// PRIMUS_CHECK(cond, "format {}", args...): throws primus::Error(kRuntime) naming file:line when cond is
// false.
#define PRIMUS_CHECK(cond, ...)                                                                              \
  do {                                                                                                       \
    if (!(cond)) ::primus::detail::throw_check_failure(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
  } while (0)

#define PRIMUS_FAIL(...) \
  ::primus::detail::throw_check_failure(__FILE__, __LINE__, nullptr, fmt::format(__VA_ARGS__))
