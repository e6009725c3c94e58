#include "config/moe_layer_pattern.h"

#include <fmt/format.h>

#include <cctype>

#include "core/error.h"

namespace primus::config {
namespace {

// expr := term ('+' term)* ; term := atom ('*' int)* | int '*' atom ; atom := '[' int (',' int)* ']' |
// '(' expr ')'. Lists are capped at 1 << 20 entries (a layer count is a few hundred).
class ListExpr {
 public:
  ListExpr(const std::string& text, const std::string& where) : s_(text), where_(where) {}
  std::vector<int64_t> parse() {
    std::vector<int64_t> v = expr();
    skip();
    if (i_ != s_.size()) fail("unexpected '" + std::string(1, s_[i_]) + "'");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw ConfigError(fmt::format("{}: moe_layer_freq '{}' is not a list expression: {} at character {}",
                                  where_, s_, why, i_ + 1),
                      "an int (every N-th layer), a list of 0/1 per layer, or e.g. \"([0]*3+[1]*58)\"");
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool peek_digit() {
    skip();
    return i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-');
  }
  int64_t integer() {
    skip();
    size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (i_ == start || (i_ == start + 1 && s_[start] == '-')) fail("expected an integer");
    if (i_ - start > 9) fail("integer too large");
    return std::stoll(s_.substr(start, i_ - start));
  }
  std::vector<int64_t> repeat(const std::vector<int64_t>& v, int64_t times) {
    if (times < 0) fail("negative repeat count");
    if (static_cast<double>(v.size()) * static_cast<double>(times) > (1 << 20)) fail("list too long");
    std::vector<int64_t> out;
    for (int64_t k = 0; k < times; ++k) out.insert(out.end(), v.begin(), v.end());
    return out;
  }
  std::vector<int64_t> atom() {
    if (++depth_ > 64) fail("nested too deeply");
    std::vector<int64_t> v;
    if (eat('[')) {
      if (!eat(']')) {
        do v.push_back(integer());
        while (eat(','));
        if (!eat(']')) fail("expected ']'");
      }
    } else if (eat('(')) {
      v = expr();
      if (!eat(')')) fail("expected ')'");
    } else {
      fail("expected '[' or '('");
    }
    --depth_;
    return v;
  }
  std::vector<int64_t> term() {
    std::vector<int64_t> v;
    if (peek_digit()) {
      const int64_t times = integer();
      if (!eat('*')) fail("expected '*' after a repeat count");
      v = repeat(atom(), times);
    } else {
      v = atom();
    }
    while (eat('*')) v = repeat(v, integer());
    return v;
  }
  std::vector<int64_t> expr() {
    std::vector<int64_t> v = term();
    while (eat('+')) {
      std::vector<int64_t> more = term();
      if (v.size() + more.size() > (1u << 20)) fail("list too long");
      v.insert(v.end(), more.begin(), more.end());
    }
    return v;
  }

  const std::string& s_;
  const std::string& where_;
  size_t i_ = 0;
  int depth_ = 0;
};

std::vector<char> every_nth(int64_t n, int64_t num_layers, const std::string& where) {
  if (n <= 0)
    throw ConfigError(fmt::format("{}: moe_layer_freq {} must be a positive layer period", where, n));
  std::vector<char> out(static_cast<size_t>(num_layers));
  for (int64_t l = 0; l < num_layers; ++l) out[static_cast<size_t>(l)] = l % n == 0;
  return out;
}

}  // namespace

std::vector<char> moe_layer_pattern(const Value& freq, int64_t num_layers, const std::string& where) {
  std::vector<int64_t> flags;
  if (freq.is_null()) return every_nth(1, num_layers, where);
  if (freq.is_int()) return every_nth(freq.as_int(), num_layers, where);
  if (freq.is_list()) {
    for (const Value& v : freq.items()) {
      if (!v.is_int())
        throw ConfigError(fmt::format("{}: moe_layer_freq: expected 0/1 per layer, got {}", where, v.repr()));
      flags.push_back(v.as_int());
    }
  } else if (freq.is_string()) {
    const std::string& text = freq.as_string();
    size_t first = text.find_first_not_of(" \t");
    if (first != std::string::npos && std::isdigit(static_cast<unsigned char>(text[first])) &&
        text.find_first_of("[(") == std::string::npos) {
      try {
        size_t used = 0;
        int64_t n = std::stoll(text, &used);
        if (text.find_first_not_of(" \t", used) == std::string::npos) return every_nth(n, num_layers, where);
      } catch (const std::exception&) {
      }
    }
    flags = ListExpr(text, where).parse();
  } else {
    throw ConfigError(
        fmt::format("{}: moe_layer_freq: expected an int, a list or a list expression, got {} {}", where,
                    freq.type_name(), freq.repr()));
  }
  if (static_cast<int64_t>(flags.size()) != num_layers)
    throw ConfigError(fmt::format("{}: moe_layer_freq lists {} layers but num_layers is {}", where,
                                  flags.size(), num_layers));
  std::vector<char> out;
  for (int64_t f : flags) {
    if (f != 0 && f != 1)
      throw ConfigError(
          fmt::format("{}: moe_layer_freq: every entry must be 0 (dense) or 1 (MoE), got {}", where, f));
    out.push_back(static_cast<char>(f));
  }
  return out;
}

}  // namespace primus::config
