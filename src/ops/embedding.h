#pragma once
#include "core/tensor.h"
#include "ops/optimizer.h"

namespace primus::ops {

// out[N, D] = table[tokens[n]]; tokens i32 [N], every id in [0, V) (checked on the CPU; on the GPU an id out
// of range raises a device-side error flag that the op reports).
//
// Vocabulary-sharded table (tensor parallelism: each rank holds a slice of the rows, and the ranks' outputs
// are summed by an all-reduce): the table [V, D] holds rows [vocab_begin, vocab_begin + V) of a vocabulary of
// vocab_total ids. out[n] = table[tokens[n] - vocab_begin] for the ids in that range and a zero row for the
// others (another rank's), so that the sum over the shards is the unsharded lookup. Every id must still lie
// in [0, vocab_total): a bad id is an error on every rank, not a row that no rank fills. vocab_total = -1
// means the table's own rows (vocab_begin must then be 0): the unsharded lookup.
void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out, const Stream& s,
                       int64_t vocab_begin = 0, int64_t vocab_total = -1);
// The vocabulary the ids of a (sharded) lookup are checked against: vocab_total, or the table's `rows` for
// -1; checks that the table's rows [vocab_begin, vocab_begin + rows) lie in it (both backends call it).
int64_t embedding_vocab_total(const char* op, int64_t rows, int64_t vocab_begin, int64_t vocab_total);
// dtable[V, D] += scatter of dout rows by token id. Deterministic: the same inputs give bitwise the same
// result. Sharded (vocab_begin, vocab_total as for embedding_forward): only the dout rows whose ids fall in
// [vocab_begin, vocab_begin + V) are added, at row id - vocab_begin; the others belong to another rank's
// shard and are skipped.
void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable, const Stream& s,
                        int64_t vocab_begin = 0, int64_t vocab_total = -1);
// out[N, D] = rows tokens[n] of the table as one AdamW step with `p` would leave them: computed from the f32
// master rows, their gradients and moments (all [V, D]) without storing anything, and converted to out's
// dtype (bf16: the compute rounding of core/master_split.h). The first forward op can then run before the
// table's update has (train/overlapped_update.h); on CUDA the rows are bitwise those adamw_step writes to the
// bf16 copy (one shared element update). Forward only: the gradient flows through embedding_backward as for a
// plain lookup.
void embedding_forward_updated(const Tensor& tokens, const Tensor& master, const Tensor& grad,
                               const Tensor& m, const Tensor& v, const AdamWParams& p, Tensor& out,
                               const Stream& s);
// The same with the master table stored as (hi bf16, rem i16) pairs (core/master_split.h): the rows are
// bitwise the hi that adamw_step_split leaves (on CUDA), i.e. embedding_forward_updated on the joined master.
void embedding_forward_updated_split(const Tensor& tokens, const Tensor& hi, const Tensor& rem,
                                     const Tensor& grad, const Tensor& m, const Tensor& v,
                                     const AdamWParams& p, Tensor& out, const Stream& s);

}  // namespace primus::ops
