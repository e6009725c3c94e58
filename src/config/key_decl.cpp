#include "config/key_decl.h"

#include <fmt/format.h>

#include "config/yaml_reader.h"
#include "core/error.h"

namespace primus::config {

std::string_view key_type_name(KeyType t) {
  switch (t) {
    case KeyType::kBool:
      return "bool";
    case KeyType::kInt:
      return "int";
    case KeyType::kFloat:
      return "float";
    case KeyType::kString:
      return "string";
    case KeyType::kList:
      return "list";
    case KeyType::kMap:
      return "map";
    case KeyType::kAny:
      return "any";
    case KeyType::kSection:
      return "section";
  }
  return "?";
}

std::string_view key_status_name(KeyStatus s) {
  switch (s) {
    case KeyStatus::kImplemented:
      return "implemented";
    case KeyStatus::kNoEffect:
      return "no effect here";
    case KeyStatus::kNotSupported:
      return "not supported yet";
  }
  return "?";
}

int64_t KeyLookup::int_or(std::string_view key, int64_t fallback) const {
  const Value* v = get(key);
  return v != nullptr && v->is_int() ? v->as_int() : fallback;
}

bool KeyLookup::bool_or(std::string_view key, bool fallback) const {
  const Value* v = get(key);
  return v != nullptr && v->is_bool() ? v->as_bool() : fallback;
}

bool KeyLookup::is_set(std::string_view key) const {
  const Value* v = get(key);
  return v != nullptr && !v->is_null();
}

void KeyTable::add(KeyDecl d) {
  if (index_.count(d.name) != 0)
    PRIMUS_FAIL("config key '{}' declared twice in the {} table", d.name, dialect_);
  if (d.group.empty()) d.group = group_;
  if (d.type != KeyType::kSection) {
    // Defaults are YAML text so that the tables can say "null", "[0]" or "'99,1,0'" as the files do.
    Value v = read_yaml_text(d.default_yaml, "default of " + d.name);
    Origin o = Origin::by_default();
    v.set_origin(o);
    d.default_value = std::move(v);
  }
  index_.emplace(d.name, decls_.size());
  decls_.push_back(std::move(d));
}

const KeyDecl* KeyTable::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &decls_[it->second];
}

std::vector<std::string> KeyTable::names() const {
  std::vector<std::string> out;
  out.reserve(decls_.size());
  for (const auto& d : decls_) out.push_back(d.name);
  return out;
}

}  // namespace primus::config
