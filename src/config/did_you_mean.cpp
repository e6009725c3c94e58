#include "config/did_you_mean.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace primus::config {
namespace {

std::string normalize(std::string_view s) {
  std::string out;
  size_t start = s.find_first_not_of('-');  // "--dryrun" and "dryrun" compare alike
  if (start == std::string_view::npos) start = s.size();
  for (char c : s.substr(start)) out.push_back(c == '-' ? '_' : static_cast<char>(std::tolower(c)));
  return out;
}

std::string_view last_segment(std::string_view s) {
  size_t dot = s.rfind('.');
  return dot == std::string_view::npos ? s : s.substr(dot + 1);
}

}  // namespace

size_t edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::vector<std::string> did_you_mean(std::string_view word, const std::vector<std::string>& candidates,
                                      size_t max) {
  const std::string w = normalize(word);
  if (w.empty()) return {};
  // A typo changes a few characters; longer names tolerate a few more.
  const size_t limit = std::max<size_t>(2, w.size() / 3);
  struct Scored {
    size_t score;
    std::string name;
  };
  std::vector<Scored> scored;
  for (const std::string& candidate : candidates) {
    const std::string c = normalize(candidate);
    if (c == w) {
      scored.push_back({0, candidate});
      continue;
    }
    size_t best = edit_distance(w, c);
    // A key given without its section ("seq_len" for "training.seq_len") is close to that section's key.
    if (w.find('.') == std::string::npos && c.find('.') != std::string::npos)
      best = std::min(best, edit_distance(w, last_segment(c)) + 1);
    bool contains = w.size() >= 4 && (c.find(w) != std::string::npos || w.find(c) != std::string::npos);
    if (best <= limit) {
      scored.push_back({best * 2, candidate});
    } else if (contains) {
      scored.push_back({limit * 2 + 1, candidate});
    }
  }
  std::stable_sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
    return a.score != b.score ? a.score < b.score : a.name < b.name;
  });
  std::vector<std::string> out;
  for (const auto& s : scored) {
    if (out.size() >= max) break;
    if (std::find(out.begin(), out.end(), s.name) == out.end()) out.push_back(s.name);
  }
  return out;
}

std::string did_you_mean_text(std::string_view word, const std::vector<std::string>& candidates) {
  std::vector<std::string> best = did_you_mean(word, candidates);
  if (best.empty()) return "";
  std::string text = "; did you mean ";
  for (size_t i = 0; i < best.size(); ++i) {
    if (i > 0) text += i + 1 == best.size() ? " or " : ", ";
    text += "'" + best[i] + "'";
  }
  return text + "?";
}

}  // namespace primus::config
