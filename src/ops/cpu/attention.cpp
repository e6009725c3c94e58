// CPU reference for causal grouped-query attention over the packed qkv layout (see ops/attention.h). One
// query row at a time with a max-subtracted softmax; no T x T matrix is ever stored. The backward recomputes
// the probabilities from the saved lse, in two passes (query rows for dq, key rows for dk/dv) so that every
// output row has exactly one writer: no atomics, no races, and a result that does not depend on the thread
// count.
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

template <typename T>
inline void axpy(T* y, T alpha, const T* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

struct Layout {
  int64_t b, t, h, kv, d, group, row;  // row: elements per token of qkv
  bool causal;
  explicit Layout(const AttentionShape& s)
      : b(s.batch),
        t(s.seq),
        h(s.heads),
        kv(s.kv_heads),
        d(s.head_dim),
        group(s.heads / s.kv_heads),
        row((s.heads + 2 * s.kv_heads) * s.head_dim),
        causal(s.causal) {}
  // Offsets of query head hh / kv head kh of token (bb, i) inside qkv.
  int64_t q(int64_t bb, int64_t i, int64_t hh) const { return (bb * t + i) * row + hh * d; }
  int64_t k(int64_t bb, int64_t i, int64_t kh) const { return (bb * t + i) * row + (h + kh) * d; }
  int64_t v(int64_t bb, int64_t i, int64_t kh) const { return (bb * t + i) * row + (h + kv + kh) * d; }
  int64_t o(int64_t bb, int64_t i, int64_t hh) const { return ((bb * t + i) * h + hh) * d; }
  int64_t stat(int64_t bb, int64_t hh, int64_t i) const { return (bb * h + hh) * t + i; }
};

void check_shape_args(const char* op, const AttentionShape& s) {
  PRIMUS_CHECK(s.batch >= 1 && s.seq >= 1 && s.heads >= 1 && s.kv_heads >= 1 && s.head_dim >= 1,
               "{}: shape needs batch, seq, heads, kv_heads, head_dim >= 1, got B={} T={} H={} KV={} D={}",
               op, s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
  PRIMUS_CHECK(s.heads % s.kv_heads == 0, "{}: heads ({}) must be a multiple of kv_heads ({})", op, s.heads,
               s.kv_heads);
  PRIMUS_CHECK(std::isfinite(s.scale), "{}: scale must be finite, got {}", op, s.scale);
}

template <typename T>
void forward_impl(const T* qkv, const Layout& L, T scale, T* out, T* lse) {
  const int64_t rows = L.b * L.h * L.t;
#pragma omp parallel if (rows * L.t * L.d > kParallelGrain)
  {
    std::vector<T> p(static_cast<size_t>(L.t));
    // Interleaved chunks: under the causal mask late query rows cost more than early ones.
#pragma omp for collapse(3) schedule(static, 8)
    for (int64_t bb = 0; bb < L.b; ++bb) {
      for (int64_t hh = 0; hh < L.h; ++hh) {
        for (int64_t i = 0; i < L.t; ++i) {
          const int64_t kh = hh / L.group;
          const T* q = qkv + L.q(bb, i, hh);
          const int64_t n = L.causal ? i + 1 : L.t;
          T mx = -std::numeric_limits<T>::infinity();
          for (int64_t j = 0; j < n; ++j) {
            p[j] = scale * dot(q, qkv + L.k(bb, j, kh), L.d);
            mx = std::max(mx, p[j]);
          }
          T sum = T(0);
          for (int64_t j = 0; j < n; ++j) {
            p[j] = std::exp(p[j] - mx);
            sum += p[j];
          }
          T* o = out + L.o(bb, i, hh);
          for (int64_t e = 0; e < L.d; ++e) o[e] = T(0);
          for (int64_t j = 0; j < n; ++j) axpy(o, p[j], qkv + L.v(bb, j, kh), L.d);
          const T inv = T(1) / sum;
          for (int64_t e = 0; e < L.d; ++e) o[e] *= inv;
          lse[L.stat(bb, hh, i)] = mx + std::log(sum);
        }
      }
    }
  }
}

template <typename T>
void backward_impl(const T* dout, const T* qkv, const T* out, const T* lse, const Layout& L, T scale,
                   T* dqkv) {
  const int64_t rows = L.b * L.h * L.t;
  const bool par = rows * L.t * L.d > kParallelGrain;
  // delta_i = dout_i . out_i, the softmax-Jacobian term shared by both passes.
  std::vector<T> delta(static_cast<size_t>(rows));

  // Pass 1, query rows: dq_i = scale * sum_j p_ij (dout_i . v_j - delta_i) k_j.
#pragma omp parallel for collapse(3) schedule(static, 8) if (par)
  for (int64_t bb = 0; bb < L.b; ++bb) {
    for (int64_t hh = 0; hh < L.h; ++hh) {
      for (int64_t i = 0; i < L.t; ++i) {
        const int64_t kh = hh / L.group;
        const T* q = qkv + L.q(bb, i, hh);
        const T* g = dout + L.o(bb, i, hh);
        const T di = dot(g, out + L.o(bb, i, hh), L.d);
        const T li = lse[L.stat(bb, hh, i)];
        delta[L.stat(bb, hh, i)] = di;
        T* dq = dqkv + L.q(bb, i, hh);
        for (int64_t e = 0; e < L.d; ++e) dq[e] = T(0);
        const int64_t n = L.causal ? i + 1 : L.t;
        for (int64_t j = 0; j < n; ++j) {
          const T* k = qkv + L.k(bb, j, kh);
          const T p = std::exp(scale * dot(q, k, L.d) - li);
          const T ds = p * (dot(g, qkv + L.v(bb, j, kh), L.d) - di);
          axpy(dq, ds, k, L.d);
        }
        for (int64_t e = 0; e < L.d; ++e) dq[e] *= scale;
      }
    }
  }

  // Pass 2, key rows: dk_j = scale * sum_{h in group, i} ds_ij q_i ; dv_j = sum_{h in group, i} p_ij dout_i.
#pragma omp parallel for collapse(3) schedule(static, 8) if (par)
  for (int64_t bb = 0; bb < L.b; ++bb) {
    for (int64_t kh = 0; kh < L.kv; ++kh) {
      for (int64_t j = 0; j < L.t; ++j) {
        const T* k = qkv + L.k(bb, j, kh);
        const T* v = qkv + L.v(bb, j, kh);
        T* dk = dqkv + L.k(bb, j, kh);
        T* dv = dqkv + L.v(bb, j, kh);
        for (int64_t e = 0; e < L.d; ++e) dk[e] = dv[e] = T(0);
        for (int64_t hh = kh * L.group; hh < (kh + 1) * L.group; ++hh) {
          for (int64_t i = L.causal ? j : 0; i < L.t; ++i) {
            const T* q = qkv + L.q(bb, i, hh);
            const T* g = dout + L.o(bb, i, hh);
            const T p = std::exp(scale * dot(q, k, L.d) - lse[L.stat(bb, hh, i)]);
            const T ds = p * (dot(g, v, L.d) - delta[L.stat(bb, hh, i)]);
            axpy(dk, ds, q, L.d);
            axpy(dv, p, g, L.d);
          }
        }
        for (int64_t e = 0; e < L.d; ++e) dk[e] *= scale;
      }
    }
  }
}

}  // namespace

void attention_forward(const Tensor& qkv, const AttentionShape& shape, Tensor& out, Tensor& lse,
                       const Stream& s) {
  constexpr const char* op = "attention_forward";
  check_shape_args(op, shape);
  const DType dt = check_float(op, "qkv", qkv);
  const Layout L(shape);
  check_tensor(op, "qkv", qkv, dt, {L.b, L.t, L.row});
  check_tensor(op, "out", out, dt, {L.b, L.t, L.h * L.d});
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
  const DType dt = check_float(op, "qkv", qkv);
  const Layout L(shape);
  check_tensor(op, "qkv", qkv, dt, {L.b, L.t, L.row});
  check_tensor(op, "dout", dout, dt, {L.b, L.t, L.h * L.d});
  check_tensor(op, "out", out, dt, {L.b, L.t, L.h * L.d});
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

}  // namespace primus::ops::cpu
