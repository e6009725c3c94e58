#pragma once
// Softmax cross-entropy over the vocabulary. The lm-head runs it chunk by chunk of rows so that the full
// tokens x vocab logits never exist at once (see model/lm_head.h).
#include "core/tensor.h"

namespace primus::ops {

// logits [R, V]; targets i32 [R] (a negative target marks a row that does not count: loss 0, gradient 0).
// losses [R] f32 (f64 for f64 logits): logsumexp(logits) - logits[target].
// dlogits (optional, may be the logits tensor itself: in place) = grad_scale * (softmax(logits) -
// onehot(target)).
void softmax_cross_entropy(const Tensor& logits, const Tensor& targets, float grad_scale, Tensor& losses,
                           Tensor* dlogits, const Stream& s);

// Vocabulary-parallel softmax cross-entropy (tensor parallelism). The vocabulary of vocab_total ids is split
// over P ranks; rank p holds the logit columns [vocab_begin, vocab_begin + V_local) of every row. The loss
// needs the logsumexp over all columns, but a row's logits are never gathered: each rank reduces its columns
// to three numbers per row (stats), the caller all-gathers those ([P, R, 3], 12 bytes per row and rank
// instead of the row), and every rank finishes its own columns from the merged statistics. The op does no
// communication itself.
//
// Step 1. logits [R, V_local]; targets i32 [R], global ids (negative = ignored row).
// stats [R, 3] (f32; f64 for f64 logits) = per row, over this rank's columns: (max m, sum of exp(x - m), the
// target's logit when targets[r] - vocab_begin is in [0, V_local), else 0). Ignored rows get (0, 0, 0): no
// statistics, which the finish step never reads. vocab_total: the whole vocabulary, [vocab_begin, vocab_begin
// + V_local) must lie in [0, vocab_total). A target >= vocab_total is an error on the CPU (naming the row);
// the GPU cannot throw and writes a NaN target logit instead, so the loss of that row comes out NaN (as
// softmax_cross_entropy's kernel does).
void vocab_parallel_ce_stats(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                             int64_t vocab_total, Tensor& stats, const Stream& s);

// Step 2. all_stats [P, R, 3]: every rank's stats in rank order (the all-gather of step 1's stats). The rows'
// statistics are merged in rank order, M = max_p m_p, S = sum_p s_p exp(m_p - M), lse = M + log S, target
// logit = sum_p t_p, so that every rank computes bitwise the same lse and loss from the same all_stats.
// losses [R] (f32; f64 for f64 logits) = lse - target logit (0 for ignored rows); every rank gets the whole
// row's loss.
// dlogits (optional; may be the logits tensor itself: in place) = grad_scale * (exp(x - lse) - onehot(target
// - vocab_begin)) over this rank's columns, zeros for ignored rows: this rank's slice of
// softmax_cross_entropy's gradient.
void vocab_parallel_ce_finish(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                              const Tensor& all_stats, float grad_scale, Tensor& losses, Tensor* dlogits,
                              const Stream& s);

}  // namespace primus::ops
