#pragma once
// CPU reference implementations (src/ops/cpu/elementwise.cpp): f32 and f64, OpenMP.
// Same contract as ops/elementwise.h, which documents every function; the dispatcher ops/elementwise.cpp
// routes here.
#include "ops/elementwise.h"

namespace primus::ops::cpu {

void add(const Tensor& a, const Tensor& b, Tensor& out, const Stream& s);
void scale_(Tensor& x, float factor, const Stream& s);
void cast(const Tensor& src, Tensor& dst, const Stream& s);
void fill_(Tensor& x, float value, const Stream& s);
int64_t count_nonfinite(const Tensor& x, const Stream& s);
void concat_columns(const Tensor& a, const Tensor& b, Tensor& out, const Stream& s);
void split_columns(const Tensor& x, Tensor& a, Tensor& b, const Stream& s);

}  // namespace primus::ops::cpu
