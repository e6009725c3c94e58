#include "data/regex.h"

#include <pcre2.h>

#include <memory>

#include "core/error.h"
#include "data/unicode.h"

namespace primus {

namespace {
// Unicode White_Space (Oniguruma's \s): TAB..CR, SPACE, NEL, NBSP, OGHAM SPACE MARK, EN QUAD..HAIR SPACE,
// LINE SEPARATOR, PARAGRAPH SEPARATOR, NARROW NBSP, MEDIUM MATHEMATICAL SPACE, IDEOGRAPHIC SPACE.
const char* kWhiteSpace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Per-thread match state: PCRE2 match data and JIT stacks are not shareable between threads.
struct MatchScratch {
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  MatchScratch() {
    mctx = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (mctx != nullptr && jit_stack != nullptr) pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
  }
  ~MatchScratch() {
    if (jit_stack != nullptr) pcre2_jit_stack_free(jit_stack);
    if (mctx != nullptr) pcre2_match_context_free(mctx);
  }
};
MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}
}  // namespace

std::string onig_compatible_pattern(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (n == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const size_t close = p.find(":]", i + 2);
      if (close != std::string::npos) {
        out += p.substr(i, close + 2 - i);
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& what) : pattern_(pattern) {
  const std::string p = onig_compatible_pattern(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP,
                                   &err, &off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw ConfigError(fmt::format("{}: cannot compile the pre-tokenizer regex '{}': {} (at offset {})", what,
                                  pattern, reinterpret_cast<const char*>(msg), off));
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchScratch& sc = scratch();
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t off = 0;
  while (off <= s.size()) {
    int rc = jit_ ? pcre2_jit_match(code, subject, s.size(), off, PCRE2_NO_UTF_CHECK, md.get(), sc.mctx)
                  : pcre2_match(code, subject, s.size(), off, PCRE2_NO_UTF_CHECK, md.get(), sc.mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // pathological input: the interpreter has no such limit
      rc = pcre2_match(code, subject, s.size(), off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      throw Error(ErrorKind::kRuntime, fmt::format("regex '{}' failed at byte {}: {}", pattern_, off,
                                                   reinterpret_cast<const char*>(msg)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t start = ov[0], end = ov[1];
    out->emplace_back(start, end);
    if (end > start) {
      off = end;
    } else {
      if (start >= s.size()) break;
      const size_t n = utf8::valid_sequence_length(s, start);
      off = start + (n == 0 ? 1 : n);
    }
  }
}

}  // namespace primus
