// The row-sparse embedding gradient (ops/row_sparse_grad.h) on the GPU (family row_sparse_grad):
//  - embedding_backward_sparse over two accumulating calls (the second with new rows), unsharded and
//    vocabulary-sharded: slot_of / row_of / count exactly the CPU reference's, every slot row bitwise the GPU
//    dense embedding_backward's row of the same calls (and a row without a slot a zero dense row), the rows
//    within f32 tolerance of the CPU reference;
//  - row_sparse_clear: to_dense all zero, every slot free, the rows zero, and the next backward as on a fresh
//    gradient (bitwise);
//  - adamw_step_sparse (no copy, bf16 copy, f32 copy) and adamw_step_split_sparse on a span that starts
//    mid-row and runs past V x D, aligned and unaligned: bitwise the dense GPU ops with the densified
//    gradient;
//  - embedding_forward_updated(_split)_sparse bitwise the dense GPU ops with the densified gradient;
//  - running out of slots: the rows past the capacity get none, the others are still bitwise the dense rows,
//    and the next call throws a primus::Error naming the capacity (once);
//  - timing at Llama-3-8B size (V 128256, D 4096, N 8192): the backward and the whole table's
//    adamw_step_split, sparse vs dense.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "gpu/fused_test_util.h"
#include "ops/cpu/row_sparse_grad_cpu.h"
#include "ops/cuda/embedding_cuda.h"
#include "ops/cuda/optimizer_cuda.h"
#include "ops/cuda/row_sparse_grad_cuda.h"
#include "ops/row_sparse_grad.h"

namespace primus::gputest {
namespace {

using fused::gpu_poisoned_view;
using fused::gpu_view;

using fused::bitwise_equal;
using fused::check_true;
using ops::RowSparseGrad;

constexpr const char* kFamily = "row_sparse_grad";

enum class Dist { kUniform, kSkewed, kOne };

const char* dist_name(Dist d) {
  return d == Dist::kUniform ? "uniform" : d == Dist::kSkewed ? "skewed" : "one id";
}

// n token ids in [0, total): uniform, skewed towards small ids (long runs, as in text), or one id; all
// shifted by `shift` (mod total), so that a second call with another shift touches new rows.
Tensor make_tokens(Context& ctx, int64_t n, int64_t total, Dist dist, int64_t shift) {
  Tensor t = Tensor::empty({n}, DType::kI32);
  int32_t* p = t.data<int32_t>();
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t id = 0;
    switch (dist) {
      case Dist::kUniform:
        id = std::min<int64_t>(total - 1, static_cast<int64_t>(std::floor(u(ctx.rng) * total)));
        break;
      case Dist::kSkewed:
        id = std::min<int64_t>(total - 1, static_cast<int64_t>(std::floor(std::pow(u(ctx.rng), 6) * total)));
        break;
      case Dist::kOne:
        id = total / 2;
        break;
    }
    p[i] = static_cast<int32_t>((id + shift) % total);
  }
  return t;
}

// A host copy of a row-sparse gradient (GPU or CPU).
struct HostGrad {
  std::vector<int32_t> slot_of, row_of;
  int32_t count = 0;
  Tensor rows;  // CPU f32 [C, D]
};

HostGrad host_copy(Context& ctx, const RowSparseGrad& g) {
  stream_sync(ctx.stream);
  HostGrad h;
  h.slot_of = g.slot_of.to_vector<int32_t>();
  h.row_of = g.row_of.to_vector<int32_t>();
  h.count = g.count.to_vector<int32_t>()[0];
  h.rows = fused::cpu_copy_f32(ctx, g.rows);
  return h;
}

// "" when the slot maps are equal (slot_of, count, row_of of the used slots), else the first difference.
std::string slots_diff(const HostGrad& gpu, const HostGrad& ref) {
  if (gpu.count != ref.count) return fmt::format("count {} vs reference {}", gpu.count, ref.count);
  for (size_t r = 0; r < ref.slot_of.size(); ++r)
    if (gpu.slot_of[r] != ref.slot_of[r])
      return fmt::format("slot_of[{}] = {} vs reference {}", r, gpu.slot_of[r], ref.slot_of[r]);
  for (int32_t k = 0; k < ref.count; ++k)
    if (gpu.row_of[k] != ref.row_of[k])
      return fmt::format("row_of[{}] = {} vs reference {}", k, gpu.row_of[k], ref.row_of[k]);
  return {};
}

// "" when every used slot's row is bitwise the dense gradient's row, the rows of free slots are zero, and
// every row without a slot is a zero row of the dense gradient (which started from zeros); else the first
// difference.
std::string rows_vs_dense(const HostGrad& g, const Tensor& dense_gpu, int64_t d) {
  const Tensor dense = dense_gpu.to(Stream::cpu());
  const auto* rb = static_cast<const uint32_t*>(g.rows.data_ptr());
  const auto* db = static_cast<const uint32_t*>(dense.data_ptr());
  const int64_t cap = static_cast<int64_t>(g.row_of.size());
  for (int64_t k = 0; k < cap; ++k) {
    for (int64_t c = 0; c < d; ++c) {
      const uint32_t got = rb[k * d + c];
      if (k < g.count) {
        const int64_t r = g.row_of[k];
        const uint32_t want = db[r * d + c];
        if (got != want) {
          float x, y;
          std::memcpy(&x, &got, 4);
          std::memcpy(&y, &want, 4);
          return fmt::format("slot {} (row {}) column {}: {} vs dense {} (bits {:08x} vs {:08x})", k, r, c, x,
                             y, got, want);
        }
      } else if (got != 0) {
        return fmt::format("slot {} is free (count {}) but its row is not zero at column {}", k, g.count, c);
      }
    }
  }
  for (size_t r = 0; r < g.slot_of.size(); ++r) {
    if (g.slot_of[r] >= 0) continue;
    for (int64_t c = 0; c < d; ++c)
      if (db[static_cast<int64_t>(r) * d + c] != 0)
        return fmt::format("row {} has no slot but a nonzero dense gradient at column {}", r, c);
  }
  return {};
}

void check_empty(Context& ctx, const std::string& name, const std::string& diff, const std::string& note) {
  check_true(ctx, kFamily, name, diff.empty(), diff.empty() ? note : "MISMATCH: " + diff);
}

// (i) + (ii): two accumulating backward calls against the CPU reference and the dense GPU backward, then a
// clear, then the first call again on the cleared gradient. Sharded when lo > 0 or total > v.
void backward_case(Context& ctx, int64_t n, int64_t v, int64_t d, Dist dist, int64_t lo = 0,
                   int64_t total = -1) {
  const bool sharded = total > 0;
  const int64_t ids = sharded ? total : v;
  const std::string sz = sharded ? fmt::format("N={} V={} D={} shard [{}, {}) of {} {}", n, v, d, lo, lo + v,
                                               total, dist_name(dist))
                                 : fmt::format("N={} V={} D={} {}", n, v, d, dist_name(dist));
  const int64_t cap = std::min(v, 2 * n);
  RowSparseGrad g = ops::cuda::row_sparse_grad(v, d, cap, ctx.stream);
  RowSparseGrad ref = ops::cpu::row_sparse_grad(v, d, cap, Stream::cpu());
  Tensor dense = Tensor::zeros({v, d}, DType::kF32, ctx.stream);
  Tensor first_tokens, first_dout;
  HostGrad after_first;
  for (int call = 0; call < 2; ++call) {
    // The second micro-batch draws its ids shifted by a third of the vocabulary: new rows after the old
    // slots.
    Tensor tokens = make_tokens(ctx, n, ids, dist, call * (ids / 3 + 1));
    Tensor tokens_g = tokens.to(ctx.stream);
    Tensor dout = fused::gpu_randn(ctx, {n, d}, DType::kBF16);
    Tensor doutf = fused::host_f32(ctx, dout);
    ops::cuda::embedding_backward_sparse(tokens_g, dout, g, ctx.stream, lo, total);
    ops::cuda::embedding_backward(tokens_g, dout, dense, ctx.stream, lo, total);
    ops::cpu::embedding_backward_sparse(tokens, doutf, ref, Stream::cpu(), lo, total);
    const HostGrad got = host_copy(ctx, g), want = host_copy(ctx, ref);
    const std::string name = fmt::format("bwd_sparse call {} {}", call + 1, sz);
    check_empty(ctx, name + " slots", slots_diff(got, want),
                fmt::format("slot_of/row_of/count = CPU reference ({} slots)", got.count));
    check_empty(ctx, name + " rows", rows_vs_dense(got, dense, d), "bitwise = dense GPU backward rows");
    ctx.check(kFamily, name + " rows vs CPU", g.rows, want.rows, kTolF32);
    if (call == 0) {
      first_tokens = tokens_g;
      first_dout = dout;
      after_first = got;
    }
  }

  // (ii) clear: nothing left, and the gradient behaves as a fresh one.
  ops::cuda::row_sparse_clear(g, ctx.stream);
  Tensor dense_after = ctx.poisoned({v, d}, DType::kF32);
  ops::cuda::row_sparse_to_dense(g, dense_after, ctx.stream);
  const HostGrad cleared = host_copy(ctx, g);
  bool zero = true;
  for (float x : dense_after.to_vector<float>()) zero = zero && x == 0.0f && !std::signbit(x);
  bool free = cleared.count == 0;
  for (int32_t s : cleared.slot_of) free = free && s == -1;
  bool rows_zero = true;
  for (float x : cleared.rows.to_vector<float>()) rows_zero = rows_zero && x == 0.0f;
  check_true(
      ctx, kFamily, "row_sparse_clear " + sz, zero && free && rows_zero,
      zero && free && rows_zero
          ? "to_dense all zero, slot_of all -1, count 0, rows zero"
          : fmt::format("MISMATCH: to_dense zero {}, slots free {}, rows zero {}", zero, free, rows_zero));
  ops::cuda::embedding_backward_sparse(first_tokens, first_dout, g, ctx.stream, lo, total);
  const HostGrad again = host_copy(ctx, g);
  std::string diff = slots_diff(again, after_first);
  if (diff.empty() &&
      std::memcmp(again.rows.data_ptr(), after_first.rows.data_ptr(), again.rows.nbytes()) != 0)
    diff = "rows differ";
  check_empty(ctx, "bwd_sparse after clear " + sz, diff, "bitwise = the first call on the fresh gradient");
}

// (vii) Data parallelism's reservation: a list of rows (repeats, any order) reserved, then a backward over a
// subset of them: the slot maps equal the CPU reference's (the reserved rows first, ascending; no new slot
// for the backward's rows) and the rows equal the dense GPU backward's, the untouched reserved slots zero.
void reserve_case(Context& ctx, int64_t n, int64_t v, int64_t d, Dist dist) {
  const std::string sz = fmt::format("N={} V={} D={} {}", n, v, d, dist_name(dist));
  const int64_t cap = std::min(v, 2 * n);
  RowSparseGrad g = ops::cuda::row_sparse_grad(v, d, cap, ctx.stream);
  RowSparseGrad ref = ops::cpu::row_sparse_grad(v, d, cap, Stream::cpu());
  // The reservation: this rank's tokens and as many of another rank's (shifted ids).
  Tensor mine = make_tokens(ctx, n, v, dist, 0), theirs = make_tokens(ctx, n, v, dist, v / 3 + 1);
  std::vector<int32_t> both = mine.to_vector<int32_t>();
  for (int32_t x : theirs.to_vector<int32_t>()) both.push_back(x);
  Tensor reserved = Tensor::from_vector(both, {2 * n});
  ops::cuda::row_sparse_reserve(reserved.to(ctx.stream), g, ctx.stream);
  ops::cpu::row_sparse_reserve(reserved, ref, Stream::cpu());
  Tensor dout = fused::gpu_randn(ctx, {n, d}, DType::kBF16);
  Tensor dense = Tensor::zeros({v, d}, DType::kF32, ctx.stream);
  ops::cuda::embedding_backward_sparse(mine.to(ctx.stream), dout, g, ctx.stream);
  ops::cuda::embedding_backward(mine.to(ctx.stream), dout, dense, ctx.stream);
  ops::cpu::embedding_backward_sparse(mine, fused::host_f32(ctx, dout), ref, Stream::cpu());
  const HostGrad got = host_copy(ctx, g), want = host_copy(ctx, ref);
  check_empty(ctx, "row_sparse_reserve + bwd " + sz + " slots", slots_diff(got, want),
              fmt::format("slot_of/row_of/count = CPU reference ({} reserved slots)", got.count));
  check_empty(ctx, "row_sparse_reserve + bwd " + sz + " rows", rows_vs_dense(got, dense, d),
              "bitwise = dense GPU backward rows");
}

// A row-sparse gradient from one backward call of n uniform tokens, and its dense [V, D] form (GPU).
RowSparseGrad filled_grad(Context& ctx, int64_t n, int64_t v, int64_t d, Tensor& dense) {
  RowSparseGrad g = ops::cuda::row_sparse_grad(v, d, std::min(v, n), ctx.stream);
  Tensor tokens = make_tokens(ctx, n, v, Dist::kUniform, 0).to(ctx.stream);
  Tensor dout = fused::gpu_randn(ctx, {n, d}, DType::kBF16);
  ops::cuda::embedding_backward_sparse(tokens, dout, g, ctx.stream);
  dense = ctx.poisoned({v, d}, DType::kF32);
  ops::cuda::row_sparse_to_dense(g, dense, ctx.stream);
  stream_sync(ctx.stream);
  return g;
}

// (iii) AdamW on table elements [first, first + len), first mid-row, the span running `past` elements beyond
// V x D (a region's padding: zero gradient). The dense ops get the densified gradient of the span.
void adamw_case(Context& ctx, int64_t v, int64_t d, int64_t n_tokens, int64_t first, int64_t past,
                int64_t offset) {
  const int64_t len = v * d - first + past;
  const std::string sz = fmt::format("V={} D={} span [{}, {}) of {}{}", v, d, first, first + len, v * d,
                                     offset ? " unaligned" : "");
  Tensor dense;
  RowSparseGrad g = filled_grad(ctx, n_tokens, v, d, dense);
  Tensor grad_c = Tensor::zeros({len}, DType::kF32);
  {
    const Tensor dh = dense.to(Stream::cpu());
    std::memcpy(grad_c.data<float>(), dh.data<float>() + first, (v * d - first) * sizeof(float));
  }
  Tensor grad = gpu_view(ctx, grad_c, offset);
  Tensor w_c = ctx.randn_cpu({len}, DType::kF32), m_c = ctx.randn_cpu({len}, DType::kF32, 0.01);
  Tensor v_c = ctx.randn_cpu({len}, DType::kF32, 1e-4);
  for (float& x : std::span(v_c.data<float>(), static_cast<size_t>(len))) x = std::fabs(x);

  for (int copy_kind = 0; copy_kind < 3; ++copy_kind) {  // none, bf16, f32
    const ops::AdamWParams p = fused::adamw_test_params(3 + copy_kind, 0.7f);
    Tensor w1 = gpu_view(ctx, w_c, offset), m1 = gpu_view(ctx, m_c, offset), v1 = gpu_view(ctx, v_c, offset);
    Tensor w2 = gpu_view(ctx, w_c, offset), m2 = gpu_view(ctx, m_c, offset), v2 = gpu_view(ctx, v_c, offset);
    const DType cd = copy_kind == 2 ? DType::kF32 : DType::kBF16;
    Tensor c1 = gpu_poisoned_view(ctx, len, cd, offset), c2 = gpu_poisoned_view(ctx, len, cd, offset);
    ops::cuda::adamw_step(w1, grad, m1, v1, p, copy_kind ? &c1 : nullptr, ctx.stream);
    ops::cuda::adamw_step_sparse(w2, g, first, m2, v2, p, copy_kind ? &c2 : nullptr, ctx.stream);
    stream_sync(ctx.stream);
    const char* what = copy_kind == 0 ? "no copy" : copy_kind == 1 ? "bf16 copy" : "f32 copy";
    const bool ok_w = bitwise_equal(w1, w2), ok_mv = bitwise_equal(m1, m2) && bitwise_equal(v1, v2);
    const bool ok_c = copy_kind == 0 || bitwise_equal(c1, c2);
    check_true(ctx, kFamily, fmt::format("adamw_step_sparse {} {}", what, sz), ok_w && ok_mv && ok_c,
               ok_w && ok_mv && ok_c
                   ? "bitwise = adamw_step with the densified gradient"
                   : fmt::format("MISMATCH: master {}, m/v {}, copy {}", ok_w, ok_mv, ok_c));
  }

  const ops::AdamWParams p = fused::adamw_test_params(7);
  Tensor w = gpu_view(ctx, w_c, 0);
  Tensor h1 = gpu_poisoned_view(ctx, len, DType::kBF16, offset),
         r1 = gpu_poisoned_view(ctx, len, DType::kI16, offset);
  ops::cuda::master_split(w, h1, &r1, ctx.stream);
  Tensor h2 = gpu_poisoned_view(ctx, len, DType::kBF16, offset),
         r2 = gpu_poisoned_view(ctx, len, DType::kI16, offset);
  h2.copy_from(h1, ctx.stream);
  r2.copy_from(r1, ctx.stream);
  Tensor m1 = gpu_view(ctx, m_c, offset), v1 = gpu_view(ctx, v_c, offset);
  Tensor m2 = gpu_view(ctx, m_c, offset), v2 = gpu_view(ctx, v_c, offset);
  ops::cuda::adamw_step_split(h1, r1, grad, m1, v1, p, ctx.stream);
  ops::cuda::adamw_step_split_sparse(h2, r2, g, first, m2, v2, p, ctx.stream);
  stream_sync(ctx.stream);
  const bool ok_h = bitwise_equal(h1, h2) && bitwise_equal(r1, r2);
  const bool ok_mv = bitwise_equal(m1, m2) && bitwise_equal(v1, v2);
  check_true(ctx, kFamily, "adamw_step_split_sparse " + sz, ok_h && ok_mv,
             ok_h && ok_mv ? "bitwise = adamw_step_split with the densified gradient"
                           : fmt::format("MISMATCH: hi/rem {}, m/v {}", ok_h, ok_mv));
}

// (iv) The updated lookups with the gradient read through the slot map.
void updated_case(Context& ctx, int64_t n, int64_t v, int64_t d, int64_t n_grad_tokens) {
  const std::string sz = fmt::format("N={} V={} D={}", n, v, d);
  Tensor dense;
  RowSparseGrad g = filled_grad(ctx, n_grad_tokens, v, d, dense);
  Tensor tokens = make_tokens(ctx, n, v, Dist::kUniform, 0).to(ctx.stream);
  Tensor master = fused::gpu_randn(ctx, {v, d}, DType::kF32);
  Tensor m = fused::gpu_randn(ctx, {v, d}, DType::kF32, 0.01);
  Tensor vv_c = ctx.randn_cpu({v, d}, DType::kF32, 1e-4);
  for (float& x : std::span(vv_c.data<float>(), static_cast<size_t>(v * d))) x = std::fabs(x);
  Tensor vv = vv_c.to(ctx.stream);
  const ops::AdamWParams p = fused::adamw_test_params(3, 0.7f);
  Tensor out = ctx.poisoned({n, d}, DType::kBF16), ref = ctx.poisoned({n, d}, DType::kBF16);
  ops::cuda::embedding_forward_updated_sparse(tokens, master, g, m, vv, p, out, ctx.stream);
  ops::cuda::embedding_forward_updated(tokens, master, dense, m, vv, p, ref, ctx.stream);
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "embedding_fwd_updated_sparse " + sz, bitwise_equal(out, ref),
             "bitwise = embedding_forward_updated with the densified gradient");
  Tensor hi = ctx.poisoned({v, d}, DType::kBF16), rem = ctx.poisoned({v, d}, DType::kI16);
  ops::cuda::master_split(master, hi, &rem, ctx.stream);
  Tensor out2 = ctx.poisoned({n, d}, DType::kBF16), ref2 = ctx.poisoned({n, d}, DType::kBF16);
  ops::cuda::embedding_forward_updated_split_sparse(tokens, hi, rem, g, m, vv, p, out2, ctx.stream);
  ops::cuda::embedding_forward_updated_split(tokens, hi, rem, dense, m, vv, p, ref2, ctx.stream);
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "embedding_fwd_updated_split_sparse " + sz, bitwise_equal(out2, ref2),
             "bitwise = embedding_forward_updated_split with the densified gradient");
}

// (v) More distinct rows than slots: the first `cap` new rows in ascending order get slots (their rows still
// bitwise the dense ones), the others none, and the next call (through the dispatcher) throws naming the
// capacity, once. An exact fit is no error.
void overflow_case(Context& ctx) {
  const int64_t v = 1000, d = 33, n = 200, cap = 10;
  Tensor tokens = make_tokens(ctx, n, v, Dist::kUniform, 0);
  Tensor tokens_g = tokens.to(ctx.stream);
  Tensor dout = fused::gpu_randn(ctx, {n, d}, DType::kBF16);
  std::set<int32_t> distinct(tokens.data<int32_t>(), tokens.data<int32_t>() + n);
  const std::vector<int32_t> sorted(distinct.begin(), distinct.end());

  // Exact fit first: no error on the next call.
  RowSparseGrad fit = ops::row_sparse_grad(v, d, static_cast<int64_t>(sorted.size()), ctx.stream);
  ops::embedding_backward_sparse(tokens_g, dout, fit, ctx.stream);
  stream_sync(ctx.stream);
  bool fit_clean = true;
  std::string fit_msg;
  try {
    ops::row_sparse_clear(fit, ctx.stream);
    stream_sync(ctx.stream);
  } catch (const std::exception& e) {
    fit_clean = false;
    fit_msg = e.what();
  }
  check_true(ctx, kFamily, fmt::format("capacity exactly the {} distinct rows: no error", sorted.size()),
             fit_clean, fit_clean ? "" : "MISMATCH: threw: " + fit_msg);

  RowSparseGrad g = ops::row_sparse_grad(v, d, cap, ctx.stream);
  Tensor dense = Tensor::zeros({v, d}, DType::kF32, ctx.stream);
  ops::embedding_backward_sparse(tokens_g, dout, g, ctx.stream);
  ops::cuda::embedding_backward(tokens_g, dout, dense, ctx.stream);
  stream_sync(ctx.stream);
  // Read the state without an op of the family (the flag is still pending).
  HostGrad h;
  h.slot_of = g.slot_of.to_vector<int32_t>();
  h.row_of = g.row_of.to_vector<int32_t>();
  h.count = g.count.to_vector<int32_t>()[0];
  h.rows = fused::cpu_copy_f32(ctx, g.rows);
  std::string diff;
  if (h.count != cap) diff = fmt::format("count {} after overflow, want the capacity {}", h.count, cap);
  for (int64_t k = 0; diff.empty() && k < cap; ++k)
    if (h.row_of[k] != sorted[k] || h.slot_of[sorted[k]] != k)
      diff = fmt::format("slot {} holds row {}, want row {} (whose slot_of is {})", k, h.row_of[k], sorted[k],
                         h.slot_of[sorted[k]]);
  int64_t slotted = 0;
  for (int32_t s : h.slot_of) {
    slotted += s >= 0;
    if (diff.empty() && (s < -1 || s >= cap)) diff = fmt::format("slot_of holds {} after overflow", s);
  }
  if (diff.empty() && slotted != cap) diff = fmt::format("{} rows have slots, want {}", slotted, cap);
  if (diff.empty()) {
    // The slotted rows are still bitwise the dense rows (only the rows without a slot were dropped).
    const Tensor dh = dense.to(Stream::cpu());
    for (int64_t k = 0; diff.empty() && k < cap; ++k)
      if (std::memcmp(h.rows.data<float>() + k * d, dh.data<float>() + h.row_of[k] * d, d * sizeof(float)))
        diff = fmt::format("slot {} (row {}) differs from the dense row", k, h.row_of[k]);
  }
  check_empty(ctx, fmt::format("overflow: {} distinct rows, capacity {}: slots", sorted.size(), cap), diff,
              "the first C new rows in ascending order get slots, bitwise the dense rows");

  bool threw = false, named = false;
  std::string msg;
  try {
    ops::row_sparse_clear(g, ctx.stream);
  } catch (const Error& e) {
    threw = true;
    msg = e.what();
    named = msg.find(fmt::format("capacity of {}", cap)) != std::string::npos &&
            msg.find(fmt::format("needed {} slots", sorted.size())) != std::string::npos;
  }
  bool once = true;
  try {
    ops::row_sparse_clear(g, ctx.stream);
    stream_sync(ctx.stream);
  } catch (const std::exception&) {
    once = false;
  }
  check_true(ctx, kFamily, "overflow reported by the next call (primus::Error, once)", threw && named && once,
             threw && named && once
                 ? ""
                 : fmt::format("MISMATCH: threw {}, names capacity {}, reported once {}: {}", threw, named,
                               once, msg));
}

// (vi) Llama-3-8B's table: the backward and the whole table's adamw_step_split, sparse vs dense.
void timing_case(Context& ctx) {
  const int64_t v = 128256, d = 4096, n = 8192;
  if (ctx.quick) {
    ctx.skip(kFamily, "timing V=128256 D=4096 N=8192", "--quick");
    return;
  }
  const std::string sz = fmt::format("V={} D={} N={}", v, d, n);
  Tensor tokens = make_tokens(ctx, n, v, Dist::kSkewed, 0);
  const std::set<int32_t> unique(tokens.data<int32_t>(), tokens.data<int32_t>() + n);
  Tensor tokens_g = tokens.to(ctx.stream);
  Tensor dout = fused::gpu_randn(ctx, {n, d}, DType::kBF16);
  RowSparseGrad g = ops::cuda::row_sparse_grad(v, d, n, ctx.stream);
  {
    Tensor dtable = Tensor::zeros({v, d}, DType::kF32, ctx.stream);
    const double bytes = n * d * 2.0 + static_cast<double>(unique.size()) * d * 4 * 2 + n * 8.0;
    const double dense_ms =
        ctx.time_ms([&] { ops::cuda::embedding_backward(tokens_g, dout, dtable, ctx.stream); }, 2, 10);
    ctx.timing(kFamily, "embedding_backward dense " + sz, dense_ms, bytes / (dense_ms * 1e-3) / 1e9, "GB/s",
               fmt::format("{} unique ids", unique.size()));
    const double sparse_ms =
        ctx.time_ms([&] { ops::cuda::embedding_backward_sparse(tokens_g, dout, g, ctx.stream); }, 2, 10);
    ctx.timing(kFamily, "embedding_backward_sparse " + sz, sparse_ms, bytes / (sparse_ms * 1e-3) / 1e9,
               "GB/s",
               fmt::format("{:.2f}x the dense time; gradient {:.0f} MB vs {:.0f} MB dense",
                           sparse_ms / dense_ms, n * d * 4 / 1e6, v * d * 4 / 1e6));
  }
  const int64_t total = v * d;
  constexpr int64_t kPool = int64_t{1} << 24;
  Tensor hi = Tensor::empty({total}, DType::kBF16, ctx.stream),
         rem = Tensor::empty({total}, DType::kI16, ctx.stream);
  {
    Tensor w = fused::gpu_randn(ctx, {total}, DType::kF32, 1.0, kPool);
    ops::cuda::master_split(w, hi, &rem, ctx.stream);
    stream_sync(ctx.stream);
  }
  Tensor m = fused::gpu_randn(ctx, {total}, DType::kF32, 0.01, kPool);
  Tensor vv = Tensor::zeros({total}, DType::kF32, ctx.stream);  // v >= 0: zeros are a valid second moment
  Tensor grad = Tensor::empty({v, d}, DType::kF32, ctx.stream);
  ops::cuda::row_sparse_to_dense(g, grad, ctx.stream);
  const ops::AdamWParams p = fused::adamw_test_params(10);
  const double dense_ms =
      ctx.time_ms([&] { ops::cuda::adamw_step_split(hi, rem, grad, m, vv, p, ctx.stream); }, 2, 5);
  ctx.timing(kFamily, "adamw_step_split dense " + sz, dense_ms, total * 28.0 / (dense_ms * 1e-3) / 1e9,
             "GB/s");
  const double sparse_ms =
      ctx.time_ms([&] { ops::cuda::adamw_step_split_sparse(hi, rem, g, 0, m, vv, p, ctx.stream); }, 2, 5);
  const double sparse_bytes = total * 24.0 + static_cast<double>(unique.size()) * d * 4;
  ctx.timing(kFamily, "adamw_step_split_sparse " + sz, sparse_ms, sparse_bytes / (sparse_ms * 1e-3) / 1e9,
             "GB/s", fmt::format("{:.2f}x the dense time", sparse_ms / dense_ms));
}

}  // namespace

PRIMUS_GPU_TEST(row_sparse_grad) {
  // (i), (ii): odd D (scalar scatter) and D 4096 (vector scatter); one token, few, many repeats, one id over
  // every chunk; V from 127 to 50304.
  backward_case(ctx, 1, 127, 31, Dist::kUniform);
  backward_case(ctx, 33, 1000, 33, Dist::kUniform);
  backward_case(ctx, 1024, 127, 127, Dist::kSkewed);
  backward_case(ctx, 1024, 50304, 33, Dist::kUniform);
  backward_case(ctx, 8192, 1000, 31, Dist::kOne);
  backward_case(ctx, 8192, 50304, 127, Dist::kUniform);
  backward_case(ctx, 8192, 50304, 4096, Dist::kSkewed);
  // Vocabulary-sharded: a middle shard, the first shard under skewed ids, a shard that the one id misses.
  backward_case(ctx, 1024, 334, 33, Dist::kUniform, 333, 1000);
  backward_case(ctx, 8192, 12576, 4096, Dist::kSkewed, 0, 50304);
  backward_case(ctx, 8192, 12576, 127, Dist::kUniform, 25152, 50304);
  backward_case(ctx, 33, 100, 31, Dist::kOne, 900, 1000);
  // (iii): N = 4 with the row-crossing gradient read (D 33), N = 4 with one vector load per row (D 4096,
  // first a multiple of 4), N = 1 (unaligned views), and the padding past V x D.
  adamw_case(ctx, 1000, 33, 100, 3 * 33 + 16, 37, 0);
  adamw_case(ctx, 127, 4096, 33, 5 * 4096 + 2048, 4096 + 3, 0);
  adamw_case(ctx, 1000, 127, 1024, 7 * 127 + 50, 1, 1);
  adamw_case(ctx, 1000, 31, 33, 15, 64, 3);
  // (iv)
  updated_case(ctx, 127, 1000, 33, 100);
  updated_case(ctx, 1024, 127, 4096, 33);
  updated_case(ctx, 33, 50304, 127, 1024);
  // (v)
  overflow_case(ctx);
  // (vii)
  reserve_case(ctx, 33, 127, 31, Dist::kUniform);
  reserve_case(ctx, 1024, 50304, 4096, Dist::kSkewed);
  reserve_case(ctx, 8192, 50304, 127, Dist::kUniform);
  // (vi)
  timing_case(ctx);
}

}  // namespace primus::gputest
