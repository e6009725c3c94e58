// Token embedding forward (gather) and deterministic backward (scatter-add) on the GPU against the CPU
// reference, unsharded and vocabulary-sharded (a table of rows [vocab_begin, vocab_begin + V) of a larger
// vocabulary), and the lookup of rows as a pending AdamW step will leave them (embedding_forward_updated).
#include <fmt/format.h>

#include <cmath>
#include <random>
#include <set>
#include <span>

#include "gpu/fused_test_util.h"
#include "ops/cpu/embedding_cpu.h"
#include "ops/cpu/optimizer_cpu.h"
#include "ops/cuda/embedding_cuda.h"
#include "ops/cuda/optimizer_cuda.h"

namespace primus::gputest {
namespace {

using fused::cpu_copy_f32;
using fused::gpu_randn;

enum class Dist { kUniform, kSkewed, kOne };

// Token ids in [0, v): uniform, skewed towards small ids (long runs of equal ids, as in text), or all equal.
Tensor make_tokens(Context& ctx, int64_t n, int64_t v, Dist dist) {
  Tensor t = Tensor::empty({n}, DType::kI32);
  int32_t* p = t.data<int32_t>();
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    switch (dist) {
      case Dist::kUniform:
        p[i] = static_cast<int32_t>(std::min<double>(v - 1, std::floor(u(ctx.rng) * v)));
        break;
      case Dist::kSkewed:
        p[i] = static_cast<int32_t>(std::min<double>(v - 1, std::floor(std::pow(u(ctx.rng), 6) * v)));
        break;
      case Dist::kOne:
        p[i] = static_cast<int32_t>(v / 2);
        break;
    }
  }
  return t;
}

const char* dist_name(Dist d) {
  return d == Dist::kUniform ? "uniform" : d == Dist::kSkewed ? "skewed" : "one id";
}

void embedding_case(Context& ctx, int64_t n, int64_t v, int64_t d, Dist dist, bool timed) {
  const std::string sz = fmt::format("N={} V={} D={} {}", n, v, d, dist_name(dist));
  Tensor tokens = make_tokens(ctx, n, v, dist);
  Tensor tokens_g = tokens.to(ctx.stream);
  Tensor table = gpu_randn(ctx, {v, d}, DType::kBF16);
  Tensor tablef = fused::host_f32(ctx, table);

  Tensor out = ctx.poisoned({n, d}, DType::kBF16);
  ops::cuda::embedding_forward(tokens_g, table, out, ctx.stream);
  Tensor out_ref = Tensor::empty({n, d}, DType::kF32);
  ops::cpu::embedding_forward(tokens, tablef, out_ref, Stream::cpu());
  ctx.check("embedding", "embedding_fwd " + sz, out, out_ref, 0.0, "exact copy");
  if (timed) {
    const double ms = ctx.time_ms([&] { ops::cuda::embedding_forward(tokens_g, table, out, ctx.stream); });
    fused::set_rate(ctx, ms, n * d * 2.0 * 2 + n * 4.0);
  }

  Tensor dout = gpu_randn(ctx, {n, d}, DType::kBF16);
  Tensor doutf = fused::host_f32(ctx, dout);
  Tensor dtable_start = gpu_randn(ctx, {v, d}, DType::kF32);
  Tensor dtable = Tensor::empty({v, d}, DType::kF32, ctx.stream);
  dtable.copy_from(dtable_start, ctx.stream);
  Tensor dtable_ref = cpu_copy_f32(ctx, dtable_start);
  ops::cuda::embedding_backward(tokens_g, dout, dtable, ctx.stream);
  ops::cpu::embedding_backward(tokens, doutf, dtable_ref, Stream::cpu());
  ctx.check("embedding", "embedding_bwd " + sz, dtable, dtable_ref, kTolF32);

  // The same call again from the same start: bitwise the same dtable.
  Tensor again = Tensor::empty({v, d}, DType::kF32, ctx.stream);
  again.copy_from(dtable_start, ctx.stream);
  ops::cuda::embedding_backward(tokens_g, dout, again, ctx.stream);
  stream_sync(ctx.stream);
  fused::check_true(ctx, "embedding", "embedding_bwd bitwise repeatable " + sz,
                    fused::bitwise_equal(dtable, again));
  if (timed) {
    std::set<int32_t> unique(tokens.data<int32_t>(), tokens.data<int32_t>() + n);
    const double ms = ctx.time_ms([&] { ops::cuda::embedding_backward(tokens_g, dout, dtable, ctx.stream); });
    fused::set_rate(ctx, ms, n * d * 2.0 + static_cast<double>(unique.size()) * d * 4 * 2 + n * 4.0);
    ctx.results.back().note = fmt::format("{} unique ids", unique.size());
  }
}

// An out-of-range id cannot throw inside the kernel: it is recorded, and the next embedding call throws.
void bad_id_case(Context& ctx) {
  const int64_t v = 100, d = 16;
  Tensor tokens = make_tokens(ctx, 10, v, Dist::kUniform);
  tokens.data<int32_t>()[3] = static_cast<int32_t>(v + 5);
  Tensor tokens_g = tokens.to(ctx.stream);
  Tensor table = gpu_randn(ctx, {v, d}, DType::kBF16);
  Tensor out = ctx.poisoned({10, d}, DType::kBF16);
  ops::cuda::embedding_forward(tokens_g, table, out, ctx.stream);
  stream_sync(ctx.stream);
  Tensor good = tokens_g.slice(0, 3), out3 = out.slice(0, 3);
  bool threw = false;
  try {
    ops::cuda::embedding_forward(good, table, out3, ctx.stream);
  } catch (const std::exception&) {
    threw = true;
  }
  // Reported once: the call after is clean again.
  bool clean = true;
  try {
    ops::cuda::embedding_forward(good, table, out3, ctx.stream);
    stream_sync(ctx.stream);
  } catch (const std::exception&) {
    clean = false;
  }
  fused::check_true(ctx, "embedding", "embedding_fwd out-of-range id reported", threw && clean);
}

// A vocabulary-sharded table: rows [lo, lo + rows) of a vocabulary of v, ids drawn over the whole vocabulary
// (most of them another shard's: zero rows forward, skipped backward), against the CPU reference of the
// sharded op; the backward bitwise repeatable.
void sharded_case(Context& ctx, int64_t n, int64_t v, int64_t d, int64_t lo, int64_t rows, Dist dist,
                  bool timed) {
  const std::string sz =
      fmt::format("N={} V={} D={} shard [{}, {}) {}", n, v, d, lo, lo + rows, dist_name(dist));
  Tensor tokens = make_tokens(ctx, n, v, dist);
  Tensor tokens_g = tokens.to(ctx.stream);
  Tensor table = gpu_randn(ctx, {rows, d}, DType::kBF16);
  Tensor tablef = fused::host_f32(ctx, table);

  Tensor out = ctx.poisoned({n, d}, DType::kBF16);
  ops::cuda::embedding_forward(tokens_g, table, out, ctx.stream, lo, v);
  Tensor out_ref = Tensor::empty({n, d}, DType::kF32);
  ops::cpu::embedding_forward(tokens, tablef, out_ref, Stream::cpu(), lo, v);
  ctx.check("embedding", "embedding_fwd sharded " + sz, out, out_ref, 0.0, "exact copy or zero row");
  if (timed) {
    const double ms =
        ctx.time_ms([&] { ops::cuda::embedding_forward(tokens_g, table, out, ctx.stream, lo, v); });
    fused::set_rate(ctx, ms, n * d * 2.0 * 2 + n * 4.0);
  }

  Tensor dout = gpu_randn(ctx, {n, d}, DType::kBF16);
  Tensor doutf = fused::host_f32(ctx, dout);
  Tensor dtable_start = gpu_randn(ctx, {rows, d}, DType::kF32);
  Tensor dtable = Tensor::empty({rows, d}, DType::kF32, ctx.stream);
  dtable.copy_from(dtable_start, ctx.stream);
  Tensor dtable_ref = cpu_copy_f32(ctx, dtable_start);
  ops::cuda::embedding_backward(tokens_g, dout, dtable, ctx.stream, lo, v);
  ops::cpu::embedding_backward(tokens, doutf, dtable_ref, Stream::cpu(), lo, v);
  ctx.check("embedding", "embedding_bwd sharded " + sz, dtable, dtable_ref, kTolF32);

  Tensor again = Tensor::empty({rows, d}, DType::kF32, ctx.stream);
  again.copy_from(dtable_start, ctx.stream);
  ops::cuda::embedding_backward(tokens_g, dout, again, ctx.stream, lo, v);
  stream_sync(ctx.stream);
  fused::check_true(ctx, "embedding", "embedding_bwd sharded bitwise repeatable " + sz,
                    fused::bitwise_equal(dtable, again));
  if (timed) {
    const double ms =
        ctx.time_ms([&] { ops::cuda::embedding_backward(tokens_g, dout, dtable, ctx.stream, lo, v); });
    int64_t mine = 0;
    for (int64_t i = 0; i < n; ++i)
      mine += tokens.data<int32_t>()[i] >= lo && tokens.data<int32_t>()[i] < lo + rows;
    fused::set_rate(ctx, ms, mine * d * 2.0 + n * 4.0);
    ctx.results.back().note = fmt::format("{} of {} ids in the shard", mine, n);
  }
}

// Sharded: another shard's id is no error (a zero row), an id >= vocab_total is, reported by the next call.
void sharded_bad_id_case(Context& ctx) {
  const int64_t v = 100, d = 16, lo = 40, rows = 30;
  Tensor table = gpu_randn(ctx, {rows, d}, DType::kBF16);
  Tensor others = Tensor::from_vector(std::vector<int32_t>{0, 99, 45, 39, 70}, {5}).to(ctx.stream);
  Tensor out = ctx.poisoned({5, d}, DType::kBF16);
  bool clean = true;
  try {
    ops::cuda::embedding_forward(others, table, out, ctx.stream, lo, v);
    stream_sync(ctx.stream);
    ops::cuda::embedding_forward(others, table, out, ctx.stream, lo, v);
    stream_sync(ctx.stream);
  } catch (const std::exception&) {
    clean = false;
  }
  Tensor bad = Tensor::from_vector(std::vector<int32_t>{45, static_cast<int32_t>(v), 50}, {3}).to(ctx.stream);
  Tensor out3 = out.slice(0, 3);
  ops::cuda::embedding_forward(bad, table, out3, ctx.stream, lo, v);
  stream_sync(ctx.stream);
  bool threw = false;
  try {
    ops::cuda::embedding_forward(others, table, out, ctx.stream, lo, v);
  } catch (const std::exception&) {
    threw = true;
  }
  // The backward reports it too (and skips the id).
  Tensor dout = gpu_randn(ctx, {3, d}, DType::kBF16);
  Tensor dtable = Tensor::zeros({rows, d}, DType::kF32, ctx.stream);
  ops::cuda::embedding_backward(bad, dout, dtable, ctx.stream, lo, v);
  stream_sync(ctx.stream);
  bool threw_bwd = false;
  try {
    ops::cuda::embedding_backward(others.slice(0, 3), dout, dtable, ctx.stream, lo, v);
  } catch (const std::exception&) {
    threw_bwd = true;
  }
  stream_sync(ctx.stream);
  fused::check_true(ctx, "embedding",
                    "embedding sharded: other shards' ids accepted, id >= vocab_total reported",
                    clean && threw && threw_bwd);
}

// embedding_forward_updated: against the CPU reference (f64 AdamW on the gathered rows), and bitwise against
// what it stands in for on the GPU -- adamw_step writing the bf16 copy, then the plain lookup of that copy.
void updated_case(Context& ctx, int64_t n, int64_t v, int64_t d) {
  const std::string sz = fmt::format("N={} V={} D={}", n, v, d);
  Tensor tokens = make_tokens(ctx, n, v, Dist::kUniform);
  Tensor tokens_g = tokens.to(ctx.stream);
  Tensor master_c = ctx.randn_cpu({v, d}, DType::kF32), grad_c = ctx.randn_cpu({v, d}, DType::kF32, 0.1);
  Tensor m_c = ctx.randn_cpu({v, d}, DType::kF32, 0.01), v_c = ctx.randn_cpu({v, d}, DType::kF32, 1e-4);
  for (float& x : std::span(v_c.data<float>(), static_cast<size_t>(v * d))) x = std::fabs(x);
  const ops::AdamWParams p = fused::adamw_test_params(3, 0.7f);
  Tensor master = ctx.to_gpu(master_c, DType::kF32), grad = ctx.to_gpu(grad_c, DType::kF32);
  Tensor m = ctx.to_gpu(m_c, DType::kF32), vv = ctx.to_gpu(v_c, DType::kF32);
  Tensor out = ctx.poisoned({n, d}, DType::kBF16);
  ops::cuda::embedding_forward_updated(tokens_g, master, grad, m, vv, p, out, ctx.stream);
  Tensor ref = Tensor::empty({n, d}, DType::kF32);
  ops::cpu::embedding_forward_updated(tokens, master_c, grad_c, m_c, v_c, p, ref, Stream::cpu());
  ctx.check("embedding", "embedding_fwd_updated " + sz, out, ref, kTolBF16, "vs f64 AdamW rows");
  // What it replaces: the optimizer's pass over the whole table, then the lookup of the bf16 copy.
  Tensor copy = ctx.poisoned({v, d}, DType::kBF16);
  ops::cuda::adamw_step(master, grad, m, vv, p, &copy, ctx.stream);
  Tensor looked_up = ctx.poisoned({n, d}, DType::kBF16);
  ops::cuda::embedding_forward(tokens_g, copy, looked_up, ctx.stream);
  ctx.check("embedding", "embedding_fwd_updated " + sz + " vs adamw_step + lookup", out,
            fused::host_f32(ctx, looked_up), 0.0, "bitwise");
}

}  // namespace

PRIMUS_GPU_TEST(embedding) {
  updated_case(ctx, 127, 31, 33);
  updated_case(ctx, 1000, 127, 64);
  updated_case(ctx, 33, 1000, 127);
  embedding_case(ctx, 127, 1000, 33, Dist::kUniform, false);  // odd D: scalar path
  embedding_case(ctx, 1000, 50, 64, Dist::kUniform, false);   // many repeats per id
  embedding_case(ctx, 1000, 31, 31, Dist::kOne, false);       // one run over every chunk
  embedding_case(ctx, 4099, 32000, 256, Dist::kSkewed, false);
  bad_id_case(ctx);
  // Vocabulary-sharded tables: a middle shard with odd D (scalar path), the last shard (many repeats), one id
  // in the shard over every chunk and in another shard (nothing to add), a large skewed case.
  sharded_case(ctx, 127, 1000, 33, 333, 334, Dist::kUniform, false);
  sharded_case(ctx, 1000, 50, 64, 25, 25, Dist::kUniform, false);
  sharded_case(ctx, 1000, 31, 31, 10, 11, Dist::kOne, false);
  sharded_case(ctx, 1000, 31, 64, 0, 10, Dist::kOne, false);
  sharded_case(ctx, 4099, 32000, 256, 1000, 8000, Dist::kSkewed, false);
  sharded_bad_id_case(ctx);
  // Llama-3-8B: 16384 tokens of a 128256 x 4096 table; skewed ids like text.
  embedding_case(ctx, 16384, 128256, 4096, Dist::kSkewed, true);
  // The same over 8 shards of 16032 rows: the first shard (most of the skewed ids) and the second.
  sharded_case(ctx, 16384, 128256, 4096, 0, 16032, Dist::kSkewed, true);
  sharded_case(ctx, 16384, 128256, 4096, 16032, 16032, Dist::kSkewed, true);
}

}  // namespace primus::gputest
