#include "ops/grouped_gemm.h"

#include "ops/cpu/grouped_gemm_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/grouped_gemm_cuda.h"
#endif

namespace primus::ops {

namespace {

// A [rows, cols] matrix (exactly 2-D: the rows are tokens grouped by expert).
void check_matrix(const char* op, const char* name, const Tensor& t, int64_t rows, int64_t cols) {
  PRIMUS_CHECK(t.ndim() == 2 && t.size(0) == rows && t.size(1) == cols, "{}: {} must be [{}, {}], got {}", op,
               name, rows, cols, t.describe());
}

void check_weights(const char* op, const char* name, const Tensor& w) {
  PRIMUS_CHECK(w.ndim() == 3, "{}: {} must be [experts, out, in], got {}", op, name, w.describe());
}

}  // namespace

int64_t grouped_rows(const char* op, std::span<const int64_t> counts, int64_t experts, int64_t rows) {
  PRIMUS_CHECK(static_cast<int64_t>(counts.size()) == experts,
               "{}: {} token counts given for {} experts (one count per expert expected)", op, counts.size(),
               experts);
  int64_t total = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    PRIMUS_CHECK(counts[e] >= 0, "{}: expert {} has a negative token count {}", op, e, counts[e]);
    total += counts[e];
  }
  PRIMUS_CHECK(total <= rows, "{}: the token counts sum to {} but the inputs hold only {} rows", op, total,
               rows);
  return total;
}

void grouped_gemm_forward(const Tensor& x, const Tensor& w, std::span<const int64_t> counts, Tensor& y,
                          const Stream& s) {
  constexpr const char* op = "grouped_gemm_forward";
  check_same_device(op, x.device(), {&x, &w, &y});
  check_weights(op, "w", w);
  check_matrix(op, "x", x, x.ndim() == 2 ? x.size(0) : -1, w.size(2));
  check_matrix(op, "y", y, x.size(0), w.size(1));
  grouped_rows(op, counts, w.size(0), x.size(0));
  PRIMUS_DISPATCH(x, grouped_gemm_forward, x, w, counts, y, s);
}

void grouped_gemm_backward_input(const Tensor& dy, const Tensor& w, std::span<const int64_t> counts,
                                 Tensor& dx, const Stream& s) {
  constexpr const char* op = "grouped_gemm_backward_input";
  check_same_device(op, dy.device(), {&dy, &w, &dx});
  check_weights(op, "w", w);
  check_matrix(op, "dy", dy, dy.ndim() == 2 ? dy.size(0) : -1, w.size(1));
  check_matrix(op, "dx", dx, dy.size(0), w.size(2));
  grouped_rows(op, counts, w.size(0), dy.size(0));
  PRIMUS_DISPATCH(dy, grouped_gemm_backward_input, dy, w, counts, dx, s);
}

void grouped_gemm_backward_weight(const Tensor& dy, const Tensor& x, std::span<const int64_t> counts,
                                  Tensor& dw, const Stream& s, bool accumulate) {
  constexpr const char* op = "grouped_gemm_backward_weight";
  check_same_device(op, dy.device(), {&dy, &x, &dw});
  check_weights(op, "dw", dw);
  check_matrix(op, "dy", dy, dy.ndim() == 2 ? dy.size(0) : -1, dw.size(1));
  check_matrix(op, "x", x, dy.size(0), dw.size(2));
  grouped_rows(op, counts, dw.size(0), dy.size(0));
  PRIMUS_DISPATCH(dy, grouped_gemm_backward_weight, dy, x, counts, dw, s, accumulate);
}

}  // namespace primus::ops
