// Packed sequences on the GPU (AttentionShape::seg_starts: several samples per row, causal + document mask)
// against the CPU reference, forward and backward, on fresh random inputs with odd sample lengths, GQA and
// head dims 64 and 128 (plus MLA's 192/128 and a zero-padded head dim). Packed shapes always run on the flash
// kernels: auto must pick flash, forced cuDNN must refuse. Timed rows show what skipping the key blocks
// before each sample saves against plain causal attention over the whole row.
#include <fmt/format.h>

#include <cmath>
#include <exception>
#include <random>
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
using ops::cuda::AttentionBackend;

constexpr const char* kFamily = "attention_packed";

struct Case {
  int64_t t, h, kv, d;
  std::vector<std::vector<int64_t>> lengths;  // sample lengths per row; the rest of a row is padding
  int64_t dv = 0;
  int64_t b() const { return static_cast<int64_t>(lengths.size()); }
  int64_t vd() const { return dv > 0 ? dv : d; }
};

std::string case_name(const Case& c) {
  std::vector<std::string> rows;
  for (const auto& l : c.lengths) rows.push_back(fmt::format("{}", fmt::join(l, "+")));
  std::string samples = fmt::format("{}", fmt::join(rows, "|"));
  if (samples.size() > 60) samples = samples.substr(0, 57) + "...";
  return fmt::format("B{} T{} H{} KV{} D{}{} [{}]", c.b(), c.t, c.h, c.kv, c.d,
                     c.dv > 0 ? fmt::format(" Dv{}", c.dv) : "", samples);
}

// `rows` rows of random sample lengths in [1, max_len] filling most of T (the rest is padding).
std::vector<std::vector<int64_t>> random_rows(Context& ctx, int rows, int64_t t, int64_t max_len) {
  std::vector<std::vector<int64_t>> r(static_cast<size_t>(rows));
  std::uniform_int_distribution<int64_t> len(1, max_len);
  for (auto& row : r) {
    int64_t used = 0;
    for (;;) {
      const int64_t l = len(ctx.rng);
      if (used + l > t - 3) break;  // leave a few padding tokens
      row.push_back(l);
      used += l;
    }
  }
  return r;
}

void record_fail(Context& ctx, const std::string& name, const std::string& why) {
  ctx.record(kFamily, name, INFINITY, kTolBF16, why);
}

void run_case(Context& ctx, const Case& c) {
  const std::string tag = case_name(c);
  AttentionShape s = attention_shape(c.b(), c.t, c.h, c.kv, c.d, /*causal=*/true, c.dv);
  const int64_t w = s.qkv_width(), ow = s.out_width();
  const Tensor seg_cpu = ops::attention_segment_starts(c.lengths, c.t);
  const Tensor seg_gpu = ctx.to_gpu(seg_cpu, DType::kI32);
  AttentionShape s_cpu = s, s_gpu = s;
  s_cpu.seg_starts = &seg_cpu;
  s_gpu.seg_starts = &seg_gpu;

  // Fresh inputs, rounded to bf16 once; the reference sees exactly the values the GPU sees.
  Tensor qkv_bf = ctx.randn_cpu({c.b(), c.t, w}, DType::kBF16);
  Tensor dout_bf = ctx.randn_cpu({c.b(), c.t, ow}, DType::kBF16);
  const AttentionReference ref = attention_reference(ctx, qkv_bf, dout_bf, s_cpu);
  Tensor qkv = ctx.to_gpu(qkv_bf, DType::kBF16), dout = ctx.to_gpu(dout_bf, DType::kBF16);

  ops::cuda::set_attention_backend(AttentionBackend::kAuto);
  const std::string fwd_be = ops::cuda::attention_backend_for(s_gpu, false);
  const std::string bwd_be = ops::cuda::attention_backend_for(s_gpu, true);
  fused::check_true(ctx, kFamily, "auto picks flash " + tag, fwd_be == "flash" && bwd_be == "flash",
                    fmt::format("fwd {}, bwd {}", fwd_be, bwd_be));

  // Padding rows are compared too: they are a sample of their own and must be finite.
  Tensor out = ctx.poisoned({c.b(), c.t, ow}, DType::kBF16);
  Tensor lse = ctx.poisoned({c.b(), c.h, c.t}, DType::kF32);
  ops::cuda::attention_forward(qkv, s_gpu, out, lse, ctx.stream);
  ctx.check(kFamily, "fwd out " + tag, out, ref.out, kTolBF16);
  ctx.check(kFamily, "fwd lse " + tag, lse, ref.lse, kTolBF16);

  Tensor dqkv = ctx.poisoned({c.b(), c.t, w}, DType::kBF16);
  ops::cuda::attention_backward(dout, qkv, out, lse, s_gpu, dqkv, ctx.stream);
  // to_cpu_f32 copies on the legacy default stream, which does not wait for the compute stream.
  stream_sync(ctx.stream);
  const Tensor got = ctx.to_cpu_f32(dqkv);
  const int64_t kq = c.h * c.d, kk = (c.h + c.kv) * c.d;
  check_attention_grad(ctx, kFamily, "bwd dq " + tag, columns(got, w, 0, kq), columns(ref.dqkv, w, 0, kq));
  check_attention_grad(ctx, kFamily, "bwd dk " + tag, columns(got, w, kq, kk), columns(ref.dqkv, w, kq, kk));
  check_attention_grad(ctx, kFamily, "bwd dv " + tag, columns(got, w, kk, w), columns(ref.dqkv, w, kk, w));

  // The flash backward is deterministic with packing too: a second run must match bitwise.
  Tensor again = ctx.poisoned({c.b(), c.t, w}, DType::kBF16);
  ops::cuda::attention_backward(dout, qkv, out, lse, s_gpu, again, ctx.stream);
  stream_sync(ctx.stream);
  fused::check_true(ctx, kFamily, "bwd determinism " + tag, fused::bitwise_equal(dqkv, again));
}

// One sample per row (seg_starts all zero) is plain causal attention: the flash kernels must give bitwise the
// unpacked flash result (the extra mask never fires and the loops cover the same blocks).
void run_one_sample_per_row(Context& ctx, int64_t b, int64_t t, int64_t h, int64_t kv, int64_t d) {
  const std::string tag = fmt::format("B{} T{} H{} KV{} D{}", b, t, h, kv, d);
  const AttentionShape plain = attention_shape(b, t, h, kv, d, /*causal=*/true);
  const Tensor seg =
      ctx.to_gpu(ops::attention_segment_starts(
                     std::vector<std::vector<int64_t>>(static_cast<size_t>(b), std::vector<int64_t>{t}), t),
                 DType::kI32);
  AttentionShape packed = plain;
  packed.seg_starts = &seg;
  Tensor qkv = ctx.to_gpu(ctx.randn_cpu({b, t, plain.qkv_width()}, DType::kBF16), DType::kBF16);
  Tensor dout = ctx.to_gpu(ctx.randn_cpu({b, t, plain.out_width()}, DType::kBF16), DType::kBF16);
  ops::cuda::set_attention_backend(AttentionBackend::kFlash);
  Tensor outs[2], lses[2], dqkvs[2];
  for (int k = 0; k < 2; ++k) {
    const AttentionShape& s = k == 0 ? plain : packed;
    outs[k] = ctx.poisoned({b, t, s.out_width()}, DType::kBF16);
    lses[k] = ctx.poisoned({b, h, t}, DType::kF32);
    dqkvs[k] = ctx.poisoned({b, t, s.qkv_width()}, DType::kBF16);
    ops::cuda::attention_forward(qkv, s, outs[k], lses[k], ctx.stream);
    ops::cuda::attention_backward(dout, qkv, outs[k], lses[k], s, dqkvs[k], ctx.stream);
  }
  ops::cuda::set_attention_backend(AttentionBackend::kAuto);
  stream_sync(ctx.stream);
  fused::check_true(ctx, kFamily, "one sample per row = plain causal, bitwise " + tag,
                    fused::bitwise_equal(outs[0], outs[1]) && fused::bitwise_equal(lses[0], lses[1]) &&
                        fused::bitwise_equal(dqkvs[0], dqkvs[1]));
}

// Forcing cuDNN on a packed shape is an error that names the reason (the graph has no document mask).
void run_forced_cudnn_refuses(Context& ctx) {
  const AttentionShape plain = attention_shape(1, 128, 4, 2, 64, /*causal=*/true);
  const Tensor seg = ctx.to_gpu(ops::attention_segment_starts({{64, 64}}, 128), DType::kI32);
  AttentionShape s = plain;
  s.seg_starts = &seg;
  Tensor qkv = ctx.to_gpu(ctx.randn_cpu({1, 128, s.qkv_width()}, DType::kBF16), DType::kBF16);
  Tensor out = ctx.poisoned({1, 128, s.out_width()}, DType::kBF16);
  Tensor lse = ctx.poisoned({1, 4, 128}, DType::kF32);
  ops::cuda::set_attention_backend(AttentionBackend::kCudnn);
  std::string what;
  try {
    ops::cuda::attention_forward(qkv, s, out, lse, ctx.stream);
  } catch (const std::exception& e) {
    what = e.what();
  }
  ops::cuda::set_attention_backend(AttentionBackend::kAuto);
  fused::check_true(ctx, kFamily, "forced cudnn refuses packed shapes",
                    what.find("packed sequences") != std::string::npos,
                    what.empty() ? "no error" : what.substr(0, 160));
}

// Timed: a row of T tokens holding T / len samples of len tokens, packed flash against plain causal flash
// and cuDNN over the whole row. FLOPs are counted as done (2 (D + Dv) B H sum of len^2 / 2 for packing), so
// the TFLOP/s columns are comparable and the time ratio shows the saving (ideally about T / len).
void run_perf(Context& ctx, int64_t b, int64_t t, int64_t h, int64_t kv, int64_t d, int64_t len) {
  const AttentionShape plain = attention_shape(b, t, h, kv, d, /*causal=*/true);
  const std::vector<std::vector<int64_t>> rows(static_cast<size_t>(b), std::vector<int64_t>(t / len, len));
  const Tensor seg = ctx.to_gpu(ops::attention_segment_starts(rows, t), DType::kI32);
  AttentionShape packed = plain;
  packed.seg_starts = &seg;
  const double per_sq = 2.0 * b * h * 2 * d * 0.5;  // causal FLOPs per (query, key) square unit
  const double plain_flop = per_sq * static_cast<double>(t) * t;
  const double packed_flop = per_sq * static_cast<double>(t / len) * len * len;
  Tensor qkv = ctx.to_gpu(ctx.randn_cpu({b, t, plain.qkv_width()}, DType::kBF16), DType::kBF16);
  Tensor dout = ctx.to_gpu(ctx.randn_cpu({b, t, plain.out_width()}, DType::kBF16), DType::kBF16);
  Tensor out = ctx.poisoned({b, t, plain.out_width()}, DType::kBF16);
  Tensor lse = ctx.poisoned({b, h, t}, DType::kF32);
  Tensor dqkv = ctx.poisoned({b, t, plain.qkv_width()}, DType::kBF16);
  const std::string tag = fmt::format("B{} T{} H{} KV{} D{}", b, t, h, kv, d);
  struct Run {
    const char* name;
    AttentionBackend be;
    const AttentionShape* s;
    double flop;
  };
  const Run runs[] = {{"packed flash", AttentionBackend::kFlash, &packed, packed_flop},
                      {"causal flash", AttentionBackend::kFlash, &plain, plain_flop},
                      {"causal auto", AttentionBackend::kAuto, &plain, plain_flop}};
  for (const Run& r : runs) {
    ops::cuda::set_attention_backend(r.be);
    const double fwd_ms =
        ctx.time_ms([&] { ops::cuda::attention_forward(qkv, *r.s, out, lse, ctx.stream); }, 3, 20);
    const double bwd_ms = ctx.time_ms(
        [&] { ops::cuda::attention_backward(dout, qkv, out, lse, *r.s, dqkv, ctx.stream); }, 3, 20);
    const std::string name = fmt::format("{} {} ({} samples of {})", r.name, tag, t / len, len);
    ctx.timing(kFamily, "perf fwd " + name, fwd_ms, r.flop / (fwd_ms * 1e-3) / 1e12, "TFLOP/s");
    ctx.timing(kFamily, "perf bwd " + name, bwd_ms, 2.5 * r.flop / (bwd_ms * 1e-3) / 1e12, "TFLOP/s");
  }
  ops::cuda::set_attention_backend(AttentionBackend::kAuto);
}

}  // namespace
}  // namespace primus::gputest

PRIMUS_GPU_TEST(attention_packed) {
  using primus::gputest::Case;
  namespace g = primus::gputest;
  // One failing case (an exception) is recorded with its message and the rest still run.
  auto guarded = [&](const std::string& what, const auto& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      primus::ops::cuda::set_attention_backend(primus::ops::cuda::AttentionBackend::kAuto);
      g::record_fail(ctx, what + " (exception)", e.what());
    }
  };
  std::vector<Case> cases = {
      // Sample lengths 1, 31, 33, 127 in several orders; T = 200 leaves 8 padding tokens (not a multiple of
      // 64, so boundaries fall inside key and query blocks).
      {200, 8, 2, 64, {{1, 31, 33, 127}, {127, 33, 1, 31}}},
      {200, 8, 2, 128, {{33, 1, 127, 31}, {31, 127, 33, 1}}},
      {200, 4, 4, 64, {{1, 31, 33, 127}}},                      // MHA
      {130, 4, 1, 128, {{64, 1, 1, 63}, {65, 65}, {1, 1, 1}}},  // boundaries on block edges; mostly padding
      {97, 2, 1, 64, {{97}, {1, 1, 1, 1, 1, 1, 1, 1}}},         // one sample; tokens of length 1
      {200, 4, 4, 192, {{1, 31, 33, 127}}, 128},                // MLA head dims
      {131, 4, 2, 48, {{33, 31, 1, 64}}, 32},                   // zero-padded head dims carry the segments
  };
  // Random sample lengths over longer rows (several query blocks per sample, many samples per block).
  cases.push_back({1000, 8, 2, 64, g::random_rows(ctx, 2, 1000, 300)});
  cases.push_back({1000, 4, 1, 128, g::random_rows(ctx, 2, 1000, 90)});
  if (!ctx.quick) cases.push_back({2047, 8, 2, 128, g::random_rows(ctx, 1, 2047, 700)});
  for (const Case& c : cases) guarded("case " + g::case_name(c), [&] { g::run_case(ctx, c); });
  guarded("one sample per row", [&] { g::run_one_sample_per_row(ctx, 2, 321, 8, 2, 64); });
  guarded("one sample per row", [&] { g::run_one_sample_per_row(ctx, 1, 256, 4, 4, 128); });
  guarded("forced cudnn", [&] { g::run_forced_cudnn_refuses(ctx); });
  guarded("perf", [&] { g::run_perf(ctx, 1, 8192, 32, 8, 128, 512); });
  guarded("perf", [&] { g::run_perf(ctx, 4, 4096, 32, 8, 64, 1024); });
}
