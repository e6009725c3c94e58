#include "train/grad_norm.h"

#include <algorithm>
#include <cmath>

#include "ops/optimizer.h"

namespace primus {

ChunkedGradNorm::ChunkedGradNorm(ParamStore& params, const Stream& compute) : params_(params) {
  for (const ParamRegion& r : params.regions()) {
    first_chunk_.push_back(static_cast<int>(ranges_.size()));
    for (int64_t b = r.begin; b < r.end; b += kChunk) ranges_.emplace_back(b, std::min(r.end, b + kChunk));
  }
  first_chunk_.push_back(static_cast<int>(ranges_.size()));
  partials_ = Tensor::zeros({std::max<int64_t>(1, chunks())}, params.grad_flat().dtype(), compute);
  if (compute.device.is_cuda()) scratch_ = Tensor::empty({ops::kSumSquaresScratch}, DType::kF64, compute);
}

void ChunkedGradNorm::launch_region(int r, const Stream& s) {
  for (int c = first_chunk_[r]; c < first_chunk_[r + 1]; ++c) {
    Tensor out = partials_.slice(c, c + 1);
    ops::sum_squares(params_.grad_flat().slice(ranges_[c].first, ranges_[c].second), out,
                     /*accumulate=*/false, s, scratch_.defined() ? &scratch_ : nullptr);
  }
}

void ChunkedGradNorm::launch_all(const Stream& s) {
  for (int r = 0; r + 1 < static_cast<int>(first_chunk_.size()); ++r) launch_region(r, s);
}

double ChunkedGradNorm::read() {
  double sum = 0;
  for (double v : partials_.to_vector<double>()) sum += v;
  return std::sqrt(sum);
}

}  // namespace primus
