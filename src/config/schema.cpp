#include "config/schema.h"

#include <fmt/format.h>

#include <algorithm>

#include "config/did_you_mean.h"
#include "config/not_supported.h"
#include "config/problems.h"
#include "config/yaml_scalar.h"
#include "core/error.h"

namespace primus::config {

const Value* CheckedKeys::get(std::string_view key) const {
  const KeyEntry* e = entry(key);
  return e == nullptr ? nullptr : &e->value;
}

const KeyEntry* CheckedKeys::entry(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries[it->second];
}

void CheckedKeys::build_index() {
  index_.clear();
  for (size_t i = 0; i < entries.size(); ++i) index_.emplace(entries[i].decl->name, i);
  consumed_.assign(entries.size(), 0);
}

const Value& CheckedKeys::consume(std::string_view key) const {
  auto it = index_.find(std::string(key));
  if (it == index_.end())
    PRIMUS_FAIL("config key '{}' is not declared in the {} table", key,
                table == nullptr ? "?" : table->dialect());
  consumed_[it->second] = 1;
  return entries[it->second].value;
}

bool CheckedKeys::consumed(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it != index_.end() && consumed_[it->second] != 0;
}

const Value& CheckedKeys::value(std::string_view key) const {
  return consume(key);
}
bool CheckedKeys::is_null(std::string_view key) const {
  return consume(key).is_null();
}
int64_t CheckedKeys::i(std::string_view key) const {
  return consume(key).as_int();
}
double CheckedKeys::f(std::string_view key) const {
  return consume(key).as_float();
}
bool CheckedKeys::b(std::string_view key) const {
  const Value& v = consume(key);
  return v.is_null() ? false : v.as_bool();
}
std::string CheckedKeys::s(std::string_view key) const {
  const Value& v = consume(key);
  return v.is_null() ? std::string() : v.as_string();
}
const Origin& CheckedKeys::origin(std::string_view key) const {
  const Value* v = get(key);
  if (v == nullptr)
    PRIMUS_FAIL("config key '{}' is not declared in the {} table", key,
                table == nullptr ? "?" : table->dialect());
  return v->origin();
}

bool coerce_to_type(Value& v, KeyType type, bool nullable, std::string* problem) {
  Origin o = v.origin();
  auto fail = [&](std::string_view want) {
    *problem = fmt::format("expected {}, got {} {}", want, v.type_name(), v.repr());
    return false;
  };
  if (v.is_null()) {
    if (nullable || type == KeyType::kAny) return true;
    *problem = "must not be null";
    return false;
  }
  switch (type) {
    case KeyType::kAny:
    case KeyType::kSection:
      return true;
    case KeyType::kBool:
      if (v.is_bool()) return true;
      // Primus files write `sequence_parallel: 1` and `${CONTI_PARAMS:0}`; argparse-style flags take 0/1.
      if (v.is_int() && (v.as_int() == 0 || v.as_int() == 1)) {
        v = Value::boolean(v.as_int() == 1, o);
        return true;
      }
      if (v.is_string()) {
        std::string lower = v.as_string();
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](unsigned char c) { return std::tolower(c); });
        if (lower == "true" || lower == "false") {
          v = Value::boolean(lower == "true", o);
          return true;
        }
      }
      return fail("a bool (true/false)");
    case KeyType::kInt:
      if (v.is_int()) return true;
      if (v.is_string()) {
        if (auto i = python_int(v.as_string())) {
          v = Value::integer(*i, o);
          return true;
        }
      }
      return fail("an integer");
    case KeyType::kFloat:
      if (v.is_float()) return true;
      if (v.is_int()) {
        v = Value::real(static_cast<double>(v.as_int()), o);
        return true;
      }
      // `--lr 1e-5` arrives as the string "1e-5" (Primus's CLI typing; YAML 1.1 also reads 1e-5 as a string).
      if (v.is_string()) {
        if (auto f = python_float(v.as_string())) {
          v = Value::real(*f, o);
          return true;
        }
      }
      return fail("a number");
    case KeyType::kString:
      if (v.is_string()) return true;
      if (v.is_number()) {
        v = Value::string(v.repr(), o);
        return true;
      }
      return fail("a string");
    case KeyType::kList:
      if (v.is_list()) return true;
      return fail("a list");
    case KeyType::kMap:
      if (v.is_map()) return true;
      return fail("a map");
  }
  return true;
}

namespace {

void flatten(const Value& map, const std::string& prefix, const KeyTable& table, const std::string& what,
             std::vector<std::pair<const KeyDecl*, Value>>& out, Problems& problems,
             const std::vector<std::string>& all_names) {
  for (const auto& [key, value] : map.entries()) {
    std::string name = prefix.empty() ? key : prefix + "." + key;
    if (key.find('.') != std::string::npos) {
      // Only the command line nests dotted names; in a file, "training.seq_len: 5" would be a second spelling
      // of training: {seq_len: ...} that Primus never reads.
      problems.add(fmt::format(
          "{}: key '{}' contains a dot; in a YAML file write it nested ({}: {{{}: ...}})",
          value.origin().str(), name, name.substr(0, name.rfind('.')), name.substr(name.rfind('.') + 1)));
      continue;
    }
    const KeyDecl* decl = table.find(name);
    if (decl == nullptr) {
      problems.add(fmt::format("{}: unknown key '{}' in {}{}", value.origin().str(), name, what,
                               did_you_mean_text(name, all_names)));
      continue;
    }
    if (decl->type == KeyType::kSection) {
      if (value.is_null()) continue;  // an empty section, as `float8:` with everything commented out
      if (!value.is_map()) {
        problems.add(fmt::format("{}: '{}' is a section and must hold keys, got {} {}", value.origin().str(),
                                 name, value.type_name(), value.repr()));
        continue;
      }
      flatten(value, name, table, what, out, problems, all_names);
      continue;
    }
    out.emplace_back(decl, value);
  }
}

}  // namespace

CheckedKeys check_keys(const Value& tree, const KeyTable& table, const std::string& what,
                       std::vector<std::string>* unsupported_out) {
  const std::string hint = "see docs/configuration.md for the keys and their status";
  if (!tree.is_map()) throw ConfigError(fmt::format("{}: expected a mapping of keys", what));
  const std::vector<std::string> all_names = table.names();

  std::vector<std::pair<const KeyDecl*, Value>> given;
  Problems problems;
  flatten(tree, "", table, what, given, problems, all_names);

  // Types and value rules.
  for (auto& [decl, value] : given) {
    std::string problem;
    if (!coerce_to_type(value, decl->type, decl->nullable, &problem)) {
      problems.add(fmt::format("{}: {} has the wrong type: {}", value.origin().str(), decl->name, problem));
      continue;
    }
    if (decl->rule && !value.is_null()) {
      std::string broken = decl->rule(value);
      if (!broken.empty())
        problems.add(fmt::format("{}: invalid value {}={}: {}", value.origin().str(), decl->name,
                                 value.repr(), broken));
    }
  }
  problems.throw_if_any(what, hint);

  // Every declared leaf, in table order; absent keys take their defaults.
  CheckedKeys out;
  out.table = &table;
  for (const KeyDecl& decl : table.all()) {
    if (decl.type == KeyType::kSection) continue;
    auto it = std::find_if(given.begin(), given.end(), [&](const auto& g) { return g.first == &decl; });
    Value v = it != given.end() ? it->second : decl.default_value;
    if (it == given.end()) {
      std::string problem;
      if (!coerce_to_type(v, decl.type, true, &problem))
        PRIMUS_FAIL("default of config key '{}' does not have its type: {}", decl.name, problem);
    }
    out.entries.push_back({&decl, std::move(v)});
  }
  out.build_index();

  // Values of features we do not have.
  Problems unsupported;
  for (const KeyEntry& e : out.entries) {
    if (!e.decl->supported || e.decl->supported(e.value, out)) continue;
    std::string note = e.decl->reason.empty() ? e.decl->doc : e.decl->doc + "; " + e.decl->reason;
    unsupported.add(fmt::format("{}: not supported yet: {}={} ({})", e.value.origin().str(), e.decl->name,
                                e.value.repr(), note));
  }
  if (unsupported_out != nullptr) {
    unsupported_out->insert(unsupported_out->end(), unsupported.lines.begin(), unsupported.lines.end());
    return out;
  }
  unsupported.throw_if_any<NotSupportedError>(
      what, "Primus-C++ does not have these features yet; see docs/configuration.md");
  return out;
}

}  // namespace primus::config
