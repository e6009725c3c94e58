#include "config/env_subst.h"

#include <fmt/format.h>

#include <cstdlib>

#include "config/yaml_scalar.h"
#include "core/error.h"

namespace primus::config {

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

Value retype_substituted(const std::string& text, Origin origin) {
  std::string lower;
  for (char c : text) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (lower == "true" || lower == "false") return Value::boolean(lower == "true", std::move(origin));
  // Python: re.fullmatch(r"-?\d+", v) -> int(v); otherwise float(v) if it parses.
  bool int_like = !text.empty();
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (!(std::isdigit(static_cast<unsigned char>(c)) || (i == 0 && c == '-' && text.size() > 1))) {
      int_like = false;
      break;
    }
  }
  if (int_like) {
    if (auto i = python_int(text)) return Value::integer(*i, std::move(origin));
  }
  if (auto f = python_float(text)) return Value::real(*f, std::move(origin));
  return Value::string(text, std::move(origin));
}

std::optional<Value> substitute_env(const std::string& text, const Origin& origin, const EnvLookup& env) {
  // Mirrors re.sub(r"\$\{([^:{}]+)(?::([^}]*))?\}", ...): scan left to right; a failed match at one position
  // moves on by one character.
  std::string out;
  bool substituted = false;
  size_t i = 0;
  while (i < text.size()) {
    if (text.compare(i, 2, "${") == 0) {
      size_t j = i + 2;
      while (j < text.size() && text[j] != ':' && text[j] != '{' && text[j] != '}') ++j;
      bool has_name = j > i + 2;
      if (has_name && j < text.size() && (text[j] == '}' || text[j] == ':')) {
        std::string name = text.substr(i + 2, j - i - 2);
        std::optional<std::string> fallback;
        size_t end = j;
        if (text[j] == ':') {
          end = text.find('}', j + 1);
          if (end != std::string::npos) fallback = text.substr(j + 1, end - j - 1);
        }
        if (end != std::string::npos) {
          std::optional<std::string> value = env(name);
          if (!value && !fallback)
            throw ConfigError(fmt::format("{}: environment variable '{}' is required by '{}' but not set",
                                          origin.str(), name, text),
                              fmt::format("export {}=... or write ${{{}:default}}", name, name));
          out += value ? *value : *fallback;
          substituted = true;
          i = end + 1;
          continue;
        }
      }
    }
    out.push_back(text[i]);
    ++i;
  }
  if (!substituted) return std::nullopt;
  Origin o = origin;
  o.note = text;
  return retype_substituted(out, std::move(o));
}

void substitute_env_tree(Value& tree, const EnvLookup& env) {
  switch (tree.type()) {
    case Value::Type::kString:
      if (auto v = substitute_env(tree.as_string(), tree.origin(), env)) tree = std::move(*v);
      break;
    case Value::Type::kList:
      for (Value& item : tree.items()) substitute_env_tree(item, env);
      break;
    case Value::Type::kMap:
      for (auto& [key, value] : tree.entries()) substitute_env_tree(value, env);
      break;
    default:
      break;
  }
}

}  // namespace primus::config
