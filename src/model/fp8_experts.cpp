#include "model/fp8_experts.h"

#include <atomic>

#include "core/env.h"
#include "core/error.h"
#include "model/fp8_linear.h"
#include "ops/fp8.h"
#include "ops/grouped_gemm.h"

namespace primus {

using ops::Fp8Granularity;
using ops::Fp8Tensor;

namespace {

// Rows [begin, end) of an FP8 operand cast as a whole, as an operand of its own: the same bytes and the
// multipliers of those rows. Only for the granularities whose multipliers follow the rows (see the header).
Fp8Tensor rows_of(const Fp8Tensor& t, int64_t begin, int64_t end) {
  Fp8Tensor v = t;
  v.data = t.data.slice(begin, end);
  switch (t.granularity) {
    case Fp8Granularity::kTensorwise:
      break;
    case Fp8Granularity::kRowwise:
      v.scale_inv = t.scale_inv.slice(begin, end);
      break;
    case Fp8Granularity::kBlock128x128:
      PRIMUS_CHECK(begin % 128 == 0 && end % 128 == 0,
                   "fp8 experts: rows [{}, {}) of a 128x128-block operand do not start and end on a block",
                   begin, end);
      v.scale_inv = t.scale_inv.slice(begin / 128, end / 128);
      break;
    case Fp8Granularity::kBlock1x128:
      PRIMUS_FAIL("fp8 experts: a 1x128 operand's rows cannot be sliced (its multipliers are rows-fastest)");
  }
  return v;
}

// cuBLASLt (13.1, H100) has no FP8 GEMM with a 1x128-scaled token operand whose row count is not a multiple
// of 16 (measured 2026-11-28: 1, 31, 33, 127, 270 and 967 rows find no algorithm; 144, 272 and 8192 do); the
// other scalings take any count (tests/gpu/fp8_gemm_gpu_test.cpp, "odd rows").
int64_t row_multiple(Fp8Granularity token_operand) {
  return token_operand == Fp8Granularity::kBlock1x128 ? 16 : 1;
}

// Runs gemm(in_rows, out_rows) for expert rows [at, at + m) of `in` and `out`, rounded up to `mult` rows.
// The extra rows belong to later experts or to the padding past the routed rows: the experts run in order on
// one stream, so a later expert's GEMM (or the final zeroing of the padding) overwrites what this one wrote
// there. Only when the rounded rows run past the tensors does the expert go through zero-padded copies.
template <typename Gemm>
void expert_rows(const Tensor& in, Tensor& out, int64_t at, int64_t m, int64_t mult, const Stream& s,
                 const Gemm& gemm) {
  const int64_t m_pad = (m + mult - 1) / mult * mult;
  if (at + m_pad <= in.size(0)) {
    Tensor o = out.slice(at, at + m_pad);
    gemm(in.slice(at, at + m_pad), o);
    return;
  }
  Tensor in_pad = Tensor::zeros({m_pad, in.size(1)}, in.dtype(), s);
  Tensor head = in_pad.slice(0, m);
  head.copy_from(in.slice(at, at + m), s);
  Tensor out_pad = Tensor::empty({m_pad, out.size(1)}, out.dtype(), s);
  gemm(in_pad, out_pad);
  Tensor dst = out.slice(at, at + m);
  dst.copy_from(out_pad.slice(0, m), s);
}

void zero_rows_past(Tensor& t, int64_t used, const Stream& s) {
  if (used < t.size(0)) {
    Tensor tail = t.slice(used, t.size(0));
    tail.zero_(s);
  }
}

// One FP8 GEMM per expert with rows: out[rows of e] = cast(in[rows of e]) @ b(e)^T, the token operand cast
// once for all experts (tensorwise: one scale, its amax over the routed rows only) or per expert.
template <typename ExpertOperand>
void per_expert_gemms(const Tensor& in, Tensor& out, std::span<const int64_t> counts, int64_t used,
                      ops::Fp8Format f, Fp8Granularity g, const Tensor* scale, Tensor* amax, bool fast_accum,
                      const Stream& s, const char* what, const ExpertOperand& b) {
  Fp8Tensor whole;
  if (g == Fp8Granularity::kTensorwise && used > 0)
    whole = fp8_cast(in.slice(0, used), f, g, false, scale, amax, s, what);
  const int64_t mult = row_multiple(g);
  int64_t at = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    const int64_t m = counts[e];
    if (m > 0) {
      const Fp8Tensor be = b(static_cast<int64_t>(e));
      expert_rows(in, out, at, m, mult, s, [&](const Tensor& rows, Tensor& o) {
        const Fp8Tensor a =
            whole.defined() ? rows_of(whole, at, at + m) : fp8_cast(rows, f, g, false, scale, amax, s, what);
        ops::fp8_gemm(a, be, o, 1.0f, 0.0f, fast_accum, s);
      });
    }
    at += m;
  }
  zero_rows_past(out, used, s);
}

}  // namespace

namespace {
std::atomic<int64_t> g_min_rows{-1};  // -1: not read yet
}  // namespace

int64_t fp8_expert_min_rows() {
  int64_t v = g_min_rows.load();
  if (v < 0) {
    v = env_int("PRIMUS_FP8_EXPERT_MIN_ROWS", static_cast<int>(kFp8ExpertMinMeanRows), 0);
    g_min_rows.store(v);
  }
  return v;
}

void set_fp8_expert_min_rows(int64_t rows) {
  g_min_rows.store(rows);
}

bool fp8_experts_worthwhile(int64_t rows, int64_t experts) {
  return experts > 0 && rows / experts >= fp8_expert_min_rows();
}

void expert_project(const StepContext& ctx, int slot, const Tensor& x, const Tensor& w,
                    std::span<const int64_t> counts, Tensor& y) {
  const Stream& s = ctx.stream;
  constexpr const char* op = "fp8 expert projection";
  const int64_t used = ops::grouped_rows(op, counts, w.ndim() == 3 ? w.size(0) : -1, x.size(0));
  if (ctx.fp8 == nullptr || slot < 0 || !fp8_experts_worthwhile(used, w.size(0))) {
    ops::grouped_gemm_forward(x, w, counts, y, s);
    return;
  }
  PRIMUS_CHECK(x.ndim() == 2 && x.size(1) == w.size(2) && y.ndim() == 2 && y.size(0) == x.size(0) &&
                   y.size(1) == w.size(1),
               "{}: x {}, w {} (experts, out, in), y {} do not fit", op, x.describe(), w.describe(),
               y.describe());
  const int64_t E = w.size(0), N = w.size(1), K = w.size(2);
  Fp8State& st = *ctx.fp8;
  const Fp8Recipe& r = st.recipe();
  // The whole stack at once: every micro-batch's forward reads all of it anyway.
  const Fp8Tensor wq =
      fp8_cast(w.view({E * N, K}), r.fwd, r.weight_granularity(), false, st.scale(slot, Fp8State::kW),
               st.amax_out(slot, Fp8State::kW), s, "fp8 expert weights");
  // Fast accumulation in the forward, exact for gradients: the dense projections' choice.
  per_expert_gemms(x, y, counts, used, r.fwd, r.activation_granularity(), st.scale(slot, Fp8State::kX),
                   st.amax_out(slot, Fp8State::kX), /*fast_accum=*/true, s, "fp8 expert input",
                   [&](int64_t e) { return rows_of(wq, e * N, (e + 1) * N); });
}

void expert_project_backward_input(const StepContext& ctx, int slot, const Tensor& dy, const Tensor& w,
                                   std::span<const int64_t> counts, Tensor& dx) {
  const Stream& s = ctx.stream;
  constexpr const char* op = "fp8 expert projection backward";
  const int64_t used = ops::grouped_rows(op, counts, w.ndim() == 3 ? w.size(0) : -1, dy.size(0));
  if (ctx.fp8 == nullptr || slot < 0 || !fp8_experts_worthwhile(used, w.size(0))) {
    ops::grouped_gemm_backward_input(dy, w, counts, dx, s);
    return;
  }
  PRIMUS_CHECK(dy.ndim() == 2 && dy.size(1) == w.size(1) && dx.ndim() == 2 && dx.size(0) == dy.size(0) &&
                   dx.size(1) == w.size(2),
               "{}: dy {}, w {} (experts, out, in), dx {} do not fit", op, dy.describe(), w.describe(),
               dx.describe());
  Fp8State& st = *ctx.fp8;
  const Fp8Recipe& r = st.recipe();
  // W_e^T [in, out] per expert (not a slice of the stack's transpose); the forward recorded the stack's amax
  // and its scale does not change within a step.
  per_expert_gemms(dy, dx, counts, used, r.grad, r.activation_granularity(), st.scale(slot, Fp8State::kDy),
                   st.amax_out(slot, Fp8State::kDy), /*fast_accum=*/false, s, "fp8 expert output gradient",
                   [&](int64_t e) {
                     return fp8_cast(w.slice(e, e + 1).view({w.size(1), w.size(2)}), r.fwd,
                                     r.weight_granularity(), true, st.scale(slot, Fp8State::kW), nullptr, s,
                                     "fp8 expert weights (transposed)");
                   });
}

}  // namespace primus
