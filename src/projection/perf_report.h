#pragma once
// The performance projection as a terminal table (breakdown and the slowest rank's ops) and as JSON
// (`step_time_s`, `tokens_per_s_per_gpu`).
#include <string>

#include "projection/perf_model.h"

namespace primus::projection {

std::string performance_text(const PerformanceProjection& p, const Setup& s, const std::string& title);
std::string performance_json(const PerformanceProjection& p, const Setup& s);

}  // namespace primus::projection
