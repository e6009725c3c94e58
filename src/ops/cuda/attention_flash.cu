// FA2-style flash attention on the packed qkv layout (see attention_flash.h): the fallback behind cuDNN, and
// the backend for shapes cuDNN refuses. Correctness first: mma.sync m16n8k16 bf16 with f32 accumulation,
// tiles staged in padded shared memory by cp.async, no warp specialisation or software pipelining.
//
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, c = lane % 4):
//   A 16x16 row-major: a0 (g, 2c..2c+1), a1 (g+8, 2c..), a2 (g, 2c+8..), a3 (g+8, 2c+8..)
//   B 16x8 "col":      b0 (k 2c..2c+1, n g), b1 (k 2c+8.., n g)
//   C 16x8 f32:        c0,c1 (g, 2c..2c+1), c2,c3 (g+8, 2c..2c+1)
// Two adjacent C tiles (n 0..7, 8..15) repacked to bf16 form the A fragment of a k16 step (FA2's register
// reuse). The kernels are templates over the q/k head dim DQ and the v head dim DV (equal except for
// multi-latent attention, DQ 192 / DV 128); other head dims run on the smallest instantiation that holds
// them, with q, k, v, out and dout zero-padded (zero columns change neither the scores nor delta = sum dO O).
//
// Packed sequences (Params::seg, seg_starts of ops/attention.h): query row t sees keys [seg[t], t]. Samples
// are contiguous, so a query block's rows together see keys [seg[q0], q0 + 63]: the forward and dQ loops
// start at the key block holding seg[q0] (the blocks before it are skipped, which is what packing saves), and
// the dK/dV loop stops at the last query of the sample holding the block's last key (found by a binary
// search, seg being non-decreasing). Inside those ranges each element is masked by its own row's seg. The
// kernels take SEG as a template parameter: without packing they compile to exactly the unpacked code (the
// extra mask, registers and search cost the plain flash backward 16-25% when left in at run time).
//
// fmt 9 (header-only) does not build under nvcc in C++20 (its consteval format-string checks): check at run
// time.
#if defined(__CUDACC__) && !defined(FMT_CONSTEVAL)
#define FMT_CONSTEVAL
#define FMT_USE_CONSTEXPR 1
#endif
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>

#include "core/cuda_check.h"
#include "core/device.h"
#include "ops/cuda/attention_flash.h"

namespace primus::ops::cuda {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 128;  // 4 warps, 16 rows each
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct Params {
  const bf16* qkv;
  const bf16* out;
  const bf16* dout;
  bf16* o;  // forward output
  float* lse;
  const float* delta;
  bf16* dqkv;
  int T, H, KV, G;
  int64_t row;   // qkv / dqkv elements per token: (H + KV) DQ + KV DV
  int64_t orow;  // out elements per token: H DV
  float scale, scale_log2;
  bool causal;
  const int* seg;  // seg_starts [B, T] (packed sequences), or null: every row sees keys from 0
};

// First key query `row` (< T) of batch row b sees (0 without packing). Clamped into [0, row]: malformed
// seg_starts (not checked on the device) give wrong results but never send a block outside its row or past
// its diagonal.
template <bool SEG>
__device__ __forceinline__ int seg_start(const Params& p, int b, int row) {
  if constexpr (SEG)
    return min(max(p.seg[static_cast<int64_t>(b) * p.T + row], 0), row);
  else
    return 0;
}

// One past the last query that sees key `key` (< T) of batch row b: the end of key's sample, the first t >
// key with seg[t] > key (binary search; seg is non-decreasing along a row), or T. Without packed sequences
// every later query sees the key: T.
template <bool SEG>
__device__ __forceinline__ int seg_query_end(const Params& p, int b, int key) {
  if constexpr (!SEG) return p.T;
  const int* r = p.seg + static_cast<int64_t>(b) * p.T;
  int lo = key + 1, hi = p.T;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (r[mid] > key)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;  // 0: zero-fill (rows past T must read as zeros, never as garbage)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ROWS x D tile of rows [row0, row0 + ROWS) from a [T, stride] row-major head slice into smem with row stride
// D + 8 (16 bytes of padding: ldmatrix rows land in distinct banks).
template <int ROWS, int D>
__device__ __forceinline__ void load_tile(bf16* smem, const bf16* g, int64_t stride, int row0, int T) {
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < ROWS * kChunks; i += kThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const bool valid = row0 + r < T;
    const bf16* src = valid ? g + static_cast<int64_t>(row0 + r) * stride + c : g;
    cp_async16(smem_addr(smem + r * (D + 8) + c), src, valid);
  }
}

// A fragment (16 rows x 16 cols at (r0, c0)) of a row-major smem tile.
template <int LDS>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* s, int r0, int c0, int lane) {
  ldsm_x4(a, smem_addr(s + (r0 + (lane % 16)) * LDS + c0 + (lane / 16) * 8));
}
// B fragments of two n8 tiles (n0..n0+7, n0+8..n0+15), k16 at c0, from a smem tile stored [n][k] (row = n).
template <int LDS>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const bf16* s, int n0, int c0, int lane) {
  ldsm_x4(b, smem_addr(s + (n0 + (lane % 8) + (lane / 16) * 8) * LDS + c0 + ((lane / 8) % 2) * 8));
}
// Same from a smem tile stored [k][n] (row = k), via the transposing ldmatrix.
template <int LDS>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const bf16* s, int k0, int n0, int lane) {
  ldsm_x4_t(b, smem_addr(s + (k0 + (lane % 8) + ((lane / 8) % 2) * 8) * LDS + n0 + (lane / 16) * 8));
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---------------------------------------------------------------------------------------------------------------
// Forward: one block per (64 query rows, head, batch); each warp owns 16 rows; key blocks of 64.

template <int DQ, int DV, bool SEG>
__global__ void __launch_bounds__(kThreads) fwd_kernel(Params p) {
  constexpr int BM = 64, BN = 64, LDQ = DQ + 8, LDV = DV + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
  bf16* sK = sQ + BM * LDQ;
  bf16* sV = sK + BN * LDQ;

  const int mb = gridDim.x - 1 - blockIdx.x;  // longest (causal) rows first
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / p.G;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = mb * BM;
  const bf16* base = p.qkv + static_cast<int64_t>(b) * p.T * p.row;
  const bf16* qg = base + h * DQ;
  const bf16* kg = base + (p.H + kvh) * DQ;
  const bf16* vg = base + (p.H + p.KV) * DQ + kvh * DV;

  // Key blocks [nb_first, n_blocks): from the one holding the first key of the block's first sample (0
  // without packed sequences) to the diagonal.
  const int kv_end = p.causal ? min(p.T, q0 + BM) : p.T;
  const int n_blocks = (kv_end + BN - 1) / BN;
  const int nb_first = seg_start<SEG>(p, b, q0) / BN;

  // Pipeline: V of block nb loads while S = Q K^T runs; K of block nb + 1 loads during softmax and P V.
  load_tile<BM, DQ>(sQ, qg, p.row, q0, p.T);
  cp_async_commit();
  load_tile<BN, DQ>(sK, kg, p.row, nb_first * BN, p.T);
  cp_async_commit();
  cp_async_wait<1>();  // Q landed (K0 may still be in flight)
  __syncthreads();
  uint32_t qf[DQ / 16][4];
#pragma unroll
  for (int kk = 0; kk < DQ / 16; ++kk) load_a<LDQ>(qf[kk], sQ, warp * 16, kk * 16, lane);

  float o[DV / 8][4];
#pragma unroll
  for (int i = 0; i < DV / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  const int row_a = q0 + warp * 16 + lane / 4;
  const int first_key[2] = {row_a < p.T ? seg_start<SEG>(p, b, row_a) : 0,
                            row_a + 8 < p.T ? seg_start<SEG>(p, b, row_a + 8) : 0};

  for (int nb = nb_first; nb < n_blocks; ++nb) {
    const int k0 = nb * BN;
    load_tile<BN, DV>(sV, vg, p.row, k0, p.T);
    cp_async_commit();
    cp_async_wait<1>();  // K of this block landed (V may still be in flight)
    __syncthreads();

    float s[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < DQ / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t bf[4];
        load_b_nk<LDQ>(bf, sK, np * 16, kk * 16, lane);
        mma(s[2 * np], qf[kk], bf[0], bf[1]);
        mma(s[2 * np + 1], qf[kk], bf[2], bf[3]);
      }
    }
    __syncthreads();  // every warp is done with sK
    const bool more = nb + 1 < n_blocks;
    if (more) {
      load_tile<BN, DQ>(sK, kg, p.row, k0 + BN, p.T);
      cp_async_commit();
    }
    // Scale into the log2 domain and mask (keys past T; keys after the query under the causal mask; keys
    // before the query's sample).
    float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = k0 + nt * 8 + (lane % 4) * 2 + (e & 1);
        const int row = row_a + (e >= 2 ? 8 : 0);
        float v = s[nt][e] * p.scale_log2;
        if (col >= p.T || (p.causal && col > row) || (SEG && col < first_key[e >> 1])) v = -INFINITY;
        s[nt][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
    }
    float msub[2], alpha[2], rs[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = quad_max(mx[i]);
      msub[i] = mx[i] == -INFINITY ? 0.f : mx[i];  // a row with nothing visible yet stays at zero weight
      alpha[i] = exp2f(m_run[i] - msub[i]);
      m_run[i] = mx[i];
    }
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - msub[e >> 1]);
        rs[e >> 1] += s[nt][e];
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) l_run[i] = l_run[i] * alpha[i] + rs[i];
#pragma unroll
    for (int dt = 0; dt < DV / 8; ++dt) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }
    // O += P V, once V of this block has landed
    if (more)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t a[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                             pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < DV / 16; ++dp) {
        uint32_t bf[4];
        load_b_kn<LDV>(bf, sV, kk * 16, dp * 16, lane);
        mma(o[2 * dp], a, bf[0], bf[1]);
        mma(o[2 * dp + 1], a, bf[2], bf[3]);
      }
    }
    __syncthreads();  // every warp is done with sV before the next block's V load
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = row_a + i * 8;
    const float l = quad_sum(l_run[i]);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    if (row < p.T) {
      bf16* og = p.o + (static_cast<int64_t>(b) * p.T + row) * p.orow + h * DV;
#pragma unroll
      for (int dt = 0; dt < DV / 8; ++dt) {
        const int col = dt * 8 + (lane % 4) * 2;
        *reinterpret_cast<uint32_t*>(og + col) = pack_bf16(o[dt][2 * i] * inv, o[dt][2 * i + 1] * inv);
      }
      if (lane % 4 == 0)
        p.lse[(static_cast<int64_t>(b) * p.H + h) * p.T + row] = (m_run[i] + log2f(l)) * kLn2;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Backward, pass 0: delta[b, h, t] = sum_d dout * out (f32), one warp per (b, t, h).

__global__ void delta_kernel(const bf16* dout, const bf16* out, float* delta, int64_t rows, int T, int H,
                             int D) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const bf16* a = dout + r * D;
  const bf16* c = out + r * D;
  float acc = 0.f;
  for (int i = lane * 2; i < D; i += 64) {
    const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(a + i));
    const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(c + i));
    acc += x.x * y.x + x.y * y.y;
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) {
    const int64_t h = r % H, t = (r / H) % T, b = r / (static_cast<int64_t>(H) * T);
    delta[(b * H + h) * T + t] = acc;
  }
}

// Backward, pass 1: dQ for 64 query rows of one head, looping over key blocks (no atomics: one writer per
// row).
template <int DQ, int DV, bool SEG>
__global__ void __launch_bounds__(kThreads) dq_kernel(Params p) {
  constexpr int BM = 64, BN = 64, LDQ = DQ + 8, LDV = DV + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
  bf16* sdO = sQ + BM * LDQ;
  bf16* sK = sdO + BM * LDV;
  bf16* sV = sK + BN * LDQ;

  const int mb = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / p.G;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = mb * BM;
  const bf16* base = p.qkv + static_cast<int64_t>(b) * p.T * p.row;
  const bf16* kg = base + (p.H + kvh) * DQ;
  const bf16* vg = base + (p.H + p.KV) * DQ + kvh * DV;
  load_tile<BM, DQ>(sQ, base + h * DQ, p.row, q0, p.T);
  load_tile<BM, DV>(sdO, p.dout + static_cast<int64_t>(b) * p.T * p.orow + h * DV, p.orow, q0, p.T);

  const int row_a = q0 + warp * 16 + lane / 4;
  float lse2[2], dlt[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = row_a + 8 * i;
    const int64_t idx = (static_cast<int64_t>(b) * p.H + h) * p.T + row;
    lse2[i] = row < p.T ? p.lse[idx] * kLog2e : 0.f;
    dlt[i] = row < p.T ? p.delta[idx] : 0.f;
  }
  float dq[DQ / 8][4];
#pragma unroll
  for (int i = 0; i < DQ / 8; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
  const int first_key[2] = {row_a < p.T ? seg_start<SEG>(p, b, row_a) : 0,
                            row_a + 8 < p.T ? seg_start<SEG>(p, b, row_a + 8) : 0};
  const int kv_end = p.causal ? min(p.T, q0 + BM) : p.T;
  const int n_blocks = (kv_end + BN - 1) / BN;

  for (int nb = seg_start<SEG>(p, b, q0) / BN; nb < n_blocks; ++nb) {  // as in the forward
    const int k0 = nb * BN;
    __syncthreads();
    load_tile<BN, DQ>(sK, kg, p.row, k0, p.T);
    load_tile<BN, DV>(sV, vg, p.row, k0, p.T);
    cp_async_wait_all();
    __syncthreads();
    float s[BN / 8][4], dp[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.f;
        // S = Q K^T over DQ, dP = dO V^T over DV
#pragma unroll
    for (int kk = 0; kk < DQ / 16; ++kk) {
      uint32_t aq[4];
      load_a<LDQ>(aq, sQ, warp * 16, kk * 16, lane);
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t bk[4];
        load_b_nk<LDQ>(bk, sK, np * 16, kk * 16, lane);
        mma(s[2 * np], aq, bk[0], bk[1]);
        mma(s[2 * np + 1], aq, bk[2], bk[3]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < DV / 16; ++kk) {
      uint32_t ado[4];
      load_a<LDV>(ado, sdO, warp * 16, kk * 16, lane);
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t bv[4];
        load_b_nk<LDV>(bv, sV, np * 16, kk * 16, lane);
        mma(dp[2 * np], ado, bv[0], bv[1]);
        mma(dp[2 * np + 1], ado, bv[2], bv[3]);
      }
    }
    // dS = P (dP - delta), P = exp2(S scale log2e - lse log2e); masked entries are exactly zero.
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = k0 + nt * 8 + (lane % 4) * 2 + (e & 1);
        const int row = row_a + (e >= 2 ? 8 : 0);
        const bool masked =
            col >= p.T || row >= p.T || (p.causal && col > row) || (SEG && col < first_key[e >> 1]);
        const float pr = masked ? 0.f : exp2f(s[nt][e] * p.scale_log2 - lse2[e >> 1]);
        s[nt][e] = pr * (dp[nt][e] - dlt[e >> 1]);
      }
    }
    // dQ += dS K
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t a[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                             pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dt = 0; dt < DQ / 16; ++dt) {
        uint32_t bf[4];
        load_b_kn<LDQ>(bf, sK, kk * 16, dt * 16, lane);
        mma(dq[2 * dt], a, bf[0], bf[1]);
        mma(dq[2 * dt + 1], a, bf[2], bf[3]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = row_a + 8 * i;
    if (row >= p.T) continue;
    bf16* g = p.dqkv + (static_cast<int64_t>(b) * p.T + row) * p.row + h * DQ;
#pragma unroll
    for (int dt = 0; dt < DQ / 8; ++dt)
      *reinterpret_cast<uint32_t*>(g + dt * 8 + (lane % 4) * 2) =
          pack_bf16(dq[dt][2 * i] * p.scale, dq[dt][2 * i + 1] * p.scale);
  }
}

// Backward, pass 2: dK, dV for 64 keys of one kv head. The block loops over every query head of the group and
// every query block that sees these keys, so the group sum happens in registers, in a fixed order
// (deterministic). Warps own 16 keys each and compute the transposed products S^T = K Q^T and dP^T = V dO^T
// directly.
template <int DQ, int DV, int BMQ, bool SEG>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(Params p) {
  constexpr int BN = 64, LDQ = DQ + 8, LDV = DV + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);
  bf16* sV = sK + BN * LDQ;
  bf16* sQ = sV + BN * LDV;
  bf16* sdO = sQ + BMQ * LDQ;
  float* sL = reinterpret_cast<float*>(sdO + BMQ * LDV);
  float* sD = sL + BMQ;
  int* sS = reinterpret_cast<int*>(sD + BMQ);  // SEG: first key of each query row's sample

  const int nb = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = nb * BN;
  const bf16* base = p.qkv + static_cast<int64_t>(b) * p.T * p.row;
  load_tile<BN, DQ>(sK, base + (p.H + kvh) * DQ, p.row, k0, p.T);
  load_tile<BN, DV>(sV, base + (p.H + p.KV) * DQ + kvh * DV, p.row, k0, p.T);

  float dk[DQ / 8][4], dv[DV / 8][4];
#pragma unroll
  for (int i = 0; i < DQ / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[i][e] = 0.f;
#pragma unroll
  for (int i = 0; i < DV / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[i][e] = 0.f;
  const int key_a = k0 + warp * 16 + lane / 4;
  const int m_first = p.causal ? k0 / BMQ : 0;
  // Queries past the end of the last key's sample see none of these keys (the search overlaps the K/V loads).
  const int q_end = seg_query_end<SEG>(p, b, min(p.T, k0 + BN) - 1);
  const int m_blocks = (q_end + BMQ - 1) / BMQ;

  for (int hh = 0; hh < p.G; ++hh) {
    const int h = kvh * p.G + hh;
    const float* lse = p.lse + (static_cast<int64_t>(b) * p.H + h) * p.T;
    const float* dl = p.delta + (static_cast<int64_t>(b) * p.H + h) * p.T;
    for (int mb = m_first; mb < m_blocks; ++mb) {
      const int q0 = mb * BMQ;
      __syncthreads();
      load_tile<BMQ, DQ>(sQ, base + h * DQ, p.row, q0, p.T);
      load_tile<BMQ, DV>(sdO, p.dout + static_cast<int64_t>(b) * p.T * p.orow + h * DV, p.orow, q0, p.T);
      for (int i = threadIdx.x; i < BMQ; i += kThreads) {
        const bool valid = q0 + i < p.T;
        sL[i] = valid ? lse[q0 + i] * kLog2e : 0.f;
        sD[i] = valid ? dl[q0 + i] : 0.f;
        if constexpr (SEG) sS[i] = valid ? seg_start<SEG>(p, b, q0 + i) : 0;
      }
      cp_async_wait_all();
      __syncthreads();

      // S^T = K Q^T over DQ, dP^T = V dO^T over DV
      float st[BMQ / 8][4], dpt[BMQ / 8][4];
#pragma unroll
      for (int i = 0; i < BMQ / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) st[i][e] = dpt[i][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < DQ / 16; ++kk) {
        uint32_t ak[4];
        load_a<LDQ>(ak, sK, warp * 16, kk * 16, lane);
#pragma unroll
        for (int np = 0; np < BMQ / 16; ++np) {
          uint32_t bq[4];
          load_b_nk<LDQ>(bq, sQ, np * 16, kk * 16, lane);
          mma(st[2 * np], ak, bq[0], bq[1]);
          mma(st[2 * np + 1], ak, bq[2], bq[3]);
        }
      }
#pragma unroll
      for (int kk = 0; kk < DV / 16; ++kk) {
        uint32_t av[4];
        load_a<LDV>(av, sV, warp * 16, kk * 16, lane);
#pragma unroll
        for (int np = 0; np < BMQ / 16; ++np) {
          uint32_t bo[4];
          load_b_nk<LDV>(bo, sdO, np * 16, kk * 16, lane);
          mma(dpt[2 * np], av, bo[0], bo[1]);
          mma(dpt[2 * np + 1], av, bo[2], bo[3]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < BMQ / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = nt * 8 + (lane % 4) * 2 + (e & 1);
          const int q = q0 + qi;
          const int key = key_a + (e >= 2 ? 8 : 0);
          const bool masked = q >= p.T || key >= p.T || (p.causal && key > q) || (SEG && key < sS[qi]);
          const float pr = masked ? 0.f : exp2f(st[nt][e] * p.scale_log2 - sL[qi]);
          st[nt][e] = pr;
          dpt[nt][e] = pr * (dpt[nt][e] - sD[qi]);
        }
      }
      // dV += P^T dO, dK += dS^T Q (k = queries)
#pragma unroll
      for (int kk = 0; kk < BMQ / 16; ++kk) {
        const uint32_t ap[4] = {
            pack_bf16(st[2 * kk][0], st[2 * kk][1]), pack_bf16(st[2 * kk][2], st[2 * kk][3]),
            pack_bf16(st[2 * kk + 1][0], st[2 * kk + 1][1]), pack_bf16(st[2 * kk + 1][2], st[2 * kk + 1][3])};
        const uint32_t as[4] = {pack_bf16(dpt[2 * kk][0], dpt[2 * kk][1]),
                                pack_bf16(dpt[2 * kk][2], dpt[2 * kk][3]),
                                pack_bf16(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]),
                                pack_bf16(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
#pragma unroll
        for (int dt = 0; dt < DV / 16; ++dt) {
          uint32_t bo[4];
          load_b_kn<LDV>(bo, sdO, kk * 16, dt * 16, lane);
          mma(dv[2 * dt], ap, bo[0], bo[1]);
          mma(dv[2 * dt + 1], ap, bo[2], bo[3]);
        }
#pragma unroll
        for (int dt = 0; dt < DQ / 16; ++dt) {
          uint32_t bq[4];
          load_b_kn<LDQ>(bq, sQ, kk * 16, dt * 16, lane);
          mma(dk[2 * dt], as, bq[0], bq[1]);
          mma(dk[2 * dt + 1], as, bq[2], bq[3]);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int key = key_a + 8 * i;
    if (key >= p.T) continue;
    bf16* g = p.dqkv + (static_cast<int64_t>(b) * p.T + key) * p.row;
    bf16* gk = g + (p.H + kvh) * DQ;
    bf16* gv = g + (p.H + p.KV) * DQ + kvh * DV;
#pragma unroll
    for (int dt = 0; dt < DQ / 8; ++dt) {
      const int col = dt * 8 + (lane % 4) * 2;
      *reinterpret_cast<uint32_t*>(gk + col) =
          pack_bf16(dk[dt][2 * i] * p.scale, dk[dt][2 * i + 1] * p.scale);
    }
#pragma unroll
    for (int dt = 0; dt < DV / 8; ++dt) {
      const int col = dt * 8 + (lane % 4) * 2;
      *reinterpret_cast<uint32_t*>(gv + col) = pack_bf16(dv[dt][2 * i], dv[dt][2 * i + 1]);
    }
  }
}

// Copies `copy_d` elements of each of `heads` heads per token from src to dst and zero-fills dst's heads
// up to dst_hd: pads (dst_hd > copy_d) or crops (copy_d = dst_hd < src_hd) head dims for the padded path.
__global__ void copy_heads_kernel(bf16* dst, int64_t dst_row, int64_t dst_off, int dst_hd, const bf16* src,
                                  int64_t src_row, int64_t src_off, int src_hd, int heads, int copy_d,
                                  int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int j = static_cast<int>(i % dst_hd);
  const int64_t hh = (i / dst_hd) % heads, tok = i / (static_cast<int64_t>(dst_hd) * heads);
  dst[tok * dst_row + dst_off + hh * dst_hd + j] =
      j < copy_d ? src[tok * src_row + src_off + hh * src_hd + j] : __float2bfloat16(0.f);
}

// ---------------------------------------------------------------------------------------------------------------
// Launchers

Params make_params(const AttentionShape& s) {
  Params p{};
  p.T = static_cast<int>(s.seq);
  p.H = static_cast<int>(s.heads);
  p.KV = static_cast<int>(s.kv_heads);
  p.G = static_cast<int>(s.heads / s.kv_heads);
  p.row = s.qkv_width();
  p.orow = s.out_width();
  p.scale = s.scale;
  p.scale_log2 = s.scale * kLog2e;
  p.causal = s.causal;
  p.seg = s.seg_starts ? s.seg_starts->data<int32_t>() : nullptr;
  return p;
}

template <typename K>
void launch(K kernel, dim3 grid, size_t smem, const Params& p, const Stream& st) {
  // Above 48 KB a kernel must opt in to its dynamic shared memory; setting the attribute is cheap and
  // idempotent.
  PRIMUS_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<grid, kThreads, smem, cuda_stream(st)>>>(p);
  PRIMUS_CUDA_CHECK_LAUNCH();
}

template <int DQ, int DV>
void forward_d(const Params& p, int64_t batch, const Stream& st) {
  const dim3 grid(static_cast<unsigned>(ceil_div(p.T, 64)), p.H, static_cast<unsigned>(batch));
  const size_t smem = (2 * 64 * (DQ + 8) + 64 * (DV + 8)) * sizeof(bf16);
  if (p.seg)
    launch(fwd_kernel<DQ, DV, true>, grid, smem, p, st);
  else
    launch(fwd_kernel<DQ, DV, false>, grid, smem, p, st);
}

template <int DQ, int DV, bool SEG>
void backward_seg(const Params& p, int64_t batch, const Stream& st) {
  // Query rows per dK/dV step: fewer for wide heads, whose dK and dV accumulators fill the registers.
  constexpr int BMQ = DQ > 128 ? 16 : DQ > 64 ? 32 : 64;
  const dim3 gq(static_cast<unsigned>(ceil_div(p.T, 64)), p.H, static_cast<unsigned>(batch));
  launch(dq_kernel<DQ, DV, SEG>, gq, 2 * 64 * (DQ + DV + 16) * sizeof(bf16), p, st);
  const dim3 gk(static_cast<unsigned>(ceil_div(p.T, 64)), p.KV, static_cast<unsigned>(batch));
  launch(dkdv_kernel<DQ, DV, BMQ, SEG>, gk,
         (64 + BMQ) * (DQ + DV + 16) * sizeof(bf16) + 2 * BMQ * sizeof(float) + (SEG ? BMQ * sizeof(int) : 0),
         p, st);
}

template <int DQ, int DV>
void backward_d(const Params& p, int64_t batch, const Stream& st) {
  if (p.seg)
    backward_seg<DQ, DV, true>(p, batch, st);
  else
    backward_seg<DQ, DV, false>(p, batch, st);
}

// The instantiated (DQ, DV) pairs, smallest first; a shape runs on the first one that holds its head dims.
struct Native {
  int dq, dv;
};
constexpr Native kNative[] = {{32, 32}, {64, 64}, {128, 128}, {192, 128}};

const Native* native_for(const AttentionShape& s) {
  for (const Native& n : kNative)
    if (s.head_dim <= n.dq && s.dv() <= n.dv) return &n;
  return nullptr;
}

void run_forward(const Native& n, const Params& p, int64_t batch, const Stream& st) {
  if (n.dq == 32)
    forward_d<32, 32>(p, batch, st);
  else if (n.dq == 64)
    forward_d<64, 64>(p, batch, st);
  else if (n.dq == 128)
    forward_d<128, 128>(p, batch, st);
  else
    forward_d<192, 128>(p, batch, st);
}

void run_backward(const Native& n, const Params& p, int64_t batch, const Stream& st) {
  if (n.dq == 32)
    backward_d<32, 32>(p, batch, st);
  else if (n.dq == 64)
    backward_d<64, 64>(p, batch, st);
  else if (n.dq == 128)
    backward_d<128, 128>(p, batch, st);
  else
    backward_d<192, 128>(p, batch, st);
}

void copy_heads(void* dst, int64_t dst_row, int64_t dst_off, int64_t dst_hd, const void* src, int64_t src_row,
                int64_t src_off, int64_t src_hd, int64_t tokens, int64_t heads, int64_t copy_d,
                const Stream& st) {
  const int64_t total = tokens * heads * dst_hd;
  if (total == 0) return;
  copy_heads_kernel<<<static_cast<unsigned>(ceil_div<int64_t>(total, 256)), 256, 0, cuda_stream(st)>>>(
      static_cast<bf16*>(dst), dst_row, dst_off, static_cast<int>(dst_hd), static_cast<const bf16*>(src),
      src_row, src_off, static_cast<int>(src_hd), static_cast<int>(heads), static_cast<int>(copy_d), total);
  PRIMUS_CUDA_CHECK_LAUNCH();
}

// The shape as the instantiation `n` sees it, and the copies between the two packed layouts.
struct Padded {
  AttentionShape s;  // head dims of n
  int64_t tokens;
  explicit Padded(const AttentionShape& orig, const Native& n) : s(orig), tokens(orig.batch * orig.seq) {
    s.head_dim = n.dq;
    s.v_head_dim = n.dv;
  }
  // qkv (orig) -> qkv_p (padded), or back with crop = true (gradients).
  static void qkv(const AttentionShape& o, const AttentionShape& p, int64_t tokens, const void* src,
                  void* dst, bool crop, const Stream& st) {
    const AttentionShape& from = crop ? p : o;
    const AttentionShape& to = crop ? o : p;
    const int64_t fr = from.qkv_width(), tr = to.qkv_width();
    copy_heads(dst, tr, 0, to.head_dim, src, fr, 0, from.head_dim, tokens, o.heads, o.head_dim, st);
    copy_heads(dst, tr, o.heads * to.head_dim, to.head_dim, src, fr, o.heads * from.head_dim, from.head_dim,
               tokens, o.kv_heads, o.head_dim, st);
    copy_heads(dst, tr, (o.heads + o.kv_heads) * to.head_dim, to.dv(), src, fr,
               (o.heads + o.kv_heads) * from.head_dim, from.dv(), tokens, o.kv_heads, o.dv(), st);
  }
  static void out(const AttentionShape& o, const AttentionShape& p, int64_t tokens, const void* src,
                  void* dst, bool crop, const Stream& st) {
    const AttentionShape& from = crop ? p : o;
    const AttentionShape& to = crop ? o : p;
    copy_heads(dst, to.out_width(), 0, to.dv(), src, from.out_width(), 0, from.dv(), tokens, o.heads, o.dv(),
               st);
  }
};

bool is_native(const AttentionShape& s, const Native& n) {
  return s.head_dim == n.dq && s.dv() == n.dv;
}

}  // namespace

bool flash_attention_supported(const AttentionShape& s, std::string* why) {
  if (native_for(s) == nullptr) {
    if (why)
      *why = fmt::format(
          "head dims {}/{} (flash kernels are built for 32, 64, 128 and 192/128; smaller dims are padded)",
          s.head_dim, s.dv());
    return false;
  }
  if (s.seq > (1 << 30) || s.heads > 65535 || s.batch > 65535) {
    if (why) *why = fmt::format("grid too large (B={}, H={}, T={})", s.batch, s.heads, s.seq);
    return false;
  }
  return true;
}

void flash_attention_forward(const AttentionShape& s, const void* qkv, void* out, float* lse,
                             const Stream& st) {
  const Native* n = native_for(s);
  PRIMUS_CHECK(n != nullptr, "flash attention: unsupported head dims {}/{}", s.head_dim, s.dv());
  if (is_native(s, *n)) {
    Params p = make_params(s);
    p.qkv = static_cast<const bf16*>(qkv);
    p.o = static_cast<bf16*>(out);
    p.lse = lse;
    run_forward(*n, p, s.batch, st);
    return;
  }
  const Padded pd(s, *n);
  const size_t qkv_bytes = static_cast<size_t>(pd.tokens * pd.s.qkv_width()) * sizeof(bf16);
  const size_t out_bytes = static_cast<size_t>(pd.tokens * pd.s.out_width()) * sizeof(bf16);
  void* qkv_p = device_alloc(qkv_bytes, st);
  void* out_p = device_alloc(out_bytes, st);
  Padded::qkv(s, pd.s, pd.tokens, qkv, qkv_p, false, st);
  Params p = make_params(pd.s);
  p.qkv = static_cast<const bf16*>(qkv_p);
  p.o = static_cast<bf16*>(out_p);
  p.lse = lse;
  run_forward(*n, p, s.batch, st);
  Padded::out(s, pd.s, pd.tokens, out_p, out, true, st);
  device_free(out_p, st);
  device_free(qkv_p, st);
}

void flash_attention_backward(const AttentionShape& s, const void* dout, const void* qkv, const void* out,
                              const float* lse, void* dqkv, const Stream& st) {
  const Native* n = native_for(s);
  PRIMUS_CHECK(n != nullptr, "flash attention: unsupported head dims {}/{}", s.head_dim, s.dv());
  const bool native = is_native(s, *n);
  const Padded pd(s, *n);
  const AttentionShape& ks = native ? s : pd.s;  // the shape the kernels run
  void *qkv_p = nullptr, *dqkv_p = nullptr, *out_p = nullptr, *dout_p = nullptr;
  if (!native) {
    const size_t qkv_bytes = static_cast<size_t>(pd.tokens * ks.qkv_width()) * sizeof(bf16);
    const size_t out_bytes = static_cast<size_t>(pd.tokens * ks.out_width()) * sizeof(bf16);
    qkv_p = device_alloc(qkv_bytes, st);
    dqkv_p = device_alloc(qkv_bytes, st);
    out_p = device_alloc(out_bytes, st);
    dout_p = device_alloc(out_bytes, st);
    Padded::qkv(s, ks, pd.tokens, qkv, qkv_p, false, st);
    Padded::out(s, ks, pd.tokens, out, out_p, false, st);
    Padded::out(s, ks, pd.tokens, dout, dout_p, false, st);
  }
  const void* k_dout = native ? dout : dout_p;
  const void* k_out = native ? out : out_p;
  const int64_t rows = ks.batch * ks.seq * ks.heads;
  float* delta = static_cast<float*>(device_alloc(static_cast<size_t>(rows) * sizeof(float), st));
  delta_kernel<<<static_cast<unsigned>(ceil_div<int64_t>(rows, 8)), 256, 0, cuda_stream(st)>>>(
      static_cast<const bf16*>(k_dout), static_cast<const bf16*>(k_out), delta, rows,
      static_cast<int>(ks.seq), static_cast<int>(ks.heads), static_cast<int>(ks.dv()));
  PRIMUS_CUDA_CHECK_LAUNCH();
  Params p = make_params(ks);
  p.qkv = static_cast<const bf16*>(native ? qkv : qkv_p);
  p.out = static_cast<const bf16*>(k_out);
  p.dout = static_cast<const bf16*>(k_dout);
  p.lse = const_cast<float*>(lse);
  p.delta = delta;
  p.dqkv = static_cast<bf16*>(native ? dqkv : dqkv_p);
  run_backward(*n, p, s.batch, st);
  device_free(delta, st);
  if (!native) {
    Padded::qkv(s, ks, pd.tokens, dqkv_p, dqkv, true, st);
    for (void* b : {dout_p, out_p, dqkv_p, qkv_p}) device_free(b, st);
  }
}

}  // namespace primus::ops::cuda
