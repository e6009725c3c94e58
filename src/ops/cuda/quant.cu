// FP8 casts on the GPU (ops/fp8.h): quantize, dequantize and amax for bf16 and f32 inputs, byte-exact against
// the CPU emulation (src/ops/cpu/quant.cpp). Design notes: docs/kernels/fp8.md, "Quantisation".
//
// quantize is one tile kernel: a block owns a 128 x 128 tile of x (the group edge), reads it once into
// registers with 16-byte loads (thread t: 16 consecutive rows x one 16-byte column chunk), and computes every
// tile-local maximum from those registers -- the 1x128 row segments of `out` (a butterfly over the lanes of a
// row), the 128x1 column segments of `out_t` (through shared memory) and the 128x128 block. It then writes q
// row by row and q^T through a swizzled shared-memory transpose (16 rows of one column = one 16-byte store of
// q^T), and the scale_inv of its groups. Groups wider than a tile (tensorwise current scaling, rowwise of out
// = a whole row, rowwise of out_t = a whole column) need their amax before any element is cast: a first pass
// of the same tiling reduces them with integer atomicMax into a small scratch (per row, per column, global),
// and the cast kernel reads those.
//
// Exactness: --use_fast_math compiles f32 multiplies, divides and max with flush-to-zero, so the kernels do
// their arithmetic in PTX without .ftz (mul.rn.f32, div.rn.f32) and take maxima on the IEEE bit patterns of
// |x| (an unsigned compare orders non-negative floats, and NaN above +inf, so NaN propagates). The casts are
// cvt.rn.satfinite (via __nv_cvt_float2_to_fp8x2): round to nearest even, saturate to +-max, NaN -> 0x7f, the
// rule float_to_fp8 defines.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/kernel_utils.cuh"
#include "ops/cuda/quant_cuda.h"

namespace primus::ops::cuda {
namespace {

using detail::bf16;

constexpr int kTile = 128;                          // tile edge = group edge of 1x128 and 128x128
constexpr int kRowsPerThread = 16;                  // a thread's rows: one 16-byte store of q^T per column
constexpr int kRowGroups = kTile / kRowsPerThread;  // 8
constexpr uint32_t kInfBits = 0x7f800000u;
constexpr uint32_t kNaNBits = 0x7fc00000u;  // the canonical NaN stored in amax outputs
constexpr uint32_t kFltMaxBits = 0x7f7fffffu;

// Thread layout of a tile: kLanes threads share a row group, each holding kVec consecutive columns (one
// 16-byte load per row); thread t owns rows 16 * (t / kLanes) + [0, 16) and columns kVec * (t % kLanes) + [0,
// kVec).
template <typename T>
struct Layout;
template <>
struct Layout<bf16> {
  static constexpr int kVec = 8, kLanes = 16, kThreads = 128;
};
template <>
struct Layout<float> {
  static constexpr int kVec = 4, kLanes = 32, kThreads = 256;
};

// IEEE f32 arithmetic whatever -ftz says: denormal inputs and results stay, as on the CPU.
__device__ __forceinline__ float mul_rn(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ float div_rn(float a, float b) {
  float r;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// cpu::fp8_scale_from_amax on the bit pattern of a non-negative amax.
__device__ __forceinline__ float scale_from_amax(uint32_t amax_bits, float fp8max) {
  if (amax_bits == 0u || amax_bits >= kInfBits) return 1.0f;  // zero, inf or NaN
  const float s = div_rn(fp8max, __uint_as_float(amax_bits));
  return __float_as_uint(s) == kInfBits ? __uint_as_float(kFltMaxBits) : s;
}

// NaN payloads differ; amax outputs get one NaN, which as an int is above every finite and infinite pattern.
__device__ __forceinline__ int canonical(uint32_t amax_bits) {
  return static_cast<int>(amax_bits > kInfBits ? kNaNBits : amax_bits);
}

__device__ __forceinline__ uint32_t warp_umax(uint32_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The f32 bit pattern of element e of a 16-byte word of T.
template <typename T>
__device__ __forceinline__ uint32_t elem_bits(const uint4& v, int e) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  if constexpr (std::is_same_v<T, bf16>) {
    return (e & 1) ? (w[e >> 1] & 0xffff0000u) : (w[e >> 1] << 16);
  } else {
    return w[e];
  }
}
template <typename T>
__device__ __forceinline__ float elem(const uint4& v, int e) {
  return __uint_as_float(elem_bits<T>(v, e));
}

// Two values to two FP8 bytes (lo in the low byte): cvt.rn.satfinite.
template <bool kE4>
__device__ __forceinline__ uint32_t cvt2(float lo, float hi) {
  return __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, kE4 ? __NV_E4M3 : __NV_E5M2);
}

// raw[i] = x[r + i, c .. c + kVec) (zeros outside x). kVecOk: C % kVec == 0 and x 16-byte aligned.
template <typename T, bool kVecOk, bool kStream>
__device__ __forceinline__ void load_rows(const T* __restrict__ x, int64_t R, int64_t C, int64_t r, int64_t c,
                                          uint4 (&raw)[kRowsPerThread]) {
  constexpr int kVec = Layout<T>::kVec;
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    raw[i] = make_uint4(0u, 0u, 0u, 0u);
    if (r + i >= R) continue;
    if constexpr (kVecOk) {
      if (c < C) {
        const uint4* p = reinterpret_cast<const uint4*>(x + (r + i) * C + c);
        raw[i] = kStream ? __ldcs(p) : __ldg(p);
      }
    } else {
      uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        if (c + e >= C) break;
        const int64_t at = (r + i) * C + c + e;
        if constexpr (std::is_same_v<T, bf16>) {
          w[e >> 1] |= static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(x)[at]) << (16 * (e & 1));
        } else {
          w[e] = reinterpret_cast<const uint32_t*>(x)[at];
        }
      }
      raw[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

// rowm[i] = max |x| over the thread's columns of its row i; colm[e] = over its 16 rows of its column e
// (bits).
template <typename T>
__device__ __forceinline__ void thread_abs_max(const uint4 (&raw)[kRowsPerThread],
                                               uint32_t (&rowm)[kRowsPerThread],
                                               uint32_t (&colm)[Layout<T>::kVec]) {
  if constexpr (std::is_same_v<T, bf16>) {
    // Two bf16 at a time: |x| is the low 15 bits of each half, and max.u16x2 orders them as floats.
    uint32_t colp[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const uint32_t w[4] = {raw[i].x, raw[i].y, raw[i].z, raw[i].w};
      uint32_t rp = 0u;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t a = w[k] & 0x7fff7fffu;
        rp = __vmaxu2(rp, a);
        colp[k] = __vmaxu2(colp[k], a);
      }
      rowm[i] = max(rp & 0xffffu, rp >> 16) << 16;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      colm[2 * k] = colp[k] << 16;
      colm[2 * k + 1] = colp[k] & 0xffff0000u;
    }
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) colm[e] = 0u;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const uint32_t w[4] = {raw[i].x, raw[i].y, raw[i].z, raw[i].w};
      uint32_t m = 0u;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t a = w[e] & 0x7fffffffu;
        m = max(m, a);
        colm[e] = max(colm[e], a);
      }
      rowm[i] = m;
    }
  }
}

// One halving step of row_reduce: kN values held, partner lane lc ^ kO.
template <int kN, int kO>
__device__ __forceinline__ void halve(uint32_t (&v)[kRowsPerThread], int lc) {
  const bool upper = (lc & kO) != 0;
#pragma unroll
  for (int j = 0; j < kN / 2; ++j) {
    const uint32_t send = upper ? v[j] : v[j + kN / 2];
    const uint32_t keep = upper ? v[j + kN / 2] : v[j];
    v[j] = max(keep, __shfl_xor_sync(0xffffffffu, send, kO));
  }
}
// Max of each of the 16 rows over the kLanes lanes of a row group, by halving: each step sends half the
// values still held to the partner lane and keeps the other half, 15 shuffles instead of 16 * log2(kLanes).
// Lane lc ends with the max of row reduced_row(lc) (with 32 lanes, lanes lc and lc ^ 1 hold the same row).
template <int kLanes>
__device__ __forceinline__ uint32_t row_reduce(uint32_t (&v)[kRowsPerThread], int lc) {
  static_assert(kRowsPerThread == 16, "four halving steps");
  halve<16, kLanes / 2>(v, lc);
  halve<8, kLanes / 4>(v, lc);
  halve<4, kLanes / 8>(v, lc);
  halve<2, kLanes / 16>(v, lc);
  uint32_t m = v[0];
#pragma unroll
  for (int o = kLanes / 32; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  return m;
}
template <int kLanes>
__device__ __forceinline__ int reduced_row(int lc) {
  return ((lc & (kLanes / 2)) ? 8 : 0) + ((lc & (kLanes / 4)) ? 4 : 0) + ((lc & (kLanes / 8)) ? 2 : 0) +
         ((lc & (kLanes / 16)) ? 1 : 0);
}

// Column maxima of the tile into colseg[128] and the block's max (returned to every thread). Contains
// barriers: the whole block calls it or none.
template <typename T>
__device__ __forceinline__ uint32_t tile_col_reduce(const uint32_t (&colm)[Layout<T>::kVec], int rg, int lc,
                                                    uint32_t (*red)[kTile], uint32_t* colseg,
                                                    uint32_t* warpmax) {
  constexpr int kVec = Layout<T>::kVec;
#pragma unroll
  for (int e = 0; e < kVec; ++e) red[rg][lc * kVec + e] = colm[e];
  __syncthreads();
  const int t = threadIdx.x;
  if (t < kTile) {
    uint32_t m = 0u;
#pragma unroll
    for (int g = 0; g < kRowGroups; ++g) m = max(m, red[g][t]);
    colseg[t] = m;
    m = warp_umax(m);
    if ((t & 31) == 0) warpmax[t >> 5] = m;
  }
  __syncthreads();
  return max(max(warpmax[0], warpmax[1]), max(warpmax[2], warpmax[3]));
}

// ---------------------------------------------------------------------------------------------------------------
// The amax pass: per-row, per-column and global maxima for the groups wider than a tile.

struct AmaxPassParams {
  const void* x;
  int64_t R, C, ncb;
  uint32_t* row_amax;   // [R] or null
  uint32_t* col_amax;   // [C] or null
  uint32_t* glob_amax;  // [1] or null
  int* amax_out;        // args.amax_out or null
};

template <typename T, bool kVecOk>
__global__ void __launch_bounds__(Layout<T>::kThreads) quant_amax_kernel(const AmaxPassParams p) {
  using L = Layout<T>;
  __shared__ uint32_t red[kRowGroups][kTile];
  __shared__ uint32_t s_colseg[kTile], s_warp[4];
  const int t = threadIdx.x, lc = t % L::kLanes, rg = t / L::kLanes;
  const int64_t rb = blockIdx.x / p.ncb, cb = blockIdx.x % p.ncb;
  const int64_t rt = rb * kTile + rg * kRowsPerThread, ct = cb * kTile + lc * L::kVec;

  uint4 raw[kRowsPerThread];
  load_rows<T, kVecOk, false>(static_cast<const T*>(p.x), p.R, p.C, rt, ct, raw);
  uint32_t rowm[kRowsPerThread], colm[L::kVec];
  thread_abs_max<T>(raw, rowm, colm);
  if (p.row_amax != nullptr) {
    const uint32_t m = row_reduce<L::kLanes>(rowm, lc);
    const int64_t r = rt + reduced_row<L::kLanes>(lc);
    if ((L::kLanes == 16 || (lc & 1) == 0) && r < p.R) atomicMax(p.row_amax + r, m);
  }
  if (p.col_amax != nullptr || p.glob_amax != nullptr || p.amax_out != nullptr) {
    const uint32_t blk = tile_col_reduce<T>(colm, rg, lc, red, s_colseg, s_warp);
    const int64_t c = cb * kTile + t;
    if (p.col_amax != nullptr && t < kTile && c < p.C) atomicMax(p.col_amax + c, s_colseg[t]);
    if (t == 0 && p.glob_amax != nullptr) atomicMax(p.glob_amax, blk);
    if (t == 0 && p.amax_out != nullptr) atomicMax(p.amax_out, canonical(blk));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The cast kernel.

struct OutDesc {
  uint8_t* q = nullptr;  // null: this output is not requested
  float* scale_inv = nullptr;
  Fp8Granularity gran = Fp8Granularity::kTensorwise;
  float fp8max = 448.0f;
  bool vec16 = false;  // out_t: R % 16 == 0 and q 16-byte aligned (a column's 16 rows are one 16-byte store)
};

struct CastParams {
  const void* x;
  int64_t R, C, nrb, ncb;
  OutDesc out, out_t;
  const float* given_scale;   // tensorwise with args.scale
  const uint32_t* glob_amax;  // from the amax pass, where it ran (abs f32 bits)
  const uint32_t* row_amax;
  const uint32_t* col_amax;
  int* amax_out;     // args.amax_out when no amax pass ran (else the pass accumulated it)
  bool need_rowseg;  // out is 1x128
  bool need_colred;  // out_t is 1x128, an output is 128x128, or amax_out is accumulated here
};

__device__ __forceinline__ float tensor_scale(const CastParams& p, float fp8max) {
  return p.given_scale != nullptr ? *p.given_scale : scale_from_amax(*p.glob_amax, fp8max);
}

// The multiplier of tile row i of `out`; the thread that owns a group's first tile row writes its scale_inv.
__device__ float out_row_scale(const CastParams& p, int i, int64_t rb, int64_t cb, const uint32_t* rowseg,
                               uint32_t blk) {
  const OutDesc& o = p.out;
  const int64_t r = rb * kTile + i;
  float s = 1.0f;
  switch (o.gran) {
    case Fp8Granularity::kTensorwise:
      s = tensor_scale(p, o.fp8max);
      if (rb == 0 && cb == 0 && i == 0) o.scale_inv[0] = div_rn(1.0f, s);
      break;
    case Fp8Granularity::kRowwise:
      if (r < p.R) {
        s = scale_from_amax(p.row_amax[r], o.fp8max);
        if (cb == 0) o.scale_inv[r] = div_rn(1.0f, s);
      }
      break;
    case Fp8Granularity::kBlock1x128:
      if (r < p.R) {
        s = scale_from_amax(rowseg[i], o.fp8max);
        o.scale_inv[cb * p.R + r] = div_rn(1.0f, s);
      }
      break;
    case Fp8Granularity::kBlock128x128:
      s = scale_from_amax(blk, o.fp8max);
      if (i == 0) o.scale_inv[rb * p.ncb + cb] = div_rn(1.0f, s);
      break;
  }
  return s;
}

// The multiplier of tile column j for `out_t` (x^T [C, R], grouped along x's columns).
__device__ float out_t_col_scale(const CastParams& p, int j, int64_t rb, int64_t cb, const uint32_t* colseg,
                                 uint32_t blk) {
  const OutDesc& o = p.out_t;
  const int64_t c = cb * kTile + j;
  float s = 1.0f;
  switch (o.gran) {
    case Fp8Granularity::kTensorwise:
      s = tensor_scale(p, o.fp8max);
      if (rb == 0 && cb == 0 && j == 0) o.scale_inv[0] = div_rn(1.0f, s);
      break;
    case Fp8Granularity::kRowwise:
      if (c < p.C) {
        s = scale_from_amax(p.col_amax[c], o.fp8max);
        if (rb == 0) o.scale_inv[c] = div_rn(1.0f, s);
      }
      break;
    case Fp8Granularity::kBlock1x128:  // scale_inv [ceil(R / 128), C]
      if (c < p.C) {
        s = scale_from_amax(colseg[j], o.fp8max);
        o.scale_inv[rb * p.C + c] = div_rn(1.0f, s);
      }
      break;
    case Fp8Granularity::kBlock128x128:  // scale_inv [ceil(C / 128), ceil(R / 128)]
      s = scale_from_amax(blk, o.fp8max);
      if (j == 0) o.scale_inv[cb * p.nrb + rb] = div_rn(1.0f, s);
      break;
  }
  return s;
}

template <typename T, bool kVecOk, bool kE4, bool kE4T>
__global__ void __launch_bounds__(Layout<T>::kThreads) quant_cast_kernel(const CastParams p) {
  using L = Layout<T>;
  constexpr int kVec = L::kVec;
  __shared__ uint32_t red[kRowGroups][kTile];
  __shared__ uint32_t s_rowseg[kTile], s_colseg[kTile], s_warp[4];
  __shared__ float s_rscale[kTile], s_cscale[kTile];
  // q^T staging: s_qt[j][k ^ swz(j)] holds the bytes of tile rows 16k .. 16k + 15 of tile column j, where
  // swz(j) = (j / kVec) & 7 spreads the 16-byte stores of 8 neighbouring lanes over all 32 banks.
  __shared__ uint4 s_qt[kTile][8];

  const int t = threadIdx.x, lc = t % L::kLanes, rg = t / L::kLanes;
  const int64_t rb = blockIdx.x / p.ncb, cb = blockIdx.x % p.ncb;
  const int64_t r0 = rb * kTile, c0 = cb * kTile;
  const int64_t rt = r0 + rg * kRowsPerThread, ct = c0 + lc * kVec;  // this thread's first row and column

  uint4 raw[kRowsPerThread];
  load_rows<T, kVecOk, true>(static_cast<const T*>(p.x), p.R, p.C, rt, ct, raw);

  // 1. Tile-local maxima.
  uint32_t rowm[kRowsPerThread], colm[kVec];
  thread_abs_max<T>(raw, rowm, colm);
  if (p.need_rowseg) {
    const uint32_t m = row_reduce<L::kLanes>(rowm, lc);
    if (L::kLanes == 16 || (lc & 1) == 0) s_rowseg[rg * kRowsPerThread + reduced_row<L::kLanes>(lc)] = m;
  }
  uint32_t blk = 0u;
  if (p.need_colred) {
    blk = tile_col_reduce<T>(colm, rg, lc, red, s_colseg, s_warp);
    if (t == 0 && p.amax_out != nullptr) atomicMax(p.amax_out, canonical(blk));
  }
  __syncthreads();

  // 2. One multiplier per tile row (out) and per tile column (out_t); scale_inv of the tile's groups.
  for (int i = t; i < 2 * kTile; i += L::kThreads) {
    if (i < kTile) {
      if (p.out.q != nullptr) s_rscale[i] = out_row_scale(p, i, rb, cb, s_rowseg, blk);
    } else if (p.out_t.q != nullptr) {
      s_cscale[i - kTile] = out_t_col_scale(p, i - kTile, rb, cb, s_colseg, blk);
    }
  }
  __syncthreads();

  // 3. out: kVec bytes per row, coalesced along the row.
  if (p.out.q != nullptr) {
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int64_t r = rt + i;
      if (r >= p.R) break;
      const float s = s_rscale[rg * kRowsPerThread + i];
      uint32_t w[kVec / 4];
#pragma unroll
      for (int k = 0; k < kVec / 2; ++k) {
        const uint32_t pair =
            cvt2<kE4>(mul_rn(elem<T>(raw[i], 2 * k), s), mul_rn(elem<T>(raw[i], 2 * k + 1), s));
        if (k & 1) {
          w[k >> 1] |= pair << 16;
        } else {
          w[k >> 1] = pair;
        }
      }
      uint8_t* dst = p.out.q + r * p.C + ct;
      if constexpr (kVecOk) {
        if (ct < p.C) {
          if constexpr (kVec == 8) {
            *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
          } else {
            *reinterpret_cast<uint32_t*>(dst) = w[0];
          }
        }
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          if (ct + e < p.C) dst[e] = static_cast<uint8_t>(w[e >> 2] >> (8 * (e & 3)));
      }
    }
  }

  // 4. out_t: each thread casts its 16 rows of each of its columns into one 16-byte word of s_qt; then 8
  // lanes store one 128-byte row segment of q^T.
  if (p.out_t.q != nullptr) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const int j = lc * kVec + e;
      const float s = s_cscale[j];
      uint32_t w[4];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const uint32_t pair =
            cvt2<kE4T>(mul_rn(elem<T>(raw[2 * k], e), s), mul_rn(elem<T>(raw[2 * k + 1], e), s));
        if (k & 1) {
          w[k >> 1] |= pair << 16;
        } else {
          w[k >> 1] = pair;
        }
      }
      s_qt[j][rg ^ (lc & 7)] = make_uint4(w[0], w[1], w[2], w[3]);
    }
    __syncthreads();
    for (int idx = t; idx < kTile * 8; idx += L::kThreads) {
      const int j = idx >> 3, k = idx & 7;
      const int64_t c = c0 + j, r = r0 + 16 * k;
      if (c >= p.C || r >= p.R) continue;
      const uint4 v = s_qt[j][k ^ ((j / kVec) & 7)];
      uint8_t* dst = p.out_t.q + c * p.R + r;
      if (p.out_t.vec16) {
        *reinterpret_cast<uint4*>(dst) = v;
      } else {
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int b = 0; b < 16; ++b)
          if (r + b < p.R) dst[b] = static_cast<uint8_t>(w[b >> 2] >> (8 * (b & 3)));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// amax over a whole tensor and dequantize.

template <typename T>
__global__ void __launch_bounds__(256)
    amax_flat_kernel(const T* __restrict__ x, int64_t n, bool vec, int* __restrict__ out) {
  constexpr int kVec = 16 / sizeof(T);
  __shared__ uint32_t s_warp[8];
  uint32_t m = 0u;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t nv = n / kVec;
    for (int64_t i = first; i < nv; i += stride) {
      const uint4 v = __ldcs(reinterpret_cast<const uint4*>(x) + i);
#pragma unroll
      for (int e = 0; e < kVec; ++e) m = max(m, elem_bits<T>(v, e) & 0x7fffffffu);
    }
    done = nv * kVec;
  }
  for (int64_t i = done + first; i < n; i += stride) {
    uint32_t bits;
    if constexpr (std::is_same_v<T, bf16>) {
      bits = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(x)[i]) << 16;
    } else {
      bits = reinterpret_cast<const uint32_t*>(x)[i];
    }
    m = max(m, bits & 0x7fffffffu);
  }
  m = warp_umax(m);
  if ((threadIdx.x & 31) == 0) s_warp[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) m = max(m, s_warp[w]);
    atomicMax(out, canonical(m));
  }
}

template <bool kE4>
__global__ void __launch_bounds__(256)
    dequant_kernel(const uint8_t* __restrict__ q, const float* __restrict__ scale_inv, float* __restrict__ x,
                   int64_t rows, int64_t cols, Fp8Granularity g) {
  const int64_t n = rows * cols, ncb = (cols + kTile - 1) / kTile;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / cols, c = i - r * cols;
    int64_t at = 0;
    switch (g) {
      case Fp8Granularity::kTensorwise:
        break;
      case Fp8Granularity::kRowwise:
        at = r;
        break;
      case Fp8Granularity::kBlock1x128:
        at = (c / kTile) * rows + r;
        break;
      case Fp8Granularity::kBlock128x128:
        at = (r / kTile) * ncb + c / kTile;
        break;
    }
    const __half h(__nv_cvt_fp8_to_halfraw(q[i], kE4 ? __NV_E4M3 : __NV_E5M2));
    x[i] = mul_rn(__half2float(h), scale_inv[at]);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Launchers

template <typename T>
void launch_amax_pass(const AmaxPassParams& p, bool vec_ok, int64_t tiles, cudaStream_t st) {
  const auto grid = static_cast<unsigned>(tiles);
  if (vec_ok) {
    quant_amax_kernel<T, true><<<grid, Layout<T>::kThreads, 0, st>>>(p);
  } else {
    quant_amax_kernel<T, false><<<grid, Layout<T>::kThreads, 0, st>>>(p);
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_cast(const CastParams& p, bool vec_ok, bool e4, bool e4t, int64_t tiles, cudaStream_t st) {
  const auto grid = static_cast<unsigned>(tiles);
  auto go = [&]<bool kVecOk, bool kE4, bool kE4T>() {
    quant_cast_kernel<T, kVecOk, kE4, kE4T><<<grid, Layout<T>::kThreads, 0, st>>>(p);
  };
  auto formats = [&]<bool kVecOk>() {
    if (e4 && e4t) return go.template operator()<kVecOk, true, true>();
    if (e4) return go.template operator()<kVecOk, true, false>();
    if (e4t) return go.template operator()<kVecOk, false, true>();
    return go.template operator()<kVecOk, false, false>();
  };
  if (vec_ok) {
    formats.template operator()<true>();
  } else {
    formats.template operator()<false>();
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

OutDesc describe_output(const Fp8Tensor* o) {
  OutDesc d;
  if (o == nullptr) return d;
  d.q = static_cast<uint8_t*>(o->data.data_ptr());
  d.scale_inv = o->scale_inv.data<float>();
  d.gran = o->granularity;
  d.fp8max = fp8_max(o->format);
  d.vec16 = o->cols() % 16 == 0 && detail::aligned16(d.q);  // out_t: cols = R
  return d;
}

}  // namespace

// Floor (bytes / 3 TB/s, reference.md's device-to-device bandwidth). x [8192, 4096] bf16 = 67.1 MB read once;
// each requested output writes 33.6 MB of bytes (scales are < 0.1%):
//   q and q^T, tile-local groups (1x128 / 128x128 / given tensorwise): 134.2 MB -> 44.7 us; one output: 33.6
//   us. with the amax pass (rowwise, current tensorwise): x is read twice, + 67.1 MB -> 67.1 us for q and
//   q^T.
// [8192, 14336] (the FFN activations) is 3.5 times that.
void quantize(const Tensor& x, Fp8Tensor* out, Fp8Tensor* out_t, const QuantizeArgs& args, const Stream& s,
              const char* what) {
  const int64_t R = x.size(0), C = x.size(1);
  const bool bf = x.dtype() == DType::kBF16;
  const int vec = bf ? Layout<bf16>::kVec : Layout<float>::kVec;
  const int64_t nrb = ceil_div<int64_t>(R, kTile), ncb = ceil_div<int64_t>(C, kTile), tiles = nrb * ncb;
  PRIMUS_CHECK(tiles < (int64_t{1} << 31), "{}: x {} has too many 128 x 128 tiles ({})", what, x.describe(),
               tiles);
  const cudaStream_t st = cuda_stream(s);
  const bool given = args.scale != nullptr;
  auto computed_tensorwise = [&](const Fp8Tensor* o) {
    return o != nullptr && o->granularity == Fp8Granularity::kTensorwise && !given;
  };
  const bool need_glob = computed_tensorwise(out) || computed_tensorwise(out_t);
  const bool need_row = out != nullptr && out->granularity == Fp8Granularity::kRowwise;
  const bool need_col = out_t != nullptr && out_t->granularity == Fp8Granularity::kRowwise;
  const bool amax_pass = need_glob || need_row || need_col;
  const bool vec_ok = C % vec == 0 && detail::aligned16(x.data_ptr()) &&
                      (out == nullptr || detail::aligned16(out->data.data_ptr()));
  int* amax_out = args.amax_out != nullptr ? static_cast<int*>(args.amax_out->data_ptr()) : nullptr;

  CastParams cp{};
  cp.x = x.data_ptr();
  cp.R = R;
  cp.C = C;
  cp.nrb = nrb;
  cp.ncb = ncb;
  cp.out = describe_output(out);
  cp.out_t = describe_output(out_t);
  cp.given_scale = given ? args.scale->data<float>() : nullptr;

  Tensor scratch;  // [global | rows | columns] amax bits; freed in stream order after the cast kernel
  if (amax_pass) {
    const int64_t n = 1 + (need_row ? R : 0) + (need_col ? C : 0);
    scratch = Tensor::empty({n}, DType::kI32, s);
    PRIMUS_CUDA_CHECK(cudaMemsetAsync(scratch.data_ptr(), 0, scratch.nbytes(), st));
    uint32_t* base = static_cast<uint32_t*>(scratch.data_ptr());
    AmaxPassParams ap{};
    ap.x = x.data_ptr();
    ap.R = R;
    ap.C = C;
    ap.ncb = ncb;
    ap.glob_amax = need_glob ? base : nullptr;
    ap.row_amax = need_row ? base + 1 : nullptr;
    ap.col_amax = need_col ? base + 1 + (need_row ? R : 0) : nullptr;
    ap.amax_out = amax_out;
    if (bf) {
      launch_amax_pass<bf16>(ap, vec_ok, tiles, st);
    } else {
      launch_amax_pass<float>(ap, vec_ok, tiles, st);
    }
    cp.glob_amax = ap.glob_amax;
    cp.row_amax = ap.row_amax;
    cp.col_amax = ap.col_amax;
  }
  cp.amax_out = amax_pass ? nullptr : amax_out;
  cp.need_rowseg = out != nullptr && out->granularity == Fp8Granularity::kBlock1x128;
  cp.need_colred = (out_t != nullptr && out_t->granularity == Fp8Granularity::kBlock1x128) ||
                   (out != nullptr && out->granularity == Fp8Granularity::kBlock128x128) ||
                   (out_t != nullptr && out_t->granularity == Fp8Granularity::kBlock128x128) ||
                   cp.amax_out != nullptr;
  const bool e4 = out == nullptr || out->format == Fp8Format::kE4M3;
  const bool e4t = out_t == nullptr || out_t->format == Fp8Format::kE4M3;
  if (bf) {
    launch_cast<bf16>(cp, vec_ok, e4, e4t, tiles, st);
  } else {
    launch_cast<float>(cp, vec_ok, e4, e4t, tiles, st);
  }
}

// A test and CPU-GEMM utility, not on the training path: one thread per element, grid-stride.
void dequantize(const Fp8Tensor& t, Tensor& x, const Stream& s) {
  const int64_t rows = t.rows(), cols = t.cols(), n = rows * cols;
  const int grid =
      static_cast<int>(std::min<int64_t>(ceil_div<int64_t>(n, 256), int64_t{detail::sm_count()} * 16));
  const auto* q = static_cast<const uint8_t*>(t.data.data_ptr());
  if (t.format == Fp8Format::kE4M3) {
    dequant_kernel<true><<<grid, 256, 0, cuda_stream(s)>>>(q, t.scale_inv.data<float>(), x.data<float>(),
                                                           rows, cols, t.granularity);
  } else {
    dequant_kernel<false><<<grid, 256, 0, cuda_stream(s)>>>(q, t.scale_inv.data<float>(), x.data<float>(),
                                                            rows, cols, t.granularity);
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

// Floor: one read of x (n * 2 or 4 bytes) over 3 TB/s; 16-byte streaming loads, one atomic per block.
void amax(const Tensor& x, Tensor& amax, const Stream& s) {
  const cudaStream_t st = cuda_stream(s);
  PRIMUS_CUDA_CHECK(cudaMemsetAsync(amax.data_ptr(), 0, sizeof(float), st));
  const int64_t n = x.numel();
  if (n == 0) return;
  const bool bf = x.dtype() == DType::kBF16;
  const int vec = bf ? 8 : 4;
  const bool vec_ok = detail::aligned16(x.data_ptr());
  const int grid = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(ceil_div<int64_t>(n, 256 * vec), int64_t{detail::sm_count()} * 8)));
  int* out = static_cast<int*>(amax.data_ptr());
  if (bf) {
    amax_flat_kernel<bf16><<<grid, 256, 0, st>>>(static_cast<const bf16*>(x.data_ptr()), n, vec_ok, out);
  } else {
    amax_flat_kernel<float><<<grid, 256, 0, st>>>(static_cast<const float*>(x.data_ptr()), n, vec_ok, out);
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace primus::ops::cuda
