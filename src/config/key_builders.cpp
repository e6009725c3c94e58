#include "config/key_builders.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "config/yaml_scalar.h"

namespace primus::config::keys {

KeyDecl impl(std::string name, KeyType type, std::string def, std::string doc) {
  KeyDecl d;
  d.name = std::move(name);
  d.type = type;
  d.default_yaml = std::move(def);
  d.doc = std::move(doc);
  d.status = KeyStatus::kImplemented;
  return d;
}

KeyDecl noeff(std::string name, KeyType type, std::string def, std::string why, std::string doc) {
  KeyDecl d = impl(std::move(name), type, std::move(def), std::move(doc));
  d.status = KeyStatus::kNoEffect;
  d.reason = std::move(why);
  return d;
}

KeyDecl unsup(std::string name, KeyType type, std::string def, std::string doc) {
  KeyDecl d = impl(std::move(name), type, std::move(def), std::move(doc));
  d.status = KeyStatus::kNotSupported;
  d.supported = inert_default();
  return d;
}

KeyDecl unsup(std::string name, KeyType type, std::string def, std::string doc, SupportRule inert,
              std::string what) {
  KeyDecl d = impl(std::move(name), type, std::move(def), std::move(doc));
  d.status = KeyStatus::kNotSupported;
  d.supported = std::move(inert);
  d.reason = std::move(what);
  return d;
}

std::optional<std::vector<int64_t>> layer_ids_of(const Value& v) {
  std::vector<int64_t> ids;
  auto take = [&](std::optional<int64_t> id) {
    if (!id || *id < 0) return false;
    ids.push_back(*id);
    return true;
  };
  if (v.is_int()) {  // one layer (`--recompute_layer_ids 3` arrives as an integer)
    if (!take(v.as_int())) return std::nullopt;
  } else if (v.is_list()) {
    for (const Value& item : v.items())
      if (!item.is_int() || !take(item.as_int())) return std::nullopt;
  } else if (v.is_string()) {
    const std::string text = v.as_string();
    size_t start = 0;
    for (;;) {
      const size_t comma = text.find(',', start);
      std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      while (!part.empty() && part.front() == ' ') part.erase(part.begin());
      while (!part.empty() && part.back() == ' ') part.pop_back();
      if (!take(python_int(part))) return std::nullopt;
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else {
    return std::nullopt;
  }
  return ids;
}

ValueRule layer_id_list() {
  return [](const Value& v) -> std::string {
    return layer_ids_of(v) ? "" : "must be a list of layer indices >= 0 or a string like \"0,3,4\"";
  };
}

KeyDecl unsup_unless_default(std::string name, KeyType type, std::string def, std::string doc) {
  Value at_default = resolve_plain_scalar(def, Origin::derived("default"));
  KeyDecl d = unsup(std::move(name), type, std::move(def), std::move(doc));
  SupportRule inert = inert_default();
  d.supported = [inert, at_default](const Value& v, const KeyLookup& k) {
    if (inert(v, k)) return true;
    if (v.is_number() && at_default.is_number()) return v.as_float() == at_default.as_float();
    return v == at_default;
  };
  return d;
}

KeyDecl section(std::string name, std::string doc) {
  KeyDecl d;
  d.name = std::move(name);
  d.type = KeyType::kSection;
  d.doc = std::move(doc);
  return d;
}

namespace {
bool numeric(const Value& v) {
  return v.is_number();
}
}  // namespace

ValueRule positive() {
  return [](const Value& v) -> std::string {
    if (numeric(v) && v.as_float() <= 0) return "must be > 0";
    return "";
  };
}

ValueRule non_negative() {
  return [](const Value& v) -> std::string {
    if (numeric(v) && v.as_float() < 0) return "must be >= 0";
    return "";
  };
}

ValueRule at_least(double lo) {
  return [lo](const Value& v) -> std::string {
    if (numeric(v) && v.as_float() < lo) return fmt::format("must be >= {}", lo);
    return "";
  };
}

ValueRule in_range(double lo, double hi) {
  return [lo, hi](const Value& v) -> std::string {
    if (numeric(v) && (v.as_float() < lo || v.as_float() > hi || std::isnan(v.as_float())))
      return fmt::format("must be in [{}, {}]", lo, hi);
    return "";
  };
}

ValueRule one_of(std::initializer_list<const char*> choices) {
  std::vector<std::string> ok(choices.begin(), choices.end());
  return [ok](const Value& v) -> std::string {
    if (!v.is_string()) return "";
    for (const auto& c : ok)
      if (v.as_string() == c) return "";
    return fmt::format("must be one of: {}", fmt::join(ok, ", "));
  };
}

SupportRule inert_default() {
  return [](const Value& v, const KeyLookup&) {
    switch (v.type()) {
      case Value::Type::kNull:
        return true;
      case Value::Type::kBool:
        return !v.as_bool();
      case Value::Type::kInt:
        return v.as_int() == 0;
      case Value::Type::kFloat:
        return v.as_float() == 0.0;
      case Value::Type::kString:
        return v.as_string().empty();
      case Value::Type::kList:
        return v.items().empty();
      case Value::Type::kMap:
        return v.entries().empty();
    }
    return false;
  };
}

SupportRule null_or(std::initializer_list<const char*> ok_list) {
  std::vector<std::string> ok(ok_list.begin(), ok_list.end());
  return [ok](const Value& v, const KeyLookup&) {
    if (v.is_null()) return true;
    if (!v.is_string()) return false;
    for (const auto& s : ok)
      if (v.as_string() == s) return true;
    return false;
  };
}

SupportRule strings(std::initializer_list<const char*> ok_list) {
  return null_or(ok_list);
}

SupportRule null_or_int(int64_t ok) {
  return [ok](const Value& v, const KeyLookup&) { return v.is_null() || (v.is_int() && v.as_int() == ok); };
}

SupportRule null_or_number(double ok) {
  return
      [ok](const Value& v, const KeyLookup&) { return v.is_null() || (v.is_number() && v.as_float() == ok); };
}

SupportRule is_bool(bool ok) {
  return [ok](const Value& v, const KeyLookup&) {
    return v.is_bool() ? v.as_bool() == ok : (v.is_null() && !ok);
  };
}

void add_all(KeyTable& t, const char* why, std::initializer_list<Knob> knobs) {
  for (const Knob& k : knobs) t.add(noeff(k.name, k.type, k.def, why, k.doc));
}

}  // namespace primus::config::keys
