#pragma once
// A configuration value tree (null, bool, int, float, string, list, ordered map) in which every node
// remembers where it came from, so that errors and `--dry-run` can cite "file:line:col", "command line" or
// "default". YAML nodes from yaml-cpp carry only untyped scalars and no file name, which is why the loader
// converts them.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace primus::config {

struct Origin {
  enum class Kind : uint8_t { kNone, kFile, kCommandLine, kDefault, kDerived };
  Kind kind = Kind::kNone;
  std::string file;  // kFile: the YAML file; kCommandLine: the token(s); kDerived: how it was computed
  int line = 0;      // 1-based (kFile only)
  int column = 0;    // 1-based (kFile only)
  std::string note;  // extra detail, e.g. the `${VAR:default}` text a value was substituted from

  static Origin in_file(std::string file, int line, int column);
  static Origin command_line(std::string tokens);
  static Origin by_default();
  static Origin derived(std::string how);
  bool is_file() const { return kind == Kind::kFile; }
  // "path:12:3", "command line (--lr 1e-5)", "default", "derived (...)"; the note is appended in brackets.
  std::string str() const;
};

class Value {
 public:
  enum class Type : uint8_t { kNull, kBool, kInt, kFloat, kString, kList, kMap };
  using List = std::vector<Value>;
  using Entry = std::pair<std::string, Value>;
  using Map = std::vector<Entry>;  // insertion-ordered: dumps and reports keep the files' order

  Value() = default;
  static Value null(Origin o = {});
  static Value boolean(bool b, Origin o = {});
  static Value integer(int64_t i, Origin o = {});
  static Value real(double d, Origin o = {});
  static Value string(std::string s, Origin o = {});
  static Value list(Origin o = {});
  static Value map(Origin o = {});

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kFloat; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_map() const { return type_ == Type::kMap; }
  bool is_scalar() const { return !is_list() && !is_map(); }

  // Accessors; callers check the type first (a mismatch throws primus::Error, a programming error).
  bool as_bool() const;
  int64_t as_int() const;
  double as_float() const;  // ints convert
  const std::string& as_string() const;
  const List& items() const;
  List& items();
  const Map& entries() const;
  Map& entries();

  // Map helpers.
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  // Dotted lookup through nested maps: find_path("training.seq_len").
  const Value* find_path(std::string_view dotted) const;
  void set(const std::string& key, Value v);  // replaces in place (keeping the position) or appends
  bool erase(std::string_view key);
  void push_back(Value v);

  const Origin& origin() const { return origin_; }
  void set_origin(Origin o) { origin_ = std::move(o); }

  // Compact YAML flow text for messages: 1, 2.5, 1.0e-05, true, null, abc, "123" (a string that would
  // re-type is quoted), [a, b], {k: v}.
  std::string repr() const;
  // Human type name: "null", "bool", "int", "float", "string", "list", "map".
  static std::string_view type_name(Type t);
  std::string_view type_name() const { return type_name(type_); }

  // Structural equality (origins ignored; 1 == 1.0 is false: types must match).
  bool operator==(const Value& other) const;

 private:
  Type type_ = Type::kNull;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0.0;
  std::string s_;
  List list_;
  Map map_;
  Origin origin_;
};

// Formats a double the way YAML 1.1 (and PyYAML) reads back as a float: always a '.', signed exponent,
// .inf/.nan.
std::string format_float(double d);

}  // namespace primus::config
