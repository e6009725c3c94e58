#pragma once
// The HTML page of a projection: stacked bars of memory per pipeline rank (with the GPU's memory as a line)
// and of time per rank (forward / backward / collectives / optimizer), and the tables.
#include <string>

#include "projection/memory_model.h"
#include "projection/perf_model.h"

namespace primus::projection {

// Either part may be null.
std::string projection_page(const std::string& title, const Setup& s, const MemoryProjection* memory,
                            const PerformanceProjection* perf);

}  // namespace primus::projection
