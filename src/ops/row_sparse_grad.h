#pragma once
// The gradient of an input embedding table [V, D] held as the rows a step's tokens touch, not as V rows.
//
// Why: a step of T tokens touches at most T of the table's rows; the rest of its f32 gradient is zeros.
// Llama-3's table (V 128,256, D 4,096) has a 2.1 GB dense gradient, of which a T 8,192 step uses 134 MB;
// keeping only those rows is what lets the Llama-3-8B dims 4-layer workload fit under torch.compile's peak
// without recomputation (docs/performance.md). AdamW still updates all V rows (their moments decay and
// weight decay applies): the update kernels read a row's gradient through the slot map, zero for a row
// without a slot, so every result is bitwise the dense one's.
//
// Layout: slot s in [0, count) holds the gradient of table row row_of[s]; slot_of[r] is r's slot or -1.
// Slots are handed out in ascending row order per backward call, after the slots already in use: a step's
// micro-batches accumulate into the slots of the rows they share, and the assignment depends only on the
// tokens (deterministic). Rows of slots >= count are zero (row_sparse_clear keeps them so), so sums of
// squares over all of `rows` are sums over the used slots.
#include <cstdint>

#include "core/tensor.h"
#include "ops/optimizer.h"

namespace primus::ops {

struct RowSparseGrad {
  Tensor rows;     // f32 [C, D]
  Tensor slot_of;  // i32 [V]
  Tensor row_of;   // i32 [C]
  Tensor count;    // i32 [1]: slots in use
  int64_t vocab() const { return slot_of.numel(); }
  int64_t dim() const { return rows.defined() ? rows.size(1) : 0; }
  int64_t capacity() const { return rows.defined() ? rows.size(0) : 0; }
  bool defined() const { return rows.defined(); }
};

// Zero rows, every slot free, on s's device. capacity: the most distinct rows a step can touch (<= vocab).
RowSparseGrad row_sparse_grad(int64_t vocab, int64_t dim, int64_t capacity, const Stream& s);

// embedding_backward (ops/embedding.h) into a row-sparse gradient: first every row the tokens look up (in
// this table's shard: vocab_begin, vocab_total as there) gets a slot if it has none, then the dout rows are
// summed into the slots exactly as embedding_backward sums them into the table's rows: g's row of r is then
// bitwise the dense gradient's row r after the same calls. Throws when the slots would run out (more
// distinct rows than the capacity) -- checked on the host for CPU tensors, by a device flag reported on the
// next call on CUDA.
void embedding_backward_sparse(const Tensor& tokens, const Tensor& dout, RowSparseGrad& g, const Stream& s,
                               int64_t vocab_begin = 0, int64_t vocab_total = -1);

// Slots for `rows` (i32 table rows, any order, repeats allowed) that have none, handed out as
// embedding_backward_sparse hands them out (ascending row order after those in use), with nothing added to
// any row. Data parallelism (parallel/data_parallel.h) reserves the union of every rank's rows of a step
// before its first backward, so that the slots are laid out alike on every rank and the slot rows can be
// all-reduced as they are. Throws (CPU) or flags (CUDA) running out of slots as the backward does.
void row_sparse_reserve(const Tensor& rows, RowSparseGrad& g, const Stream& s);

// Every slot free and its row zeroed (the next step's gradient starts from zero).
void row_sparse_clear(RowSparseGrad& g, const Stream& s);

// dense [V, D] (f32) = the gradient g holds.
void row_sparse_to_dense(const RowSparseGrad& g, Tensor& dense, const Stream& s);

// adamw_step / adamw_step_split on a span of the table's flat elements [first, first + n) (n = the length
// of master / hi), with the gradient read from g (zero for a row without a slot, and for elements at or
// past V x D: a region's alignment padding). Bitwise the dense update with row_sparse_to_dense's gradient.
void adamw_step_sparse(Tensor& master, const RowSparseGrad& g, int64_t first, Tensor& m, Tensor& v,
                       const AdamWParams& p, Tensor* param_copy, const Stream& s);
void adamw_step_split_sparse(Tensor& hi, Tensor& rem, const RowSparseGrad& g, int64_t first, Tensor& m,
                             Tensor& v, const AdamWParams& p, const Stream& s);

// embedding_forward_updated / _split (ops/embedding.h) with the table's gradient read from g.
void embedding_forward_updated_sparse(const Tensor& tokens, const Tensor& master, const RowSparseGrad& g,
                                      const Tensor& m, const Tensor& v, const AdamWParams& p, Tensor& out,
                                      const Stream& s);
void embedding_forward_updated_split_sparse(const Tensor& tokens, const Tensor& hi, const Tensor& rem,
                                            const RowSparseGrad& g, const Tensor& m, const Tensor& v,
                                            const AdamWParams& p, Tensor& out, const Stream& s);

}  // namespace primus::ops
