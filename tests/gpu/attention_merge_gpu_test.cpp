// attention_merge (context parallelism's ring attention) on the GPU against the CPU reference: partial
// results (bf16 parts, f32 in two cases) folded into an f32 running result that starts at (0, -inf), the CPU
// doing the same folds on the same bf16-rounded values. Rows where a part saw no key (lse -inf, NaN values
// that must not leak) and rows no part reaches (acc 0, lse -inf); odd T, H and D (D not a multiple of the
// vector width takes the scalar kernel, D past 256 vector steps loops), an unaligned acc; refusals; and one
// timed merge at Llama-3-8B's attention shape (B 1, T 8192, H 32, D 128) reporting GB/s.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gpu/fused_test_util.h"
#include "gpu/gpu_test.h"
#include "ops/cpu/attention_cpu.h"
#include "ops/cuda/attention_cuda.h"

namespace primus::gputest {
namespace {

constexpr const char* kFam = "attn_merge";
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct MergeCase {
  int64_t b, t, h, d;
  int parts;
  DType part_dt = DType::kBF16;
  bool unaligned_acc = false;  // acc starts one float past a 16-byte boundary
};

std::string case_name(const MergeCase& c) {
  return fmt::format("B{} T{} H{} D{} x{} {}{}", c.b, c.t, c.h, c.d, c.parts, dtype_name(c.part_dt),
                     c.unaligned_acc ? " unaligned" : "");
}

Tensor host_filled(const Shape& shape, float v) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = v;
  return t;
}

// lse against the reference: -inf in the same entries, relative error over the others (a -inf difference
// would be NaN in Context::check).
void check_lse(Context& ctx, const std::string& name, const Tensor& gpu, const Tensor& ref) {
  stream_sync(ctx.stream);
  const std::vector<double> g = gpu.to(Stream::cpu()).to_vector<double>(), r = ref.to_vector<double>();
  double num = 0, den = 0;
  int64_t mismatched = 0, neg_inf = 0;
  bool finite = g.size() == r.size();
  for (size_t i = 0; i < g.size() && finite; ++i) {
    if (std::isinf(r[i]) && r[i] < 0) {
      ++neg_inf;
      mismatched += !(std::isinf(g[i]) && g[i] < 0);
      continue;
    }
    finite = std::isfinite(g[i]);
    num += (g[i] - r[i]) * (g[i] - r[i]);
    den += r[i] * r[i];
  }
  const double err = !finite || mismatched > 0 ? INFINITY : (den > 0 ? std::sqrt(num / den) : std::sqrt(num));
  ctx.record(kFam, name, err, kTolF32,
             mismatched > 0 ? fmt::format("{} of {} -inf entries differ", mismatched, neg_inf)
                            : fmt::format("{} -inf entries", neg_inf));
}

// Part k's lse per entry q = (b * H + h) * T + t: N(0, 3^2), or -inf where the row saw no key of this part:
// every part at q % 7 == 3 (the row stays 0 / -inf), part (q / 5) % parts at q % 5 == 1, part 0 at q % 3 == 0
// (so that the running side is -inf in the first folds and one side in later ones).
Tensor part_lse_host(Context& ctx, const MergeCase& c, int k) {
  Tensor l = ctx.randn_cpu({c.b, c.h, c.t}, DType::kF32, 3.0);
  float* p = l.data<float>();
  for (int64_t q = 0; q < l.numel(); ++q) {
    const bool none = q % 7 == 3 || (q % 5 == 1 && (q / 5) % c.parts == k) || (k == 0 && q % 3 == 0);
    if (none) p[q] = kNegInf;
  }
  return l;
}

// NaN in the values of the rows whose lse is -inf (a fully masked row of a real kernel may be 0/0).
void poison_empty_rows(Tensor& part_f32, const Tensor& lse, const MergeCase& c) {
  float* v = part_f32.data<float>();
  const float* l = lse.data<float>();
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t h = 0; h < c.h; ++h)
      for (int64_t t = 0; t < c.t; ++t)
        if (std::isinf(l[(b * c.h + h) * c.t + t]))
          for (int64_t e = 0; e < c.d; ++e)
            v[((b * c.t + t) * c.h + h) * c.d + e] = std::numeric_limits<float>::quiet_NaN();
}

void merge_case(Context& ctx, const MergeCase& c) {
  const Shape os{c.b, c.t, c.h * c.d}, ls{c.b, c.h, c.t};
  const std::string name = case_name(c);
  Tensor acc_ref = host_filled(os, 0.f), lse_ref = host_filled(ls, kNegInf);
  Tensor acc_buf;  // owns the unaligned acc's storage
  Tensor acc;
  if (c.unaligned_acc) {
    acc_buf = Tensor::empty({shape_numel(os) + 1}, DType::kF32, ctx.stream);
    acc = acc_buf.slice(1, shape_numel(os) + 1).view(os);
    acc.copy_from(acc_ref, ctx.stream);
  } else {
    acc = ctx.to_gpu(acc_ref, DType::kF32);
  }
  Tensor acc_lse = ctx.to_gpu(lse_ref, DType::kF32);
  for (int k = 0; k < c.parts; ++k) {
    Tensor pl = part_lse_host(ctx, c, k);
    Tensor pv = ctx.randn_cpu(os, DType::kF32);
    poison_empty_rows(pv, pl, c);
    Tensor part_host = c.part_dt == DType::kF32 ? pv : cpu_cast(pv, c.part_dt);  // rounded once
    Tensor part_ref = ctx.to_cpu_f32(part_host);                                 // the values the GPU sees
    Tensor part = ctx.to_gpu(part_host, c.part_dt), part_lse = ctx.to_gpu(pl, DType::kF32);
    ops::cuda::attention_merge(acc, acc_lse, part, part_lse, ctx.stream);
    ops::cpu::attention_merge(acc_ref, lse_ref, part_ref, pl, Stream::cpu());
  }
  ctx.check(kFam, name + " acc", acc, acc_ref, kTolF32);
  check_lse(ctx, name + " lse", acc_lse, lse_ref);
}

template <typename Fn>
void expect_refusal(Context& ctx, const std::string& name, const std::string& want, Fn&& fn) {
  try {
    fn();
    ctx.record(kFam, name, INFINITY, 0, "accepted");
  } catch (const Error& e) {
    const bool ok = std::string(e.what()).find(want) != std::string::npos;
    ctx.record(kFam, name, ok ? 0.0 : INFINITY, 0, ok ? "" : std::string("message: ") + e.what());
  }
}

void refusal_cases(Context& ctx) {
  const Shape os{2, 3, 32}, ls{2, 4, 3};
  Tensor acc = ctx.to_gpu(host_filled(os, 0.f), DType::kF32),
         lse = ctx.to_gpu(host_filled(ls, kNegInf), DType::kF32);
  Tensor part = ctx.to_gpu(ctx.randn_cpu(os, DType::kF32), DType::kBF16);
  Tensor part_lse = ctx.to_gpu(ctx.randn_cpu(ls, DType::kF32), DType::kF32);
  Tensor acc_bf = ctx.to_gpu(host_filled(os, 0.f), DType::kBF16);
  expect_refusal(ctx, "refuses a bf16 acc", "acc must be f32",
                 [&] { ops::cuda::attention_merge(acc_bf, lse, part, part_lse, ctx.stream); });
  Tensor part_lse_t = ctx.to_gpu(ctx.randn_cpu({2, 3, 4}, DType::kF32), DType::kF32);
  expect_refusal(ctx, "refuses a [B, T, H] part_lse", "part_lse must be [2, 4, 3]",
                 [&] { ops::cuda::attention_merge(acc, lse, part, part_lse_t, ctx.stream); });
  Tensor part_short = ctx.to_gpu(ctx.randn_cpu({2, 3, 24}, DType::kF32), DType::kBF16);
  expect_refusal(ctx, "refuses a part of another width", "part must be [2, 3, 32]",
                 [&] { ops::cuda::attention_merge(acc, lse, part_short, part_lse, ctx.stream); });
}

// Llama-3-8B's attention output per micro-batch: the first part folded into (0, -inf), the second checked
// against the CPU, then the second fold timed (acc read and written in f32, the bf16 part read, three lse).
void timed_case(Context& ctx) {
  const int64_t b = 1, t = 8192, h = 32, d = 128;
  const Shape os{b, t, h * d}, ls{b, h, t};
  const std::string name = fmt::format("B{} T{} H{} D{} bf16", b, t, h, d);
  Tensor acc = ctx.to_gpu(host_filled(os, 0.f), DType::kF32),
         acc_lse = ctx.to_gpu(host_filled(ls, kNegInf), DType::kF32);
  Tensor p0 = fused::gpu_randn(ctx, os, DType::kBF16), p1 = fused::gpu_randn(ctx, os, DType::kBF16, 2.0);
  Tensor l0 = ctx.to_gpu(ctx.randn_cpu(ls, DType::kF32, 3.0), DType::kF32);
  Tensor l1 = ctx.to_gpu(ctx.randn_cpu(ls, DType::kF32, 3.0), DType::kF32);
  ops::cuda::attention_merge(acc, acc_lse, p0, l0, ctx.stream);
  Tensor acc_ref = fused::host_f32(ctx, acc), lse_ref = fused::host_f32(ctx, acc_lse);
  ops::cuda::attention_merge(acc, acc_lse, p1, l1, ctx.stream);
  ops::cpu::attention_merge(acc_ref, lse_ref, fused::host_f32(ctx, p1), fused::host_f32(ctx, l1),
                            Stream::cpu());
  ctx.check(kFam, name + " acc", acc, acc_ref, kTolF32);
  check_lse(ctx, name + " lse", acc_lse, lse_ref);
  const double ms = ctx.time_ms([&] { ops::cuda::attention_merge(acc, acc_lse, p1, l1, ctx.stream); });
  const double bytes = static_cast<double>(b * t * h * d) * (4 + 4 + 2) + static_cast<double>(b * h * t) * 12;
  ctx.timing(kFam, name, ms, bytes / (ms * 1e-3) / 1e9, "GB/s", "acc f32 read + write, part bf16 read");
}

}  // namespace

PRIMUS_GPU_TEST(attn_merge) {
  const MergeCase cases[] = {{1, 1, 1, 8, 2},                         // one row
                             {2, 31, 3, 8, 3},                        // one 16-byte step per row
                             {1, 33, 4, 64, 4},                       //
                             {2, 127, 2, 128, 3},                     // the model's head dim
                             {1, 127, 4, 72, 2},                      // 9 steps per row: rows straddle warps
                             {1, 33, 3, 12, 3},                       // D % 8 != 0: scalar
                             {2, 31, 1, 7, 2},                        // odd D: scalar
                             {1, 5, 2, 4096, 2},                      // 512 steps per row: the block loops
                             {1, 3, 1, 1031, 3},                      // scalar, 1031 steps per row
                             {1, 127, 4, 64, 3, DType::kF32},         // f32 part, 4-wide
                             {1, 31, 2, 6, 2, DType::kF32},           // f32 part, scalar
                             {2, 33, 4, 64, 3, DType::kBF16, true}};  // unaligned acc: scalar
  for (const MergeCase& c : cases) merge_case(ctx, c);
  refusal_cases(ctx);
  timed_case(ctx);
}

}  // namespace primus::gputest
