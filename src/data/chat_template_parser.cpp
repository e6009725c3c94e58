// Parser of the chat-template interpreter: recursive descent with Jinja2's operator precedence
// (jinja2/parser.py): conditional < or < and < not < comparisons and `in` < + - < ~ < * / // % < ** < unary
// minus < postfix (. [] ()) and filters / tests, so `a + b | trim` is `a + (b | trim)` and
// `messages | length - 1` is `(messages | length) - 1`.
#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "core/error.h"
#include "data/chat_template_ast.h"

namespace primus::data::jinja {

namespace {

using T = Token::Type;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& origin) : toks_(tokens), origin_(origin) {}

  Body parse_template() {
    std::string stop;
    Body body = parse_body({}, &stop);
    return body;
  }

 private:
  [[noreturn]] void fail(SourcePos p, const std::string& what) const {
    throw ConfigError(fmt::format("{}:{}:{}: chat template: {}", origin_, p.line, p.column, what));
  }
  // One level of the parser's recursion (a block inside a block, brackets, `not`, a unary sign): at most
  // Limits::kNesting, so that hostile nesting is an error rather than a stack overflow.
  class Nest {
   public:
    Nest(Parser& p, SourcePos pos) : p_(p) {
      if (++p_.nest_ > Limits::kNesting) {
        --p_.nest_;
        p_.fail(pos, fmt::format("blocks and expressions nested deeper than {} levels", Limits::kNesting));
      }
    }
    ~Nest() { --p_.nest_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& p_;
  };

  // Attaches a child node, keeping the height of the tree within Limits::kNesting: evaluating and freeing an
  // expression recurses that deep, and a chain such as `a ~ b ~ c ~ ...` grows it without any recursion here.
  void grow(Expr& parent, const Expr& child) {
    parent.depth = std::max(parent.depth, child.depth + 1);
    if (parent.depth > Limits::kNesting)
      fail(parent.pos, fmt::format("an expression nested deeper than {} levels", Limits::kNesting));
  }
  void attach(Expr& parent, ExprPtr child) {
    if (child) grow(parent, *child);
    parent.items.push_back(std::move(child));
  }

  // Integer literals: Python's are unbounded, the interpreter's 64-bit.
  int64_t int_literal(const Token& t) const {
    int64_t v = 0;
    const char* end = t.text.data() + t.text.size();
    auto [ptr, ec] = std::from_chars(t.text.data(), end, v);
    if (ec != std::errc() || ptr != end)
      fail(t.pos, fmt::format("integer literal {} is out of range (integers are 64-bit here)", t.text));
    return v;
  }

  const Token& cur() const { return toks_[k_]; }
  const Token& peek(size_t ahead = 1) const { return toks_[std::min(k_ + ahead, toks_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == T::kOp && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == T::kName && cur().text == name; }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::kText:
        return "text";
      case T::kVarBegin:
        return "'{{'";
      case T::kVarEnd:
        return "'}}'";
      case T::kBlockBegin:
        return "'{%'";
      case T::kBlockEnd:
        return "'%}'";
      case T::kName:
        return "'" + t.text + "'";
      case T::kString:
        return "a string";
      case T::kInt:
      case T::kFloat:
        return "a number";
      case T::kOp:
        return "'" + t.text + "'";
      case T::kEof:
        return "the end of the template";
    }
    return "?";
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(cur().pos, fmt::format("expected '{}', found {}", op, describe(cur())));
    ++k_;
  }
  std::string expect_name(const char* what) {
    if (cur().type != T::kName) fail(cur().pos, fmt::format("expected {}, found {}", what, describe(cur())));
    return toks_[k_++].text;
  }
  void expect_block_end(const std::string& tag) {
    if (cur().type != T::kBlockEnd)
      fail(cur().pos, fmt::format("expected '%}}' to end the '{}' tag, found {}", tag, describe(cur())));
    ++k_;
  }

  // Parses statements until a block tag whose name is in `stops` (returned in *stop, the tag's name consumed
  // but not its arguments) or, when `stops` is empty, the end of the template.
  Body parse_body(const std::vector<std::string>& stops, std::string* stop, SourcePos opened = {},
                  const std::string& opener = {}) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == T::kEof) {
        if (stops.empty()) return body;
        fail(opened, fmt::format("'{}' is never closed: expected '{{% {} %}}' before the end of the template",
                                 opener, stops.back()));
      }
      if (t.type == T::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->pos = t.pos;
        s->text = t.text;
        body.push_back(std::move(s));
        ++k_;
      } else if (t.type == T::kVarBegin) {
        ++k_;
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->pos = t.pos;
        s->expr = parse_expr();
        if (cur().type != T::kVarEnd)
          fail(cur().pos, fmt::format("expected '}}}}', found {}", describe(cur())));
        ++k_;
        body.push_back(std::move(s));
      } else if (t.type == T::kBlockBegin) {
        const Token& name = peek();
        if (name.type != T::kName)
          fail(name.pos, fmt::format("expected a tag name after '{{%', found {}", describe(name)));
        for (const auto& s : stops) {
          if (name.text == s) {
            k_ += 2;
            *stop = s;
            return body;
          }
        }
        k_ += 2;
        body.push_back(parse_statement(name));
      } else {
        fail(t.pos, fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  StmtPtr parse_statement(const Token& name) {
    Nest nest(*this, name.pos);
    auto s = std::make_unique<Stmt>();
    s->pos = name.pos;
    const std::string& n = name.text;
    std::string stop;
    if (n == "if") {
      s->kind = Stmt::Kind::kIf;
      ExprPtr cond = parse_expr();
      expect_block_end("if");
      while (true) {
        Body b = parse_body({"elif", "else", "endif"}, &stop, name.pos, "if");
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (stop == "elif") {
          cond = parse_expr();
          expect_block_end("elif");
          continue;
        }
        if (stop == "else") {
          expect_block_end("else");
          s->else_body = parse_body({"endif"}, &stop, name.pos, "if");
        }
        expect_block_end("endif");
        break;
      }
    } else if (n == "for") {
      s->kind = Stmt::Kind::kFor;
      do {
        s->targets.push_back(expect_name("a loop variable"));
      } while (is_op(",") && (++k_, true));
      if (!is_name("in"))
        fail(cur().pos, fmt::format("expected 'in' in the 'for' tag, found {}", describe(cur())));
      ++k_;
      s->expr = parse_expr(/*allow_cond=*/false);
      if (is_name("if")) {
        ++k_;
        s->cond = parse_expr(false);
      }
      if (is_name("recursive")) fail(cur().pos, "recursive for-loops are not supported");
      expect_block_end("for");
      s->body = parse_body({"else", "endfor"}, &stop, name.pos, "for");
      if (stop == "else") {
        expect_block_end("else");
        s->else_body = parse_body({"endfor"}, &stop, name.pos, "for");
      }
      expect_block_end("endfor");
    } else if (n == "set") {
      std::string target = expect_name("a variable name");
      if (is_op(".")) {
        ++k_;
        s->attr = expect_name("an attribute name");
      }
      s->targets.push_back(target);
      while (s->attr.empty() && is_op(",")) {
        ++k_;
        s->targets.push_back(expect_name("a variable name"));
      }
      if (cur().type == T::kBlockEnd && s->attr.empty() && s->targets.size() == 1) {
        ++k_;
        s->kind = Stmt::Kind::kSetBlock;
        s->body = parse_body({"endset"}, &stop, name.pos, "set");
        expect_block_end("endset");
      } else {
        s->kind = Stmt::Kind::kSet;
        expect_op("=");
        s->expr = parse_bare_tuple();
        expect_block_end("set");
      }
    } else if (n == "macro") {
      s->kind = Stmt::Kind::kMacro;
      s->targets.push_back(expect_name("a macro name"));
      expect_op("(");
      while (!is_op(")")) {
        s->targets.push_back(expect_name("a parameter name"));
        if (is_op("=")) {
          ++k_;
          s->defaults.push_back(parse_expr());
        } else {
          s->defaults.push_back(nullptr);
        }
        if (!is_op(")")) expect_op(",");
      }
      ++k_;
      expect_block_end("macro");
      s->body = parse_body({"endmacro"}, &stop, name.pos, "macro");
      expect_block_end("endmacro");
    } else if (n == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      s->expr = parse_filter(nullptr, name.pos);
      expect_block_end("filter");
      s->body = parse_body({"endfilter"}, &stop, name.pos, "filter");
      expect_block_end("endfilter");
    } else if (n == "generation") {
      s->kind = Stmt::Kind::kGeneration;
      expect_block_end("generation");
      s->body = parse_body({"endgeneration"}, &stop, name.pos, "generation");
      expect_block_end("endgeneration");
    } else if (n == "break" || n == "continue") {
      s->kind = n == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect_block_end(n);
    } else if (n == "elif" || n == "else" || n.rfind("end", 0) == 0) {
      fail(name.pos, fmt::format("unexpected '{{% {} %}}': no open block that it continues or closes", n));
    } else {
      fail(name.pos,
           fmt::format("unknown tag '{}' (supported: if, for, set, macro, filter, generation, break, "
                       "continue)",
                       n));
    }
    return s;
  }

  ExprPtr node(Expr::Kind kind, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }
  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, SourcePos pos) {
    auto e = node(Expr::Kind::kBinary, pos);
    e->name = op;
    attach(*e, std::move(a));
    attach(*e, std::move(b));
    return e;
  }

  // `a, b` without parentheses, as Jinja allows on the right of `set` (`{% set a, b = 1, 2 %}`).
  ExprPtr parse_bare_tuple() {
    SourcePos p = cur().pos;
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto tup = node(Expr::Kind::kTuple, p);
    attach(*tup, std::move(first));
    while (is_op(",")) {
      ++k_;
      if (cur().type == T::kBlockEnd) break;
      attach(*tup, parse_expr());
    }
    return tup;
  }

  ExprPtr parse_expr(bool allow_cond = true) {
    Nest nest(*this, cur().pos);
    ExprPtr e = parse_or();
    while (allow_cond && is_name("if")) {
      SourcePos p = cur().pos;
      ++k_;
      auto c = node(Expr::Kind::kCond, p);
      attach(*c, parse_or());
      attach(*c, std::move(e));
      if (is_name("else")) {
        ++k_;
        attach(*c, parse_expr());
      } else {
        attach(*c, nullptr);
      }
      e = std::move(c);
    }
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      SourcePos p = cur().pos;
      ++k_;
      e = binary("or", std::move(e), parse_and(), p);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      SourcePos p = cur().pos;
      ++k_;
      e = binary("and", std::move(e), parse_not(), p);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Nest nest(*this, cur().pos);
      auto e = node(Expr::Kind::kUnary, cur().pos);
      ++k_;
      e->name = "not";
      attach(*e, parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    while (true) {
      SourcePos p = cur().pos;
      std::string op;
      if (cur().type == T::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                   cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        ++k_;
      } else if (is_name("in")) {
        op = "in";
        ++k_;
      } else if (is_name("not") && peek().type == T::kName && peek().text == "in") {
        op = "notin";
        k_ += 2;
      } else {
        return e;
      }
      e = binary(op, std::move(e), parse_math1(), p);
    }
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      SourcePos p = cur().pos;
      std::string op = toks_[k_++].text;
      e = binary(op, std::move(e), parse_concat(), p);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      SourcePos p = cur().pos;
      ++k_;
      e = binary("~", std::move(e), parse_math2(), p);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      SourcePos p = cur().pos;
      std::string op = toks_[k_++].text;
      e = binary(op, std::move(e), parse_pow(), p);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      SourcePos p = cur().pos;
      ++k_;
      e = binary("**", std::move(e), parse_unary(true), p);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      Nest nest(*this, cur().pos);
      e = node(Expr::Kind::kUnary, cur().pos);
      e->name = toks_[k_++].text;
      attach(*e, parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filters_and_tests(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    SourcePos p = t.pos;
    switch (t.type) {
      case T::kName: {
        ++k_;
        auto e = node(Expr::Kind::kLiteral, p);
        if (t.text == "true" || t.text == "True")
          e->value = Value::boolean(true);
        else if (t.text == "false" || t.text == "False")
          e->value = Value::boolean(false);
        else if (t.text == "none" || t.text == "None")
          e->value = Value::none();
        else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      }
      case T::kString: {
        std::string s;
        while (cur().type == T::kString) s += toks_[k_++].text;  // adjacent literals concatenate
        auto e = node(Expr::Kind::kLiteral, p);
        e->value = Value::string(s);
        return e;
      }
      case T::kInt:
      case T::kFloat: {
        ++k_;
        auto e = node(Expr::Kind::kLiteral, p);
        // strtod, unlike stod, reads a float literal too large for a double as inf, as Python does.
        e->value = t.type == T::kInt ? Value::integer(int_literal(t))
                                     : Value::real(std::strtod(t.text.c_str(), nullptr));
        return e;
      }
      case T::kOp:
        if (t.text == "(") {
          ++k_;
          if (is_op(")")) {
            ++k_;
            return node(Expr::Kind::kTuple, p);
          }
          ExprPtr first = parse_expr();
          if (is_op(")")) {
            ++k_;
            return first;
          }
          auto tup = node(Expr::Kind::kTuple, p);
          attach(*tup, std::move(first));
          while (is_op(",")) {
            ++k_;
            if (is_op(")")) break;
            attach(*tup, parse_expr());
          }
          expect_op(")");
          return tup;
        }
        if (t.text == "[") {
          ++k_;
          auto e = node(Expr::Kind::kList, p);
          while (!is_op("]")) {
            attach(*e, parse_expr());
            if (!is_op("]")) expect_op(",");
          }
          ++k_;
          return e;
        }
        if (t.text == "{") {
          ++k_;
          auto e = node(Expr::Kind::kDict, p);
          while (!is_op("}")) {
            attach(*e, parse_expr());
            expect_op(":");
            attach(*e, parse_expr());
            if (!is_op("}")) expect_op(",");
          }
          ++k_;
          return e;
        }
        break;
      default:
        break;
    }
    fail(p, fmt::format("expected an expression, found {}", describe(t)));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      SourcePos p = cur().pos;
      if (is_op(".")) {
        ++k_;
        auto a = node(Expr::Kind::kAttr, p);
        if (cur().type == T::kInt) {  // `x.0` is x[0] in Jinja
          a->kind = Expr::Kind::kSubscript;
          attach(*a, std::move(e));
          auto idx = node(Expr::Kind::kLiteral, p);
          idx->value = Value::integer(int_literal(toks_[k_++]));
          attach(*a, std::move(idx));
        } else {
          a->name = expect_name("an attribute name after '.'");
          attach(*a, std::move(e));
        }
        e = std::move(a);
      } else if (is_op("[")) {
        ++k_;
        e = parse_subscript(std::move(e), p);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, SourcePos p) {
    ExprPtr parts[3];
    int n = 0;
    bool slice = false;
    while (true) {
      if (is_op(":")) {
        slice = true;
        ++k_;
        ++n;
        if (n > 2) fail(cur().pos, "a slice takes at most three parts");
        continue;
      }
      if (is_op("]")) break;
      if (parts[n])
        fail(cur().pos, fmt::format("expected ':' or ']' in a subscript, found {}", describe(cur())));
      parts[n] = parse_expr();
    }
    ++k_;
    auto e = node(slice ? Expr::Kind::kSlice : Expr::Kind::kSubscript, p);
    attach(*e, std::move(obj));
    if (slice) {
      for (auto& part : parts) attach(*e, std::move(part));
    } else {
      if (!parts[0]) fail(p, "empty subscript '[]'");
      attach(*e, std::move(parts[0]));
    }
    return e;
  }

  // Arguments of a call, filter or test: positional then `name=value`.
  void parse_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (cur().type == T::kName && peek().type == T::kOp && peek().text == "=") {
        std::string key = toks_[k_].text;
        k_ += 2;
        ExprPtr value = parse_expr();
        grow(e, *value);
        e.keyword.emplace_back(key, std::move(value));
      } else {
        if (!e.keyword.empty()) fail(cur().pos, "a positional argument after a keyword argument");
        attach(e, parse_expr());
      }
      if (!is_op(")")) expect_op(",");
    }
    ++k_;
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(Expr::Kind::kCall, callee->pos);  // errors point at the function's name, not at '('
    attach(*e, std::move(callee));
    parse_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr operand, SourcePos p) {
    auto e = node(Expr::Kind::kFilter, p);
    e->name = expect_name("a filter name");
    while (is_op(".")) {  // dotted filter names
      ++k_;
      e->name += "." + expect_name("a filter name");
    }
    attach(*e, std::move(operand));
    if (is_op("(")) parse_args(*e);
    return e;
  }

  ExprPtr parse_filters_and_tests(ExprPtr e) {
    while (true) {
      SourcePos p = cur().pos;
      if (is_op("|")) {
        ++k_;
        e = parse_filter(std::move(e), p);
      } else if (is_name("is")) {
        ++k_;
        auto t = node(Expr::Kind::kTest, p);
        if (is_name("not")) {
          t->negated = true;
          ++k_;
        }
        t->name = expect_name("a test name after 'is'");
        attach(*t, std::move(e));
        if (is_op("(")) {
          parse_args(*t);
        } else if ((cur().type == T::kString || cur().type == T::kInt || cur().type == T::kFloat ||
                    (cur().type == T::kName && !is_name("else") && !is_name("or") && !is_name("and") &&
                     !is_name("if") && !is_name("is") && !is_name("in") && !is_name("not")))) {
          // `x is divisibleby 3`, `x is sameas false`: one argument without parentheses.
          attach(*t, parse_primary());
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& toks_;
  const std::string& origin_;
  size_t k_ = 0;
  int nest_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const std::string& origin) {
  return Parser(tokens, origin).parse_template();
}

}  // namespace primus::data::jinja
