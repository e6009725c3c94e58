#pragma once
// PCRE2 (UTF + UCP, JIT when available) for the tokenizers' pre-tokenizer patterns. The patterns of HF
// tokenizer.json files are written for Oniguruma; the one difference that matters for them is `\s`, which in
// Oniguruma is Unicode White_Space (it includes U+0085) and in PCRE2 is not quite: patterns are rewritten so
// that
// `\s` (and `\S` outside a character class) means White_Space.
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace primus {

// The pattern with `\s` / `\S` replaced by explicit White_Space classes.
std::string onig_compatible_pattern(const std::string& pattern);

class Regex {
 public:
  // Throws ConfigError naming `what` (e.g. the tokenizer file) and PCRE2's message with the pattern offset.
  Regex(const std::string& pattern, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match [start, end) in `s` (valid UTF-8), left to right. An empty match is recorded
  // and the search resumes one character later, as Oniguruma's find_iter does.
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

}  // namespace primus
