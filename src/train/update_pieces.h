#pragma once
// The pieces in which the overlapped optimizer update (train/overlapped_update.h) writes one region, in the
// order it writes them; the next forward waits for the piece holding each weight just before reading it.
//
// Why: waiting for a whole layer's update before its forward serialised the two. A Mixtral-8x7B layer is
// 1.45 B parameters (~14 ms of AdamW at 3 TB/s) and its forward ~5 ms, so with two layers most of the update
// stood in front of the forward instead of beside it. In pieces, the first GEMM waits only for its own
// weights.
//
// Order: the region's no-decay span first (norms, biases, the router's expert bias: tiny, and the input norm
// is the first thing a layer reads), then the decay span in entry order, which is the order in which the
// forward reads the matrices (ParamStore lays them out as q|k|v, o, router, experts' gate|up, down, shared
// expert). Consecutive entries merge until a piece holds at least `min_elems` elements, so small ones do not
// each cost a launch and an event. The pieces cover [begin, end) of the region exactly, padding included.
#include <cstdint>
#include <vector>

#include "model/param_store.h"

namespace primus {

// The piece size the overlapped update and the chunked gradient norm use: 4 M parameters are ~110 MB of
// AdamW traffic (~40 us), so events and launches cost nothing next to them, and a Mixtral layer still splits
// into its attention, router + experts' gate|up, and down tensors.
constexpr int64_t kUpdatePieceElems = int64_t{4} << 20;

struct UpdatePiece {
  int64_t begin = 0, end = 0;  // flat element range
  bool decay = true;           // weight decay applies (the region's decay span)
  std::vector<int> entries;    // the entries inside it
};

std::vector<UpdatePiece> update_pieces(const ParamStore& params, int region, int64_t min_elems);

}  // namespace primus
