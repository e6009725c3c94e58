#pragma once
// Nearest-name suggestions for unknown keys, files and options. Primus merges unknown keys silently (a
// renamed key once left MoE load balancing off in every DeepSeek config); we reject them and say what was
// probably meant.
#include <string>
#include <string_view>
#include <vector>

namespace primus::config {

// Up to `max` candidates closest to `word` (edit distance with transpositions, case- and
// '-'/'_'-insensitive), best first; empty when nothing is close enough to be a plausible typo.
std::vector<std::string> did_you_mean(std::string_view word, const std::vector<std::string>& candidates,
                                      size_t max = 3);

// "; did you mean 'a' or 'b'?" (with the leading "; "), or "" when there is no suggestion.
std::string did_you_mean_text(std::string_view word, const std::vector<std::string>& candidates);

// Optimal-string-alignment edit distance (a transposition counts as one edit).
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace primus::config
