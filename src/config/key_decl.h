#pragma once
// Every configuration key is declared once: name, type, default, a one-line doc, a value rule and a status.
//   implemented      the key changes what Primus-C++ does;
//   no effect here   accepted and listed with the reason by --dry-run (ROCm/PyTorch/logging switches, overlap
//                    knobs at world size 1, settings of features that are off, ...);
//   not supported yet  loads, but a value that would change the training result fails with
//                    "not supported yet: KEY=VALUE"; the inert values (null/false/0/... by default) pass.
// An implemented key may also support only some values (TP = 1, normalization RMSNorm): the others fail the
// same way. A key in no declaration is an error, so nothing is ignored silently.
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/value.h"

namespace primus::config {

enum class KeyType : uint8_t { kBool, kInt, kFloat, kString, kList, kMap, kAny, kSection };
enum class KeyStatus : uint8_t { kImplemented, kNoEffect, kNotSupported };

std::string_view key_type_name(KeyType t);
std::string_view key_status_name(KeyStatus s);

// Read access to the other (typed) keys, for rules that depend on context, e.g. sequence_parallel is inert
// when tensor_model_parallel_size is 1.
class KeyLookup {
 public:
  virtual ~KeyLookup() = default;
  virtual const Value* get(std::string_view key) const = 0;
  int64_t int_or(std::string_view key, int64_t fallback) const;
  bool bool_or(std::string_view key, bool fallback) const;
  bool is_set(std::string_view key) const;  // present and not null
};

// "" when the value is fine, else the rule it breaks ("must be > 0", "one of: a, b").
using ValueRule = std::function<std::string(const Value&)>;
// True when Primus-C++ handles this value (for kNotSupported: the value changes nothing).
using SupportRule = std::function<bool(const Value&, const KeyLookup&)>;

struct KeyDecl {
  std::string name;  // dotted for sections: "training.local_batch_size"
  KeyType type = KeyType::kAny;
  bool nullable = true;
  std::string default_yaml = "null";
  std::string doc;
  KeyStatus status = KeyStatus::kImplemented;
  std::string reason;      // kNoEffect: why; kNotSupported / partial support: what does work
  std::string group;       // heading in --dry-run
  bool extension = false;  // a Primus-C++ key that Primus does not have
  ValueRule rule;
  SupportRule supported;
  Value default_value;  // parsed from default_yaml when the table is built

  // Fluent setters so that the tables read as one line per key.
  KeyDecl&& check(ValueRule r) && {
    rule = std::move(r);
    return std::move(*this);
  }
  KeyDecl&& supports(SupportRule s, std::string what) && {
    supported = std::move(s);
    reason = std::move(what);
    return std::move(*this);
  }
  KeyDecl&& non_null() && {
    nullable = false;
    return std::move(*this);
  }
  KeyDecl&& ext() && {
    extension = true;
    return std::move(*this);
  }
};

class KeyTable {
 public:
  explicit KeyTable(std::string dialect) : dialect_(std::move(dialect)) {}
  // Sets the --dry-run heading for the keys added after it.
  void group(std::string g) { group_ = std::move(g); }
  // Adds a declaration (a duplicate name is a programming error and throws).
  void add(KeyDecl d);
  const KeyDecl* find(std::string_view name) const;
  const std::vector<KeyDecl>& all() const { return decls_; }
  std::vector<std::string> names() const;  // leaf keys and sections
  const std::string& dialect() const { return dialect_; }

 private:
  std::string dialect_;
  std::string group_ = "other";
  std::vector<KeyDecl> decls_;
  std::unordered_map<std::string, size_t> index_;
};

// The tables, built once on first use.
const KeyTable& megatron_keys();
const KeyTable& torchtitan_keys();
const KeyTable& platform_keys();
const KeyTable& keys_for_framework(const std::string& framework);  // "megatron" | "torchtitan"

}  // namespace primus::config
