#pragma once
// Checks a merged module tree against a dialect's key table: every key must be declared (else an error with
// its file:line:col and a did-you-mean), every value must have the declared type (numeric strings are coerced
// for numeric keys, 0/1 for booleans) and pass the key's rule; absent keys get their declared defaults; and a
// value that would change the result of a feature we do not have fails with "not supported yet: KEY=VALUE".
#include <string>
#include <unordered_map>
#include <vector>

#include "config/key_decl.h"
#include "config/value.h"

namespace primus::config {

struct KeyEntry {
  const KeyDecl* decl = nullptr;
  Value value;  // typed; its origin says where it came from ("default" for keys the files do not set)
  bool is_default() const { return value.origin().kind == Origin::Kind::kDefault; }
};

class CheckedKeys : public KeyLookup {
 public:
  const KeyTable* table = nullptr;
  std::vector<KeyEntry> entries;  // every declared leaf key, in table order

  // Rules and reports look keys up through get() / entry(): that is not a use of the key.
  const Value* get(std::string_view key) const override;
  const KeyEntry* entry(std::string_view key) const;
  // Shorthands for the dialect mappers (the types were checked, so these only see null or the declared type).
  // Each records the key as consumed: the mapper decided something from its value (see consumed()).
  const Value& value(std::string_view key) const;
  bool is_null(std::string_view key) const;
  int64_t i(std::string_view key) const;
  double f(std::string_view key) const;
  bool b(std::string_view key) const;         // null reads as false
  std::string s(std::string_view key) const;  // null reads as ""
  const Origin& origin(std::string_view key) const;

  void build_index();

  // Whether a mapper read the key's value (through value / is_null / i / f / b / s). The key-status test
  // (tests/unit/config_key_use_test.cpp) asserts that every key declared implemented is consumed and no key
  // declared "no effect here" is, for every shipped and Primus experiment, so a label cannot drift from the
  // code.
  bool consumed(std::string_view key) const;

 private:
  const Value& consume(std::string_view key) const;
  std::unordered_map<std::string, size_t> index_;
  mutable std::vector<char> consumed_;  // parallel to entries
};

// `what` names the tree in messages ("module pre_trainer (framework megatron)", "platform").
// Throws ConfigError listing every problem found (unknown keys, types, rules), or every "not supported yet";
// with `unsupported` given, the "not supported yet" lines go there instead (planning, config/experiment.h).
CheckedKeys check_keys(const Value& tree, const KeyTable& table, const std::string& what,
                       std::vector<std::string>* unsupported = nullptr);

// Coerces one value to a declared type; on failure returns false and sets *problem.
bool coerce_to_type(Value& v, KeyType type, bool nullable, std::string* problem);

}  // namespace primus::config
