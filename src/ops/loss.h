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

}  // namespace primus::ops
