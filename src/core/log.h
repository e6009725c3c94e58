#pragma once
// Rank-aware logging. By default only rank 0 prints info lines; warnings and errors print on every rank with
// a
// "[rank N]" prefix when the job has more than one rank.
#include <fmt/format.h>

#include <string>

namespace primus::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_rank(int rank, int world);
void set_level(Level level);
void set_all_ranks(bool all);  // print info lines on every rank
Level level();
void write(Level level, const std::string& msg);

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kDebug) write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::kError, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace primus::log
