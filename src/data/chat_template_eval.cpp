// Evaluator of the chat-template interpreter: walks the syntax tree with Jinja2's scoping (a for-loop body
// gets a fresh scope every iteration, so `set` inside a loop does not leak out, which is why templates carry
// state in namespace() objects; `if` bodies share their scope; macros see the scope they were defined in).
#include "data/chat_template_eval.h"

#include "data/chat_template.h"

#include <cmath>
#include <cstdint>
#include <unordered_map>

#include "core/error.h"
#include "data/chat_template_builtins.h"

namespace primus::data::jinja {

namespace {

struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;

  const Value* lookup(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent.get()) {
      charge_steps(1);  // one scope per enclosing for-loop
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const std::string& origin, std::string* main_out, std::vector<TextRange>* generation)
      : origin_(origin), main_out_(main_out), generation_(generation) {}

  Flow exec(const Body& body, const FramePtr& frame, std::string& out) {
    for (const auto& s : body) {
      Flow f = exec(*s, frame, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  [[noreturn]] void fail(SourcePos p, const std::string& what) const {
    throw ConfigError(fmt::format("{}:{}:{}: chat template: {}", origin_, p.line, p.column, what));
  }

 private:
  // Every statement and expression is one step and one level of nesting of the render (RenderScope), and
  // the errors of the interpreter's limits raised while it runs get its position.
  Flow exec(const Stmt& s, const FramePtr& frame, std::string& out) {
    try {
      RenderScope::Nest nest;
      charge_steps(1);
      return exec_stmt(s, frame, out);
    } catch (const TemplateRuntimeError& err) {
      fail(s.pos, err.what());
    }
  }

  static void append(std::string& out, const std::string& text) {
    charge_bytes(text.size());
    out += text;
  }

  Flow exec_stmt(const Stmt& s, const FramePtr& frame, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        append(out, s.text);
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        append(out, eval(*s.expr, frame).str());
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond, frame).truthy()) return exec(body, frame, out);
        return exec(s.else_body, frame, out);
      case Stmt::Kind::kFor:
        return exec_for(s, frame, out);
      case Stmt::Kind::kSet:
        exec_set(s, frame);
        return Flow::kNormal;
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        exec(s.body, frame, captured);
        frame->vars[s.targets[0]] = Value::string(std::move(captured));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        frame->vars[s.targets[0]] = make_macro(s, frame);
        return Flow::kNormal;
      case Stmt::Kind::kFilterBlock: {
        std::string captured;
        exec(s.body, frame, captured);
        append(out, apply_filter_expr(*s.expr, Value::string(std::move(captured)), frame).str());
        return Flow::kNormal;
      }
      case Stmt::Kind::kGeneration: {
        // Only ranges of the top-level output are meaningful (as in transformers' AssistantTracker).
        size_t begin = out.size();
        Flow f = exec(s.body, frame, out);
        if (generation_ && &out == main_out_) generation_->emplace_back(begin, out.size());
        return f;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  static void bind_targets(const std::vector<std::string>& targets, const Value& v, Frame& frame, SourcePos p,
                           const Renderer& r) {
    if (targets.size() == 1) {
      frame.vars[targets[0]] = v;
      return;
    }
    List parts = iterate(v);
    if (parts.size() != targets.size())
      r.fail(p, fmt::format("cannot unpack {} values into {} variables", parts.size(), targets.size()));
    for (size_t k = 0; k < targets.size(); ++k) frame.vars[targets[k]] = parts[k];
  }

  Flow exec_for(const Stmt& s, const FramePtr& frame, std::string& out) {
    Value seq = eval(*s.expr, frame);
    if (!seq.is_undefined() && !seq.is_list() && !seq.is_mapping() && !seq.is_string())
      fail(s.expr->pos, fmt::format("'{}' object is not iterable", seq.type_name()));
    List items = iterate(seq);
    if (s.cond) {  // `for x in xs if cond`: the loop (and loop.length) sees only the kept items
      List kept;
      for (const Value& item : items) {
        auto probe = std::make_shared<Frame>();
        probe->parent = frame;
        bind_targets(s.targets, item, *probe, s.pos, *this);
        if (eval(*s.cond, probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(s.else_body, frame, out);
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < n; ++k) {
      auto iter = std::make_shared<Frame>();
      iter->parent = frame;
      bind_targets(s.targets, items[static_cast<size_t>(k)], *iter, s.pos, *this);
      Dict loop;
      loop.set("index", Value::integer(k + 1));
      loop.set("index0", Value::integer(k));
      loop.set("revindex", Value::integer(n - k));
      loop.set("revindex0", Value::integer(n - k - 1));
      loop.set("first", Value::boolean(k == 0));
      loop.set("last", Value::boolean(k == n - 1));
      loop.set("length", Value::integer(n));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      loop.set("previtem",
               k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("there is no previous item"));
      loop.set("nextitem",
               k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::undefined("there is no next item"));
      loop.set("cycle", Value::callable("loop.cycle", [k](CallArgs& a) {
                 if (a.positional.empty())
                   throw TemplateRuntimeError("loop.cycle() needs at least one argument");
                 return a.positional[static_cast<size_t>(k) % a.positional.size()];
               }));
      iter->vars["loop"] = Value::make_namespace(std::move(loop));
      if (exec(s.body, iter, out) == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void exec_set(const Stmt& s, const FramePtr& frame) {
    Value v = eval(*s.expr, frame);
    if (s.attr.empty()) {
      bind_targets(s.targets, v, *frame, s.pos, *this);
      return;
    }
    const Value* target = frame->lookup(s.targets[0]);
    if (!target || target->kind != Value::Kind::kNamespace || !target->dict->assignable)
      fail(s.pos,
           fmt::format("cannot assign attribute '{}' on '{}': only namespace() objects take attributes",
                       s.attr, s.targets[0]));
    target->dict->set(s.attr, std::move(v));
  }

  Value make_macro(const Stmt& s, const FramePtr& frame) {
    std::weak_ptr<Frame> defined_in = frame;  // weak: the macro lives in that frame, avoid a cycle
    const Stmt* def = &s;
    return Value::callable(s.targets[0], [this, def, defined_in](CallArgs& a) {
      auto call = std::make_shared<Frame>();
      call->parent = defined_in.lock();
      size_t nparams = def->targets.size() - 1;
      if (a.positional.size() > nparams)
        fail(a.pos, fmt::format("macro '{}' takes {} arguments, got {}", def->targets[0], nparams,
                                a.positional.size()));
      for (size_t k = 0; k < nparams; ++k) {
        const std::string& pname = def->targets[k + 1];
        Value v = a.get(k, pname);
        if (v.is_undefined() && def->defaults[k]) v = eval(*def->defaults[k], call);
        if (v.is_undefined()) v = Value::undefined(fmt::format("'{}' is undefined", pname));
        call->vars[pname] = v;
      }
      std::string out;
      exec(def->body, call, out);
      return Value::string(std::move(out));
    });
  }

  CallArgs eval_args(const Expr& e, size_t first, const FramePtr& frame) {
    CallArgs args;
    args.pos = e.pos;
    for (size_t k = first; k < e.items.size(); ++k) args.positional.push_back(eval(*e.items[k], frame));
    for (const auto& [name, x] : e.keyword) args.keyword.emplace_back(name, eval(*x, frame));
    return args;
  }

  Value apply_filter_expr(const Expr& e, const Value& operand, const FramePtr& frame) {
    if (!has_filter(e.name)) fail(e.pos, fmt::format("unknown filter '{}'", e.name));
    CallArgs args = eval_args(e, 1, frame);
    return guarded(e.pos, [&] { return apply_filter(e.name, operand, args); });
  }

  // Runs a builtin, giving its errors the template position.
  template <typename F>
  auto guarded(SourcePos p, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const TemplateRuntimeError& err) {
      fail(p, err.what());
    }
  }

  Value eval(const Expr& e, const FramePtr& frame) {
    try {
      RenderScope::Nest nest;
      charge_steps(1);
      return eval_node(e, frame);
    } catch (const TemplateRuntimeError& err) {
      fail(e.pos, err.what());
    }
  }

  Value eval_node(const Expr& e, const FramePtr& frame) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName: {
        const Value* v = frame->lookup(e.name);
        return v ? *v : Value::undefined(fmt::format("'{}' is undefined", e.name));
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List items;
        for (const auto& x : e.items) items.push_back(eval(*x, frame));
        return e.kind == Expr::Kind::kTuple ? Value::make_tuple(std::move(items))
                                            : Value::make_list(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
          Value key = eval(*e.items[k], frame);
          // Dicts are keyed by strings; a number key (a lookup table such as {0: 0, 512: 128}) is stored as
          // its decimal text, and subscripts with numbers look up that text.
          if (!key.is_string() && !key.is_number())
            fail(e.items[k]->pos, "dict keys must be strings or numbers");
          d.int_keys = (k == 0 || d.int_keys) && key.kind == Value::Kind::kInt;
          d.set(key.str(), eval(*e.items[k + 1], frame));
        }
        return Value::make_dict(std::move(d));
      }
      case Expr::Kind::kAttr: {
        Value obj = eval(*e.items[0], frame);
        return guarded(e.pos, [&] { return get_attribute(obj, e.name); });
      }
      case Expr::Kind::kSubscript: {
        Value obj = eval(*e.items[0], frame);
        Value key = eval(*e.items[1], frame);
        return guarded(e.pos, [&] { return get_item(obj, key); });
      }
      case Expr::Kind::kSlice: {
        Value obj = eval(*e.items[0], frame);
        Value parts[3];
        for (int k = 0; k < 3; ++k)
          if (e.items[static_cast<size_t>(k) + 1])
            parts[k] = eval(*e.items[static_cast<size_t>(k) + 1], frame);
        return guarded(e.pos, [&] { return get_slice(obj, parts[0], parts[1], parts[2]); });
      }
      case Expr::Kind::kCall: {
        Value callee = eval(*e.items[0], frame);
        if (callee.kind != Value::Kind::kCallable) {
          std::string what = e.items[0]->kind == Expr::Kind::kName   ? "'" + e.items[0]->name + "'"
                             : e.items[0]->kind == Expr::Kind::kAttr ? "'" + e.items[0]->name + "'"
                                                                     : "the expression";
          if (callee.is_undefined())
            fail(e.pos, fmt::format("{} is not a known function or method{}", what,
                                    callee.s.empty() ? "" : " (" + callee.s + ")"));
          fail(e.pos, fmt::format("{} is a {}, not a function", what, callee.type_name()));
        }
        CallArgs args = eval_args(e, 1, frame);
        return guarded(e.pos, [&] { return callee.fn->fn(args); });
      }
      case Expr::Kind::kFilter:
        return apply_filter_expr(e, eval(*e.items[0], frame), frame);
      case Expr::Kind::kTest: {
        if (!has_test(e.name)) fail(e.pos, fmt::format("unknown test '{}'", e.name));
        Value v = eval(*e.items[0], frame);
        CallArgs args = eval_args(e, 1, frame);
        bool r = guarded(e.pos, [&] { return apply_test(e.name, v, args); });
        return Value::boolean(r != e.negated);
      }
      case Expr::Kind::kUnary: {
        Value v = eval(*e.items[0], frame);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (v.kind == Value::Kind::kInt) {
          if (e.name == "-" && v.i == INT64_MIN)
            fail(e.pos, "integer overflow in unary - (integers are 64-bit here)");
          return Value::integer(e.name == "-" ? -v.i : v.i);
        }
        if (v.kind == Value::Kind::kFloat) return Value::real(e.name == "-" ? -v.f : v.f);
        fail(e.pos,
             fmt::format("bad operand type for unary {}: '{}'{}", e.name, v.type_name(), undefined_note(v)));
      }
      case Expr::Kind::kBinary:
        return eval_binary(e, frame);
      case Expr::Kind::kCond:
        if (eval(*e.items[0], frame).truthy()) return eval(*e.items[1], frame);
        return e.items[2] ? eval(*e.items[2], frame)
                          : Value::undefined("the conditional expression had no else");
    }
    return Value::undefined();
  }

  static std::string undefined_note(const Value& v) {
    return v.is_undefined() && !v.s.empty() ? " (" + v.s + ")" : "";
  }

  Value eval_binary(const Expr& e, const FramePtr& frame) {
    const std::string& op = e.name;
    Value a = eval(*e.items[0], frame);
    if (op == "and") return a.truthy() ? eval(*e.items[1], frame) : a;
    if (op == "or") return a.truthy() ? a : eval(*e.items[1], frame);
    Value b = eval(*e.items[1], frame);
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "~") return Value::string(a.str() + b.str());
    if (op == "in" || op == "notin") {
      bool r = guarded(e.pos, [&] { return contains(b, a); });
      return Value::boolean(op == "in" ? r : !r);
    }
    if (op == "<") return Value::boolean(guarded(e.pos, [&] { return less(a, b); }));
    if (op == ">") return Value::boolean(guarded(e.pos, [&] { return less(b, a); }));
    if (op == "<=") return Value::boolean(!guarded(e.pos, [&] { return less(b, a); }));
    if (op == ">=") return Value::boolean(!guarded(e.pos, [&] { return less(a, b); }));

    auto bad = [&]() {
      fail(e.pos, fmt::format("unsupported operand types for {}: '{}' and '{}'{}{}", op, a.type_name(),
                              b.type_name(), undefined_note(a), undefined_note(b)));
    };
    using K = Value::Kind;
    auto as_num = [](Value v) {
      if (v.kind == K::kBool) return Value::integer(v.b);
      return v;
    };
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value::string(a.s + b.s);
      if (a.is_list() && b.is_list()) {
        List items = *a.list;
        items.insert(items.end(), b.list->begin(), b.list->end());
        return Value::make_list(std::move(items));
      }
    }
    if (op == "*") {
      const Value* str = a.is_string() ? &a : b.is_string() ? &b : nullptr;
      const Value* count = a.is_string() ? &b : &a;
      if (str && count->kind == K::kInt) {
        std::string out;
        if (count->i > 0 && !str->s.empty()) {
          // Charged before it is built, so that 'x' * 10**12 is an error rather than an allocation.
          const uint64_t n = static_cast<uint64_t>(count->i), size = str->s.size();
          charge_bytes(n > Limits::kBytes / size ? Limits::kBytes + 1 : n * size);
          out.reserve(n * size);
          for (uint64_t k = 0; k < n; ++k) out += str->s;
        }
        return Value::string(std::move(out));
      }
    }
    Value x = as_num(a), y = as_num(b);
    if (!x.is_number() || !y.is_number()) bad();
    bool ints = x.kind == K::kInt && y.kind == K::kInt;
    // Python's integers do not overflow; the interpreter's are 64-bit and refuse to.
    auto overflow = [&]() {
      fail(e.pos, fmt::format("integer overflow in {} (integers are 64-bit here)", op));
    };
    int64_t r = 0;
    if (op == "+") {
      if (!ints) return Value::real(x.as_double() + y.as_double());
      if (__builtin_add_overflow(x.i, y.i, &r)) overflow();
      return Value::integer(r);
    }
    if (op == "-") {
      if (!ints) return Value::real(x.as_double() - y.as_double());
      if (__builtin_sub_overflow(x.i, y.i, &r)) overflow();
      return Value::integer(r);
    }
    if (op == "*") {
      if (!ints) return Value::real(x.as_double() * y.as_double());
      if (__builtin_mul_overflow(x.i, y.i, &r)) overflow();
      return Value::integer(r);
    }
    if (op == "/") {
      if (y.as_double() == 0) fail(e.pos, "division by zero");
      return Value::real(x.as_double() / y.as_double());
    }
    if (op == "//" || op == "%") {
      if (y.as_double() == 0) fail(e.pos, op == "//" ? "integer division by zero" : "modulo by zero");
      if (ints) {         // Python floors toward negative infinity; the remainder takes the divisor's sign
        if (y.i == -1) {  // INT64_MIN / -1 overflows (and traps in hardware)
          if (op == "%") return Value::integer(0);
          if (x.i == INT64_MIN) overflow();
          return Value::integer(-x.i);
        }
        int64_t q = x.i / y.i;
        r = x.i % y.i;
        if (r != 0 && ((r < 0) != (y.i < 0))) {
          --q;
          r += y.i;
        }
        return Value::integer(op == "//" ? q : r);
      }
      double q = std::floor(x.as_double() / y.as_double());
      return Value::real(op == "//" ? q : x.as_double() - q * y.as_double());
    }
    if (op == "**") {
      if (ints && y.i >= 0) {  // by squaring: 2 ** 10**18 takes 60 steps to overflow, not 10**18
        int64_t base = x.i;
        r = 1;
        for (uint64_t n = static_cast<uint64_t>(y.i); n > 0; n >>= 1) {
          if ((n & 1) && __builtin_mul_overflow(r, base, &r)) overflow();
          if (n > 1 && __builtin_mul_overflow(base, base, &base)) overflow();
        }
        return Value::integer(r);
      }
      return Value::real(std::pow(x.as_double(), y.as_double()));
    }
    bad();
    return Value::undefined();
  }

  const std::string& origin_;
  std::string* main_out_;
  std::vector<TextRange>* generation_;
};

}  // namespace

std::string render_template(const Body& body, const Dict& globals, const Value& context,
                            const std::string& origin, std::vector<TextRange>* generation) {
  // The scope first: it must outlive the frames and values of the render (see RenderScope).
  RenderScope scope;
  std::string out;
  Renderer r(origin, &out, generation);
  auto global_frame = std::make_shared<Frame>();
  auto root = std::make_shared<Frame>();
  root->parent = global_frame;
  try {
    for (const auto& [k, v] : globals.items) global_frame->vars[k] = v;
    if (context.is_mapping())
      for (const auto& [k, v] : context.dict->items) root->vars[k] = v;
    if (r.exec(body, root, out) != Flow::kNormal) r.fail({}, "'break' or 'continue' outside a for-loop");
  } catch (const TemplateRuntimeError& err) {
    r.fail({}, err.what());
  }
  return out;
}

}  // namespace primus::data::jinja
