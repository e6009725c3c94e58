#include "config/python_literal.h"

#include <cctype>

#include "config/yaml_scalar.h"

namespace primus::config {
namespace {

class Parser {
 public:
  Parser(std::string_view text, const Origin& origin) : s_(text), origin_(origin) {}

  std::optional<Value> parse_all() {
    auto v = parse_value();
    skip_space();
    if (!v || pos_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  std::optional<Value> parse_value() {
    skip_space();
    if (pos_ >= s_.size()) return std::nullopt;
    char c = s_[pos_];
    if (c == '[') return parse_sequence('[', ']');
    if (c == '(') return parse_sequence('(', ')');
    if (c == '{') return parse_dict();
    if (c == '\'' || c == '"') return parse_string();
    return parse_atom();
  }

  std::optional<Value> parse_sequence(char open, char close) {
    eat(open);
    Value list = Value::list(origin_);
    if (eat(close)) return list;
    while (true) {
      auto item = parse_value();
      if (!item) return std::nullopt;
      list.push_back(std::move(*item));
      if (eat(close)) return list;
      if (!eat(',')) return std::nullopt;
      if (eat(close)) return list;  // trailing comma
    }
  }

  std::optional<Value> parse_dict() {
    eat('{');
    Value map = Value::map(origin_);
    if (eat('}')) return map;
    while (true) {
      auto key = parse_value();
      if (!key || !key->is_scalar() || key->is_null()) return std::nullopt;
      if (!eat(':')) return std::nullopt;
      auto value = parse_value();
      if (!value) return std::nullopt;
      std::string k = key->is_string() ? key->as_string() : key->repr();
      map.set(k, std::move(*value));
      if (eat('}')) return map;
      if (!eat(',')) return std::nullopt;
      if (eat('}')) return map;
    }
  }

  std::optional<Value> parse_string() {
    char quote = s_[pos_++];
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      char c = s_[pos_++];
      if (c == '\\' && pos_ < s_.size()) {
        char e = s_[pos_++];
        switch (e) {
          case 'n':
            out.push_back('\n');
            break;
          case 't':
            out.push_back('\t');
            break;
          default:
            out.push_back(e);
        }
        continue;
      }
      out.push_back(c);
    }
    if (pos_ >= s_.size()) return std::nullopt;
    ++pos_;
    return Value::string(out, origin_);
  }

  std::optional<Value> parse_atom() {
    size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != ',' && s_[pos_] != ']' && s_[pos_] != ')' && s_[pos_] != '}' &&
           s_[pos_] != ':' && !std::isspace(static_cast<unsigned char>(s_[pos_])))
      ++pos_;
    std::string_view atom = s_.substr(start, pos_ - start);
    if (atom == "None") return Value::null(origin_);
    if (atom == "True") return Value::boolean(true, origin_);
    if (atom == "False") return Value::boolean(false, origin_);
    if (auto i = python_int(atom)) return Value::integer(*i, origin_);
    if (atom.find_first_of("0123456789") != std::string_view::npos) {
      if (auto f = python_float(atom)) return Value::real(*f, origin_);
    }
    return std::nullopt;  // a bare name is not a literal
  }

  std::string_view s_;
  size_t pos_ = 0;
  const Origin& origin_;
};

}  // namespace

std::optional<Value> parse_python_literal(std::string_view text, const Origin& origin) {
  return Parser(text, origin).parse_all();
}

}  // namespace primus::config
