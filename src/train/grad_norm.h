#pragma once
// The global gradient norm of one process, as partial sums of fixed chunks of the flat gradient buffer.
//
// Why chunks: the overlapped update (train/overlapped_update.h) sums region r's squares on its background
// stream as soon as region r's backward is over, so that only the input embedding's share is left when the
// backward ends. The serial path launches the same chunks in the same order on the compute stream, so both
// paths give the same norm to the last bit. Each chunk is at most kChunk elements (a short kernel: a
// background block never holds an SM for long) and never crosses a region; its f32 partial is summed on the
// host in f64, in chunk order: deterministic.
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
  // sqrt of the sum of every partial; the compute stream must already be ordered after the launches.
  double read();
  int64_t chunks() const { return static_cast<int64_t>(ranges_.size()); }

 private:
  ParamStore& params_;
  std::vector<std::pair<int64_t, int64_t>> ranges_;  // element ranges of the chunks
  std::vector<int> first_chunk_;                     // per region, plus one past the end
  Tensor partials_;                                  // f32 [chunks] on the device
  Tensor scratch_;                                   // f64 per-block partials of one sum_squares
};

}  // namespace primus
