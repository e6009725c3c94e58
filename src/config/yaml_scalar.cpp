#include "config/yaml_scalar.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace primus::config {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_oct(char c) {
  return c >= '0' && c <= '7';
}
bool is_hex(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}

bool is_null_text(std::string_view s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

std::optional<bool> bool_text(std::string_view s) {
  for (auto t : {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"})
    if (s == t) return true;
  for (auto f : {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"})
    if (s == f) return false;
  return std::nullopt;
}

// Strips an optional sign; returns the sign factor.
int take_sign(std::string_view& s) {
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    int sign = s[0] == '-' ? -1 : 1;
    s.remove_prefix(1);
    return sign;
  }
  return 1;
}

bool all_of(std::string_view s, bool (*pred)(char)) {
  for (char c : s)
    if (c != '_' && !pred(c)) return false;
  return true;
}

std::string without_underscores(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '_') out.push_back(c);
  return out;
}

// PyYAML int: [-+]?0b[01_]+ | [-+]?0[0-7_]+ | [-+]?(0|[1-9][0-9_]*) | [-+]?0x[0-9a-fA-F_]+ |
//             [-+]?[1-9][0-9_]*(:[0-5]?[0-9])+
std::optional<int64_t> yaml_int(std::string_view text) {
  std::string_view s = text;
  int sign = take_sign(s);
  if (s.empty()) return std::nullopt;
  auto parse = [&](std::string_view digits, int base) -> std::optional<int64_t> {
    std::string clean = without_underscores(digits);
    if (clean.empty()) return base == 8 ? std::optional<int64_t>(0) : std::nullopt;
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(clean.c_str(), &end, base);
    if (errno != 0 || *end != '\0') return std::nullopt;
    return sign * static_cast<int64_t>(v);
  };
  if (s.size() > 2 && s[0] == '0' && s[1] == 'b') {
    if (!all_of(s.substr(2), [](char c) { return c == '0' || c == '1'; })) return std::nullopt;
    return parse(s.substr(2), 2);
  }
  if (s.size() > 2 && s[0] == '0' && s[1] == 'x') {
    if (!all_of(s.substr(2), is_hex)) return std::nullopt;
    return parse(s.substr(2), 16);
  }
  if (s == "0") return 0;
  if (s[0] == '0') {
    if (!all_of(s.substr(1), is_oct)) return std::nullopt;
    return parse(s.substr(1), 8);
  }
  if (!is_digit(s[0])) return std::nullopt;
  size_t colon = s.find(':');
  if (colon == std::string_view::npos) {
    if (!all_of(s, is_digit)) return std::nullopt;
    return parse(s, 10);
  }
  // Sexagesimal (base 60), e.g. 1:30 = 90.
  if (!all_of(s.substr(0, colon), is_digit)) return std::nullopt;
  std::string head = without_underscores(s.substr(0, colon));
  int64_t value = std::strtoll(head.c_str(), nullptr, 10);
  std::string_view rest = s.substr(colon + 1);
  while (true) {
    size_t next = rest.find(':');
    std::string_view part = rest.substr(0, next);
    if (part.empty() || part.size() > 2 || !all_of(part, is_digit) ||
        part.find('_') != std::string_view::npos)
      return std::nullopt;
    if (part.size() == 2 && part[0] > '5') return std::nullopt;
    value = value * 60 + std::stoi(std::string(part));
    if (next == std::string_view::npos) break;
    rest = rest.substr(next + 1);
  }
  return sign * value;
}

// PyYAML float: [-+]?([0-9][0-9_]*)\.[0-9_]*([eE][-+][0-9]+)? | \.[0-9][0-9_]*([eE][-+][0-9]+)? |
//               [-+]?\.(inf|Inf|INF) | \.(nan|NaN|NAN)      (the sexagesimal form is not supported)
std::optional<double> yaml_float(std::string_view text) {
  if (text == ".nan" || text == ".NaN" || text == ".NAN") return std::numeric_limits<double>::quiet_NaN();
  std::string_view s = text;
  bool had_sign = !s.empty() && (s[0] == '+' || s[0] == '-');
  int sign = take_sign(s);
  if (s == ".inf" || s == ".Inf" || s == ".INF") return sign * std::numeric_limits<double>::infinity();
  if (s.empty()) return std::nullopt;
  size_t i = 0;
  if (s[0] == '.') {
    if (had_sign || s.size() < 2 || !is_digit(s[1])) return std::nullopt;
  } else {
    if (!is_digit(s[0])) return std::nullopt;
    while (i < s.size() && (is_digit(s[i]) || s[i] == '_')) ++i;
    if (i >= s.size() || s[i] != '.') return std::nullopt;
  }
  ++i;  // the dot
  while (i < s.size() && (is_digit(s[i]) || s[i] == '_')) ++i;
  if (i < s.size()) {
    if (s[i] != 'e' && s[i] != 'E') return std::nullopt;
    ++i;
    if (i >= s.size() || (s[i] != '+' && s[i] != '-')) return std::nullopt;
    ++i;
    if (i >= s.size()) return std::nullopt;
    for (; i < s.size(); ++i)
      if (!is_digit(s[i])) return std::nullopt;
  }
  std::string clean = without_underscores(s);
  return sign * std::strtod(clean.c_str(), nullptr);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Python accepts single underscores between digits in int() and float().
std::optional<std::string> python_digits(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 >= s.size() || !is_digit(s[i - 1]) || !is_digit(s[i + 1])) return std::nullopt;
      continue;
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

std::optional<int64_t> python_int(std::string_view text) {
  std::string_view s = trim(text);
  auto clean = python_digits(s);
  if (!clean || clean->empty()) return std::nullopt;
  std::string_view d = *clean;
  size_t start = (d[0] == '+' || d[0] == '-') ? 1 : 0;
  if (start >= d.size()) return std::nullopt;
  for (size_t i = start; i < d.size(); ++i)
    if (!is_digit(d[i])) return std::nullopt;
  errno = 0;
  long long v = std::strtoll(clean->c_str(), nullptr, 10);
  if (errno != 0) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<double> python_float(std::string_view text) {
  std::string_view s = trim(text);
  auto clean = python_digits(s);
  if (!clean || clean->empty()) return std::nullopt;
  // strtod also takes hex floats and "infinity"-style words; Python takes the words but not hex.
  for (char c : *clean)
    if (c == 'x' || c == 'X' || c == 'p' || c == 'P') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(clean->c_str(), &end);
  if (end == clean->c_str() || *end != '\0') return std::nullopt;
  return v;
}

Value resolve_plain_scalar(std::string_view text, Origin origin) {
  if (is_null_text(text)) return Value::null(std::move(origin));
  if (auto b = bool_text(text)) return Value::boolean(*b, std::move(origin));
  if (!text.empty() && (is_digit(text[0]) || text[0] == '-' || text[0] == '+' || text[0] == '.')) {
    if (auto i = yaml_int(text)) return Value::integer(*i, std::move(origin));
    if (auto f = yaml_float(text)) return Value::real(*f, std::move(origin));
  }
  return Value::string(std::string(text), std::move(origin));
}

bool needs_quotes(std::string_view text) {
  if (!resolve_plain_scalar(text, {}).is_string()) return true;
  if (text.empty() || text != trim(text)) return true;
  // Indicators that start a non-plain node, and sequences that end a plain scalar or start a comment.
  static constexpr std::string_view kLeading = "-?:,[]{}#&*!|>'\"%@`";
  if (kLeading.find(text[0]) != std::string_view::npos) return true;
  if (text.find(": ") != std::string_view::npos || text.find(" #") != std::string_view::npos) return true;
  if (text.back() == ':') return true;
  for (char c : text)
    if (c == '\n' || c == '\t' || c == '\r' || static_cast<unsigned char>(c) < 0x20) return true;
  return false;
}

}  // namespace primus::config
