#pragma once
// The global gradient norm of one process, as partial sums of fixed chunks of the flat gradient buffer.
//
// Why chunks: the overlapped update (train/overlapped_update.h) sums a piece of the gradients on its
// background stream as soon as that piece is complete -- a layer's MLP matrices when the MLP's backward is
// over (ParamHooks::grads_final), the rest of the region when its backward is over -- so that only the input
// embedding's share is left when the backward ends. The serial path launches the same chunks in the same
// order on the compute stream, so both paths give the same norm to the last bit. Chunks follow the update's
// pieces (train/update_pieces.h): each is at most kChunk elements (a short kernel: a background block never
// holds an SM for long) and never crosses a piece; their f32 partials are summed on the host in f64, in
// chunk order: deterministic. A row-sparse embedding gradient (ParamStore::sparse_grad) is region 0's one
// piece, its chunks cut from the slot rows (unused slots are zero).
#include <vector>

#include "model/param_store.h"

namespace primus {

class ChunkedGradNorm {
 public:
  static constexpr int64_t kChunk = int64_t{1} << 24;

  // Buffers are allocated on `compute` (persistent: launches on another stream allocate nothing).
  ChunkedGradNorm(ParamStore& params, const Stream& compute);

  // Squares of region r's gradients, on s.
  void launch_region(int r, const Stream& s);
  // Every region, in region order, on s.
  void launch_all(const Stream& s);
  // The pieces of region r: their entries, and the squares of one piece's gradients on s.
  int pieces(int r) const { return static_cast<int>(pieces_[r].size()); }
  const std::vector<int>& piece_entries(int r, int p) const { return pieces_[r][p].entries; }
  void launch_piece(int r, int p, const Stream& s);
  // sqrt of the sum of every partial; the compute stream must already be ordered after the launches.
  double read();
  int64_t chunks() const { return static_cast<int64_t>(ranges_.size()); }

 private:
  struct Piece {
    int first_chunk = 0, end_chunk = 0;
    std::vector<int> entries;
    bool sparse = false;  // the row-sparse embedding: chunks of its slot rows, not of the flat buffer
  };
  ParamStore& params_;
  std::vector<std::pair<int64_t, int64_t>> ranges_;  // element ranges of the chunks
  std::vector<std::vector<Piece>> pieces_;           // per region, in update order
  Tensor partials_;                                  // f32 [chunks] on the device
  Tensor scratch_;                                   // f64 per-block partials of one sum_squares
};

}  // namespace primus
