// CPU reference for MLA's pack / unpack step (ops/mla.h): one task per token, so there are no races and the
// per-token head sum of the k_pe gradient runs in a fixed order.
#include "ops/cpu/cpu_common.h"
#include "ops/cpu/mla_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

// The per-token positions (null: pos_offset + t), checked against the table: the reference is where bad
// positions are caught (the CUDA path only clamps them).
const int32_t* check_dims(const char* op, const MlaDims& d, const Tensor& table, int64_t pos_offset,
                          const Tensor* positions) {
  PRIMUS_CHECK(d.batch >= 1 && d.seq >= 1 && d.heads >= 1 && d.nope >= 0 && d.rope >= 2 && d.rope % 2 == 0 &&
                   d.v_dim >= 1,
               "{}: needs batch, seq, heads, v_dim >= 1, nope >= 0 and an even rope >= 2, got B={} T={} H={} "
               "nope={} rope={} v={}",
               op, d.batch, d.seq, d.heads, d.nope, d.rope, d.v_dim);
  check_host(op, "table", table);
  check_ndim(op, "table", table, 2);
  PRIMUS_CHECK(table.size(1) == d.rope, "{}: table must be [max_pos, {}], got {}", op, d.rope,
               table.describe());
  if (!positions) {
    PRIMUS_CHECK(pos_offset >= 0 && pos_offset + d.seq <= table.size(0),
                 "{}: positions [{}, {}) exceed the table's {} rows", op, pos_offset, pos_offset + d.seq,
                 table.size(0));
    return nullptr;
  }
  PRIMUS_CHECK(pos_offset == 0, "{}: pos_offset must be 0 with per-token positions, got {}", op, pos_offset);
  check_tensor(op, "positions", *positions, DType::kI32, {d.batch, d.seq});
  const int32_t* pos = positions->data<int32_t>();
  for (int64_t tok = 0; tok < d.tokens(); ++tok)
    PRIMUS_CHECK(pos[tok] >= 0 && pos[tok] < table.size(0),
                 "{}: positions[{}, {}] = {} is outside the table's {} rows", op, tok / d.seq, tok % d.seq,
                 pos[tok], table.size(0));
  return pos;
}

// The table row of token tok.
inline int64_t row_of(int64_t tok, int64_t seq, int64_t pos_offset, const int32_t* pos) {
  return pos ? static_cast<int64_t>(pos[tok]) : pos_offset + tok % seq;
}

// y = c R x over one rope slice (rotate-half pairs i, i + half); sign -1 applies the transpose.
template <typename T, typename C>
inline void rotate(const T* x, T* y, const C* cs, int64_t half, T sign) {
  const C* sn = cs + half;
  for (int64_t i = 0; i < half; ++i) {
    const T c = static_cast<T>(cs[i]), s = sign * static_cast<T>(sn[i]);
    const T a = x[i], b = x[half + i];
    y[i] = a * c - b * s;
    y[half + i] = b * c + a * s;
  }
}

template <typename T, typename C>
void pack_impl(const T* q, const T* kv, const T* kpe, const MlaDims& d, const C* table, int64_t pos_offset,
               const int32_t* pos, T* qkv) {
  const int64_t H = d.heads, dn = d.nope, dr = d.rope, dv = d.v_dim, dq = d.qk_dim(), half = dr / 2;
  const int64_t qw = d.q_width(), kvw = d.kv_width(), w = d.qkv_width();
  const int64_t tokens = d.tokens();
#pragma omp parallel for schedule(static) if (tokens * w > kParallelGrain)
  for (int64_t tok = 0; tok < tokens; ++tok) {
    const C* cs = table + row_of(tok, d.seq, pos_offset, pos) * dr;
    const T* qt = q + tok * qw;
    const T* kvt = kv + tok * kvw;
    T* out = qkv + tok * w;
    T* kout = out + H * dq;
    T* vout = out + 2 * H * dq;
    std::vector<T> kr(static_cast<size_t>(dr));
    rotate(kpe + tok * dr, kr.data(), cs, half, T(1));
    for (int64_t h = 0; h < H; ++h) {
      std::copy_n(qt + h * dq, dn, out + h * dq);
      rotate(qt + h * dq + dn, out + h * dq + dn, cs, half, T(1));
      std::copy_n(kvt + h * (dn + dv), dn, kout + h * dq);
      std::copy_n(kr.data(), dr, kout + h * dq + dn);
      std::copy_n(kvt + h * (dn + dv) + dn, dv, vout + h * dv);
    }
  }
}

template <typename T, typename C>
void unpack_impl(const T* dqkv, const MlaDims& d, const C* table, int64_t pos_offset, const int32_t* pos,
                 T* dq, T* dkv, T* dkpe) {
  const int64_t H = d.heads, dn = d.nope, dr = d.rope, dv = d.v_dim, dqk = d.qk_dim(), half = dr / 2;
  const int64_t qw = d.q_width(), kvw = d.kv_width(), w = d.qkv_width();
  const int64_t tokens = d.tokens();
#pragma omp parallel for schedule(static) if (tokens * w > kParallelGrain)
  for (int64_t tok = 0; tok < tokens; ++tok) {
    const C* cs = table + row_of(tok, d.seq, pos_offset, pos) * dr;
    const T* in = dqkv + tok * w;
    const T* kin = in + H * dqk;
    const T* vin = in + 2 * H * dqk;
    T* qt = dq + tok * qw;
    T* kvt = dkv + tok * kvw;
    std::vector<T> sum(static_cast<size_t>(dr), T(0));
    for (int64_t h = 0; h < H; ++h) {
      std::copy_n(in + h * dqk, dn, qt + h * dqk);
      rotate(in + h * dqk + dn, qt + h * dqk + dn, cs, half, T(-1));
      std::copy_n(kin + h * dqk, dn, kvt + h * (dn + dv));
      std::copy_n(vin + h * dv, dv, kvt + h * (dn + dv) + dn);
      for (int64_t i = 0; i < dr; ++i) sum[i] += kin[h * dqk + dn + i];
    }
    rotate(sum.data(), dkpe + tok * dr, cs, half, T(-1));  // linear: rotating the sum = summing rotations
  }
}

}  // namespace

void mla_pack_qkv(const Tensor& q, const Tensor& kv, const Tensor& k_pe, const MlaDims& d,
                  const Tensor& table, int64_t pos_offset, Tensor& qkv, const Stream& s,
                  const Tensor* positions) {
  constexpr const char* op = "mla_pack_qkv";
  const int32_t* pos = check_dims(op, d, table, pos_offset, positions);
  const DType dt = check_float(op, "q", q);
  const int64_t n = d.tokens();
  check_tensor(op, "q", q, dt, {n, d.q_width()});
  check_tensor(op, "kv", kv, dt, {n, d.kv_width()});
  check_tensor(op, "k_pe", k_pe, dt, {n, d.rope});
  check_tensor(op, "qkv", qkv, dt, {n, d.qkv_width()});
  PRIMUS_CHECK(table.dtype() == DType::kF32 || table.dtype() == dt, "{}: table must be f32 or {}, got {}", op,
               dtype_name(dt), table.describe());
  PRIMUS_CHECK(!overlaps(qkv, q) && !overlaps(qkv, kv) && !overlaps(qkv, k_pe),
               "{}: qkv must not overlap its inputs", op);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    if (table.dtype() == DType::kF32)
      pack_impl<T, float>(q.data<T>(), kv.data<T>(), k_pe.data<T>(), d, table.data<float>(), pos_offset, pos,
                          qkv.data<T>());
    else
      pack_impl<T, T>(q.data<T>(), kv.data<T>(), k_pe.data<T>(), d, table.data<T>(), pos_offset, pos,
                      qkv.data<T>());
  });
}

void mla_unpack_dqkv(const Tensor& dqkv, const MlaDims& d, const Tensor& table, int64_t pos_offset,
                     Tensor& dq, Tensor& dkv, Tensor& dk_pe, const Stream& s, const Tensor* positions) {
  constexpr const char* op = "mla_unpack_dqkv";
  const int32_t* pos = check_dims(op, d, table, pos_offset, positions);
  const DType dt = check_float(op, "dqkv", dqkv);
  const int64_t n = d.tokens();
  check_tensor(op, "dqkv", dqkv, dt, {n, d.qkv_width()});
  check_tensor(op, "dq", dq, dt, {n, d.q_width()});
  check_tensor(op, "dkv", dkv, dt, {n, d.kv_width()});
  check_tensor(op, "dk_pe", dk_pe, dt, {n, d.rope});
  PRIMUS_CHECK(table.dtype() == DType::kF32 || table.dtype() == dt, "{}: table must be f32 or {}, got {}", op,
               dtype_name(dt), table.describe());
  PRIMUS_CHECK(!overlaps(dqkv, dq) && !overlaps(dqkv, dkv) && !overlaps(dqkv, dk_pe),
               "{}: outputs must not overlap dqkv", op);
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    if (table.dtype() == DType::kF32)
      unpack_impl<T, float>(dqkv.data<T>(), d, table.data<float>(), pos_offset, pos, dq.data<T>(),
                            dkv.data<T>(), dk_pe.data<T>());
    else
      unpack_impl<T, T>(dqkv.data<T>(), d, table.data<T>(), pos_offset, pos, dq.data<T>(), dkv.data<T>(),
                        dk_pe.data<T>());
  });
}

}  // namespace primus::ops::cpu
