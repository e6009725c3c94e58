#include "data/unicode.h"

#include <algorithm>

#include "data/unicode_nfc_tables.h"

namespace primus::utf8 {

namespace {
// Number of bytes of the sequence led by `b` (0: not a lead byte), and the range its second byte must be in.
struct Lead {
  int n;
  uint8_t lo, hi;
};
Lead lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Bytes of the maximal valid prefix of the sequence at i (the whole sequence when valid).
size_t valid_prefix(std::string_view s, size_t i, int* expected) {
  const Lead l = lead(static_cast<uint8_t>(s[i]));
  *expected = l.n;
  if (l.n <= 1) return l.n;
  size_t k = 1;
  for (; k < static_cast<size_t>(l.n) && i + k < s.size(); ++k) {
    const uint8_t c = static_cast<uint8_t>(s[i + k]);
    const uint8_t lo = k == 1 ? l.lo : 0x80, hi = k == 1 ? l.hi : 0xBF;
    if (c < lo || c > hi) break;
  }
  return k;
}
}  // namespace

size_t valid_sequence_length(std::string_view s, size_t i) {
  int expected = 0;
  const size_t k = valid_prefix(s, i, &expected);
  return expected > 0 && k == static_cast<size_t>(expected) ? k : 0;
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = valid_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

size_t repair(std::string_view s, std::string* out) {
  out->clear();
  out->reserve(s.size());
  size_t bad = 0, i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      out->push_back(s[i++]);
      continue;
    }
    int expected = 0;
    const size_t k = valid_prefix(s, i, &expected);
    if (expected > 0 && k == static_cast<size_t>(expected)) {
      out->append(s.substr(i, k));
      i += k;
    } else {
      out->append("\xEF\xBF\xBD");  // one U+FFFD per maximal invalid subpart
      i += std::max<size_t>(1, k);
      ++bad;
    }
  }
  return bad;
}

std::vector<char32_t> decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      out.push_back(b);
      ++i;
    } else if (b < 0xE0) {
      out.push_back(((b & 0x1Fu) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3Fu));
      i += 2;
    } else if (b < 0xF0) {
      out.push_back(((b & 0x0Fu) << 12) | ((static_cast<uint8_t>(s[i + 1]) & 0x3Fu) << 6) |
                    (static_cast<uint8_t>(s[i + 2]) & 0x3Fu));
      i += 3;
    } else {
      out.push_back(((b & 0x07u) << 18) | ((static_cast<uint8_t>(s[i + 1]) & 0x3Fu) << 12) |
                    ((static_cast<uint8_t>(s[i + 2]) & 0x3Fu) << 6) |
                    (static_cast<uint8_t>(s[i + 3]) & 0x3Fu));
      i += 4;
    }
  }
  return out;
}

void append(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// NFC (UAX #15): full canonical decomposition, canonical ordering, canonical composition.

namespace {
namespace t = primus::unicode_tables;
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = 11172;

const t::Decomposition* find_decomposition(char32_t cp) {
  const t::Decomposition* b = t::kDecompositions;
  const t::Decomposition* e = b + t::kDecompositionCount;
  const t::Decomposition* it =
      std::lower_bound(b, e, cp, [](const t::Decomposition& d, char32_t c) { return d.cp < c; });
  return it != e && it->cp == cp ? it : nullptr;
}

void decompose(char32_t cp, std::vector<char32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const t::Decomposition* d = find_decomposition(cp);
  if (d == nullptr) {
    out->push_back(cp);
    return;
  }
  decompose(d->first, out);
  if (d->second != 0) decompose(d->second, out);
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const t::Composition* beg = t::kCompositions;
  const t::Composition* end = beg + t::kCompositionCount;
  const t::Composition* it =
      std::lower_bound(beg, end, std::make_pair(a, b), [](const t::Composition& c, auto key) {
        return c.first < key.first || (c.first == key.first && c.second < key.second);
      });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}
}  // namespace

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const t::CccRange* b = t::kCccRanges;
  const t::CccRange* e = b + t::kCccRangeCount;
  const t::CccRange* it =
      std::upper_bound(b, e, cp, [](char32_t c, const t::CccRange& r) { return c < r.first; });
  if (it == b) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

std::string nfc(std::string_view s) {
  // Below U+0300 nothing composes or reorders except with a following combining mark, so pure ASCII is done.
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<uint8_t>(c) < 0x80;
  if (ascii) return std::string(s);
  std::vector<char32_t> d;
  d.reserve(s.size());
  for (char32_t cp : decode(s)) decompose(cp, &d);
  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Composition (the UAX #15 sample algorithm): each character combines with the last starter unless a
  // character of the same or higher class, or a starter, stands between them.
  std::vector<char32_t> out;
  out.reserve(d.size());
  if (d.empty()) return {};
  out.push_back(d[0]);
  size_t starter = 0;
  int last_class = combining_class(d[0]) == 0 ? 0 : 256;  // a leading non-starter composes with nothing
  for (size_t i = 1; i < d.size(); ++i) {
    const char32_t c = d[i];
    const int cc = combining_class(c);
    const char32_t comp = compose_pair(out[starter], c);
    if (comp != 0 && (last_class < cc || last_class == 0)) {
      out[starter] = comp;
      continue;
    }
    if (cc == 0) starter = out.size();
    last_class = cc;
    out.push_back(c);
  }
  std::string r;
  r.reserve(s.size());
  for (char32_t c : out) append(c, &r);
  return r;
}

}  // namespace primus::utf8
