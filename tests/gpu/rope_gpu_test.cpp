// Rotary position embedding (rotate-half, in place) on the GPU against the CPU reference.
#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <vector>

#include "gpu/fused_test_util.h"
#include "ops/cpu/rope_cpu.h"
#include "ops/cuda/rope_cuda.h"

namespace primus::gputest {
namespace {

using fused::bitwise_equal;
using fused::check_true;
using fused::cpu_copy_f32;
using fused::gpu_randn;

struct RopeCase {
  int64_t batch, seq, total, n, hd, offset;
  bool llama3;
  int64_t rot = 0;  // partial rotary: the table's width, the leading part of each head rotated (0: hd)
};

void rope_case(Context& ctx, const RopeCase& c, bool timed) {
  ops::RopeConfig cfg;
  if (c.llama3) {
    cfg.theta = 500000.0;
    cfg.llama3_scaling = true;
  }
  const int64_t rot = c.rot > 0 ? c.rot : c.hd;
  const std::string sz =
      fmt::format("B={} T={} heads {}/{} hd={}{} off={}{}", c.batch, c.seq, c.n, c.total, c.hd,
                  c.rot > 0 ? fmt::format(" rotary={}", c.rot) : "", c.offset, c.llama3 ? " llama3" : "");
  Tensor table = ops::rope_table(cfg, c.offset + c.seq, rot);
  Tensor table_g = table.to(ctx.stream);
  const Shape shape{c.batch, c.seq, c.total * c.hd};
  Tensor x = gpu_randn(ctx, shape, DType::kBF16);
  for (bool inverse : {false, true}) {
    const std::string name = std::string(inverse ? "rope_bwd " : "rope_fwd ") + sz;
    Tensor ref = cpu_copy_f32(ctx, x);  // the bf16 input, before the GPU rotates x in place
    ops::cuda::rope_apply(x, c.batch, c.seq, c.total, c.n, c.hd, table_g, c.offset, nullptr, inverse,
                          ctx.stream);
    ops::cpu::rope_apply(ref, c.batch, c.seq, c.total, c.n, c.hd, table, c.offset, nullptr, inverse,
                         Stream::cpu());
    ctx.check("rope", name, x, ref, kTolBF16);
    if (timed) {
      const double ms = ctx.time_ms([&] {
        ops::cuda::rope_apply(x, c.batch, c.seq, c.total, c.n, c.hd, table_g, c.offset, nullptr, inverse,
                              ctx.stream);
      });
      fused::set_rate(ctx, ms, c.batch * c.seq * c.n * c.hd * 2.0 * 2);
    }
  }
}

}  // namespace

PRIMUS_GPU_TEST(rope) {
  rope_case(ctx, {2, 33, 5, 3, 64, 7, false}, false);
  rope_case(ctx, {1, 31, 2, 2, 34, 0, false}, false);      // half = 17: scalar path
  rope_case(ctx, {3, 127, 4, 4, 128, 1000, true}, false);  // llama3 frequency scaling, offset positions
  rope_case(ctx, {1, 1000, 1, 1, 8, 3, false}, false);     // half = 4: scalar path
  // Partial rotary (rotary_percent): the head's first `rot` elements rotate, the rest must come back as they
  // were (the check covers the whole row). Vector path (rot / 2 and hd multiples of 8), then scalar ones.
  rope_case(ctx, {2, 127, 4, 3, 128, 5, false, 64}, false);  // 0.5 (MiniMax-M2.5, GLM-4)
  rope_case(ctx, {1, 33, 3, 2, 256, 0, true, 64}, false);    // 0.25 (Qwen3-Next)
  rope_case(ctx, {2, 31, 3, 2, 34, 1, false, 16}, false);    // hd not a multiple of 8: scalar
  rope_case(ctx, {1, 33, 2, 2, 64, 0, false, 12}, false);    // rot / 2 = 6: scalar
  // Llama-3-8B q and k of one micro-batch (32 + 8 rotated heads of a fused [q | k | v] row), 4 x 4096 tokens.
  rope_case(ctx, {4, 4096, 48, 40, 128, 0, true}, true);
}

// ---- Per-token positions (packed SFT rows) ----
namespace {

enum class Scaling { kNone, kLlama3, kYarn };

struct RopePosCase {
  int64_t batch, seq, total, n, hd, max_pos;
  Scaling scaling;
};

ops::RopeConfig pos_config(Scaling sc) {
  ops::RopeConfig cfg;
  if (sc == Scaling::kLlama3) {
    cfg.theta = 500000.0;
    cfg.llama3_scaling = true;
  } else if (sc == Scaling::kYarn) {  // DeepSeek-V3's, with mscale != mscale_all_dim so the table is scaled
    cfg.yarn = true;
    cfg.factor = 40.0;
    cfg.original_max_position = 4096;
    cfg.mscale = 1.0;
    cfg.mscale_all_dim = 0.707;
  }
  return cfg;
}

// CPU int32 [B, T]: packed samples of random lengths restarting at 0 (the SFT layout); every third row
// instead draws each position uniformly from [0, max_pos), so nothing may assume runs.
Tensor random_positions(Context& ctx, int64_t batch, int64_t seq, int64_t max_pos) {
  std::vector<int32_t> v(static_cast<size_t>(batch * seq));
  for (int64_t r = 0; r < batch; ++r) {
    int64_t p = 0, left = 0;
    for (int64_t t = 0; t < seq; ++t) {
      if (r % 3 == 2) {
        v[r * seq + t] =
            static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, max_pos - 1)(ctx.rng));
        continue;
      }
      if (left == 0)
        p = 0, left = std::uniform_int_distribution<int64_t>(1, std::max<int64_t>(1, seq / 3))(ctx.rng);
      v[r * seq + t] = static_cast<int32_t>(std::min(p, max_pos - 1));
      ++p, --left;
    }
  }
  return Tensor::from_vector(v, {batch, seq});
}

Tensor positions_from(const std::vector<int32_t>& v, int64_t batch, int64_t seq) {
  return Tensor::from_vector(v, {batch, seq});
}

void rope_pos_case(Context& ctx, const RopePosCase& c, bool timed) {
  static constexpr const char* kFamily = "rope_positions";
  const ops::RopeConfig cfg = pos_config(c.scaling);
  const char* sc = c.scaling == Scaling::kLlama3 ? " llama3" : c.scaling == Scaling::kYarn ? " yarn" : "";
  const std::string sz = fmt::format("B={} T={} heads {}/{} hd={} max_pos={}{}", c.batch, c.seq, c.n, c.total,
                                     c.hd, c.max_pos, sc);
  Tensor table = ops::rope_table(cfg, c.max_pos, c.hd);
  Tensor table_g = table.to(ctx.stream);
  Tensor pos = random_positions(ctx, c.batch, c.seq, c.max_pos);
  Tensor pos_g = pos.to(ctx.stream);
  const Shape shape{c.batch, c.seq, c.total * c.hd};
  Tensor x = gpu_randn(ctx, shape, DType::kBF16);
  for (bool inverse : {false, true}) {
    const std::string name = std::string(inverse ? "rope_bwd " : "rope_fwd ") + sz;
    Tensor ref = cpu_copy_f32(ctx, x);  // the bf16 input, before the GPU rotates x in place
    ops::cuda::rope_apply(x, c.batch, c.seq, c.total, c.n, c.hd, table_g, 0, &pos_g, inverse, ctx.stream);
    ops::cpu::rope_apply(ref, c.batch, c.seq, c.total, c.n, c.hd, table, 0, &pos, inverse, Stream::cpu());
    ctx.check(kFamily, name, x, ref, kTolBF16);
    if (timed) {
      const double ms = ctx.time_ms([&] {
        ops::cuda::rope_apply(x, c.batch, c.seq, c.total, c.n, c.hd, table_g, 0, &pos_g, inverse, ctx.stream);
      });
      fused::set_rate(ctx, ms, c.batch * c.seq * c.n * c.hd * 2.0 * 2);
    }
  }

  // positions = offset + t must be bitwise the offset path (same arithmetic, only the row lookup differs).
  const int64_t offset = c.max_pos - c.seq;
  std::vector<int32_t> ramp(static_cast<size_t>(c.batch * c.seq));
  for (int64_t i = 0; i < c.batch * c.seq; ++i) ramp[i] = static_cast<int32_t>(offset + i % c.seq);
  Tensor ramp_g = positions_from(ramp, c.batch, c.seq).to(ctx.stream);
  for (bool inverse : {false, true}) {
    Tensor a = gpu_randn(ctx, shape, DType::kBF16);
    Tensor b = a.to(ctx.stream);
    ops::cuda::rope_apply(a, c.batch, c.seq, c.total, c.n, c.hd, table_g, offset, nullptr, inverse,
                          ctx.stream);
    ops::cuda::rope_apply(b, c.batch, c.seq, c.total, c.n, c.hd, table_g, 0, &ramp_g, inverse, ctx.stream);
    stream_sync(ctx.stream);
    check_true(ctx, kFamily,
               fmt::format("{} positions = {} + t is the offset path, bitwise {}", inverse ? "bwd" : "fwd",
                           offset, sz),
               bitwise_equal(a, b));
  }

  // Out-of-range positions are clamped into the table, never read past it: bitwise the clamped positions.
  std::vector<int32_t> bad = pos.to_vector<int32_t>(), clamped = bad;
  for (size_t i = 0; i < bad.size(); i += 7) {
    const bool low = (i / 7) % 2 == 0;
    bad[i] = low ? -1000000 - static_cast<int32_t>(i) : static_cast<int32_t>(c.max_pos) + 1000000;
    clamped[i] = low ? 0 : static_cast<int32_t>(c.max_pos - 1);
  }
  Tensor bad_g = positions_from(bad, c.batch, c.seq).to(ctx.stream),
         clamped_g = positions_from(clamped, c.batch, c.seq).to(ctx.stream);
  Tensor a = gpu_randn(ctx, shape, DType::kBF16);
  Tensor b = a.to(ctx.stream);
  ops::cuda::rope_apply(a, c.batch, c.seq, c.total, c.n, c.hd, table_g, 0, &bad_g, false, ctx.stream);
  ops::cuda::rope_apply(b, c.batch, c.seq, c.total, c.n, c.hd, table_g, 0, &clamped_g, false, ctx.stream);
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "out-of-range positions clamp into the table " + sz, bitwise_equal(a, b));
}

}  // namespace

PRIMUS_GPU_TEST(rope_positions) {
  rope_pos_case(ctx, {2, 33, 5, 3, 64, 100, Scaling::kNone}, false);
  rope_pos_case(ctx, {3, 31, 2, 2, 34, 64, Scaling::kNone}, false);  // half = 17: scalar path
  rope_pos_case(ctx, {3, 127, 4, 4, 128, 2048, Scaling::kLlama3}, false);
  rope_pos_case(ctx, {2, 127, 3, 2, 64, 5000, Scaling::kYarn}, false);  // scaled table (c != 1)
  rope_pos_case(ctx, {1, 1000, 1, 1, 8, 1003, Scaling::kNone}, false);  // half = 4: scalar path
  // Llama-3-8B q and k of one packed micro-batch, 4 x 4096 tokens: the cost of the position lookup against
  // the offset timing of the rope family (same shape).
  rope_pos_case(ctx, {4, 4096, 48, 40, 128, 4096, Scaling::kLlama3}, true);
}

}  // namespace primus::gputest
