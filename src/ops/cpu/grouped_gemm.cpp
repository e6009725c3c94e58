// CPU reference for the grouped GEMM: each expert's rows are one row-major product through the dense
// reference (cpu/gemm.cpp), so the grouped op is exactly as accurate as linear_* on the same rows.
#include <cstring>

#include "ops/cpu/cpu_common.h"
#include "ops/cpu/gemm_cpu.h"
#include "ops/cpu/grouped_gemm_cpu.h"

namespace primus::ops::cpu {

using namespace detail;

namespace {

// Calls fn(e, first_row, rows) for every expert.
template <typename F>
void for_each_expert(std::span<const int64_t> counts, F&& fn) {
  int64_t row = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    fn(static_cast<int64_t>(e), row, counts[e]);
    row += counts[e];
  }
}

// Expert e's [out, in] matrix of a [E, out, in] tensor, as a 2-D view.
Tensor expert_matrix(const Tensor& w, int64_t e) {
  return w.slice(e, e + 1).view({w.size(1), w.size(2)});
}

// Zeros rows [from, rows) of a [rows, cols] matrix: the padding rows that belong to no expert.
void zero_padding_rows(Tensor& t, int64_t from) {
  const int64_t rows = t.size(0);
  if (from >= rows) return;
  const size_t row_bytes = static_cast<size_t>(t.size(1)) * dtype_size(t.dtype());
  std::memset(static_cast<char*>(t.data_ptr()) + static_cast<size_t>(from) * row_bytes, 0,
              static_cast<size_t>(rows - from) * row_bytes);
}

void check_types(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn,
                 const Tensor& c, const char* cn) {
  const DType dt = check_float(op, an, a);
  check_dtype(op, bn, b, dt);
  check_dtype(op, cn, c, dt);
  PRIMUS_CHECK(!overlaps(c, a) && !overlaps(c, b), "{}: {} must not overlap {} or {}", op, cn, an, bn);
}

}  // namespace

void grouped_gemm_forward(const Tensor& x, const Tensor& w, std::span<const int64_t> counts, Tensor& y,
                          const Stream& s) {
  constexpr const char* op = "grouped_gemm_forward";
  check_types(op, x, "x", w, "w", y, "y");
  int64_t end = 0;
  for_each_expert(counts, [&](int64_t e, int64_t row, int64_t n) {
    Tensor ye = y.slice(row, row + n);
    linear_forward(x.slice(row, row + n), expert_matrix(w, e), nullptr, ye, s, nullptr);
    end = row + n;
  });
  zero_padding_rows(y, end);
}

void grouped_gemm_backward_input(const Tensor& dy, const Tensor& w, std::span<const int64_t> counts,
                                 Tensor& dx, const Stream& s) {
  constexpr const char* op = "grouped_gemm_backward_input";
  check_types(op, dy, "dy", w, "w", dx, "dx");
  int64_t end = 0;
  for_each_expert(counts, [&](int64_t e, int64_t row, int64_t n) {
    Tensor dxe = dx.slice(row, row + n);
    linear_backward_input(dy.slice(row, row + n), expert_matrix(w, e), dxe, false, s);
    end = row + n;
  });
  zero_padding_rows(dx, end);
}

void grouped_gemm_backward_weight(const Tensor& dy, const Tensor& x, std::span<const int64_t> counts,
                                  Tensor& dw, const Stream& s, bool accumulate) {
  constexpr const char* op = "grouped_gemm_backward_weight";
  check_types(op, dy, "dy", x, "x", dw, "dw");
  // An expert without rows is a product with K = 0: linear_backward_weight then zeros dw[e] (overwrite) or
  // leaves it as it is (accumulate).
  for_each_expert(counts, [&](int64_t e, int64_t row, int64_t n) {
    Tensor dwe = expert_matrix(dw, e);
    linear_backward_weight(dy.slice(row, row + n), x.slice(row, row + n), dwe, nullptr, s, accumulate);
  });
}

}  // namespace primus::ops::cpu
