#pragma once
// Tokens and syntax tree of the chat-template interpreter (chat_template.h). Internal to the interpreter's
// lexer, parser and evaluator.
#include <memory>
#include <string>
#include <vector>

#include "data/chat_template_value.h"

namespace primus::data::jinja {

struct Token {
  enum class Type {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Type type;
  std::string text;  // text data, a name, an operator, or a string literal's unescaped value
  SourcePos pos;
};

// Splits a template into text and tag tokens, applying whitespace control ('-' markers) and the environment
// transformers renders with: trim_blocks, lstrip_blocks, and no keep_trailing_newline. Throws ConfigError
// naming `origin`, line and column on an unclosed tag or comment or a bad character.
std::vector<Token> lex(const std::string& source, const std::string& origin);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // items
    kTuple,      // items
    kDict,       // items as key, value, key, value ...
    kAttr,       // items[0] . name
    kSubscript,  // items[0] [ items[1] ]
    kSlice,      // items[0] [ items[1] : items[2] : items[3] ] (null parts omitted)
    kCall,       // items[0] ( items[1..], keyword )
    kFilter,     // items[0] | name ( items[1..], keyword )
    kTest,       // items[0] is [not] name ( items[1..] ); negated
    kUnary,      // name in {-, +, not} items[0]
    kBinary,     // items[0] name items[1]; name in {+ - * / // % ** ~ == != < > <= >= in notin and or}
    kCond,       // items[1] if items[0] else items[2] (items[2] may be null)
  };
  Kind kind;
  SourcePos pos;
  Value value;
  std::string name;
  bool negated = false;
  int depth = 1;  // height of this subtree: the parser keeps it within Limits::kNesting
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches: (cond, body)...; else_body
    kFor,          // targets in expr [if cond]: body; else_body
    kSet,          // {% set targets = expr %} or {% set ns.attr = expr %} (attr set)
    kSetBlock,     // {% set name %}body{% endset %}
    kMacro,        // {% macro name(params) %}body{% endmacro %}
    kFilterBlock,  // {% filter name(args) %}body{% endfilter %}: expr is a kFilter over a null operand
    kGeneration,   // {% generation %}body{% endgeneration %}: transformers' assistant-mask marker
    kBreak,
    kContinue,
  };
  Kind kind;
  SourcePos pos;
  std::string text;                                // kText
  ExprPtr expr;                                    // kOutput, kFor iterable, kSet value, kFilterBlock filter
  ExprPtr cond;                                    // kFor filter
  std::vector<std::string> targets;                // kFor / kSet names; kMacro: name then parameter names
  std::string attr;                                // kSet on a namespace attribute
  std::vector<ExprPtr> defaults;                   // kMacro: default per parameter (null when none)
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf
  Body body;                                       // kFor, kSetBlock, kMacro, kFilterBlock, kGeneration
  Body else_body;                                  // kIf, kFor
};

// Parses a token list into a statement list. Throws ConfigError naming origin:line:column and what was
// expected.
Body parse(const std::vector<Token>& tokens, const std::string& origin);

}  // namespace primus::data::jinja
