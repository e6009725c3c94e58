#pragma once
// The memory projection as a terminal table (one column per pipeline rank) and as JSON (`peak_bytes` per rank
// and overall).
#include <string>

#include "projection/memory_model.h"

namespace primus::projection {

std::string memory_text(const MemoryProjection& m, const Setup& s, const std::string& title);
std::string memory_json(const MemoryProjection& m, const Setup& s);

}  // namespace primus::projection
