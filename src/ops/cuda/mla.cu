// MLA's pack / unpack step (ops/mla.h) on bf16 with an f32 table: one block per token walks the token's
// output row with coalesced loads and stores (the rope slices read their pair partner, which sits in the
// same row). The unpack sums the k_pe gradient over heads per rope dim in a fixed order (deterministic).
#include "ops/cuda/kernel_utils.cuh"

#include "ops/cuda/mla_cuda.h"

namespace primus::ops::cuda {
namespace {

using detail::bf16;

struct Dims {
  int heads, nope, rope, half, v_dim, qk;
  int64_t seq, pos_offset;
  const int* pos;   // per-token positions (null: pos_offset + t), clamped into the table
  int64_t max_pos;  // the table's rows
};

// The table row of token tok.
__device__ __forceinline__ int64_t row_of(int64_t tok, const Dims& d) {
  if (!d.pos) return d.pos_offset + tok % d.seq;
  const int64_t p = d.pos[tok];
  return p < 0 ? 0 : p >= d.max_pos ? d.max_pos - 1 : p;
}

// Element r of c R x (sign -1: c R^T x) over a rope slice x of 2 * half values.
__device__ __forceinline__ float rotated(const bf16* x, int r, const float* cs, int half, float sign) {
  if (r < half) return __bfloat162float(x[r]) * cs[r] - __bfloat162float(x[r + half]) * sign * cs[half + r];
  const int i = r - half;
  return __bfloat162float(x[r]) * cs[i] + __bfloat162float(x[i]) * sign * cs[half + i];
}

__global__ void pack_kernel(const bf16* __restrict__ q, const bf16* __restrict__ kv,
                            const bf16* __restrict__ kpe, const float* __restrict__ table,
                            bf16* __restrict__ qkv, Dims d) {
  const int64_t tok = blockIdx.x;
  const float* cs = table + row_of(tok, d) * d.rope;
  const int qw = d.heads * d.qk, kvw = d.heads * (d.nope + d.v_dim);
  const bf16* qt = q + tok * qw;
  const bf16* kvt = kv + tok * kvw;
  const bf16* kp = kpe + tok * d.rope;
  const int w = d.heads * (2 * d.qk + d.v_dim);
  bf16* out = qkv + tok * w;
  for (int j = threadIdx.x; j < w; j += blockDim.x) {
    float v;
    if (j < qw) {
      const int h = j / d.qk, e = j % d.qk;
      v = e < d.nope ? __bfloat162float(qt[j]) : rotated(qt + h * d.qk + d.nope, e - d.nope, cs, d.half, 1.f);
    } else if (j < 2 * qw) {
      const int jj = j - qw, h = jj / d.qk, e = jj % d.qk;
      v = e < d.nope ? __bfloat162float(kvt[h * (d.nope + d.v_dim) + e])
                     : rotated(kp, e - d.nope, cs, d.half, 1.f);
    } else {
      const int jj = j - 2 * qw, h = jj / d.v_dim, e = jj % d.v_dim;
      v = __bfloat162float(kvt[h * (d.nope + d.v_dim) + d.nope + e]);
    }
    out[j] = __float2bfloat16_rn(v);
  }
}

__global__ void unpack_kernel(const bf16* __restrict__ dqkv, const float* __restrict__ table,
                              bf16* __restrict__ dq, bf16* __restrict__ dkv, bf16* __restrict__ dkpe,
                              Dims d) {
  extern __shared__ float g[];  // [rope]: the k_pe gradient summed over heads, before the rotation back
  const int64_t tok = blockIdx.x;
  const float* cs = table + row_of(tok, d) * d.rope;
  const int qw = d.heads * d.qk, kvw = d.heads * (d.nope + d.v_dim);
  const int w = d.heads * (2 * d.qk + d.v_dim);
  const bf16* in = dqkv + tok * w;
  const bf16* kin = in + qw;
  const bf16* vin = in + 2 * qw;
  bf16* qt = dq + tok * qw;
  bf16* kvt = dkv + tok * kvw;
  for (int j = threadIdx.x; j < qw; j += blockDim.x) {
    const int h = j / d.qk, e = j % d.qk;
    qt[j] = e < d.nope ? in[j]
                       : __float2bfloat16_rn(rotated(in + h * d.qk + d.nope, e - d.nope, cs, d.half, -1.f));
  }
  for (int j = threadIdx.x; j < kvw; j += blockDim.x) {
    const int h = j / (d.nope + d.v_dim), e = j % (d.nope + d.v_dim);
    kvt[j] = e < d.nope ? kin[h * d.qk + e] : vin[h * d.v_dim + e - d.nope];
  }
  for (int r = threadIdx.x; r < d.rope; r += blockDim.x) {
    float acc = 0.f;
    for (int h = 0; h < d.heads; ++h) acc += __bfloat162float(kin[h * d.qk + d.nope + r]);
    g[r] = acc;
  }
  __syncthreads();
  for (int r = threadIdx.x; r < d.rope; r += blockDim.x) {
    float v;
    if (r < d.half)
      v = g[r] * cs[r] + g[r + d.half] * cs[d.half + r];
    else
      v = g[r] * cs[r - d.half] - g[r - d.half] * cs[r];
    dkpe[tok * d.rope + r] = __float2bfloat16_rn(v);
  }
}

Dims check(const char* op, const MlaDims& d, const Tensor& table, int64_t pos_offset,
           const Tensor* positions) {
  PRIMUS_CHECK(d.batch >= 1 && d.seq >= 1 && d.heads >= 1 && d.nope >= 0 && d.rope >= 2 && d.rope % 2 == 0 &&
                   d.v_dim >= 1,
               "{}: needs batch, seq, heads, v_dim >= 1, nope >= 0 and an even rope >= 2, got B={} T={} H={} "
               "nope={} rope={} v={}",
               op, d.batch, d.seq, d.heads, d.nope, d.rope, d.v_dim);
  detail::check_cuda_tensor(op, "table", table, DType::kF32);
  PRIMUS_CHECK(table.ndim() == 2 && table.size(1) == d.rope, "{}: table must be [max_pos, {}], got {}", op,
               d.rope, table.describe());
  if (positions) {
    PRIMUS_CHECK(pos_offset == 0, "{}: pos_offset must be 0 with per-token positions, got {}", op,
                 pos_offset);
    detail::check_cuda_tensor(op, "positions", *positions, DType::kI32);
    PRIMUS_CHECK(positions->ndim() == 2 && positions->size(0) == d.batch && positions->size(1) == d.seq,
                 "{}: positions must be [{}, {}], got {}", op, d.batch, d.seq, positions->describe());
  } else {
    PRIMUS_CHECK(pos_offset >= 0 && pos_offset + d.seq <= table.size(0),
                 "{}: positions [{}, {}) exceed the table's {} rows", op, pos_offset, pos_offset + d.seq,
                 table.size(0));
  }
  PRIMUS_CHECK(d.qkv_width() < (int64_t{1} << 31) && d.tokens() < (int64_t{1} << 31), "{}: too large", op);
  return Dims{static_cast<int>(d.heads),
              static_cast<int>(d.nope),
              static_cast<int>(d.rope),
              static_cast<int>(d.rope / 2),
              static_cast<int>(d.v_dim),
              static_cast<int>(d.qk_dim()),
              d.seq,
              pos_offset,
              positions ? positions->data<int32_t>() : nullptr,
              table.size(0)};
}

void check_2d(const char* op, const char* name, const Tensor& t, int64_t rows, int64_t cols) {
  detail::check_cuda_tensor(op, name, t, DType::kBF16);
  PRIMUS_CHECK(t.ndim() == 2 && t.size(0) == rows && t.size(1) == cols, "{}: {} must be [{}, {}], got {}", op,
               name, rows, cols, t.describe());
}

constexpr int kBlock = 256;

}  // namespace

void mla_pack_qkv(const Tensor& q, const Tensor& kv, const Tensor& k_pe, const MlaDims& d,
                  const Tensor& table, int64_t pos_offset, Tensor& qkv, const Stream& s,
                  const Tensor* positions) {
  constexpr const char* op = "mla_pack_qkv";
  const Dims k = check(op, d, table, pos_offset, positions);
  const int64_t n = d.tokens();
  check_2d(op, "q", q, n, d.q_width());
  check_2d(op, "kv", kv, n, d.kv_width());
  check_2d(op, "k_pe", k_pe, n, d.rope);
  check_2d(op, "qkv", qkv, n, d.qkv_width());
  PRIMUS_CHECK(!detail::overlaps(qkv, q) && !detail::overlaps(qkv, kv) && !detail::overlaps(qkv, k_pe),
               "{}: qkv must not overlap its inputs", op);
  pack_kernel<<<static_cast<unsigned>(n), kBlock, 0, cuda_stream(s)>>>(
      static_cast<const bf16*>(q.data_ptr()), static_cast<const bf16*>(kv.data_ptr()),
      static_cast<const bf16*>(k_pe.data_ptr()), table.data<float>(), static_cast<bf16*>(qkv.data_ptr()), k);
  PRIMUS_CUDA_CHECK_LAUNCH();
}

void mla_unpack_dqkv(const Tensor& dqkv, const MlaDims& d, const Tensor& table, int64_t pos_offset,
                     Tensor& dq, Tensor& dkv, Tensor& dk_pe, const Stream& s, const Tensor* positions) {
  constexpr const char* op = "mla_unpack_dqkv";
  const Dims k = check(op, d, table, pos_offset, positions);
  const int64_t n = d.tokens();
  check_2d(op, "dqkv", dqkv, n, d.qkv_width());
  check_2d(op, "dq", dq, n, d.q_width());
  check_2d(op, "dkv", dkv, n, d.kv_width());
  check_2d(op, "dk_pe", dk_pe, n, d.rope);
  PRIMUS_CHECK(!detail::overlaps(dqkv, dq) && !detail::overlaps(dqkv, dkv) && !detail::overlaps(dqkv, dk_pe),
               "{}: outputs must not overlap dqkv", op);
  unpack_kernel<<<static_cast<unsigned>(n), kBlock, d.rope * sizeof(float), cuda_stream(s)>>>(
      static_cast<const bf16*>(dqkv.data_ptr()), table.data<float>(), static_cast<bf16*>(dq.data_ptr()),
      static_cast<bf16*>(dkv.data_ptr()), static_cast<bf16*>(dk_pe.data_ptr()), k);
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace primus::ops::cuda
