#pragma once
// CPU reference implementations (src/ops/cpu/optimizer.cpp): f32 and f64, OpenMP.
// Same contract as ops/optimizer.h, which documents every function; the dispatcher ops/optimizer.cpp routes
// here.
#include "ops/optimizer.h"

namespace primus::ops::cpu {

void adamw_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                Tensor* param_copy, const Stream& s);
void adamw_step_split(Tensor& hi, Tensor& rem, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                      const Stream& s);
void master_split(const Tensor& master, Tensor& hi, Tensor* rem, const Stream& s);
void master_join(const Tensor& hi, const Tensor& rem, Tensor& master, const Stream& s);
void sum_squares(const Tensor& x, Tensor& out, bool accumulate, const Stream& s, Tensor* scratch = nullptr);
void sum_squares_chunks(const Tensor& x, int64_t chunk, Tensor& out, const Stream& s,
                        Tensor* scratch = nullptr);

}  // namespace primus::ops::cpu
