#pragma once
// AdamW with decoupled weight decay, FP32 master weights and moments, over flat parameter regions.
#include "core/tensor.h"

namespace primus::ops {

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;         // 1-based, for bias correction
  float grad_scale = 1.0f;  // multiplies the gradient first (gradient clipping folds in here)
};

// master, grad, m, v: f32, same length; m and v may each be bf16 instead (the precision-aware optimizer's
// state, Megatron's exp_avg_dtype / exp_avg_sq_dtype): the step computes with the moments widened and
// updated in f32 and stores them rounded to nearest even, as TransformerEngine's FusedAdam does.
// master -= lr * (mhat / (sqrt(vhat) + eps) + wd * master).
// When param_copy is given (a bf16 view of the same parameters on CUDA) it receives the updated master: bf16
// by compute_bits (core/master_split.h: nearest, ties away from zero), f32/f64 by a plain cast.
void adamw_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                Tensor* param_copy, const Stream& s);

// The same update on a master stored as (hi bf16, rem i16) pairs (core/master_split.h): each element is
// joined to its f32 master, updated exactly as adamw_step updates an f32 master, and split again, so hi and
// rem are bitwise what adamw_step on the joined master followed by master_split gives (on the same backend).
// hi, rem, grad, m, v: same length; grad f32, m and v f32 or bf16. 28 bytes per parameter on CUDA instead of
// 30 (20 with bf16 moments).
void adamw_step_split(Tensor& hi, Tensor& rem, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                      const Stream& s);

// master (f32) -> hi (bf16, compute_bits) and, when rem is given, rem (i16): the split of
// core/master_split.h. Without rem it is the master -> compute-copy rounding of every mode.
void master_split(const Tensor& master, Tensor& hi, Tensor* rem, const Stream& s);
// (hi bf16, rem i16) -> master (f32): the exact join.
void master_join(const Tensor& hi, const Tensor& rem, Tensor& master, const Stream& s);

// out[0] (+)= sum(x^2) over a flat f32 tensor, accumulated in f64 with a fixed reduction order
// (deterministic). out is f32 [1] (f64 [1] for f64 x) on x's device. CUDA: `scratch` (f64, at least
// kSumSquaresScratch elements, on x's device) holds the per-block partials instead of a temporary allocated
// on s -- a stream that must not allocate (the overlapped update's) passes one; the CPU ignores it.
constexpr int64_t kSumSquaresScratch = 1024;
void sum_squares(const Tensor& x, Tensor& out, bool accumulate, const Stream& s, Tensor* scratch = nullptr);
// out[c] = sum(x^2) over chunk c of a flat f32 tensor cut into `chunk`-element pieces (the last one shorter),
// overwritten; out is f32 [ceil(n / chunk)]. Each out[c] is bitwise what sum_squares gives for that chunk
// alone when chunk is a multiple of 4 (the vector loads then start alike in every chunk), but the whole
// tensor takes two launches instead of two per chunk (the gradient norm's chunks of a large embedding were
// ~60 launches in the step's tail). CUDA: `scratch` as for sum_squares, holding at least chunks x
// kSumSquaresScratch elements.
void sum_squares_chunks(const Tensor& x, int64_t chunk, Tensor& out, const Stream& s,
                        Tensor* scratch = nullptr);

}  // namespace primus::ops
