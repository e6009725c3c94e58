// CPU reference of the FP8 casts (ops/fp8.h): the exact emulation of the CUDA kernels.
//
// One read of x builds two amax tables in f32 -- seg[r][cb], the max |x| of row r over the 128 columns of
// block cb, and band[rb][c], the max of column c over the 128 rows of band rb -- from which every group's
// amax follows (a row's is the max of its segs, a column's the max of its bands, a 128x128 block's the max of
// 128 segs). The casts then scale each element with one f32 multiply and round it with float_to_fp8, the
// definition. Max is exact and order-free, so nothing here depends on the thread count.
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/cpu_common.h"
#include "ops/cpu/quant_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

constexpr int64_t kGroup = 128;

int64_t blocks_of(int64_t n) {
  return (n + kGroup - 1) / kGroup;
}

// max(a, b) in which a NaN on either side wins.
inline float nan_max(float a, float b) {
  return (a > b || std::isnan(a)) ? a : b;
}

template <typename T>
inline float abs_f32(T v) {
  return std::fabs(static_cast<float>(v));
}

struct AmaxTables {
  int64_t rows = 0, cols = 0, nrb = 0, ncb = 0;
  std::vector<float> seg;   // [rows, ncb]
  std::vector<float> band;  // [nrb, cols]

  float row(int64_t r) const {
    float m = 0.f;
    for (int64_t cb = 0; cb < ncb; ++cb) m = nan_max(m, seg[r * ncb + cb]);
    return m;
  }
  float col(int64_t c) const {
    float m = 0.f;
    for (int64_t rb = 0; rb < nrb; ++rb) m = nan_max(m, band[rb * cols + c]);
    return m;
  }
  float block(int64_t rb, int64_t cb) const {
    float m = 0.f;
    for (int64_t r = rb * kGroup; r < std::min(rows, (rb + 1) * kGroup); ++r)
      m = nan_max(m, seg[r * ncb + cb]);
    return m;
  }
  float all() const {
    float m = 0.f;
    for (float v : seg) m = nan_max(m, v);
    return m;
  }
};

// Bands of 128 rows write disjoint parts of both tables, so they run in parallel without races.
template <typename T>
AmaxTables amax_tables(const T* x, int64_t rows, int64_t cols) {
  AmaxTables t;
  t.rows = rows;
  t.cols = cols;
  t.nrb = blocks_of(rows);
  t.ncb = blocks_of(cols);
  t.seg.assign(static_cast<size_t>(rows * t.ncb), 0.f);
  t.band.assign(static_cast<size_t>(t.nrb * cols), 0.f);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain && t.nrb > 1)
  for (int64_t rb = 0; rb < t.nrb; ++rb) {
    float* band = t.band.data() + rb * cols;
    for (int64_t r = rb * kGroup; r < std::min(rows, (rb + 1) * kGroup); ++r) {
      const T* row = x + r * cols;
      for (int64_t cb = 0; cb < t.ncb; ++cb) {
        float m = 0.f;
        for (int64_t c = cb * kGroup; c < std::min(cols, (cb + 1) * kGroup); ++c) {
          const float a = abs_f32(row[c]);
          m = nan_max(m, a);
          band[c] = nan_max(band[c], a);
        }
        t.seg[r * t.ncb + cb] = m;
      }
    }
  }
  return t;
}

// Where element (r, c) of a [rows, cols] FP8 tensor finds its multiplier in scale_inv (the table in fp8.h).
struct GroupMap {
  Fp8Granularity g;
  int64_t rows, cols, ncb;
  GroupMap(Fp8Granularity g_, int64_t rows_, int64_t cols_)
      : g(g_), rows(rows_), cols(cols_), ncb(blocks_of(cols_)) {}
  int64_t index(int64_t r, int64_t c) const {
    switch (g) {
      case Fp8Granularity::kTensorwise:
        return 0;
      case Fp8Granularity::kRowwise:
        return r;
      case Fp8Granularity::kBlock1x128:
        return (c / kGroup) * rows + r;
      case Fp8Granularity::kBlock128x128:
        return (r / kGroup) * ncb + c / kGroup;
    }
    return 0;
  }
};

// The amax of every group of one output, in the order of its scale_inv. The output is x itself ([R, C]) or,
// when `transposed`, x^T ([C, R]), whose rows are x's columns.
std::vector<float> group_amax(const AmaxTables& t, Fp8Granularity g, bool transposed) {
  std::vector<float> a;
  switch (g) {
    case Fp8Granularity::kTensorwise:
      a.push_back(t.all());
      break;
    case Fp8Granularity::kRowwise:
      if (transposed) {
        for (int64_t c = 0; c < t.cols; ++c) a.push_back(t.col(c));
      } else {
        for (int64_t r = 0; r < t.rows; ++r) a.push_back(t.row(r));
      }
      break;
    case Fp8Granularity::kBlock1x128:
      if (transposed) {  // [ceil(R / 128), C]: exactly the band table
        a = t.band;
      } else {  // [ceil(C / 128), R]
        for (int64_t cb = 0; cb < t.ncb; ++cb)
          for (int64_t r = 0; r < t.rows; ++r) a.push_back(t.seg[r * t.ncb + cb]);
      }
      break;
    case Fp8Granularity::kBlock128x128:
      if (transposed) {  // [ceil(C / 128), ceil(R / 128)]
        for (int64_t cb = 0; cb < t.ncb; ++cb)
          for (int64_t rb = 0; rb < t.nrb; ++rb) a.push_back(t.block(rb, cb));
      } else {  // [ceil(R / 128), ceil(C / 128)]
        for (int64_t rb = 0; rb < t.nrb; ++rb)
          for (int64_t cb = 0; cb < t.ncb; ++cb) a.push_back(t.block(rb, cb));
      }
      break;
  }
  return a;
}

// Fills o.scale_inv and returns the multipliers themselves: the given tensorwise scale, or one per group.
std::vector<float> output_scales(const Fp8Tensor& o, const AmaxTables* tables, const float* given,
                                 bool transposed) {
  std::vector<float> scale;
  if (given != nullptr) {
    scale.push_back(*given);
  } else {
    for (float a : group_amax(*tables, o.granularity, transposed))
      scale.push_back(fp8_scale_from_amax(a, o.format));
  }
  float* inv = o.scale_inv.data<float>();
  PRIMUS_CHECK(static_cast<int64_t>(scale.size()) == o.scale_inv.numel(), "quantize: {} scales for {}",
               scale.size(), o.describe());
  for (size_t i = 0; i < scale.size(); ++i) inv[i] = 1.0f / scale[i];
  return scale;
}

// q[r, c] = fp8(float(x[r, c]) * scale[group]): the f32 product is what the GPU computes with mul.rn.f32.
template <typename T>
void cast_rows(const T* x, int64_t rows, int64_t cols, const std::vector<float>& scale, const Fp8Tensor& o) {
  const GroupMap m(o.granularity, rows, cols);
  uint8_t* q = static_cast<uint8_t*>(o.data.data_ptr());
  const float* sc = scale.data();
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      q[r * cols + c] = float_to_fp8(static_cast<float>(x[r * cols + c]) * sc[m.index(r, c)], o.format);
}

// q_t[c, r] = fp8(float(x[r, c]) * scale[group of (c, r) in x^T]), a strip of 64 columns of x per task.
template <typename T>
void cast_cols(const T* x, int64_t rows, int64_t cols, const std::vector<float>& scale, const Fp8Tensor& o) {
  constexpr int64_t kStrip = 64;
  const GroupMap m(o.granularity, cols, rows);
  uint8_t* q = static_cast<uint8_t*>(o.data.data_ptr());
  const float* sc = scale.data();
  const int64_t strips = (cols + kStrip - 1) / kStrip;
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain && strips > 1)
  for (int64_t sp = 0; sp < strips; ++sp)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = sp * kStrip; c < std::min(cols, (sp + 1) * kStrip); ++c)
        q[c * rows + r] = float_to_fp8(static_cast<float>(x[r * cols + c]) * sc[m.index(c, r)], o.format);
}

template <typename T>
float amax_of(const T* x, int64_t n) {
  constexpr int64_t kChunk = 1 << 15;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<float> part(static_cast<size_t>(std::max<int64_t>(chunks, 1)), 0.f);
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    float m = 0.f;
    for (int64_t i = ch * kChunk; i < std::min(n, (ch + 1) * kChunk); ++i) m = nan_max(m, abs_f32(x[i]));
    part[ch] = m;
  }
  float m = 0.f;
  for (float p : part) m = nan_max(m, p);
  return m;
}

}  // namespace

float fp8_scale_from_amax(float amax, Fp8Format f) {
  if (!(amax > 0.f) || std::isinf(amax)) return 1.0f;  // zero, NaN or infinite
  const float s = fp8_max(f) / amax;
  return std::isinf(s) ? std::numeric_limits<float>::max() : s;
}

void quantize(const Tensor& x, Fp8Tensor* out, Fp8Tensor* out_t, const QuantizeArgs& args, const Stream& s,
              const char* what) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const float* given = args.scale != nullptr ? args.scale->data<float>() : nullptr;
  const bool need_tables = args.amax_out != nullptr || given == nullptr;
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    AmaxTables tables;
    if (need_tables) tables = amax_tables(xp, rows, cols);
    if (out != nullptr) cast_rows(xp, rows, cols, output_scales(*out, &tables, given, false), *out);
    if (out_t != nullptr) cast_cols(xp, rows, cols, output_scales(*out_t, &tables, given, true), *out_t);
    if (args.amax_out != nullptr) {
      float& acc = args.amax_out->data<float>()[0];
      acc = nan_max(acc, tables.all());
    }
  });
}

void dequantize(const Fp8Tensor& t, Tensor& x, const Stream& s) {
  float table[256];
  for (int b = 0; b < 256; ++b) table[b] = fp8_to_float(static_cast<uint8_t>(b), t.format);
  const int64_t rows = t.rows(), cols = t.cols();
  const GroupMap m(t.granularity, rows, cols);
  const uint8_t* q = static_cast<const uint8_t*>(t.data.data_ptr());
  const float* inv = t.scale_inv.data<float>();
  float* xp = x.data<float>();
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) xp[r * cols + c] = table[q[r * cols + c]] * inv[m.index(r, c)];
}

void amax(const Tensor& x, Tensor& amax, const Stream& s) {
  with_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    amax.data<float>()[0] = amax_of(x.data<T>(), x.numel());
  });
}

}  // namespace primus::ops::cpu
