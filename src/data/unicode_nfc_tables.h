#pragma once
// Canonical composition tables (generated: tools/gen_unicode_nfc.py). Hangul syllables are algorithmic and
// not listed.
#include <cstddef>
#include <cstdint>

namespace primus::unicode_tables {

struct CccRange {
  uint32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp, first, second;  // second 0: a singleton
};
struct Composition {
  uint32_t first, second, composite;  // sorted by (first, second)
};

extern const CccRange kCccRanges[];
extern const size_t kCccRangeCount;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const Composition kCompositions[];
extern const size_t kCompositionCount;

}  // namespace primus::unicode_tables
