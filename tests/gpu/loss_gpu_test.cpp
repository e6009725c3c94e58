// Softmax cross-entropy on the GPU against the CPU reference: separate, in-place and absent dlogits, ignored
// rows, every kernel path (cluster with 1..8 CTAs per row, the two-pass fallback for odd or very long rows).
// The vocabulary-parallel variant (stats, all-gather, finish) over simulated ranks of odd and 8-multiple
// widths, against its CPU reference and against softmax_cross_entropy of the whole row.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <random>
#include <vector>

#include "gpu/fused_test_util.h"
#include "ops/cpu/loss_cpu.h"
#include "ops/cuda/loss_cuda.h"

namespace primus::gputest {
namespace {

using fused::gpu_randn;

enum class Mode { kSeparate, kInPlace, kLossOnly };

const char* mode_name(Mode m) {
  return m == Mode::kSeparate ? "" : m == Mode::kInPlace ? " in place" : " loss only";
}

// Targets in [0, v), a fraction of them -100 (ignored, as PyTorch's ignore_index).
Tensor make_targets(Context& ctx, int64_t rows, int64_t v, double ignored) {
  Tensor t = ctx.randint_cpu({rows}, static_cast<int32_t>(v));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int32_t* p = t.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r)
    if (u(ctx.rng) < ignored) p[r] = -100;
  return t;
}

// Checks the first `check_rows` rows against the CPU (all of them when check_rows = rows).
void ce_case(Context& ctx, int64_t rows, int64_t v, double ignored, Mode mode, bool timed,
             int64_t check_rows = -1) {
  if (check_rows < 0) check_rows = rows;
  const float grad_scale = 1.0f / static_cast<float>(rows);
  const std::string sz = fmt::format("R={} V={}{}{}", rows, v, ignored > 0 ? " ignore" : "", mode_name(mode));
  Tensor targets = make_targets(ctx, rows, v, ignored);
  Tensor targets_g = targets.to(ctx.stream);
  Tensor logits = gpu_randn(ctx, {rows, v}, DType::kBF16, 2.0);
  Tensor logits_f =
      fused::host_f32(ctx, logits.slice(0, check_rows));  // before an in-place call overwrites them

  Tensor losses = ctx.poisoned({rows}, DType::kF32);
  Tensor dlogits;
  if (mode == Mode::kSeparate) dlogits = ctx.poisoned({rows, v}, DType::kBF16);
  if (mode == Mode::kInPlace) dlogits = logits;
  Tensor* dptr = mode == Mode::kLossOnly ? nullptr : &dlogits;
  ops::cuda::softmax_cross_entropy(logits, targets_g, grad_scale, losses, dptr, ctx.stream);

  Tensor t_ref = targets.slice(0, check_rows);
  Tensor losses_ref = Tensor::empty({check_rows}, DType::kF32);
  Tensor dlogits_ref = Tensor::empty({check_rows, v}, DType::kF32);
  ops::cpu::softmax_cross_entropy(logits_f, t_ref, grad_scale, losses_ref, dptr ? &dlogits_ref : nullptr,
                                  Stream::cpu());
  ctx.check("loss", "ce losses " + sz, losses.slice(0, check_rows), losses_ref, kTolF32,
            check_rows < rows ? fmt::format("first {} rows checked", check_rows) : "");
  if (dptr) {
    ctx.check("loss", "ce dlogits " + sz, dlogits.slice(0, check_rows), dlogits_ref, kTolBF16,
              check_rows < rows ? fmt::format("first {} rows checked", check_rows) : "");
  }
  if (timed) {
    const double ms = ctx.time_ms(
        [&] { ops::cuda::softmax_cross_entropy(logits, targets_g, grad_scale, losses, dptr, ctx.stream); });
    fused::set_rate(ctx, ms, rows * v * 2.0 * (dptr ? 2 : 1) + rows * 8.0);
  }
}

// Vocabulary-parallel cross-entropy over P simulated ranks: rank k holds columns [begin_k, begin_k +
// widths[k]) of one random [R, V] logits matrix as its own GPU tensor (vocab_begin != 0 for every rank but
// the first). Each rank's stats are checked against the CPU reference, copied into [P, R, 3] (the
// all-gather), and each rank's finish is checked against the CPU finish of the CPU stats; the losses must be
// bitwise the same on every rank and equal softmax_cross_entropy of the whole rows.
void vp_case(Context& ctx, int64_t rows, const std::vector<int64_t>& widths, double ignored, Mode mode) {
  const auto p = static_cast<int64_t>(widths.size());
  std::vector<int64_t> begin{0};
  for (int64_t w : widths) begin.push_back(begin.back() + w);
  const int64_t vocab = begin.back();
  const float grad_scale = 1.0f / static_cast<float>(rows);
  const std::string sz = fmt::format("R={} V_local={}{}{}", rows, fmt::join(widths, "+"),
                                     ignored > 0 ? " ignore" : "", mode_name(mode));
  Tensor targets = make_targets(ctx, rows, vocab, ignored);
  Tensor targets_g = targets.to(ctx.stream);
  Tensor full = ctx.randn_cpu({rows, vocab}, DType::kBF16, 2.0);

  std::vector<Tensor> local(static_cast<size_t>(p)), local_f(static_cast<size_t>(p));
  Tensor all_stats = ctx.poisoned({p, rows, 3}, DType::kF32);
  Tensor all_ref = Tensor::empty({p, rows, 3}, DType::kF32);
  for (int64_t k = 0; k < p; ++k) {
    local_f[k] = fused::columns_f32(ctx, full, begin[k], begin[k + 1]);
    local[k] = ctx.to_gpu(local_f[k], DType::kBF16);  // exact: the values are bf16 already
    Tensor stats = ctx.poisoned({rows, 3}, DType::kF32);
    ops::cuda::vocab_parallel_ce_stats(local[k], targets_g, begin[k], vocab, stats, ctx.stream);
    Tensor ref = all_ref.slice(k, k + 1).view({rows, 3});
    ops::cpu::vocab_parallel_ce_stats(local_f[k], targets, begin[k], vocab, ref, Stream::cpu());
    ctx.check("loss", fmt::format("vp_ce stats rank {} {}", k, sz), stats, ref, kTolF32);
    Tensor slot = all_stats.slice(k, k + 1).view({rows, 3});
    slot.copy_from(stats, ctx.stream);  // the all-gather
  }

  Tensor losses0;
  bool same = true;
  for (int64_t k = 0; k < p; ++k) {
    const int64_t w = widths[k];
    Tensor losses = ctx.poisoned({rows}, DType::kF32);
    Tensor dlogits;
    if (mode == Mode::kSeparate) dlogits = ctx.poisoned({rows, w}, DType::kBF16);
    if (mode == Mode::kInPlace) dlogits = local[k];
    Tensor* dptr = mode == Mode::kLossOnly ? nullptr : &dlogits;
    ops::cuda::vocab_parallel_ce_finish(local[k], targets_g, begin[k], all_stats, grad_scale, losses, dptr,
                                        ctx.stream);
    Tensor losses_ref = Tensor::empty({rows}, DType::kF32),
           dlogits_ref = Tensor::empty({rows, w}, DType::kF32);
    ops::cpu::vocab_parallel_ce_finish(local_f[k], targets, begin[k], all_ref, grad_scale, losses_ref,
                                       dptr ? &dlogits_ref : nullptr, Stream::cpu());
    ctx.check("loss", fmt::format("vp_ce losses rank {} {}", k, sz), losses, losses_ref, kTolF32);
    if (dptr)
      ctx.check("loss", fmt::format("vp_ce dlogits rank {} {}", k, sz), dlogits, dlogits_ref, kTolBF16);
    stream_sync(ctx.stream);
    if (k == 0) {
      losses0 = losses;
    } else {
      same = same && fused::bitwise_equal(losses, losses0);
    }
  }
  if (p > 1) fused::check_true(ctx, "loss", "vp_ce losses bitwise equal on every rank " + sz, same);
  Tensor full_f = ctx.to_cpu_f32(full);
  Tensor ref_l = Tensor::empty({rows}, DType::kF32);
  ops::cpu::softmax_cross_entropy(full_f, targets, grad_scale, ref_l, nullptr, Stream::cpu());
  ctx.check("loss", "vp_ce losses vs softmax_cross_entropy " + sz, losses0, ref_l, kTolF32);
}

// A target outside the vocabulary cannot throw on the GPU: its row's loss comes out NaN, the others not.
void vp_bad_target_case(Context& ctx) {
  const int64_t rows = 3, v = 8;
  Tensor logits = gpu_randn(ctx, {rows, v}, DType::kBF16);
  Tensor targets = Tensor::from_vector(std::vector<int32_t>{9, 16, -100}, {rows}).to(ctx.stream);
  Tensor stats = ctx.poisoned({rows, 3}, DType::kF32), losses = ctx.poisoned({rows}, DType::kF32);
  ops::cuda::vocab_parallel_ce_stats(logits, targets, 8, 16, stats, ctx.stream);  // columns [8, 16) of 16
  ops::cuda::vocab_parallel_ce_finish(logits, targets, 8, stats.view({1, rows, 3}), 1.0f, losses, nullptr,
                                      ctx.stream);
  const std::vector<float> l = fused::host_f32(ctx, losses).to_vector<float>();
  fused::check_true(ctx, "loss", "vp_ce target >= vocab_total gives a NaN loss",
                    std::isfinite(l[0]) && std::isnan(l[1]) && l[2] == 0.f);
}

// One rank of a model-size split (Llama-3's 128256 over `ranks`): the first `check_rows` rows checked against
// the CPU, both steps timed (the finish from `ranks` copies of this rank's stats, as the all-gather's shape).
void vp_timed_case(Context& ctx, int64_t rows, int64_t v, int64_t ranks, int64_t check_rows) {
  const std::string sz = fmt::format("R={} V_local={} P={}", rows, v, ranks);
  const int64_t vocab_begin = v * (ranks / 2), vocab = v * ranks;
  Tensor targets = make_targets(ctx, rows, vocab, 0.05);
  // Half the rows' targets in this rank's columns, so that the one-hot term shows in the checked rows.
  for (int64_t r = 0; r < rows; r += 2)
    if (targets.data<int32_t>()[r] >= 0)
      targets.data<int32_t>()[r] = static_cast<int32_t>(vocab_begin + r % v);
  Tensor targets_g = targets.to(ctx.stream);
  Tensor logits = gpu_randn(ctx, {rows, v}, DType::kBF16, 2.0);
  Tensor logits_f = fused::host_f32(ctx, logits.slice(0, check_rows));
  Tensor t_ref = targets.slice(0, check_rows);

  Tensor stats = ctx.poisoned({rows, 3}, DType::kF32);
  ops::cuda::vocab_parallel_ce_stats(logits, targets_g, vocab_begin, vocab, stats, ctx.stream);
  Tensor stats_ref = Tensor::empty({check_rows, 3}, DType::kF32);
  ops::cpu::vocab_parallel_ce_stats(logits_f, t_ref, vocab_begin, vocab, stats_ref, Stream::cpu());
  ctx.check("loss", "vp_ce stats " + sz, stats.slice(0, check_rows), stats_ref, kTolF32,
            fmt::format("first {} rows checked", check_rows));
  const double ms_stats = ctx.time_ms(
      [&] { ops::cuda::vocab_parallel_ce_stats(logits, targets_g, vocab_begin, vocab, stats, ctx.stream); });
  ctx.timing("loss", "vp_ce stats " + sz, ms_stats, (rows * v * 2.0 + rows * 16.0) / (ms_stats * 1e-3) / 1e9,
             "GB/s");

  Tensor all_stats = Tensor::empty({ranks, rows, 3}, DType::kF32, ctx.stream);
  for (int64_t k = 0; k < ranks; ++k) {
    Tensor slot = all_stats.slice(k, k + 1).view({rows, 3});
    slot.copy_from(stats, ctx.stream);
  }
  // The CPU finish sees the same statistics as the GPU: this rank's (GPU) stats, `ranks` times.
  const std::vector<float> st = fused::host_f32(ctx, stats.slice(0, check_rows)).to_vector<float>();
  std::vector<float> all_host;
  for (int64_t k = 0; k < ranks; ++k) all_host.insert(all_host.end(), st.begin(), st.end());
  Tensor all_ref = Tensor::from_vector(all_host, {ranks, check_rows, 3});
  Tensor losses = ctx.poisoned({rows}, DType::kF32), dlogits = ctx.poisoned({rows, v}, DType::kBF16);
  const float gs = 1.0f / static_cast<float>(rows);
  ops::cuda::vocab_parallel_ce_finish(logits, targets_g, vocab_begin, all_stats, gs, losses, &dlogits,
                                      ctx.stream);
  Tensor losses_ref = Tensor::empty({check_rows}, DType::kF32);
  Tensor dlogits_ref = Tensor::empty({check_rows, v}, DType::kF32);
  ops::cpu::vocab_parallel_ce_finish(logits_f, t_ref, vocab_begin, all_ref, gs, losses_ref, &dlogits_ref,
                                     Stream::cpu());
  const std::string note = fmt::format("first {} rows checked", check_rows);
  ctx.check("loss", "vp_ce losses " + sz, losses.slice(0, check_rows), losses_ref, kTolF32, note);
  ctx.check("loss", "vp_ce dlogits " + sz, dlogits.slice(0, check_rows), dlogits_ref, kTolBF16, note);
  const double ms_finish = ctx.time_ms([&] {
    ops::cuda::vocab_parallel_ce_finish(logits, targets_g, vocab_begin, all_stats, gs, losses, &dlogits,
                                        ctx.stream);
  });
  ctx.timing("loss", "vp_ce finish " + sz, ms_finish,
             (rows * v * 4.0 + rows * (ranks * 12.0 + 8.0)) / (ms_finish * 1e-3) / 1e9, "GB/s");
}

}  // namespace

PRIMUS_GPU_TEST(loss) {
  ce_case(ctx, 31, 1001, 0.0, Mode::kSeparate, false);  // odd V: scalar fallback
  ce_case(ctx, 33, 1000, 0.2, Mode::kSeparate, false);  // one CTA per row
  ce_case(ctx, 127, 33, 0.0, Mode::kInPlace, false);
  ce_case(ctx, 17, 50304, 0.0, Mode::kSeparate, false);    // GPT-2 vocab: 4 CTAs per row
  ce_case(ctx, 257, 128256, 0.1, Mode::kSeparate, false);  // Llama-3: 8 CTAs x 4 packs
  ce_case(ctx, 65, 128256, 0.1, Mode::kInPlace, false);
  ce_case(ctx, 64, 128256, 0.1, Mode::kLossOnly, false);
  ce_case(ctx, 129, 151936, 0.1, Mode::kInPlace, false);  // Qwen: 8 CTAs x 8 packs
  ce_case(ctx, 9, 300000, 0.0, Mode::kSeparate, false);   // longer than a cluster holds: vector fallback
  ce_case(ctx, 5, 128256, 1.0, Mode::kSeparate, false);   // every row ignored
  // Model size: 16384 tokens x 128256, in place (as the lm-head uses it); the first 256 rows are checked.
  ce_case(ctx, 16384, 128256, 0.05, Mode::kInPlace, true, 256);
  if (!ctx.quick) ce_case(ctx, 16384, 128256, 0.05, Mode::kLossOnly, true, 256);

  // Vocabulary-parallel: odd widths (scalar kernels), widths that are multiples of 8 (16-byte accesses; 16032
  // = 128256 / 8), a width of 1, unequal widths; separate, in-place and absent dlogits.
  vp_case(ctx, 127, {33, 127, 1000}, 0.2, Mode::kSeparate);
  vp_case(ctx, 31, {1000, 1001}, 0.0, Mode::kInPlace);
  vp_case(ctx, 33, {4096, 4096, 4096}, 0.1, Mode::kSeparate);
  vp_case(ctx, 65, {16032, 16032}, 0.1, Mode::kInPlace);
  vp_case(ctx, 65, {16032, 16032}, 0.1, Mode::kLossOnly);
  vp_case(ctx, 1, {8, 1, 4096}, 0.0, Mode::kSeparate);
  vp_case(ctx, 17, {4096}, 0.0, Mode::kSeparate);       // one rank: softmax_cross_entropy itself
  vp_case(ctx, 5, {4096, 4096}, 1.0, Mode::kSeparate);  // every row ignored
  vp_bad_target_case(ctx);
  vp_timed_case(ctx, 16384, 128256 / 8, 8, 256);
}

}  // namespace primus::gputest
