// Position-keyed dropout (LoRA's input dropout) on the GPU against the CPU reference: the same mask (the same
// Philox test per element), x * keep / (1 - p) rounded once to bf16; whole and column-split views (a tensor-
// parallel rank's columns), in place, odd sizes and a model-size case with its bandwidth.
#include <fmt/format.h>

#include "gpu/fused_test_util.h"
#include "ops/cpu/dropout_cpu.h"
#include "ops/cuda/dropout_cuda.h"

namespace primus::gputest {
namespace {

using fused::gpu_randn;

void dropout_case(Context& ctx, int64_t rows, int64_t cols, int64_t col_begin, int64_t whole_cols, float p,
                  bool in_place, bool timed, const ops::DropoutRows& place = {}) {
  const std::string sz = fmt::format(
      "{}x{} cols {}+ of {} p={}{}{}", rows, cols, col_begin, whole_cols, p, in_place ? " in place" : "",
      place.chunk ? fmt::format(" cp chunks {},{} of C {} T {}", place.chunks[0], place.chunks[1],
                                place.chunk, place.seq)
                  : "");
  const uint64_t key = ctx.rng();
  Tensor x = gpu_randn(ctx, {rows, cols}, DType::kBF16);
  Tensor xf = fused::host_f32(ctx, x);
  Tensor out = in_place ? x : ctx.poisoned({rows, cols}, DType::kBF16);
  Tensor ref = Tensor::empty({rows, cols}, DType::kF32);
  ops::cpu::dropout_apply(xf, p, key, col_begin, whole_cols, ref, Stream::cpu(), place);
  ops::cuda::dropout_apply(x, p, key, col_begin, whole_cols, out, ctx.stream, place);
  ctx.check("dropout", sz, out, ref, kTolBF16);
  // The mask itself: the zeros must be exactly where the reference has them (a value check alone would
  // pass a mask that differs in a few elements).
  const std::vector<float> got = ctx.to_cpu_f32(out).to_vector<float>(), want = ref.to_vector<float>(),
                           in = xf.to_vector<float>();
  int64_t differ = 0, dropped = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (in[i] == 0.0f) continue;
    differ += (got[i] == 0.0f) != (want[i] == 0.0f);
    dropped += want[i] == 0.0f;
  }
  ctx.record("dropout", "mask " + sz, differ == 0 ? 0.0 : 1e30, 0.0,
             fmt::format("{} of {} dropped", dropped, got.size()));
  if (timed) {
    const double ms =
        ctx.time_ms([&] { ops::cuda::dropout_apply(x, p, key, col_begin, whole_cols, out, ctx.stream); });
    ctx.timing("dropout", sz, ms, rows * cols * 4.0 / (ms * 1e6), "GB/s");
  }
}

}  // namespace

PRIMUS_GPU_TEST(dropout) {
  dropout_case(ctx, 1, 1, 0, 1, 0.5f, false, false);
  dropout_case(ctx, 31, 33, 0, 33, 0.1f, false, false);
  dropout_case(ctx, 127, 33, 33, 99, 0.3f, false, false);  // the middle third of the columns (tp rank 1 of 3)
  dropout_case(ctx, 33, 127, 0, 127, 0.05f, true, false);
  // Widths divisible by 4: the four-per-thread kernel, whole, split and in place.
  dropout_case(ctx, 31, 132, 0, 132, 0.2f, false, false);
  dropout_case(ctx, 127, 96, 96, 288, 0.2f, false, false);
  dropout_case(ctx, 33, 8, 4, 12, 0.5f, true, false);
  dropout_case(ctx, 16384, 2048, 0, 2048, 0.05f, false, true);  // llama3.2-1B's hidden, 16k tokens
  // A context-parallel rank's chunk-major rows (rank 1 of CP 3: chunks 1 and 4 of T 6 C), both kernels.
  ops::DropoutRows cp;
  cp.chunk = 31;
  cp.batch = 3;
  cp.seq = 6 * 31;
  cp.chunks[0] = 1;
  cp.chunks[1] = 4;
  dropout_case(ctx, 2 * 3 * 31, 33, 0, 33, 0.2f, false, false, cp);
  dropout_case(ctx, 2 * 3 * 31, 96, 96, 288, 0.2f, false, false, cp);
}

}  // namespace primus::gputest
