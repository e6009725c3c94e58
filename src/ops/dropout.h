#pragma once
// Dropout with a mask drawn from the element's place, not from a generator's state: LoRA's input dropout
// (model/lora_adapter.h). keep[i, j] = uniform(key, i * whole_cols + col_begin + j) > p, by Philox
// (core/philox.h), for row i of x [rows, cols] viewed as columns [col_begin, col_begin + cols) of a whole
// [rows, whole_cols] tensor. So every device and every split of the columns (tensor parallelism) drops the
// same elements, and a backward regenerates the mask instead of storing it. `rows` places x's rows in the
// whole batch (ops/dropout_mask.h: context parallelism's chunks); the row index above is then the whole
// batch's.
#include <cstdint>

#include "core/tensor.h"
#include "ops/dropout_mask.h"

namespace primus::ops {

// out = x * keep / (1 - p), elementwise (out may be x). 0 <= p < 1. CPU: f32 / f64; CUDA: bf16 (f32 math,
// rounded once).
void dropout_apply(const Tensor& x, float p, uint64_t key, int64_t col_begin, int64_t whole_cols, Tensor& out,
                   const Stream& s, const DropoutRows& rows = {});

}  // namespace primus::ops
