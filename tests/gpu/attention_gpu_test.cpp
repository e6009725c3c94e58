// Attention on the GPU (cuDNN fused graph and our flash kernels) against the CPU reference, plus timed cases
// at the two performance shapes of the issue (TFLOP/s with the causal-halved convention: fwd = 2 B H T^2 D,
// bwd = 2.5 fwd) and at DeepSeek's multi-latent attention shape (q/k heads 192, v heads 128).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/attention_bench.h"
#include "gpu/attention_test_util.h"
#include "gpu/fused_test_util.h"
#include "gpu/gpu_test.h"
#include "ops/cpu/attention_cpu.h"
#include "ops/cuda/attention_backend.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cudnn_backend.h"

namespace primus::gputest {
namespace {

using ops::AttentionShape;
using ops::cuda::AttentionBackend;

struct Case {
  int64_t b, t, h, kv, d;
  bool causal = true;
  int64_t dv = 0;  // value head dim (0: = d); MLA cases set it
  int64_t vd() const { return dv > 0 ? dv : d; }
  int64_t w() const { return (h + kv) * d + kv * vd(); }  // qkv row
  int64_t ow() const { return h * vd(); }                 // out row
};

std::string case_name(const Case& c) {
  return fmt::format("B{} T{} H{} KV{} D{}{}{}", c.b, c.t, c.h, c.kv, c.d,
                     c.dv > 0 ? fmt::format(" Dv{}", c.dv) : "", c.causal ? "" : " full");
}

AttentionShape make_shape(const Case& c) {
  return attention_shape(c.b, c.t, c.h, c.kv, c.d, c.causal, c.dv);
}

// Whether cuDNN is expected to take this shape (so that a refusal is a failure, not a skip): bf16, D 64 or
// 128, and for the backward a sequence that is a multiple of 128 (the 9.14 bprop's constraint).
// MLA shapes (Dv != D) are not expected: whether the 9.14 runtime's Hopper engines take d_qk 192 / d_v 128 is
// what their skip line (or its absence) reports.
bool cudnn_expected(const Case& c, bool backward) {
  return c.dv == 0 && (c.d == 64 || c.d == 128) && (!backward || c.t % 128 == 0);
}

void record_skip(Context& ctx, const std::string& name, const std::string& why) {
  ctx.skip("attention", name, why);
}

void record_fail(Context& ctx, const std::string& name, const std::string& why) {
  ctx.record("attention", name, INFINITY, kTolBF16, why);
}

// Can `backend` run `c` in this direction? For cuDNN a refusal of an expected shape is recorded as a failure.
bool backend_takes(Context& ctx, AttentionBackend be, const Case& c, bool backward,
                   const std::string& label) {
  if (be != AttentionBackend::kCudnn) return true;
  const AttentionShape s = make_shape(c);
  std::string why;
  const bool ok = ops::cuda::cudnn_attention_supported(s, backward, &why) &&
                  ops::cuda::cudnn_attention_prepare(s, backward, ctx.stream.device.index, &why);
  if (ok) return true;
  if (cudnn_expected(c, backward))
    record_fail(ctx, label, "cuDNN refused: " + why);
  else
    record_skip(ctx, label, "cuDNN refuses: " + why.substr(0, 120));
  return false;
}

void run_case(Context& ctx, const Case& c) {
  const AttentionShape s = make_shape(c);
  const int64_t w = c.w();
  // Fresh inputs, rounded to bf16 once; the reference sees exactly the values the GPU sees.
  Tensor qkv_bf = ctx.randn_cpu({c.b, c.t, w}, DType::kBF16);
  Tensor dout_bf = ctx.randn_cpu({c.b, c.t, c.ow()}, DType::kBF16);
  const AttentionReference ref = attention_reference(ctx, qkv_bf, dout_bf, s);
  const Tensor &out_ref = ref.out, &lse_ref = ref.lse, &dqkv_ref = ref.dqkv;

  Tensor qkv = ctx.to_gpu(qkv_bf, DType::kBF16);
  Tensor dout = ctx.to_gpu(dout_bf, DType::kBF16);
  for (AttentionBackend be : {AttentionBackend::kCudnn, AttentionBackend::kFlash}) {
    const std::string tag = fmt::format("{} {}", ops::cuda::attention_backend_name(be), case_name(c));
    ops::cuda::set_attention_backend(be);
    if (!backend_takes(ctx, be, c, false, "fwd " + tag)) continue;
    Tensor out = ctx.poisoned({c.b, c.t, c.ow()}, DType::kBF16);
    Tensor lse = ctx.poisoned({c.b, c.h, c.t}, DType::kF32);
    ops::cuda::attention_forward(qkv, s, out, lse, ctx.stream);
    ctx.check("attention", "fwd out " + tag, out, out_ref, kTolBF16);
    ctx.check("attention", "fwd lse " + tag, lse, lse_ref, kTolBF16);

    if (!backend_takes(ctx, be, c, true, "bwd " + tag)) continue;
    Tensor dqkv = ctx.poisoned({c.b, c.t, w}, DType::kBF16);
    ops::cuda::attention_backward(dout, qkv, out, lse, s, dqkv, ctx.stream);
    // to_cpu_f32 copies on the legacy default stream, which does not wait for the compute stream.
    stream_sync(ctx.stream);
    Tensor got = ctx.to_cpu_f32(dqkv);
    const int64_t kq = c.h * c.d, kk = (c.h + c.kv) * c.d;
    check_attention_grad(ctx, "attention", "bwd dq " + tag, columns(got, w, 0, kq),
                         columns(dqkv_ref, w, 0, kq));
    check_attention_grad(ctx, "attention", "bwd dk " + tag, columns(got, w, kq, kk),
                         columns(dqkv_ref, w, kq, kk));
    check_attention_grad(ctx, "attention", "bwd dv " + tag, columns(got, w, kk, w),
                         columns(dqkv_ref, w, kk, w));

    if (be == AttentionBackend::kFlash && c.kv < c.h) {
      // The flash backward promises bitwise-deterministic GQA accumulation: a second run must match exactly.
      Tensor again = ctx.poisoned({c.b, c.t, w}, DType::kBF16);
      ops::cuda::attention_backward(dout, qkv, out, lse, s, again, ctx.stream);
      stream_sync(ctx.stream);
      fused::check_true(ctx, "attention", "bwd determinism " + tag, fused::bitwise_equal(dqkv, again));
    }
  }
  ops::cuda::set_attention_backend(AttentionBackend::kAuto);
}

// Timed case: both backends on the same inputs, cross-checked against each other, fwd and bwd timed
// separately.
void run_perf(Context& ctx, const Case& c) {
  const AttentionShape s = make_shape(c);
  const int64_t w = c.w();
  // QK^T costs D and PV costs Dv multiply-adds per score: 2 (D + Dv) B H T^2 (halved when causal).
  const double fwd_flop =
      2.0 * c.b * c.h * static_cast<double>(c.t) * c.t * (c.d + c.vd()) * (c.causal ? 0.5 : 1.0);
  const double bwd_flop = 2.5 * fwd_flop;
  Tensor qkv = ctx.to_gpu(ctx.randn_cpu({c.b, c.t, w}, DType::kBF16), DType::kBF16);
  Tensor dout = ctx.to_gpu(ctx.randn_cpu({c.b, c.t, c.ow()}, DType::kBF16), DType::kBF16);
  std::vector<Tensor> outs, dqkvs;
  for (AttentionBackend be : {AttentionBackend::kCudnn, AttentionBackend::kFlash}) {
    const std::string tag = fmt::format("{} {}", ops::cuda::attention_backend_name(be), case_name(c));
    ops::cuda::set_attention_backend(be);
    if (!backend_takes(ctx, be, c, false, "perf fwd " + tag) ||
        !backend_takes(ctx, be, c, true, "perf bwd " + tag))
      continue;
    Tensor out = ctx.poisoned({c.b, c.t, c.ow()}, DType::kBF16);
    Tensor lse = ctx.poisoned({c.b, c.h, c.t}, DType::kF32);
    Tensor dqkv = ctx.poisoned({c.b, c.t, w}, DType::kBF16);
    const double fwd_ms =
        ctx.time_ms([&] { ops::cuda::attention_forward(qkv, s, out, lse, ctx.stream); }, 3, 20);
    const double bwd_ms =
        ctx.time_ms([&] { ops::cuda::attention_backward(dout, qkv, out, lse, s, dqkv, ctx.stream); }, 3, 20);
    // Ten calls between two events: host overhead between calls is hidden when the GPU stays busy.
    const double fwd10_ms = ctx.time_ms(
                                [&] {
                                  for (int i = 0; i < 10; ++i)
                                    ops::cuda::attention_forward(qkv, s, out, lse, ctx.stream);
                                },
                                1, 5) /
                            10;
    const double bwd10_ms = ctx.time_ms(
                                [&] {
                                  for (int i = 0; i < 10; ++i)
                                    ops::cuda::attention_backward(dout, qkv, out, lse, s, dqkv, ctx.stream);
                                },
                                1, 5) /
                            10;
    for (int dir = 0; dir < 4; ++dir) {
      const double ms[4] = {fwd_ms, bwd_ms, fwd10_ms, bwd10_ms};
      ctx.timing("attention",
                 fmt::format("perf {}{} {}", dir % 2 == 0 ? "fwd" : "bwd", dir >= 2 ? "x10" : "", tag),
                 ms[dir], (dir % 2 == 0 ? fwd_flop : bwd_flop) / (ms[dir] * 1e-3) / 1e12, "TFLOP/s");
    }
    outs.push_back(out);
    dqkvs.push_back(dqkv);
  }
  ops::cuda::set_attention_backend(AttentionBackend::kAuto);
  stream_sync(ctx.stream);
  if (outs.size() == 2) {
    // At these sizes the CPU reference is too slow; the two independent GPU implementations check each other.
    ctx.check("attention", "perf out cudnn~flash " + case_name(c), outs[0], ctx.to_cpu_f32(outs[1]),
              kTolBF16);
    ctx.check("attention", "perf dqkv cudnn~flash " + case_name(c), dqkvs[0], ctx.to_cpu_f32(dqkvs[1]),
              kTolBF16);
  }
}

void run_bench(Context& ctx, const Case& c) {
  bench::AttentionBenchOptions o;
  o.batch = c.b;
  o.seq = c.t;
  o.heads = c.h;
  o.kv_heads = c.kv;
  o.head_dim = c.d;
  o.causal = c.causal;
  o.backend = "all";
  const char* out_dir = std::getenv("OUT");
  o.output_file = out_dir ? fmt::format("{}/attention_bench_B{}_T{}_D{}.jsonl", out_dir, c.b, c.t, c.d) : "";
  const int rc = bench::run_attention_bench(o);
  ops::cuda::set_attention_backend(AttentionBackend::kAuto);
  CaseResult r;
  r.family = "attention";
  r.name = "bench " + case_name(c);
  r.tol = 0;
  r.rel_err = rc == 0 ? 0.0 : INFINITY;
  ctx.results.push_back(r);
}

}  // namespace
}  // namespace primus::gputest

PRIMUS_GPU_TEST(attention) {
  using primus::gputest::Case;
  namespace cd = primus::ops::cuda::cudnn;
  fmt::print("attention: cuDNN runtime {} (headers {})\n", cd::version_string(cd::runtime_version()),
             cd::version_string(CUDNN_VERSION));
  // One failing case (a cuDNN error, say) is recorded with its message and the rest still run.
  auto guarded = [](primus::gputest::Context& cx, const char* what, const Case& c,
                    void (*fn)(primus::gputest::Context&, const Case&)) {
    try {
      fn(cx, c);
    } catch (const std::exception& e) {
      primus::ops::cuda::set_attention_backend(primus::ops::cuda::AttentionBackend::kAuto);
      primus::gputest::record_fail(cx, fmt::format("{} {} (exception)", what, primus::gputest::case_name(c)),
                                   e.what());
    }
  };
  const std::vector<Case> cases = {
      {1, 1, 8, 2, 64},
      {2, 31, 8, 2, 128},
      {1, 33, 4, 4, 64},
      {3, 127, 8, 2, 64},
      {2, 128, 8, 8, 128},
      {1, 256, 32, 8, 128},
      {4, 64, 2, 1, 32},
      {2, 384, 8, 2, 64, false},
      {1, 512, 16, 4, 128},
      {2, 33, 4, 1, 128, false},
      // Multi-latent attention (Dv != D): DeepSeek's 192/128 (cuDNN where it takes it, flash natively) and
      // small odd ones that run the flash kernels zero-padded to the next instantiation.
      {2, 31, 4, 4, 192, true, 128},
      {1, 256, 16, 16, 192, true, 128},
      {1, 127, 3, 3, 192, true, 128},
      {2, 33, 4, 4, 48, true, 32},
      {1, 65, 2, 1, 24, true, 40},
      {1, 130, 4, 4, 96, false, 64},
  };
  // PRIMUS_ATTENTION_TEST_PERF_ONLY=1 skips the reference checks (e.g. a second timing pass with other
  // settings).
  const char* perf_only = std::getenv("PRIMUS_ATTENTION_TEST_PERF_ONLY");
  if (!perf_only || std::string(perf_only) != "1") {
    for (const Case& c : cases) guarded(ctx, "case", c, primus::gputest::run_case);
    if (!ctx.quick) guarded(ctx, "case", Case{1, 1000, 32, 8, 64}, primus::gputest::run_case);
  }
  guarded(ctx, "perf", Case{4, 4096, 32, 8, 128}, primus::gputest::run_perf);
  guarded(ctx, "perf", Case{8, 2048, 32, 8, 64}, primus::gputest::run_perf);
  guarded(ctx, "perf", Case{2, 4096, 16, 16, 192, true, 128}, primus::gputest::run_perf);  // DeepSeek-V2-Lite
  // The `primus benchmark attention` code path at both shapes (its table goes to stdout; its report to $OUT).
  guarded(ctx, "bench", Case{4, 4096, 32, 8, 128}, primus::gputest::run_bench);
  guarded(ctx, "bench", Case{8, 2048, 32, 8, 64}, primus::gputest::run_bench);
}
