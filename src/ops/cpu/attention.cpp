// CPU reference for causal grouped-query attention over the packed qkv layout (see ops/attention.h). Scores
// and products go through BLAS on blocks of query rows (BLAS reads the strided q/k/v heads in place through
// its leading dimension); the softmax is max-subtracted per query row. No T x T matrix is ever stored: a
// thread holds one block of at most 64 x T scores. The backward recomputes the probabilities from the saved
// lse; each task owns whole output rows, so there are no atomics or races and the result does not depend on
// the thread count.
//
// Packed sequences (shape.seg_starts): row i sees keys [seg(i), i]. Samples are contiguous, so a block's
// rows together see keys [seg(i0), i1): the products run over that range only, which is where packing saves
// work, and each row masks the columns outside its own range.
//
// attention_merge is elementwise per (batch, token, head) row: two lse values give the row's two weights,
// which scale its D elements; computed in the tensors' own dtype.
#include <cmath>
#include <limits>

#include "ops/cpu/attention_cpu.h"
#include "ops/cpu/cpu_common.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
  T acc = T(0);
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

struct Layout {
  int64_t b, t, h, kv, d, dv, group,
      row;  // d: q/k head dim, dv: v/out head dim, row: elements per token of qkv
  bool causal;
  const int32_t* seg;  // seg_starts [B, T], or null (every row's first visible key is 0)
  explicit Layout(const AttentionShape& s)
      : b(s.batch),
        t(s.seq),
        h(s.heads),
        kv(s.kv_heads),
        d(s.head_dim),
        dv(s.dv()),
        group(s.heads / s.kv_heads),
        row(s.qkv_width()),
        causal(s.causal),
        seg(s.seg_starts ? s.seg_starts->data<int32_t>() : nullptr) {}
  // First key query i of row bb sees, and one past the last; a block of rows [i0, i1) sees
  // [first_key(i0), key_end(i1 - 1)) (first_key is non-decreasing along a row).
  int64_t first_key(int64_t bb, int64_t i) const { return seg ? seg[bb * t + i] : 0; }
  int64_t key_end(int64_t i) const { return causal ? i + 1 : t; }
  // Offsets of query head hh / kv head kh of token (bb, i) inside qkv.
  int64_t q(int64_t bb, int64_t i, int64_t hh) const { return (bb * t + i) * row + hh * d; }
  int64_t k(int64_t bb, int64_t i, int64_t kh) const { return (bb * t + i) * row + (h + kh) * d; }
  int64_t v(int64_t bb, int64_t i, int64_t kh) const { return (bb * t + i) * row + (h + kv) * d + kh * dv; }
  int64_t o(int64_t bb, int64_t i, int64_t hh) const { return ((bb * t + i) * h + hh) * dv; }
  int64_t stat(int64_t bb, int64_t hh, int64_t i) const { return (bb * h + hh) * t + i; }
};

void check_shape_args(const char* op, const AttentionShape& s) {
  PRIMUS_CHECK(
      s.batch >= 1 && s.seq >= 1 && s.heads >= 1 && s.kv_heads >= 1 && s.head_dim >= 1 && s.v_head_dim >= 0,
      "{}: shape needs batch, seq, heads, kv_heads, head_dim >= 1 and v_head_dim >= 0, got B={} T={} "
      "H={} KV={} D={} Dv={}",
      op, s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, s.v_head_dim);
  PRIMUS_CHECK(s.heads % s.kv_heads == 0, "{}: heads ({}) must be a multiple of kv_heads ({})", op, s.heads,
               s.kv_heads);
  PRIMUS_CHECK(std::isfinite(s.scale), "{}: scale must be finite, got {}", op, s.scale);
}

// seg_starts: int32 [B, T] on the CPU, samples as contiguous runs (see AttentionShape), causal only.
void check_segments(const char* op, const AttentionShape& s) {
  if (!s.seg_starts) return;
  PRIMUS_CHECK(s.causal, "{}: seg_starts (packed sequences) needs causal attention", op);
  check_tensor(op, "seg_starts", *s.seg_starts, DType::kI32, {s.batch, s.seq});
  check_segment_starts(op, *s.seg_starts, s.batch, s.seq);
}

// Attention with fewer multiply-adds than this (per Q K^T product) runs on the calling thread.
constexpr int64_t kParallelWork = 1 << 21;

// Query rows per block: the score buffer of a task is kBlockRows x T, so memory stays O(T) per thread.
constexpr int64_t kBlockRows = 64;

// Forward, one task per (batch, head, block of query rows): S = scale * Q K^T (BLAS) over the keys the block
// sees, a max-subtracted softmax per row (masked outside the row's keys), then O = P V (BLAS).
template <typename T>
void forward_impl(const T* qkv, const Layout& L, T scale, T* out, T* lse) {
  const int64_t blocks = (L.t + kBlockRows - 1) / kBlockRows;
  const int64_t tasks = L.b * L.h * blocks;
  const int64_t ld_o = L.h * L.dv;
#pragma omp parallel if (tasks > 1 && L.b * L.h * L.t * L.t * L.d > kParallelWork)
  {
    std::vector<T> s(static_cast<size_t>(std::min(kBlockRows, L.t) * L.t));
    // Dynamic: under the causal mask late blocks cost more than early ones.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t blk = task % blocks, hh = (task / blocks) % L.h, bb = task / (blocks * L.h);
      const int64_t kh = hh / L.group;
      const int64_t i0 = blk * kBlockRows, i1 = std::min(L.t, i0 + kBlockRows), m = i1 - i0;
      // Keys [k0, k0 + nk): the ones any row of the block can see.
      const int64_t k0 = L.first_key(bb, i0), nk = L.key_end(i1 - 1) - k0;
      gemm_raw<T>(false, true, m, nk, L.d, scale, qkv + L.q(bb, i0, hh), L.row, qkv + L.k(bb, k0, kh), L.row,
                  T(0), s.data(), nk);
      for (int64_t r = 0; r < m; ++r) {
        const int64_t i = i0 + r, lo = L.first_key(bb, i) - k0, hi = L.key_end(i) - k0;
        T* p = s.data() + r * nk;
        T mx = p[lo];
        for (int64_t j = lo + 1; j < hi; ++j) mx = std::max(mx, p[j]);
        T sum = T(0);
        for (int64_t j = lo; j < hi; ++j) {
          p[j] = std::exp(p[j] - mx);
          sum += p[j];
        }
        const T inv = T(1) / sum;
        for (int64_t j = lo; j < hi; ++j) p[j] *= inv;
        std::fill(p, p + lo, T(0));
        std::fill(p + hi, p + nk, T(0));
        lse[L.stat(bb, hh, i)] = mx + std::log(sum);
      }
      gemm_raw<T>(false, false, m, L.dv, nk, T(1), s.data(), nk, qkv + L.v(bb, k0, kh), L.row, T(0),
                  out + L.o(bb, i0, hh), ld_o);
    }
  }
}

// Backward, one task per (batch, kv head): the task owns dk/dv of its kv head and dq of the query heads that
// read it, so every gradient element has exactly one writer. Per block of query rows of each such head:
//   P = exp(scale * Q K^T - lse), dP = dO V^T, dS = scale * P (dP - rowsum(dO * O)),
//   dQ = dS K, dK += dS^T Q, dV += P^T dO.
template <typename T>
void backward_impl(const T* dout, const T* qkv, const T* out, const T* lse, const Layout& L, T scale,
                   T* dqkv) {
  const int64_t blocks = (L.t + kBlockRows - 1) / kBlockRows;
  const int64_t tasks = L.b * L.kv;
  const int64_t ld_o = L.h * L.dv;
#pragma omp parallel if (tasks > 1 && L.b * L.h * L.t * L.t * L.d > kParallelWork)
  {
    const size_t buf = static_cast<size_t>(std::min(kBlockRows, L.t) * L.t);
    std::vector<T> p(buf), ds(buf);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t kh = task % L.kv, bb = task / L.kv;
      for (int64_t j = 0; j < L.t; ++j) {
        std::fill_n(dqkv + L.k(bb, j, kh), L.d, T(0));
        std::fill_n(dqkv + L.v(bb, j, kh), L.dv, T(0));
      }
      const T* k = qkv + L.k(bb, 0, kh);
      const T* v = qkv + L.v(bb, 0, kh);
      for (int64_t hh = kh * L.group; hh < (kh + 1) * L.group; ++hh) {
        for (int64_t blk = 0; blk < blocks; ++blk) {
          const int64_t i0 = blk * kBlockRows, i1 = std::min(L.t, i0 + kBlockRows), m = i1 - i0;
          const int64_t k0 = L.first_key(bb, i0), nk = L.key_end(i1 - 1) - k0;  // as in the forward
          const T* q = qkv + L.q(bb, i0, hh);
          const T* g = dout + L.o(bb, i0, hh);
          const T* kb = k + k0 * L.row;
          const T* vb = v + k0 * L.row;
          gemm_raw<T>(false, true, m, nk, L.d, scale, q, L.row, kb, L.row, T(0), p.data(), nk);
          gemm_raw<T>(false, true, m, nk, L.dv, T(1), g, ld_o, vb, L.row, T(0), ds.data(), nk);
          for (int64_t r = 0; r < m; ++r) {
            const int64_t i = i0 + r, lo = L.first_key(bb, i) - k0, hi = L.key_end(i) - k0;
            const T li = lse[L.stat(bb, hh, i)];
            const T di = dot(g + r * ld_o, out + L.o(bb, i, hh), L.dv);
            T* pr = p.data() + r * nk;
            T* dr = ds.data() + r * nk;
            for (int64_t j = lo; j < hi; ++j) {
              pr[j] = std::exp(pr[j] - li);
              dr[j] = scale * pr[j] * (dr[j] - di);
            }
            for (int64_t j = 0; j < lo; ++j) pr[j] = dr[j] = T(0);
            for (int64_t j = hi; j < nk; ++j) pr[j] = dr[j] = T(0);
          }
          gemm_raw<T>(false, false, m, L.d, nk, T(1), ds.data(), nk, kb, L.row, T(0), dqkv + L.q(bb, i0, hh),
                      L.row);
          gemm_raw<T>(true, false, nk, L.d, m, T(1), ds.data(), nk, q, L.row, T(1), dqkv + L.k(bb, k0, kh),
                      L.row);
          gemm_raw<T>(true, false, nk, L.dv, m, T(1), p.data(), nk, g, ld_o, T(1), dqkv + L.v(bb, k0, kh),
                      L.row);
        }
      }
    }
  }
}

// One merge per (batch, token, head) row; rows follow acc's [B, T, H] order, the lse index is [B, H, T].
template <typename T>
void merge_impl(T* acc, T* acc_lse, const T* part, const T* part_lse, int64_t b, int64_t t, int64_t h,
                int64_t d) {
  const int64_t rows = b * t * h;
  const T neg_inf = -std::numeric_limits<T>::infinity();
#pragma omp parallel for schedule(static) if (rows * d > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t hh = r % h, tt = (r / h) % t, bb = r / (h * t);
    const int64_t li = (bb * h + hh) * t + tt;
    T* o = acc + r * d;
    const T* p = part + r * d;
    const T la = acc_lse[li], lp = part_lse[li];
    const T m = la > lp ? la : lp;  // a NaN lse propagates (both comparisons are false)
    if (m == neg_inf) {             // neither side has seen a key
      std::fill_n(o, d, T(0));
      acc_lse[li] = neg_inf;
      continue;
    }
    // exp(l - lse') = exp(l - m) / s with s = exp(la - m) + exp(lp - m) in [1, 2].
    const T wa = std::exp(la - m), wp = std::exp(lp - m);
    const T inv = T(1) / (wa + wp);
    const T ca = wa * inv, cp = wp * inv;
    // A -inf side is skipped rather than multiplied by 0, so that its values (NaN in a fully masked row)
    // cannot leak.
    if (la == neg_inf) {
      for (int64_t e = 0; e < d; ++e) o[e] = p[e] * cp;
    } else if (lp == neg_inf) {
      for (int64_t e = 0; e < d; ++e) o[e] = o[e] * ca;
    } else {
      for (int64_t e = 0; e < d; ++e) o[e] = o[e] * ca + p[e] * cp;
    }
    acc_lse[li] = m + std::log1p(std::exp(-std::abs(la - lp)));
  }
}

}  // namespace

void attention_forward(const Tensor& qkv, const AttentionShape& shape, Tensor& out, Tensor& lse,
                       const Stream& s) {
  constexpr const char* op = "attention_forward";
  check_shape_args(op, shape);
  check_segments(op, shape);
  const DType dt = check_float(op, "qkv", qkv);
  const Layout L(shape);
  check_tensor(op, "qkv", qkv, dt, {L.b, L.t, L.row});
  check_tensor(op, "out", out, dt, {L.b, L.t, L.h * L.dv});
  check_tensor(op, "lse", lse, dt, {L.b, L.h, L.t});
  PRIMUS_CHECK(!overlaps(out, qkv) && !overlaps(lse, qkv) && !overlaps(lse, out),
               "attention_forward: out, lse and qkv must not overlap");
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    forward_impl<T>(qkv.data<T>(), L, T(shape.scale), out.data<T>(), lse.data<T>());
  });
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const AttentionShape& shape, Tensor& dqkv, const Stream& s) {
  constexpr const char* op = "attention_backward";
  check_shape_args(op, shape);
  check_segments(op, shape);
  const DType dt = check_float(op, "qkv", qkv);
  const Layout L(shape);
  check_tensor(op, "qkv", qkv, dt, {L.b, L.t, L.row});
  check_tensor(op, "dout", dout, dt, {L.b, L.t, L.h * L.dv});
  check_tensor(op, "out", out, dt, {L.b, L.t, L.h * L.dv});
  check_tensor(op, "lse", lse, dt, {L.b, L.h, L.t});
  check_tensor(op, "dqkv", dqkv, dt, {L.b, L.t, L.row});
  PRIMUS_CHECK(!overlaps(dqkv, qkv) && !overlaps(dqkv, dout) && !overlaps(dqkv, out) && !overlaps(dqkv, lse),
               "attention_backward: dqkv must not overlap any input");
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    backward_impl<T>(dout.data<T>(), qkv.data<T>(), out.data<T>(), lse.data<T>(), L, T(shape.scale),
                     dqkv.data<T>());
  });
}

void attention_merge(Tensor& acc, Tensor& acc_lse, const Tensor& part, const Tensor& part_lse,
                     const Stream& s) {
  constexpr const char* op = "attention_merge";
  const DType dt = check_float(op, "part", part);
  check_host(op, "acc", acc);
  check_ndim(op, "acc", acc, 3);
  check_host(op, "acc_lse", acc_lse);
  check_ndim(op, "acc_lse", acc_lse, 3);
  const int64_t b = acc.size(0), t = acc.size(1), w = acc.size(2), h = acc_lse.size(1);
  PRIMUS_CHECK(h >= 1 && w % h == 0, "{}: acc {} must be [B, T, H*D] with H = {} from acc_lse {}", op,
               acc.describe(), h, acc_lse.describe());
  check_tensor(op, "acc", acc, dt, {b, t, w});
  check_tensor(op, "acc_lse", acc_lse, dt, {b, h, t});
  check_tensor(op, "part", part, dt, {b, t, w});
  check_tensor(op, "part_lse", part_lse, dt, {b, h, t});
  PRIMUS_CHECK(!overlaps(acc, acc_lse) && !overlaps(acc, part) && !overlaps(acc, part_lse) &&
                   !overlaps(acc_lse, part) && !overlaps(acc_lse, part_lse),
               "{}: acc and acc_lse must not overlap each other, part or part_lse", op);
  if (acc_lse.numel() == 0) return;
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    merge_impl<T>(acc.data<T>(), acc_lse.data<T>(), part.data<T>(), part_lse.data<T>(), b, t, h, w / h);
  });
}

}  // namespace primus::ops::cpu
