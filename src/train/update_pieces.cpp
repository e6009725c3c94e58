#include "train/update_pieces.h"

#include <algorithm>

#include "core/error.h"

namespace primus {

std::vector<UpdatePiece> update_pieces(const ParamStore& params, int region, int64_t min_elems) {
  PRIMUS_CHECK(region >= 0 && region < static_cast<int>(params.regions().size()),
               "update_pieces: region {} of {}", region, params.regions().size());
  const ParamRegion& reg = params.regions()[region];
  std::vector<int> decayed, plain;
  for (int i = 0; i < static_cast<int>(params.entries().size()); ++i) {
    const ParamEntry& e = params.entry(i);
    if (e.region != region) continue;
    (e.offset < reg.decay_end ? decayed : plain).push_back(i);
  }
  auto by_offset = [&](int a, int b) { return params.entry(a).offset < params.entry(b).offset; };
  std::sort(decayed.begin(), decayed.end(), by_offset);

  std::vector<UpdatePiece> out;
  if (reg.end > reg.decay_end) out.push_back({reg.decay_end, reg.end, false, plain});
  UpdatePiece cur{reg.begin, reg.begin, true, {}};
  for (int i : decayed) {
    const ParamEntry& e = params.entry(i);
    PRIMUS_CHECK(e.offset == cur.end || cur.entries.empty() || e.offset >= cur.end,
                 "update_pieces: entry '{}' overlaps the one before it", e.name);
    cur.entries.push_back(i);
    cur.end = e.offset + e.numel;
    if (cur.end - cur.begin >= min_elems) {
      out.push_back(cur);
      cur = UpdatePiece{cur.end, cur.end, true, {}};
    }
  }
  // The last piece reaches the span's end (alignment padding lies there); padding alone joins the piece
  // before.
  cur.end = reg.decay_end;
  if (cur.end > cur.begin) {
    if (cur.entries.empty() && !out.empty() && out.back().decay)
      out.back().end = cur.end;
    else
      out.push_back(cur);
  }
  return out;
}

}  // namespace primus
