// CPU reference for rotary position embedding (rotate-half convention), in place.
#include "ops/cpu/cpu_common.h"
#include "ops/cpu/rope_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

// Rotates the first rot_dim elements of heads [0, n_heads) of every token (the rest of each head passes
// through); the table row of token tok = b * seq + t is positions[tok] when given (validated by the caller),
// else pos_offset + t. Only the row lookup differs, so both forms do the very same arithmetic on a row and
// equal positions give bitwise equal results.
template <typename T, typename C>
void rope_impl(T* x, int64_t batch, int64_t seq, int64_t total_heads, int64_t n_heads, int64_t head_dim,
               int64_t rot_dim, const C* table, int64_t pos_offset, const int32_t* positions, bool inverse) {
  const int64_t half = rot_dim / 2;
  const int64_t tokens = batch * seq;
  const T sign = inverse ? T(-1) : T(1);
#pragma omp parallel for schedule(static) if (tokens * n_heads * rot_dim > kParallelGrain)
  for (int64_t tok = 0; tok < tokens; ++tok) {
    const int64_t pos = positions ? static_cast<int64_t>(positions[tok]) : pos_offset + tok % seq;
    const C* cs = table + pos * rot_dim;
    const C* sn = cs + half;
    T* row = x + tok * total_heads * head_dim;
    for (int64_t h = 0; h < n_heads; ++h) {
      T* x1 = row + h * head_dim;
      T* x2 = x1 + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const T c = static_cast<T>(cs[i]);
        const T s = sign * static_cast<T>(sn[i]);
        const T a = x1[i], b = x2[i];
        x1[i] = a * c - b * s;
        x2[i] = b * c + a * s;
      }
    }
  }
}

}  // namespace

void rope_apply(Tensor& x, int64_t batch, int64_t seq, int64_t total_heads, int64_t n_heads, int64_t head_dim,
                const Tensor& table, int64_t pos_offset, const Tensor* positions, bool inverse,
                const Stream& s) {
  constexpr const char* op = "rope_apply";
  const DType dt = check_float(op, "x", x);
  PRIMUS_CHECK(batch >= 1 && seq >= 1 && head_dim >= 2,
               "rope_apply: needs batch, seq >= 1 and head_dim >= 2, got batch={} seq={} head_dim={}", batch,
               seq, head_dim);
  PRIMUS_CHECK(n_heads >= 0 && n_heads <= total_heads,
               "rope_apply: n_heads ({}) must be in [0, total_heads = {}]", n_heads, total_heads);
  check_shape(op, "x", x, {batch, seq, total_heads * head_dim});
  check_host(op, "table", table);
  check_ndim(op, "table", table, 2);
  // Partial rotary (rotary_percent < 1): a table narrower than the head rotates that many leading elements.
  const int64_t rot_dim = table.size(1);
  PRIMUS_CHECK(rot_dim >= 2 && rot_dim % 2 == 0 && rot_dim <= head_dim,
               "rope_apply: table must be [max_pos, R] with R even and in [2, head_dim = {}], got {}",
               head_dim, table.describe());
  // The table is built in f32 (rope_table); an f64 x may use it as is or an f64 copy.
  PRIMUS_CHECK(table.dtype() == DType::kF32 || table.dtype() == dt,
               "rope_apply: table must be f32 or {}, got {}", dtype_name(dt), table.describe());
  const int32_t* pos = nullptr;
  if (positions) {
    PRIMUS_CHECK(pos_offset == 0, "rope_apply: pos_offset must be 0 with per-token positions, got {}",
                 pos_offset);
    check_tensor(op, "positions", *positions, DType::kI32, {batch, seq});
    PRIMUS_CHECK(!overlaps(x, *positions), "rope_apply: x must not overlap positions");
    pos = positions->data<int32_t>();
    // The reference is where bad positions are caught (the CUDA path only clamps them).
    for (int64_t tok = 0; tok < batch * seq; ++tok)
      PRIMUS_CHECK(pos[tok] >= 0 && pos[tok] < table.size(0),
                   "rope_apply: positions[{}, {}] = {} is outside the table's {} rows", tok / seq, tok % seq,
                   pos[tok], table.size(0));
  } else {
    PRIMUS_CHECK(pos_offset >= 0 && pos_offset + seq <= table.size(0),
                 "rope_apply: positions [{}, {}) exceed the table's {} rows", pos_offset, pos_offset + seq,
                 table.size(0));
  }
  PRIMUS_CHECK(!overlaps(x, table), "rope_apply: x must not overlap table");
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    if (table.dtype() == DType::kF32) {
      rope_impl<T, float>(x.data<T>(), batch, seq, total_heads, n_heads, head_dim, rot_dim,
                          table.data<float>(), pos_offset, pos, inverse);
    } else {
      rope_impl<T, double>(x.data<T>(), batch, seq, total_heads, n_heads, head_dim, rot_dim,
                           table.data<double>(), pos_offset, pos, inverse);
    }
  });
}

}  // namespace primus::ops::cpu
