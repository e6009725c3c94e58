// Deterministic mode of the attention backward (ops::set_deterministic_attention, config
// `deterministic_mode`): repeated backward calls on the same inputs must give bitwise the same dqkv, the
// result must still match the reference, and the table shows what the mode costs against the default
// cuDNN backward (whose repeated calls may differ in the last bits: reported, not failed).
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu/attention_test_util.h"
#include "gpu/fused_test_util.h"
#include "gpu/gpu_test.h"
#include "ops/attention.h"
#include "ops/cuda/attention_backend.h"
#include "ops/cuda/attention_cuda.h"

namespace primus::gputest {
namespace {

using ops::AttentionShape;

constexpr const char* kFamily = "attn_determinism";

struct Case {
  int64_t b, t, h, kv, d;
  bool reference;  // also against the CPU reference (small shapes only)
};

// Runs the backward `runs` times; returns how many results differ bitwise from the first, and the first.
int differing_runs(Context& ctx, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                   const AttentionShape& s, int runs, Tensor* first) {
  const int64_t w = (s.heads + 2 * s.kv_heads) * s.head_dim;
  int differ = 0;
  for (int i = 0; i < runs; ++i) {
    Tensor dqkv = ctx.poisoned({s.batch, s.seq, w}, DType::kBF16);
    ops::cuda::attention_backward(dout, qkv, out, lse, s, dqkv, ctx.stream);
    stream_sync(ctx.stream);
    if (i == 0)
      *first = dqkv;
    else if (!fused::bitwise_equal(*first, dqkv))
      ++differ;
  }
  return differ;
}

void run_case(Context& ctx, const Case& c) {
  const AttentionShape s = attention_shape(c.b, c.t, c.h, c.kv, c.d, /*causal=*/true);
  const int64_t w = (c.h + 2 * c.kv) * c.d;
  const std::string tag = fmt::format("B{} T{} H{} KV{} D{}", c.b, c.t, c.h, c.kv, c.d);
  Tensor qkv_bf = ctx.randn_cpu({c.b, c.t, w}, DType::kBF16);
  Tensor dout_bf = ctx.randn_cpu({c.b, c.t, c.h * c.d}, DType::kBF16);
  Tensor qkv = ctx.to_gpu(qkv_bf, DType::kBF16), dout = ctx.to_gpu(dout_bf, DType::kBF16);
  Tensor out = ctx.poisoned({c.b, c.t, c.h * c.d}, DType::kBF16);
  Tensor lse = ctx.poisoned({c.b, c.h, c.t}, DType::kF32);
  ops::set_deterministic_attention(false);
  ops::cuda::attention_forward(qkv, s, out, lse, ctx.stream);

  constexpr int kRuns = 5;
  Tensor fast, det;
  const std::string fast_backend = ops::cuda::attention_backend_for(s, true);
  const int fast_differ = differing_runs(ctx, dout, qkv, out, lse, s, kRuns, &fast);
  // Information, not a requirement: the default backward is allowed to differ run to run.
  ctx.info(kFamily, fmt::format("default bwd ({}) {}", fast_backend, tag),
           fmt::format("{} of {} repeats differ bitwise from the first", fast_differ, kRuns - 1));

  ops::set_deterministic_attention(true);
  const std::string det_backend = ops::cuda::attention_backend_for(s, true);
  const int det_differ = differing_runs(ctx, dout, qkv, out, lse, s, kRuns, &det);
  ctx.record(kFamily, fmt::format("deterministic bwd ({}) repeats {}", det_backend, tag),
             det_differ == 0 ? 0 : INFINITY, 0,
             fmt::format("{} of {} repeats differ", det_differ, kRuns - 1));
  // Both compute the same gradient; they differ only in summation order.
  ctx.check(kFamily, "deterministic ~ default dqkv " + tag, det, ctx.to_cpu_f32(fast), kTolBF16);
  if (c.reference)
    ctx.check(kFamily, "deterministic dqkv vs reference " + tag, det,
              attention_reference(ctx, qkv_bf, dout_bf, s).dqkv, kTolBF16);

  // What the mode costs: both backwards timed on the same inputs.
  const double flop = 2.5 * 2.0 * c.b * c.h * static_cast<double>(c.t) * c.t * c.d;
  for (bool on : {false, true}) {
    ops::set_deterministic_attention(on);
    Tensor dqkv = ctx.poisoned({c.b, c.t, w}, DType::kBF16);
    const double ms =
        ctx.time_ms([&] { ops::cuda::attention_backward(dout, qkv, out, lse, s, dqkv, ctx.stream); }, 3, 10);
    ctx.timing(kFamily, fmt::format("perf bwd {} {}", on ? "deterministic" : "default", tag), ms,
               flop / (ms * 1e-3) / 1e12, "TFLOP/s", ops::cuda::attention_backend_for(s, true));
  }
  ops::set_deterministic_attention(false);
}

}  // namespace
}  // namespace primus::gputest

PRIMUS_GPU_TEST(attn_determinism) {
  using primus::gputest::Case;
  const std::vector<Case> cases = {
      {2, 256, 8, 2, 64, true},
      {1, 384, 4, 4, 128, true},     // cuDNN shapes small enough for the reference
      {8, 2048, 32, 8, 64, false},   // llama3.2-1B attention
      {1, 8192, 32, 8, 128, false},  // Llama-3-8B, T 8192
  };
  for (const Case& c : cases) {
    try {
      primus::gputest::run_case(ctx, c);
    } catch (const std::exception& e) {
      primus::ops::set_deterministic_attention(false);
      ctx.record(primus::gputest::kFamily, fmt::format("B{} T{} D{} (exception)", c.b, c.t, c.d), INFINITY, 0,
                 e.what());
    }
  }
}
