#pragma once
// The value model of the chat-template interpreter (chat_template.h): the Python values a Jinja2 template
// sees when transformers renders it. Our own small type instead of nlohmann::json because templates need what
// JSON lacks: Jinja's Undefined (prints empty, is falsy, `is defined` false), ints apart from floats (Python
// `/` and `//` differ), insertion-ordered dicts (`tojson` and `items()` keep the caller's key order), mutable
// namespace() objects and callables (macros, bound string methods, builtins).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace primus::data::jinja {

// Where a token or node sits in the template source, for error messages (1-based).
struct SourcePos {
  int line = 1;
  int column = 1;
};

struct Value;
using List = std::vector<Value>;

// An insertion-ordered dict with string keys (chat messages and tool schemas only use string keys). Linear
// lookup: template dicts hold a handful of keys.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  // Set by a dict literal whose keys are all integers (a lookup table such as {0: 0, 512: 128}): the keys are
  // stored as their decimal text but come back as integers from iteration, items(), keys() and dictsort, so
  // `k <= budget` compares numbers as in Python.
  bool int_keys = false;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
  Value key(const std::string& stored) const;  // a stored key as the template sees it
};

struct CallArgs;
struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                 // kString; for kUndefined the name that was looked up (for errors)
  std::shared_ptr<List> list;    // kList, tuples included
  bool tuple = false;            // a kList that prints as a Python tuple: (1, 2), ('key', value)
  std::shared_ptr<Dict> dict;    // kDict, kNamespace (a namespace is a dict whose attributes can be set)
  std::shared_ptr<Callable> fn;  // kCallable

  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value real(double v);
  static Value string(std::string v);
  static Value make_list(List items = {});
  static Value make_tuple(List items);
  static Value make_dict(Dict d = {});
  static Value make_namespace(Dict d = {});
  static Value callable(std::string name, std::function<Value(CallArgs&)> fn);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  bool is_mapping() const { return kind == Kind::kDict || kind == Kind::kNamespace; }
  double as_double() const { return kind == Kind::kInt ? static_cast<double>(i) : f; }

  bool truthy() const;            // Python truthiness; Undefined is falsy
  std::string str() const;        // Python str(): what `{{ x }}` prints (Undefined prints nothing)
  std::string repr() const;       // Python repr(): how values print inside lists and dicts
  const char* type_name() const;  // Python type names, for error messages
};

bool equal(const Value& a, const Value& b);  // Python ==

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  SourcePos pos;
  // The argument at `index` or named `name`, else `fallback`.
  Value get(size_t index, const std::string& name, Value fallback = Value::undefined()) const;
};

// Python's json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys): what transformers'
// `tojson` filter produces (it replaces Jinja's HTML-escaping tojson). indent < 0 means None.
std::string to_json(const Value& v, int indent, bool sort_keys);

Value from_json(const nlohmann::ordered_json& j);

}  // namespace primus::data::jinja
