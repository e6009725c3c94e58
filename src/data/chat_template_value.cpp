#include "data/chat_template_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace primus::data::jinja {

// ---------------------------------------------------------------------------------------------------------
// The render's limits.

namespace {
thread_local RenderScope* g_scope = nullptr;
}

RenderScope::RenderScope() : previous_(g_scope) {
  g_scope = this;
}

RenderScope::~RenderScope() {
  g_scope = previous_;
  // Empty each namespace while this scope still holds all of them: freeing an attribute's value then stops at
  // the namespaces it reaches (values between them are at most Limits::kValueDepth deep), so neither a cycle
  // (`set ns.self = ns`) nor a long chain of namespaces outlives the render or is freed recursively.
  for (auto& ns : namespaces_) {
    auto items = std::move(ns->items);
    ns->items.clear();
  }
}

RenderScope* RenderScope::current() {
  return g_scope;
}

void RenderScope::bytes(uint64_t n) {
  if (n > Limits::kBytes - bytes_)
    throw TemplateRuntimeError(fmt::format(
        "the render needs more than {} MiB of strings and values (a string or list that keeps growing?)",
        Limits::kBytes >> 20));
  bytes_ += n;
}

void RenderScope::steps(uint64_t n) {
  if (n > Limits::kSteps - steps_)
    throw TemplateRuntimeError(
        fmt::format("the render takes more than {} steps (loops over too many items, or nested too deep?)",
                    Limits::kSteps));
  steps_ += n;
}

RenderScope::Nest::Nest() : scope_(g_scope) {
  if (scope_ && ++scope_->depth_ > Limits::kRenderDepth) {
    --scope_->depth_;
    throw TemplateRuntimeError(
        fmt::format("the render nests deeper than {} levels (a macro that calls itself without end?)",
                    Limits::kRenderDepth));
  }
}

RenderScope::Nest::~Nest() {
  if (scope_) --scope_->depth_;
}

void charge_bytes(uint64_t n) {
  if (g_scope) g_scope->bytes(n);
}

void charge_steps(uint64_t n) {
  if (g_scope) g_scope->steps(n);
}

// ---------------------------------------------------------------------------------------------------------
// Values.

const Value* Dict::find(const std::string& key) const {
  charge_steps(1 + items.size() / 8);  // a linear scan: dicts built by templates can be large
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  charge_steps(1 + items.size() / 8);
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Dict::key(const std::string& stored) const {
  return int_keys ? Value::integer(std::stoll(stored)) : Value::string(stored);
}

Value::Value() {
  charge_bytes(sizeof(Value));
}

Value::Value(const Value& o)
    : kind(o.kind),
      b(o.b),
      i(o.i),
      f(o.f),
      list(o.list),
      tuple(o.tuple),
      dict(o.dict),
      fn(o.fn),
      depth(o.depth) {
  charge_bytes(sizeof(Value) + o.s.size());  // before the string is duplicated
  s = o.s;
}

Value& Value::operator=(const Value& o) {
  if (this != &o) *this = Value(o);
  return *this;
}

namespace {

// The depth of a container of `items`; past Limits::kValueDepth a render fails (the caller's context,
// converted before the render, is not checked).
uint32_t container_depth(uint32_t deepest_item) {
  const uint32_t depth = deepest_item + 1;
  if (depth > Limits::kValueDepth && RenderScope::current())
    throw TemplateRuntimeError(
        fmt::format("lists and dicts nested deeper than {} levels", Limits::kValueDepth));
  return depth;
}

}  // namespace

Value Value::undefined(std::string name) {
  Value v;
  v.s = std::move(name);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.b = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.i = i;
  return v;
}
Value Value::real(double f) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = f;
  return v;
}
Value Value::string(std::string s) {
  charge_bytes(s.size());
  Value v;
  v.kind = Kind::kString;
  v.s = std::move(s);
  return v;
}
Value Value::make_list(List items) {
  uint32_t deepest = 0;
  for (const Value& x : items) deepest = std::max(deepest, x.depth);
  Value v;
  v.kind = Kind::kList;
  v.depth = container_depth(deepest);
  v.list = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::make_tuple(List items) {
  Value v = make_list(std::move(items));
  v.tuple = true;
  return v;
}
Value Value::make_dict(Dict d) {
  uint32_t deepest = 0;
  for (const auto& kv : d.items) deepest = std::max(deepest, kv.second.depth);
  Value v;
  v.kind = Kind::kDict;
  v.depth = container_depth(deepest);
  v.dict = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::make_namespace(Dict d) {
  Value v = make_dict(std::move(d));
  v.kind = Kind::kNamespace;
  return v;
}
Value Value::callable(std::string name, std::function<Value(CallArgs&)> fn) {
  Value v;
  v.kind = Kind::kCallable;
  v.fn = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b;
    case Kind::kInt:
      return i != 0;
    case Kind::kFloat:
      return f != 0;
    case Kind::kString:
      return !s.empty();
    case Kind::kList:
      return !list->empty();
    case Kind::kDict:
      return !dict->items.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

namespace {

// Python's repr(float): the shortest digits that round-trip, in fixed notation for exponents in [-4, 16) and
// scientific notation (two exponent digits at least) outside, always with a '.0' or an exponent.
std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  bool neg = !mant.empty() && mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(static_cast<size_t>(exp + 1 - static_cast<int>(digits.size())), '0') + ".0";
    } else {
      out =
          digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return neg ? "-" + out : out;
}

std::string string_repr(const std::string& s) {
  // Python prefers single quotes unless the string holds a single quote and no double quote.
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  charge_bytes(s.size() + 2);
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) charge_bytes(3);  // an escape is up to 4 bytes for 1
    if (c == static_cast<unsigned char>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

}  // namespace

std::string Value::str() const {
  switch (kind) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return s;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i);
    case Kind::kFloat:
      return float_repr(f);
    case Kind::kString:
      return string_repr(s);
    case Kind::kList: {
      // Each level of nesting copies the text of the levels inside it: charged as it is copied.
      charge_steps(1);
      std::string out = tuple ? "(" : "[";
      for (size_t k = 0; k < list->size(); ++k) out += (k ? ", " : "") + (*list)[k].repr();
      charge_bytes(out.size());
      if (tuple) return out + (list->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::kDict: {
      charge_steps(1);
      std::string out = "{";
      for (size_t k = 0; k < dict->items.size(); ++k)
        out += (k ? ", " : "") + string_repr(dict->items[k].first) + ": " + dict->items[k].second.repr();
      charge_bytes(out.size());
      return out + "}";
    }
    case Kind::kNamespace:
      return "<Namespace>";
    case Kind::kCallable:
      return "<function " + fn->name + ">";
  }
  return "";
}

const char* Value::type_name() const {
  switch (kind) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  charge_steps(1);
  // Python: True == 1 and 1 == 1.0; bools are ints.
  auto numeric = [](const Value& v) { return v.is_number() || v.kind == K::kBool; };
  if (numeric(a) && numeric(b)) {
    double x = a.kind == K::kBool ? a.b : a.as_double();
    double y = b.kind == K::kBool ? b.b : b.as_double();
    return x == y;
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      charge_bytes(std::min(a.s.size(), b.s.size()));
      return a.s == b.s;
    case K::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case K::kDict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    }
    default:
      return a.dict == b.dict && a.fn == b.fn;  // identity for namespaces and callables
  }
}

Value CallArgs::get(size_t index, const std::string& name, Value fallback) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return fallback;
}

namespace {

void json_string(const std::string& s, std::string& out) {
  charge_bytes(s.size() + 2);
  out += '"';
  for (unsigned char c : s) {
    if (c < 0x20 || c == '"' || c == '\\') charge_bytes(5);  // an escape is up to 6 bytes for 1
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);  // ensure_ascii=False: UTF-8 passes through
        }
    }
  }
  out += '"';
}

void json_value(const Value& v, int indent, bool sort_keys, int depth, std::string& out) {
  using K = Value::Kind;
  charge_steps(1);
  auto newline = [&](int d) {
    const uint64_t spaces = static_cast<uint64_t>(indent) * static_cast<uint64_t>(d);
    charge_bytes(1 + spaces);
    out += '\n';
    out.append(spaces, ' ');
  };
  // Python's separators: (', ', ': ') without indent, (',', ': ') with one.
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case K::kUndefined:
    case K::kNone:
      out += "null";
      return;
    case K::kBool:
      out += v.b ? "true" : "false";
      return;
    case K::kInt:
      out += std::to_string(v.i);
      return;
    case K::kFloat:
      if (std::isnan(v.f))
        out += "NaN";
      else if (std::isinf(v.f))
        out += v.f < 0 ? "-Infinity" : "Infinity";
      else
        out += v.repr();
      return;
    case K::kString:
      json_string(v.s, out);
      return;
    case K::kList: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        json_value((*v.list)[k], indent, sort_keys, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case K::kNamespace:
      // As Python's json.dumps (which transformers' tojson calls) refuses a Namespace or a loop object; and a
      // namespace can hold itself.
      throw TemplateRuntimeError("tojson: an object of type Namespace is not JSON serializable");
    case K::kDict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        json_string(items[k]->first, out);
        out += ": ";
        json_value(items[k]->second, indent, sort_keys, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
    case K::kCallable:
      out += "null";
      return;
  }
}

}  // namespace

std::string to_json(const Value& v, int indent, bool sort_keys) {
  std::string out;
  json_value(v, indent, sort_keys, 0, out);
  return out;
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), from_json(it.value()));
      return Value::make_dict(std::move(d));
    }
    default:
      return Value::none();
  }
}

}  // namespace primus::data::jinja
