#include "train/grad_norm.h"

#include <algorithm>
#include <cmath>

#include "ops/optimizer.h"
#include "train/update_pieces.h"

namespace primus {

ChunkedGradNorm::ChunkedGradNorm(ParamStore& params, const Stream& compute) : params_(params) {
  for (int r = 0; r < static_cast<int>(params.regions().size()); ++r) {
    std::vector<Piece>& out = pieces_.emplace_back();
    if (params.sparse_region(r)) {
      Piece p;
      p.sparse = true;
      p.first_chunk = static_cast<int>(ranges_.size());
      const int64_t n = params.sparse_grad().rows.numel();
      for (int64_t b = 0; b < n; b += kChunk) ranges_.emplace_back(b, std::min(n, b + kChunk));
      p.end_chunk = static_cast<int>(ranges_.size());
      p.entries = {params.sparse_entry()};
      out.push_back(std::move(p));
      continue;
    }
    for (const UpdatePiece& up : update_pieces(params, r, kUpdatePieceElems)) {
      Piece p;
      p.first_chunk = static_cast<int>(ranges_.size());
      for (int64_t b = up.begin; b < up.end; b += kChunk)
        ranges_.emplace_back(b, std::min(up.end, b + kChunk));
      p.end_chunk = static_cast<int>(ranges_.size());
      p.entries = up.entries;
      out.push_back(std::move(p));
    }
  }
  partials_ = Tensor::zeros({std::max<int64_t>(1, chunks())}, params.grad_flat().dtype(), compute);
  int64_t most = 1;  // chunks of the largest piece: one sum_squares_chunks call holds all their partials
  for (const auto& region : pieces_)
    for (const Piece& p : region) most = std::max<int64_t>(most, p.end_chunk - p.first_chunk);
  if (compute.device.is_cuda())
    scratch_ = Tensor::empty({most * ops::kSumSquaresScratch}, DType::kF64, compute);
}

void ChunkedGradNorm::launch_piece(int r, int p, const Stream& s) {
  const Piece& piece = pieces_[r][p];
  if (piece.end_chunk == piece.first_chunk) return;
  // The piece's chunks are consecutive kChunk-element ranges: one call sums them all.
  Tensor out = partials_.slice(piece.first_chunk, piece.end_chunk);
  const int64_t b = ranges_[piece.first_chunk].first, e = ranges_[piece.end_chunk - 1].second;
  ops::sum_squares_chunks(
      piece.sparse ? params_.sparse_grad().rows.view({-1}).slice(b, e) : params_.grad_span(b, e), kChunk, out,
      s, scratch_.defined() ? &scratch_ : nullptr);
}

void ChunkedGradNorm::launch_region(int r, const Stream& s) {
  for (int p = 0; p < pieces(r); ++p) launch_piece(r, p, s);
}

void ChunkedGradNorm::launch_all(const Stream& s) {
  for (int r = 0; r < static_cast<int>(pieces_.size()); ++r) launch_region(r, s);
}

double ChunkedGradNorm::read() {
  double sum = 0;
  for (double v : partials_.to_vector<double>()) sum += v;
  return std::sqrt(sum);
}

}  // namespace primus
