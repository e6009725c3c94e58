#include "safe/straggler.h"

#include <algorithm>

namespace primus::safe {

namespace {
double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

std::vector<StragglerFinding> find_stragglers(const std::vector<double>& per_rank_ms, double factor,
                                              double min_excess_ms) {
  std::vector<double> present;
  for (double v : per_rank_ms)
    if (v > 0) present.push_back(v);
  std::vector<StragglerFinding> out;
  if (present.size() < 2) return out;
  for (size_t r = 0; r < per_rank_ms.size(); ++r) {
    const double v = per_rank_ms[r];
    if (v <= 0) continue;
    // The median of the other ranks: with two ranks the overall median is their mean, which hides half of
    // the straggler's excess (1.4x slower reads as 1.17x).
    std::vector<double> others;
    for (size_t q = 0; q < per_rank_ms.size(); ++q)
      if (q != r && per_rank_ms[q] > 0) others.push_back(per_rank_ms[q]);
    const double med = median_of(others);
    if (v >= factor * med && v - med >= min_excess_ms) out.push_back({static_cast<int>(r), v, med, med / v});
  }
  return out;
}

void StepWindow::add(double ms) {
  recent_.push_back(ms);
  if (recent_.size() > size_) recent_.pop_front();
  all_.push_back(ms);
  if (all_.size() > 10000) all_.pop_front();
}

double StepWindow::median() const {
  return median_of({recent_.begin(), recent_.end()});
}

double StepWindow::p99() const {
  if (all_.empty()) return 0;
  std::vector<double> v(all_.begin(), all_.end());
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(0.99 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(idx, v.size() - 1)];
}

}  // namespace primus::safe
