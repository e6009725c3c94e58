#pragma once
// Helpers shared by the GPU tests of the memory-bound op families (norm, rope, activation, embedding, loss,
// optimizer, elementwise): model-size random inputs without minutes of host RNG, rates on the result table,
// and exact (bitwise / boolean) checks.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <string>

#include "core/cuda_check.h"
#include "core/tensor.h"
#include "gpu/gpu_test.h"
#include "ops/optimizer.h"

namespace primus::gputest::fused {

// A GPU tensor of N(0, scale^2) values: fresh random values for small tensors; past `pool` elements, a fresh
// random pool repeated on the device (a model-size input in milliseconds instead of a minute of host RNG).
inline Tensor gpu_randn(Context& ctx, const Shape& shape, DType dtype, double scale = 1.0,
                        int64_t pool = int64_t{1} << 22) {
  const int64_t n = shape_numel(shape);
  if (n <= pool) return ctx.to_gpu(ctx.randn_cpu(shape, dtype, scale), dtype);
  Tensor p = ctx.to_gpu(ctx.randn_cpu({pool}, dtype, scale), dtype);
  Tensor t = Tensor::empty(shape, dtype, ctx.stream);
  const size_t es = dtype_size(dtype);
  char* dst = static_cast<char*>(t.data_ptr());
  for (int64_t off = 0; off < n; off += pool) {
    const int64_t len = std::min(pool, n - off);
    PRIMUS_CUDA_CHECK(cudaMemcpyAsync(dst + off * es, p.data_ptr(), len * es, cudaMemcpyDeviceToDevice,
                                      cuda_stream(ctx.stream)));
  }
  stream_sync(ctx.stream);
  return t;
}

// AdamW settings of the optimizer-related cases: weight decay on, gradients scaled as by clipping.
inline ops::AdamWParams adamw_test_params(int64_t step, float grad_scale = 0.5f) {
  ops::AdamWParams p;
  p.lr = 3e-3f;
  p.beta1 = 0.9f;
  p.beta2 = 0.95f;
  p.eps = 1e-8f;
  p.weight_decay = 0.1f;
  p.grad_scale = grad_scale;
  p.step = step;
  return p;
}

// A GPU view of src's n elements `offset` elements into a fresh poisoned buffer (offset 1 breaks the vector
// alignment), and a poisoned one of n elements the same way.
inline Tensor gpu_view(Context& ctx, const Tensor& src, int64_t offset) {
  const int64_t n = src.numel();
  Tensor t = ctx.poisoned({n + offset}, src.dtype()).slice(offset, offset + n);
  t.copy_from(src, ctx.stream);
  return t;
}
inline Tensor gpu_poisoned_view(Context& ctx, int64_t n, DType dt, int64_t offset) {
  return ctx.poisoned({n + offset}, dt).slice(offset, offset + n);
}

// A CPU f32 copy of a GPU tensor, after the stream's work on it is done.
inline Tensor host_f32(Context& ctx, const Tensor& t) {
  stream_sync(ctx.stream);
  return ctx.to_cpu_f32(t);
}

// Puts the timing and the bandwidth (bytes moved / time) on the last recorded case.
inline void set_rate(Context& ctx, double ms, double bytes) {
  CaseResult& r = ctx.results.back();
  r.gpu_ms = ms;
  r.gbps_or_tflops = bytes / (ms * 1e-3) / 1e9;
  r.rate_unit = "GB/s";
}

// Records a pass/fail case with no numeric error (0 when ok, +inf when not).
inline void check_true(Context& ctx, const std::string& family, const std::string& name, bool ok,
                       const std::string& note = {}) {
  ctx.record(family, name, ok ? 0.0 : INFINITY, 0, note);
}

// Bitwise equality of two tensors (any devices; the caller synchronises the stream that wrote them).
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.nbytes() != b.nbytes()) return false;
  Tensor ha = a.device().is_cpu() ? a : a.to(Stream::cpu());
  Tensor hb = b.device().is_cpu() ? b : b.to(Stream::cpu());
  return std::memcmp(ha.data_ptr(), hb.data_ptr(), ha.nbytes()) == 0;
}

// A CPU f32 copy of columns [c0, c1) of a 2-D tensor [R, C] (any device, f32 / bf16 / f64).
inline Tensor columns_f32(Context& ctx, const Tensor& t, int64_t c0, int64_t c1) {
  stream_sync(ctx.stream);
  Tensor f = ctx.to_cpu_f32(t);
  const int64_t rows = f.size(0), cols = f.size(1), w = c1 - c0;
  Tensor out = Tensor::empty({rows, w}, DType::kF32);
  const float* src = f.data<float>();
  float* dst = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * w, src + r * cols + c0, w * sizeof(float));
  return out;
}

// True when every element outside columns [c0, c1) of a 2-D GPU tensor is still NaN (the poison).
inline bool untouched_outside(Context& ctx, const Tensor& t, int64_t c0, int64_t c1) {
  stream_sync(ctx.stream);
  Tensor f = ctx.to_cpu_f32(t);
  const int64_t rows = f.size(0), cols = f.size(1);
  const float* p = f.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if ((c < c0 || c >= c1) && !std::isnan(p[r * cols + c])) return false;
  return true;
}

// A CPU f32 copy of a tensor that a reference op may update in place.
inline Tensor cpu_copy_f32(Context& ctx, const Tensor& t) {
  stream_sync(ctx.stream);
  Tensor f = ctx.to_cpu_f32(t);
  if (f.data_ptr() != t.data_ptr()) return f;
  Tensor c = Tensor::empty(t.shape(), DType::kF32);
  std::memcpy(c.data_ptr(), f.data_ptr(), f.nbytes());
  return c;
}

inline std::string size_str(int64_t n) {
  if (n >= 1000000000 && n % 1000000 == 0) return fmt::format("{:.1f}e9", n / 1e9);
  return std::to_string(n);
}

}  // namespace primus::gputest::fused
