#include "config/value.h"

#include <fmt/format.h>

#include <cmath>

#include "config/yaml_scalar.h"
#include "core/error.h"

namespace primus::config {

Origin Origin::in_file(std::string file, int line, int column) {
  Origin o;
  o.kind = Kind::kFile;
  o.file = std::move(file);
  o.line = line;
  o.column = column;
  return o;
}

Origin Origin::command_line(std::string tokens) {
  Origin o;
  o.kind = Kind::kCommandLine;
  o.file = std::move(tokens);
  return o;
}

Origin Origin::by_default() {
  Origin o;
  o.kind = Kind::kDefault;
  return o;
}

Origin Origin::derived(std::string how) {
  Origin o;
  o.kind = Kind::kDerived;
  o.file = std::move(how);
  return o;
}

std::string Origin::str() const {
  std::string s;
  switch (kind) {
    case Kind::kNone:
      s = "unknown origin";
      break;
    case Kind::kFile:
      s = fmt::format("{}:{}:{}", file, line, column);
      break;
    case Kind::kCommandLine:
      s = file.empty() ? "command line" : fmt::format("command line ({})", file);
      break;
    case Kind::kDefault:
      s = "default";
      break;
    case Kind::kDerived:
      s = fmt::format("derived ({})", file);
      break;
  }
  if (!note.empty()) s += fmt::format(" [{}]", note);
  return s;
}

Value Value::null(Origin o) {
  Value v;
  v.origin_ = std::move(o);
  return v;
}
Value Value::boolean(bool b, Origin o) {
  Value v;
  v.type_ = Type::kBool;
  v.b_ = b;
  v.origin_ = std::move(o);
  return v;
}
Value Value::integer(int64_t i, Origin o) {
  Value v;
  v.type_ = Type::kInt;
  v.i_ = i;
  v.origin_ = std::move(o);
  return v;
}
Value Value::real(double d, Origin o) {
  Value v;
  v.type_ = Type::kFloat;
  v.d_ = d;
  v.origin_ = std::move(o);
  return v;
}
Value Value::string(std::string s, Origin o) {
  Value v;
  v.type_ = Type::kString;
  v.s_ = std::move(s);
  v.origin_ = std::move(o);
  return v;
}
Value Value::list(Origin o) {
  Value v;
  v.type_ = Type::kList;
  v.origin_ = std::move(o);
  return v;
}
Value Value::map(Origin o) {
  Value v;
  v.type_ = Type::kMap;
  v.origin_ = std::move(o);
  return v;
}

namespace {
[[noreturn]] void type_mismatch(std::string_view want, const Value& v) {
  PRIMUS_FAIL("config value {} is a {}, not a {}", v.repr(), v.type_name(), want);
}
}  // namespace

bool Value::as_bool() const {
  if (type_ != Type::kBool) type_mismatch("bool", *this);
  return b_;
}
int64_t Value::as_int() const {
  if (type_ != Type::kInt) type_mismatch("int", *this);
  return i_;
}
double Value::as_float() const {
  if (type_ == Type::kInt) return static_cast<double>(i_);
  if (type_ != Type::kFloat) type_mismatch("float", *this);
  return d_;
}
const std::string& Value::as_string() const {
  if (type_ != Type::kString) type_mismatch("string", *this);
  return s_;
}
const Value::List& Value::items() const {
  if (type_ != Type::kList) type_mismatch("list", *this);
  return list_;
}
Value::List& Value::items() {
  if (type_ != Type::kList) type_mismatch("list", *this);
  return list_;
}
const Value::Map& Value::entries() const {
  if (type_ != Type::kMap) type_mismatch("map", *this);
  return map_;
}
Value::Map& Value::entries() {
  if (type_ != Type::kMap) type_mismatch("map", *this);
  return map_;
}

const Value* Value::find(std::string_view key) const {
  if (type_ != Type::kMap) return nullptr;
  for (const auto& [k, v] : map_)
    if (k == key) return &v;
  return nullptr;
}

Value* Value::find(std::string_view key) {
  if (type_ != Type::kMap) return nullptr;
  for (auto& [k, v] : map_)
    if (k == key) return &v;
  return nullptr;
}

const Value* Value::find_path(std::string_view dotted) const {
  const Value* node = this;
  while (node != nullptr) {
    size_t dot = dotted.find('.');
    node = node->find(dotted.substr(0, dot));
    if (dot == std::string_view::npos) return node;
    dotted.remove_prefix(dot + 1);
  }
  return nullptr;
}

void Value::set(const std::string& key, Value v) {
  if (Value* existing = find(key)) {
    *existing = std::move(v);
    return;
  }
  entries().emplace_back(key, std::move(v));
}

bool Value::erase(std::string_view key) {
  if (type_ != Type::kMap) return false;
  for (auto it = map_.begin(); it != map_.end(); ++it) {
    if (it->first == key) {
      map_.erase(it);
      return true;
    }
  }
  return false;
}

void Value::push_back(Value v) {
  items().push_back(std::move(v));
}

std::string format_float(double d) {
  if (std::isnan(d)) return ".nan";
  if (std::isinf(d)) return d > 0 ? ".inf" : "-.inf";
  std::string s = fmt::format("{}", d);
  size_t e = s.find_first_of("eE");
  std::string mantissa = s.substr(0, e);
  std::string exponent = e == std::string::npos ? "" : s.substr(e);
  if (mantissa.find('.') == std::string::npos) mantissa += ".0";
  if (!exponent.empty() && exponent[1] != '+' && exponent[1] != '-') exponent.insert(1, "+");
  return mantissa + exponent;
}

std::string Value::repr() const {
  switch (type_) {
    case Type::kNull:
      return "null";
    case Type::kBool:
      return b_ ? "true" : "false";
    case Type::kInt:
      return std::to_string(i_);
    case Type::kFloat:
      return format_float(d_);
    case Type::kString: {
      if (!needs_quotes(s_)) return s_;
      std::string out = "\"";
      for (char c : s_) {
        if (c == '"' || c == '\\') out.push_back('\\');
        if (c == '\n') {
          out += "\\n";
          continue;
        }
        out.push_back(c);
      }
      return out + "\"";
    }
    case Type::kList: {
      std::string out = "[";
      for (size_t i = 0; i < list_.size(); ++i) out += (i ? ", " : "") + list_[i].repr();
      return out + "]";
    }
    case Type::kMap: {
      std::string out = "{";
      for (size_t i = 0; i < map_.size(); ++i)
        out += (i ? ", " : "") + map_[i].first + ": " + map_[i].second.repr();
      return out + "}";
    }
  }
  return "?";
}

std::string_view Value::type_name(Type t) {
  switch (t) {
    case Type::kNull:
      return "null";
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kFloat:
      return "float";
    case Type::kString:
      return "string";
    case Type::kList:
      return "list";
    case Type::kMap:
      return "map";
  }
  return "?";
}

bool Value::operator==(const Value& o) const {
  if (type_ != o.type_) return false;
  switch (type_) {
    case Type::kNull:
      return true;
    case Type::kBool:
      return b_ == o.b_;
    case Type::kInt:
      return i_ == o.i_;
    case Type::kFloat:
      return d_ == o.d_ || (std::isnan(d_) && std::isnan(o.d_));
    case Type::kString:
      return s_ == o.s_;
    case Type::kList:
      return list_ == o.list_;
    case Type::kMap:
      return map_ == o.map_;
  }
  return false;
}

}  // namespace primus::config
