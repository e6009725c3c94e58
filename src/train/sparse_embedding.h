#pragma once
// Whether a run holds the input embedding's gradient row-sparse (ops/row_sparse_grad.h) and with how many
// rows: the one place that decides it. The trainer allocates by it, the memory projection counts by it.
//
// Why: an untied embedding's f32 gradient is V x D, but a step's tokens touch at most its token count of
// rows (Llama-3: 2.1 GB dense, 134 MB for a T 8,192 step). Results are bitwise those of the dense gradient
// except for the gradient norm's summation order (the zero rows are not summed), so clipping sees the same
// norm within f32 rounding.
//
// Where: whole-model stores, in one process or replicated over plain data parallelism (DDP: the ranks
// reserve the union of their rows before the step's backward, so that the slots line up and the slot rows
// are all-reduced instead of the V x D table; parallel/data_parallel.h); not with tensor, pipeline, context
// or expert parallelism or sharded state (ZeRO / FSDP), which split or reduce-scatter the embedding's
// gradient as a dense buffer. An untied and trainable embedding (not LoRA's frozen base), and a step whose
// distinct rows (tokens per step of every dp rank x (1 + MTP depths), which look up shifted tokens) can be
// fewer than V.
#include <cstdint>

#include "config/train_config.h"

namespace primus {

// PRIMUS_SPARSE_EMBEDDING_GRAD: 0 = always dense; 1 (default) = row-sparse where allowed and the slots
// (with their map) take at most half the dense gradient's memory; 2 = row-sparse wherever allowed (tests:
// the small vocabularies of the micro models).
int sparse_embedding_mode();

// The row capacity of the embedding's row-sparse gradient for this run, or 0 for a dense gradient.
// world_size: the processes of the run.
int64_t sparse_embedding_rows(const TrainConfig& cfg, int64_t world_size);

}  // namespace primus
