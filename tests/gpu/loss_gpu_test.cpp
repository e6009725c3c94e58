// Softmax cross-entropy on the GPU against the CPU reference: separate, in-place and absent dlogits, ignored
// rows, every kernel path (cluster with 1..8 CTAs per row, the two-pass fallback for odd or very long rows).
#include <fmt/format.h>

#include <random>

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
}

}  // namespace primus::gputest
