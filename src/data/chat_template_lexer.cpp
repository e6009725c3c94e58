// Lexer of the chat-template interpreter. Whitespace follows Jinja2 as transformers configures it
// (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), keep_trailing_newline=False):
//  - `{%-` / `{{-` / `{#-` strip all whitespace (newlines included) before the tag; `-%}` / `-}}` / `-#}`
//  after;
//  - trim_blocks: the first newline right after a block or comment tag (`%}`, `#}`, not `}}`) is removed;
//  - lstrip_blocks: spaces and tabs between the start of a line and a block or comment tag are removed
//    (`{%+` keeps them);
//  - one trailing newline at the end of the template is dropped; "\r\n" and "\r" read as "\n".
#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "data/chat_template_ast.h"

namespace primus::data::jinja {

namespace {

class Lexer {
 public:
  Lexer(std::string source, const std::string& origin) : src_(std::move(source)), origin_(origin) {}

  std::vector<Token> run() {
    size_t text_begin = 0;
    while (pos_ < src_.size()) {
      size_t open = find_open(pos_);
      if (open == std::string::npos) break;
      // Text up to the tag.
      std::string text = src_.substr(text_begin, open - text_begin);
      char kind = src_[open + 1];  // '{', '%' or '#'
      char marker = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (marker == '-') {
        size_t keep = text.find_last_not_of(" \t\n\r\f\v");
        text.resize(keep == std::string::npos ? 0 : keep + 1);
      } else if (marker != '+' && kind != '{') {
        // lstrip_blocks: only whitespace between the last line start and the tag.
        size_t line_start = text.rfind('\n');
        line_start = line_start == std::string::npos ? 0 : line_start + 1;
        bool at_line_start = line_start > 0 || text_begin == 0 || src_[text_begin - 1] == '\n';
        if (at_line_start && text.find_first_not_of(" \t\f\v", line_start) == std::string::npos)
          text.resize(line_start);
      }
      advance_to(open);
      if (!text.empty()) tokens_.push_back({Token::Type::kText, text, text_pos_});
      SourcePos tag_pos = here();
      advance_to(open + 2 + ((marker == '-' || marker == '+') ? 1 : 0));
      if (kind == '#') {
        lex_comment(tag_pos);
      } else {
        tokens_.push_back({kind == '{' ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", tag_pos});
        lex_tag(kind, tag_pos);
      }
      text_begin = pos_;
      text_pos_ = here();
    }
    if (text_begin < src_.size()) tokens_.push_back({Token::Type::kText, src_.substr(text_begin), text_pos_});
    tokens_.push_back({Token::Type::kEof, "", here_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(SourcePos p, const std::string& what) const {
    throw ConfigError(fmt::format("{}:{}:{}: chat template: {}", origin_, p.line, p.column, what));
  }

  size_t find_open(size_t from) const {
    for (size_t k = src_.find('{', from); k != std::string::npos; k = src_.find('{', k + 1)) {
      if (k + 1 < src_.size() && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    }
    return std::string::npos;
  }

  // Moves pos_ forward, keeping line and column.
  void advance_to(size_t target) {
    for (; pos_ < target; ++pos_) {
      if (src_[pos_] == '\n') {
        ++line_;
        col_ = 1;
      } else if ((static_cast<unsigned char>(src_[pos_]) & 0xC0) != 0x80) {
        ++col_;  // count UTF-8 code points, not bytes
      }
    }
  }
  SourcePos here() const { return {line_, col_}; }
  SourcePos here_at(size_t target) {
    advance_to(target);
    return here();
  }

  // After a closing `%}` / `#}`: '-' strips all following whitespace; otherwise trim_blocks eats one newline.
  void after_close(bool strip, bool block) {
    if (strip) {
      size_t k = pos_;
      while (k < src_.size() && std::isspace(static_cast<unsigned char>(src_[k]))) ++k;
      advance_to(k);
    } else if (block && pos_ < src_.size() && src_[pos_] == '\n') {
      advance_to(pos_ + 1);
    }
  }

  void lex_comment(SourcePos open_pos) {
    size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) fail(open_pos, "unclosed comment '{#': expected '#}'");
    bool strip = close > pos_ && src_[close - 1] == '-';
    advance_to(close + 2);
    after_close(strip, true);
  }

  void lex_tag(char kind, SourcePos open_pos) {
    const char* close = kind == '{' ? "}}" : "%}";
    int depth = 0;  // open brackets: '}}' inside a dict literal does not close the tag
    while (true) {
      while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) advance_to(pos_ + 1);
      if (pos_ >= src_.size())
        fail(open_pos, fmt::format("unclosed '{}' tag: expected '{}' before the end of the template",
                                   kind == '{' ? "{{" : "{%", close));
      SourcePos p = here();
      if (depth == 0) {
        bool strip = src_.compare(pos_, 3, std::string("-") + close) == 0;
        if (strip || src_.compare(pos_, 2, close) == 0 ||
            (kind == '%' && src_.compare(pos_, 3, "+%}") == 0)) {
          bool plus = src_[pos_] == '+';
          advance_to(pos_ + (strip || plus ? 3 : 2));
          tokens_.push_back({kind == '{' ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", p});
          after_close(strip, kind == '%' && !plus);
          return;
        }
      }
      char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t k = pos_;
        while (k < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[k])) || src_[k] == '_')) ++k;
        tokens_.push_back({Token::Type::kName, src_.substr(pos_, k - pos_), p});
        advance_to(k);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number(p);
      } else if (c == '\'' || c == '"') {
        lex_string(p);
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                     ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};
        const char* op = nullptr;
        for (const char* o : kOps) {
          if (src_.compare(pos_, std::char_traits<char>::length(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (!op) fail(p, fmt::format("unexpected character '{}' inside a tag", c));
        std::string s(op);
        if (s == "(" || s == "[" || s == "{") ++depth;
        if ((s == ")" || s == "]" || s == "}") && depth > 0) --depth;
        tokens_.push_back({Token::Type::kOp, s, p});
        advance_to(pos_ + s.size());
      }
    }
  }

  void lex_number(SourcePos p) {
    size_t k = pos_;
    bool is_float = false;
    auto digits = [&] {
      while (k < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[k])) || src_[k] == '_')) ++k;
    };
    digits();
    if (k + 1 < src_.size() && src_[k] == '.' && std::isdigit(static_cast<unsigned char>(src_[k + 1]))) {
      is_float = true;
      ++k;
      digits();
    }
    if (k < src_.size() && (src_[k] == 'e' || src_[k] == 'E')) {
      size_t e = k + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        is_float = true;
        k = e;
        digits();
      }
    }
    std::string text;
    for (size_t q = pos_; q < k; ++q)
      if (src_[q] != '_') text += src_[q];
    tokens_.push_back({is_float ? Token::Type::kFloat : Token::Type::kInt, text, p});
    advance_to(k);
  }

  // Python string escapes, as Jinja's lexer unescapes literals; unknown escapes keep their backslash.
  void lex_string(SourcePos p) {
    char quote = src_[pos_];
    size_t k = pos_ + 1;
    std::string out;
    while (true) {
      if (k >= src_.size()) fail(p, fmt::format("unterminated string literal: expected {}", quote));
      char c = src_[k];
      if (c == quote) break;
      if (c != '\\' || k + 1 >= src_.size()) {
        out += c;
        ++k;
        continue;
      }
      char e = src_[k + 1];
      k += 2;
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          // Exactly 2, 4 or 8 hex digits, as Python requires (Jinja leaves the unescaping to Python);
          // std::stoul threw on a non-hex digit, an exception that escaped (found by
          // tests/fuzz/fuzz_chat_template.cpp).
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (k + n > src_.size() ||
              !std::all_of(src_.begin() + static_cast<std::ptrdiff_t>(k),
                           src_.begin() + static_cast<std::ptrdiff_t>(k + n),
                           [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); }))
            fail(p, fmt::format("truncated \\{} escape in a string literal: expected {} hex digits", e, n));
          uint32_t cp = static_cast<uint32_t>(std::stoul(src_.substr(k, n), nullptr, 16));
          if (cp > 0x10FFFF)
            fail(p, fmt::format("\\U{} in a string literal is not a Unicode code point", src_.substr(k, n)));
          k += n;
          append_utf8(cp, out);
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
    tokens_.push_back({Token::Type::kString, out, p});
    advance_to(k + 1);
  }

  static void append_utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string src_;
  const std::string& origin_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
  SourcePos text_pos_{1, 1};
  std::vector<Token> tokens_;
};

std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      out += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      out += source[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

}  // namespace

std::vector<Token> lex(const std::string& source, const std::string& origin) {
  return Lexer(normalize_newlines(source), origin).run();
}

}  // namespace primus::data::jinja
