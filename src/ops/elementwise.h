#pragma once
#include "core/tensor.h"

namespace primus::ops {

// out = a + b (same shape and dtype; out may alias a or b).
void add(const Tensor& a, const Tensor& b, Tensor& out, const Stream& s);
// x *= factor.
void scale_(Tensor& x, float factor, const Stream& s);
// dst = src converted (f32 <-> bf16 <-> f64, same numel).
void cast(const Tensor& src, Tensor& dst, const Stream& s);
// dst = src, on any pair of devices, converted to dst's dtype where the two differ (f32 <-> bf16 <-> f64;
// same numel, both contiguous): a plain copy_from for equal dtypes, else a cast on src's device when `s` runs
// there, or on the host.
void copy_cast(const Tensor& src, Tensor& dst, const Stream& s);
// x[:] = value.
void fill_(Tensor& x, float value, const Stream& s);
// Number of non-finite (NaN / Inf) elements of a floating tensor; synchronises.
int64_t count_nonfinite(const Tensor& x, const Stream& s);
// out[R, Ca + Cb] = [a | b] for a [R, Ca], b [R, Cb] (one dtype; out overlaps neither).
void concat_columns(const Tensor& a, const Tensor& b, Tensor& out, const Stream& s);
// The inverse: a = x[:, :Ca], b = x[:, Ca:].
void split_columns(const Tensor& x, Tensor& a, Tensor& b, const Stream& s);

}  // namespace primus::ops
