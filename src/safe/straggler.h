#pragma once
// Straggler detection: each rank's recent step time against the median over the other ranks. A rank is a
// straggler when its time >= factor x that median (its score, median / time, is then <= 1 / factor; NVRx's
// convention: 0.5 = twice as slow). Step times are medians over a window, so one slow step (a checkpoint, a
// GC pause) does not flag a rank.
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace primus::safe {

struct StragglerFinding {
  int rank = 0;
  double step_ms = 0, median_ms = 0;
  double score = 1;  // median / step_ms
};

// Ranks whose time is >= factor x the median of the other ranks' times and at least min_excess_ms above it
// (entries <= 0 are missing ranks, ignored). The floor keeps a ratio of tiny times from flagging noise: 2.9
// vs 2.3 ms (score 0.78) was flagged on four H200s in a 237 ms step.
constexpr double kStragglerMinExcessMs = 1.0;
std::vector<StragglerFinding> find_stragglers(const std::vector<double>& per_rank_ms, double factor,
                                              double min_excess_ms = kStragglerMinExcessMs);

// A rank's own window of step times.
class StepWindow {
 public:
  explicit StepWindow(size_t size = 20) : size_(size) {}
  void add(double ms);
  double median() const;  // 0 when empty
  double p99() const;     // over every step seen (kept up to 10000), 0 when empty
  size_t count() const { return all_.size(); }

 private:
  size_t size_;
  std::deque<double> recent_;
  std::deque<double> all_;
};

}  // namespace primus::safe
