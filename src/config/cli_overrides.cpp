#include "config/cli_overrides.h"

#include <fmt/format.h>

#include <algorithm>

#include "config/python_literal.h"
#include "config/yaml_scalar.h"
#include "core/error.h"

namespace primus::config {
namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t");
  return s.substr(a, b - a + 1);
}

std::string strip_dashes(const std::string& s) {
  size_t a = s.find_first_not_of('-');
  return a == std::string::npos ? "" : s.substr(a);
}

void set_nested(Value& root, const std::string& key, Value value, const std::string& token) {
  Value* node = &root;
  size_t start = 0;
  while (true) {
    size_t dot = key.find('.', start);
    std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty())
      throw ConfigError(fmt::format("command line: override '{}' has an empty key part", token),
                        "write overrides as key=value, --key=value or --key value");
    if (dot == std::string::npos) {
      node->set(part, std::move(value));
      return;
    }
    Value* child = node->find(part);
    if (child == nullptr || !child->is_map()) {
      node->set(part, Value::map(Origin::command_line(token)));
      child = node->find(part);
    }
    node = child;
    start = dot + 1;
  }
}

}  // namespace

Value type_cli_value(const std::string& raw, const Origin& origin) {
  std::string text = trim(raw);
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "true" || lower == "false") return Value::boolean(lower == "true", origin);
  if (text == "None" || (!text.empty() && (text[0] == '[' || text[0] == '(' || text[0] == '{'))) {
    if (auto v = parse_python_literal(text, origin)) return *v;
    return Value::string(text, origin);
  }
  if (text.find('.') != std::string::npos) {
    if (auto f = python_float(text)) return Value::real(*f, origin);
    return Value::string(text, origin);
  }
  if (auto i = python_int(text)) return Value::integer(*i, origin);
  return Value::string(text, origin);
}

Value parse_cli_overrides(const std::vector<std::string>& tokens) {
  Value root = Value::map(Origin::command_line(""));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& item = tokens[i];
    size_t eq = item.find('=');
    if (eq != std::string::npos) {
      std::string key = trim(strip_dashes(item.substr(0, eq)));
      if (key.empty())
        throw ConfigError(fmt::format("command line: override '{}' has no key", item),
                          "write overrides as key=value, --key=value or --key value");
      Origin o = Origin::command_line(item);
      set_nested(root, key, type_cli_value(item.substr(eq + 1), o), item);
      continue;
    }
    if (item.rfind("--", 0) == 0 && item.size() > 2) {
      std::string key = strip_dashes(item);
      bool has_value = i + 1 < tokens.size() && tokens[i + 1].rfind("--", 0) != 0 &&
                       tokens[i + 1].find('=') == std::string::npos;
      if (has_value) {
        std::string both = item + " " + tokens[i + 1];
        set_nested(root, key, type_cli_value(tokens[i + 1], Origin::command_line(both)), both);
        ++i;
      } else {
        set_nested(root, key, Value::boolean(true, Origin::command_line(item)), item);
      }
      continue;
    }
    throw ConfigError(fmt::format("command line: unexpected argument '{}'", item),
                      "overrides are key=value, --key=value, --key value or a bare --flag (= true)");
  }
  return root;
}

}  // namespace primus::config
