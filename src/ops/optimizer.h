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

// master, grad, m, v: f32, same length. master -= lr * (mhat / (sqrt(vhat) + eps) + wd * master).
// When param_copy is given (a bf16 view of the same parameters on CUDA) it receives the updated master, cast.
void adamw_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                Tensor* param_copy, const Stream& s);

// out[0] (+)= sum(x^2) over a flat f32 tensor, accumulated in f64 with a fixed reduction order
// (deterministic). out is f32 [1] (f64 [1] for f64 x) on x's device. CUDA: `scratch` (f64, at least
// kSumSquaresScratch elements, on x's device) holds the per-block partials instead of a temporary allocated
// on s -- a stream that must not allocate (the overlapped update's) passes one; the CPU ignores it.
constexpr int64_t kSumSquaresScratch = 1024;
void sum_squares(const Tensor& x, Tensor& out, bool accumulate, const Stream& s, Tensor* scratch = nullptr);

}  // namespace primus::ops
