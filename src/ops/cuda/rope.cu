// Rotary position embedding (rotate-half), in place on bf16 q/k with an f32 [max_pos, R] table (cos | sin),
// R = D or, for partial rotary, fewer (the head's first R elements rotate, the rest pass through).
// One thread rotates 8 pairs (i, i + R/2) of one head: two 16-byte bf16 loads and stores plus four 16-byte
// table loads, which stay in L1/L2 because every head of a token reuses the same table row. Heads of D not a
// multiple of 16 (or unaligned pointers) take the scalar kernel, one pair per thread.
// Per-token positions (packed rows) are a template parameter, so the offset path compiles to exactly the
// kernel it was before: the positioned variant adds one int32 load per thread (the same word for every thread
// of a token, served from L1) and a clamp into the table.
#include "ops/cuda/kernel_utils.cuh"

#include "ops/cuda/rope_cuda.h"

namespace primus::ops::cuda {
namespace {

using detail::bf16;

struct RopeShape {
  int64_t seq;         // tokens per sequence (the position of token t is pos_offset + t % seq)
  int64_t n_heads;     // rotated heads per token
  int64_t row_stride;  // elements per token row (total_heads * D)
  int64_t head_dim;    // D
  int64_t half;        // R / 2: the rotated pairs (i, i + R/2) of each head, R = the table's width <= D
  int64_t pos_offset;
  int64_t max_pos;  // table rows: per-token positions are clamped into [0, max_pos)
  float sign;       // +1 forward, -1 inverse (the rotation by the negative angle)
};

// POS: token tok's table row is positions[tok] (clamped: the values are not validated on the device, and a
// bad one must not read outside the table) instead of pos_offset + tok % seq.
template <int N, bool POS>
__global__ void rope_kernel(bf16* __restrict__ x, const float* __restrict__ table,
                            const int32_t* __restrict__ positions, int64_t total, RopeShape s) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int64_t per_head = s.half / N;
  const int64_t j = (idx % per_head) * N;
  const int64_t th = idx / per_head;
  const int64_t h = th % s.n_heads, tok = th / s.n_heads;
  bf16* x1 = x + tok * s.row_stride + h * s.head_dim + j;
  bf16* x2 = x1 + s.half;
  int64_t pos;
  if constexpr (POS) {
    const int64_t p = __ldg(positions + tok);
    pos = p < 0 ? 0 : (p >= s.max_pos ? s.max_pos - 1 : p);
  } else {
    pos = s.pos_offset + tok % s.seq;
  }
  const float* cs = table + pos * 2 * s.half + j;
  const float* sn = cs + s.half;

  const detail::Vec<bf16, N> a = detail::load_vec<bf16, N>(x1), b = detail::load_vec<bf16, N>(x2);
  float c[N], sv[N];
  if constexpr (N == 8) {
    const float4 c0 = __ldg(reinterpret_cast<const float4*>(cs)),
                 c1 = __ldg(reinterpret_cast<const float4*>(cs) + 1);
    const float4 s0 = __ldg(reinterpret_cast<const float4*>(sn)),
                 s1 = __ldg(reinterpret_cast<const float4*>(sn) + 1);
    c[0] = c0.x, c[1] = c0.y, c[2] = c0.z, c[3] = c0.w, c[4] = c1.x, c[5] = c1.y, c[6] = c1.z, c[7] = c1.w;
    sv[0] = s0.x, sv[1] = s0.y, sv[2] = s0.z, sv[3] = s0.w, sv[4] = s1.x, sv[5] = s1.y, sv[6] = s1.z,
    sv[7] = s1.w;
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) c[e] = __ldg(cs + e), sv[e] = __ldg(sn + e);
  }
  detail::Vec<bf16, N> oa, ob;
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const float fa = __bfloat162float(a.v[e]), fb = __bfloat162float(b.v[e]);
    const float sn_e = s.sign * sv[e];
    oa.v[e] = __float2bfloat16_rn(fa * c[e] - fb * sn_e);
    ob.v[e] = __float2bfloat16_rn(fb * c[e] + fa * sn_e);
  }
  detail::store_vec<bf16, N>(x1, oa);
  detail::store_vec<bf16, N>(x2, ob);
}

}  // namespace

void rope_apply(Tensor& x, int64_t batch, int64_t seq, int64_t total_heads, int64_t n_heads, int64_t head_dim,
                const Tensor& table, int64_t pos_offset, const Tensor* positions, bool inverse,
                const Stream& s) {
  constexpr const char* op = "rope_apply";
  detail::check_cuda_tensor(op, "x", x, DType::kBF16);
  detail::check_cuda_tensor(op, "table", table, DType::kF32);
  detail::check_same_cuda_device(op, x, table);
  PRIMUS_CHECK(batch >= 1 && seq >= 1 && head_dim >= 2,
               "{}: needs batch, seq >= 1 and head_dim >= 2, got batch={} seq={} head_dim={}", op, batch, seq,
               head_dim);
  PRIMUS_CHECK(n_heads >= 0 && n_heads <= total_heads, "{}: n_heads ({}) must be in [0, total_heads = {}]",
               op, n_heads, total_heads);
  PRIMUS_CHECK(x.ndim() == 3 && x.size(0) == batch && x.size(1) == seq && x.size(2) == total_heads * head_dim,
               "{}: x must be [{}, {}, {}], got {}", op, batch, seq, total_heads * head_dim, x.describe());
  // Partial rotary (rotary_percent < 1): a table narrower than the head rotates that many leading elements.
  PRIMUS_CHECK(table.ndim() == 2 && table.size(1) >= 2 && table.size(1) % 2 == 0 && table.size(1) <= head_dim,
               "{}: table must be [max_pos, R] with R even and in [2, head_dim = {}], got {}", op, head_dim,
               table.describe());
  if (positions) {
    // Only the shape is checked: reading the values back would cost a host sync per call (the kernel clamps
    // them instead; the CPU reference validates them).
    PRIMUS_CHECK(pos_offset == 0, "{}: pos_offset must be 0 with per-token positions, got {}", op,
                 pos_offset);
    detail::check_cuda_tensor(op, "positions", *positions, DType::kI32);
    detail::check_same_cuda_device(op, x, *positions);
    PRIMUS_CHECK(positions->shape() == Shape({batch, seq}), "{}: positions must be i32 [{}, {}], got {}", op,
                 batch, seq, positions->describe());
    PRIMUS_CHECK(table.size(0) >= 1, "{}: the table has no rows to clamp positions into", op);
  } else {
    PRIMUS_CHECK(pos_offset >= 0 && pos_offset + seq <= table.size(0),
                 "{}: positions [{}, {}) exceed the table's {} rows", op, pos_offset, pos_offset + seq,
                 table.size(0));
  }
  if (n_heads == 0) return;
  const int64_t half = table.size(1) / 2;
  const RopeShape shape{seq,  n_heads,    total_heads * head_dim, head_dim,
                        half, pos_offset, table.size(0),          inverse ? -1.f : 1.f};
  // 16-byte vectors need every head's start aligned as well (head_dim a multiple of 8 bf16).
  const bool vec = half % 8 == 0 && head_dim % 8 == 0 && detail::aligned16(x.data_ptr()) &&
                   detail::aligned16(table.data_ptr());
  const int n = vec ? 8 : 1;
  const int64_t total = batch * seq * n_heads * (half / n);
  constexpr int kBlock = 256;
  const int64_t grid = ceil_div<int64_t>(total, kBlock);
  PRIMUS_CHECK(grid < (int64_t{1} << 31), "{}: too large ({} threads)", op, total);
  auto* xp = static_cast<bf16*>(x.data_ptr());
  const int32_t* pp = positions ? positions->data<int32_t>() : nullptr;
  const auto launch = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(grid), kBlock, 0, cuda_stream(s)>>>(xp, table.data<float>(), pp, total,
                                                                       shape);
  };
  if (vec && positions) {
    launch(rope_kernel<8, true>);
  } else if (vec) {
    launch(rope_kernel<8, false>);
  } else if (positions) {
    launch(rope_kernel<1, true>);
  } else {
    launch(rope_kernel<1, false>);
  }
  PRIMUS_CUDA_CHECK_LAUNCH();
}

}  // namespace primus::ops::cuda
