// HfTokenizer at run time: encode and decode. Loading tokenizer.json is in hf_tokenizer_load.cpp.
#include <algorithm>
#include <array>
#include <cctype>

#include "core/error.h"
#include "data/hf_pipeline.h"
#include "data/hf_tokenizer.h"
#include "data/unicode.h"

namespace primus {

namespace {

// Rust's char::is_whitespace (Unicode White_Space).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// The code point that ends at byte `end` (exclusive) / starts at byte `i` of valid UTF-8.
char32_t cp_before(std::string_view s, size_t end, size_t* start) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  *start = i;
  return utf8::decode(s.substr(i, end - i))[0];
}
char32_t cp_at(std::string_view s, size_t i, size_t* len) {
  *len = std::max<size_t>(1, utf8::valid_sequence_length(s, i));
  return utf8::decode(s.substr(i, *len))[0];
}

bool is_word_char(char32_t c) {
  if (c < 0x80) return std::isalnum(static_cast<int>(c)) != 0 || c == '_';
  return !is_white_space(c);  // approximation of Rust's is_alphanumeric outside ASCII
}

struct Piece {
  std::string text;
  bool origin;  // starts at offset 0 of the input (Metaspace's prepend_scheme "first")
};

// NormalizedString::split: `ranges` are the pattern matches; returns the pieces per `behavior`.
void split_piece(const Piece& in, const std::vector<std::pair<size_t, size_t>>& ranges,
                 SplitBehavior behavior, bool invert, std::vector<Piece>* out) {
  struct Seg {
    size_t b, e;
    bool match;
  };
  std::vector<Seg> segs;
  const std::string& s = in.text;
  if (s.empty()) return;
  size_t prev = 0;
  for (const auto& [b, e] : ranges) {
    if (prev != b) segs.push_back({prev, b, false});
    segs.push_back({b, e, true});
    prev = e;
  }
  if (prev != s.size()) segs.push_back({prev, s.size(), false});
  if (invert)
    for (Seg& g : segs) g.match = !g.match;
  std::vector<Seg> res;  // `match` now means "remove"
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (Seg g : segs) res.push_back({g.b, g.e, false});
      break;
    case SplitBehavior::kRemoved:
      res = segs;
      break;
    case SplitBehavior::kContiguous:
      for (const Seg& g : segs) {
        if (g.match == previous_match && !res.empty()) {
          res.back().e = g.e;
        } else {
          res.push_back({g.b, g.e, false});
        }
        previous_match = g.match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Seg& g : segs) {
        if (g.match && !previous_match && !res.empty()) {
          res.back().e = g.e;
        } else {
          res.push_back({g.b, g.e, false});
        }
        previous_match = g.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->match && !previous_match && !res.empty()) {
          res.back().b = it->b;
        } else {
          res.push_back({it->b, it->e, false});
        }
        previous_match = it->match;
      }
      std::reverse(res.begin(), res.end());
      break;
  }
  for (const Seg& g : res) {
    if (g.match || g.e == g.b) continue;
    out->push_back({s.substr(g.b, g.e - g.b), in.origin && g.b == 0});
  }
}

void literal_ranges(std::string_view s, const std::string& lit, std::vector<std::pair<size_t, size_t>>* out) {
  if (lit.empty()) return;
  for (size_t p = s.find(lit); p != std::string_view::npos; p = s.find(lit, p + lit.size()))
    out->emplace_back(p, p + lit.size());
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t p = 0;
  for (size_t q = s.find(from); q != std::string::npos; q = s.find(from, p)) {
    out.append(s, p, q - p);
    out += to;
    p = q + from.size();
  }
  out.append(s, p, std::string::npos);
  return out;
}

std::string normalize(const HfPipeline& p, std::string s) {
  for (const NormalizerStep& n : p.normalizer) {
    switch (n.kind) {
      case NormalizerStep::kNfc:
        s = utf8::nfc(s);
        break;
      case NormalizerStep::kPrepend:
        if (!s.empty()) s = n.a + s;
        break;
      case NormalizerStep::kReplace:
        if (n.regex) {
          std::vector<std::pair<size_t, size_t>> r;
          n.regex->find_all(s, &r);
          std::string out;
          size_t prev = 0;
          for (const auto& [b, e] : r) {
            out.append(s, prev, b - prev);
            out += n.b;
            prev = e;
          }
          out.append(s, prev, std::string::npos);
          s = std::move(out);
        } else {
          s = replace_all(std::move(s), n.a, n.b);
        }
        break;
    }
  }
  return s;
}

void pre_tokenize(const HfPipeline& p, std::vector<Piece>* pieces) {
  std::vector<Piece> next;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const PreTokenizerStep& st : p.pre_tokenizer) {
    next.clear();
    for (Piece& pc : *pieces) {
      ranges.clear();
      switch (st.kind) {
        case PreTokenizerStep::kByteLevel:
          if (st.add_prefix_space && (pc.text.empty() || pc.text[0] != ' ')) pc.text.insert(0, " ");
          if (!st.regex) {
            next.push_back(std::move(pc));
            continue;
          }
          st.regex->find_all(pc.text, &ranges);
          split_piece(pc, ranges, SplitBehavior::kIsolated, false, &next);
          continue;
        case PreTokenizerStep::kMetaspace: {
          pc.text = replace_all(std::move(pc.text), " ", st.replacement);
          const bool prepend = st.prepend == PreTokenizerStep::kAlways ||
                               (st.prepend == PreTokenizerStep::kFirst && pc.origin);
          if (prepend && pc.text.rfind(st.replacement, 0) != 0) pc.text.insert(0, st.replacement);
          if (!st.split) {
            next.push_back(std::move(pc));
            continue;
          }
          literal_ranges(pc.text, st.replacement, &ranges);
          split_piece(pc, ranges, SplitBehavior::kMergedWithNext, false, &next);
          continue;
        }
        case PreTokenizerStep::kSplit:
        case PreTokenizerStep::kDigits:
          if (st.regex) {
            st.regex->find_all(pc.text, &ranges);
          } else {
            literal_ranges(pc.text, st.literal, &ranges);
          }
          split_piece(pc, ranges, st.behavior, st.invert, &next);
          continue;
      }
    }
    pieces->swap(next);
  }
}

}  // namespace

void AddedTokenMatcher::add(const AddedToken* t) {
  if (!t->content.empty()) tokens_.push_back(t);
}

void AddedTokenMatcher::finalize() {
  for (auto& v : by_first_byte_) v.clear();
  for (const AddedToken* t : tokens_) by_first_byte_[static_cast<uint8_t>(t->content[0])].push_back(t);
  for (auto& v : by_first_byte_)
    std::stable_sort(v.begin(), v.end(), [](const AddedToken* a, const AddedToken* b) {
      return a->content.size() > b->content.size();
    });
}

const AddedToken* AddedTokenMatcher::match_at(std::string_view s, size_t i) const {
  for (const AddedToken* t : by_first_byte_[static_cast<uint8_t>(s[i])])
    if (s.compare(i, t->content.size(), t->content) == 0) return t;
  return nullptr;
}

namespace {

// AddedVocabulary::find_matches: calls `emit(piece, token_or_null, piece_offset)` left to right.
template <typename Emit>
void split_added(std::string_view s, const AddedTokenMatcher& m, Emit emit) {
  if (m.empty()) {
    if (!s.empty()) emit(s, nullptr, size_t{0});
    return;
  }
  size_t start_offset = 0, i = 0;
  while (i < s.size()) {
    const AddedToken* t = m.match_at(s, i);
    if (t == nullptr) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + t->content.size();
    i = stop;
    if (t->single_word) {
      size_t tmp = 0;
      const bool start_space = start == 0 || !is_word_char(cp_before(s, start, &tmp));
      const bool stop_space = stop == s.size() || !is_word_char(cp_at(s, stop, &tmp));
      if (!start_space || !stop_space) continue;
    }
    if (t->lstrip) {
      size_t b = start;
      while (b > 0) {
        size_t cs = 0;
        if (!is_white_space(cp_before(s, b, &cs))) break;
        b = cs;
      }
      start = std::max(b, start_offset);
    }
    if (t->rstrip) {
      while (stop < s.size()) {
        size_t len = 0;
        if (!is_white_space(cp_at(s, stop, &len))) break;
        stop += len;
      }
      i = stop;
    }
    if (start_offset < start) emit(s.substr(start_offset, start - start_offset), nullptr, start_offset);
    emit(s.substr(start, stop - start), t, start);
    start_offset = stop;
  }
  if (start_offset < s.size()) emit(s.substr(start_offset), nullptr, start_offset);
}

}  // namespace

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const HfPipeline& p = *p_;
  std::string repaired;
  if (!utf8::is_valid(text)) {
    utf8::repair(text, &repaired);  // tokenizers works on Unicode strings: invalid bytes become U+FFFD
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Piece> pieces;
  auto encode_plain = [&](std::string text_piece, bool origin) {
    pieces.clear();
    pieces.push_back({std::move(text_piece), origin});
    pre_tokenize(p, &pieces);
    for (const Piece& pc : pieces) p.model.tokenize(pc.text, &ids);
  };
  split_added(text, p.raw_matcher, [&](std::string_view piece, const AddedToken* t, size_t off) {
    if (t != nullptr) {
      ids.push_back(t->id);
      return;
    }
    const std::string norm = normalize(p, std::string(piece));
    if (p.normalized_matcher.empty()) {
      encode_plain(norm, off == 0);
      return;
    }
    split_added(norm, p.normalized_matcher, [&](std::string_view q, const AddedToken* t2, size_t off2) {
      if (t2 != nullptr) {
        ids.push_back(t2->id);
      } else {
        encode_plain(std::string(q), off == 0 && off2 == 0);
      }
    });
  });
  if (add_special_tokens && !p.post.empty()) {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const PostItem& item : p.post) {
      if (item.sequence) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else {
        out.insert(out.end(), item.ids.begin(), item.ids.end());
      }
    }
    return out;
  }
  return ids;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const HfPipeline& p = *p_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= p.id_to_token.size() ||
        p.id_to_token[static_cast<size_t>(id)].empty())
      continue;
    if (skip_special_tokens && p.is_special[static_cast<size_t>(id)]) continue;
    tokens.push_back(p.id_to_token[static_cast<size_t>(id)]);
  }
  if (!p.has_decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const DecoderStep& d : p.decoder) {
    std::vector<std::string> next;
    switch (d.kind) {
      case DecoderStep::kByteLevel: {
        // Characters back to bytes; a token with a character outside the byte map is taken as it is.
        std::string joined;
        for (const std::string& t : tokens) {
          std::string bytes;
          bool ok = utf8::is_valid(t);
          if (ok) {
            for (char32_t c : utf8::decode(t)) {
              const int b = byte_from_char(c);
              if (b < 0) {
                ok = false;
                break;
              }
              bytes.push_back(static_cast<char>(b));
            }
          }
          joined += ok ? bytes : t;
        }
        next.push_back(std::move(joined));
        break;
      }
      case DecoderStep::kReplace:
        for (std::string& t : tokens) next.push_back(replace_all(std::move(t), d.a, d.b));
        break;
      case DecoderStep::kByteFallback: {
        std::string pending;
        size_t pending_n = 0;
        auto flush = [&] {
          if (pending_n == 0) return;
          if (utf8::is_valid(pending)) {
            next.push_back(pending);
          } else {
            for (size_t k = 0; k < pending_n; ++k) next.push_back("\xEF\xBF\xBD");
          }
          pending.clear();
          pending_n = 0;
        };
        for (std::string& t : tokens) {
          if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t.back() == '>' &&
              std::isxdigit(static_cast<uint8_t>(t[3])) && std::isxdigit(static_cast<uint8_t>(t[4]))) {
            pending.push_back(static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
            ++pending_n;
          } else {
            flush();
            next.push_back(std::move(t));
          }
        }
        flush();
        break;
      }
      case DecoderStep::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        next.push_back(std::move(all));
        break;
      }
      case DecoderStep::kStrip:
        for (std::string& t : tokens) {
          std::vector<char32_t> cps = utf8::is_valid(t) ? utf8::decode(t) : std::vector<char32_t>{};
          const char32_t c = utf8::decode(d.strip_content)[0];
          size_t b = 0, e = cps.size();
          for (int k = 0; k < d.strip_start && b < e && cps[b] == c; ++k) ++b;
          for (int k = 0; k < d.strip_stop && e > b && cps[e - 1] == c; ++k) --e;
          std::string out;
          for (size_t k = b; k < e; ++k) utf8::append(cps[k], &out);
          next.push_back(cps.empty() ? t : out);
        }
        break;
      case DecoderStep::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          const bool drop = i == 0 && d.metaspace_prepend;
          next.push_back(replace_all(tokens[i], d.a, drop ? "" : " "));
        }
        break;
    }
    tokens.swap(next);
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

int64_t HfTokenizer::vocab_size() const {
  return p_->vocab_size;
}

int32_t HfTokenizer::token_to_id(const std::string& token) const {
  auto a = p_->added_by_content.find(token);
  if (a != p_->added_by_content.end()) return a->second;
  for (size_t i = 0; i < p_->id_to_token.size(); ++i)
    if (p_->id_to_token[i] == token) return static_cast<int32_t>(i);
  return -1;
}

std::string HfTokenizer::id_to_token(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < p_->id_to_token.size()
             ? p_->id_to_token[static_cast<size_t>(id)]
             : "";
}

bool HfTokenizer::byte_level() const {
  return p_->model.byte_level;
}

char32_t byte_to_char(uint8_t b) {
  // GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the others to U+0100 onwards.
  static const auto table = [] {
    std::array<char32_t, 256> t{};
    int n = 0;
    for (int c = 0; c < 256; ++c) {
      const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
      t[static_cast<size_t>(c)] = printable ? static_cast<char32_t>(c) : static_cast<char32_t>(256 + n++);
    }
    return t;
  }();
  return table[b];
}

int byte_from_char(char32_t c) {
  static const auto inverse = [] {
    std::array<int, 324> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_char(static_cast<uint8_t>(b))] = b;
    return t;
  }();
  return c < inverse.size() ? inverse[c] : -1;
}

}  // namespace primus
