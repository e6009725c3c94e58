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
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace primus::data::jinja {

// A runtime error without a position yet; the evaluator adds origin:line:column.
struct TemplateRuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Limits that keep a hostile or broken template from exhausting the stack, the memory or the time of the
// process: past one, parsing or rendering fails with a ConfigError that names it. Real chat templates stay
// far below each (docs/posttrain.md, "Limits").
struct Limits {
  // Blocks inside blocks plus brackets inside brackets, and the height of an expression (a chain
  // `a ~ b ~ ...` counts one level per operator): the parser and the evaluator recurse that deep.
  static constexpr int kNesting = 100;
  // Nested evaluation while rendering (statements, expressions, macro calls, filters): a macro calling
  // itself without end stops here. 500 levels take about 1.2 MB of stack in an optimised build and 4.3 MB
  // under AddressSanitizer; Python's recursion limit stops jinja2 at a similar depth of macro calls.
  static constexpr int kRenderDepth = 500;
  // Lists and dicts inside lists and dicts (printing, comparing and freeing them recurse that deep).
  static constexpr uint32_t kValueDepth = 100;
  // Items of one range(): the limit of jinja2's sandbox, in which transformers renders.
  static constexpr int64_t kRange = 100000;
  // Bytes of strings and values one render creates or copies (a template copies a value at every variable
  // it reads): bounds both its memory and its time. The templates of tests/data/chat_templates take 10-16 MB
  // (and 50,000-120,000 steps) for 1,000 messages of 1 KB.
  static constexpr uint64_t kBytes = uint64_t{256} << 20;
  // Statements and expressions evaluated, comparisons, and names looked up by one render.
  static constexpr uint64_t kSteps = 10'000'000;
};

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
  // A namespace() object: the only value a template can change (`set ns.attr = ...`). The render that made
  // it owns it (RenderScope), so the cycles and chains such objects can form end with the render.
  bool assignable = false;
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
  // Nesting of a list / dict / loop object (1 + its deepest item), 0 for other values; a namespace() object
  // counts 1 (its attributes change after it is placed). At most Limits::kValueDepth for values a render
  // builds, so walking or freeing them never recurses deeper.
  uint32_t depth = 0;

  // Creating or copying a value is charged to the render running on this thread (RenderScope): copies
  // duplicate strings, and a template copies values at every variable it reads.
  Value();
  Value(const Value& other);
  Value(Value&&) noexcept = default;
  Value& operator=(const Value& other);
  Value& operator=(Value&&) noexcept = default;
  ~Value() = default;

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

// The render running on this thread: it counts the work against Limits::kBytes and kSteps, the nesting
// against kRenderDepth, and owns the namespace() objects made while it runs. At its end (also when the render
// fails) it empties them, which frees whatever cycles or chains they formed. Outside a render (parsing,
// converting the caller's context) nothing is counted.
class RenderScope {
 public:
  RenderScope();
  ~RenderScope();
  RenderScope(const RenderScope&) = delete;
  RenderScope& operator=(const RenderScope&) = delete;

  static RenderScope* current();
  void bytes(uint64_t n);  // throws TemplateRuntimeError past the limit
  void steps(uint64_t n);
  void adopt(std::shared_ptr<Dict> ns) { namespaces_.push_back(std::move(ns)); }

  // One level of nesting for as long as it lives; throws past Limits::kRenderDepth.
  class Nest {
   public:
    Nest();
    ~Nest();
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    RenderScope* scope_;
  };

 private:
  uint64_t bytes_ = 0, steps_ = 0;
  int depth_ = 0;
  std::vector<std::shared_ptr<Dict>> namespaces_;
  RenderScope* previous_;
};

// Charges the current render, if any.
void charge_bytes(uint64_t n);
void charge_steps(uint64_t n);

}  // namespace primus::data::jinja
