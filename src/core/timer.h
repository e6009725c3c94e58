#pragma once
#include <chrono>
#include <string>

namespace primus {

// Wall-clock stopwatch (host side; synchronise the stream before reading it around GPU work).
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double ms() const { return seconds() * 1e3; }

 private:
  std::chrono::steady_clock::time_point start_;
};

// "6m12s", "1h03m", "42s"
std::string format_duration(double seconds);

}  // namespace primus
