// Rotary position embedding (rotate-half, in place) on the GPU against the CPU reference.
#include <fmt/format.h>

#include "gpu/fused_test_util.h"
#include "ops/cpu/rope_cpu.h"
#include "ops/cuda/rope_cuda.h"

namespace primus::gputest {
namespace {

using fused::cpu_copy_f32;
using fused::gpu_randn;

struct RopeCase {
  int64_t batch, seq, total, n, hd, offset;
  bool llama3;
};

void rope_case(Context& ctx, const RopeCase& c, bool timed) {
  ops::RopeConfig cfg;
  if (c.llama3) {
    cfg.theta = 500000.0;
    cfg.llama3_scaling = true;
  }
  const std::string sz = fmt::format("B={} T={} heads {}/{} hd={} off={}{}", c.batch, c.seq, c.n, c.total,
                                     c.hd, c.offset, c.llama3 ? " llama3" : "");
  Tensor table = ops::rope_table(cfg, c.offset + c.seq, c.hd);
  Tensor table_g = table.to(ctx.stream);
  const Shape shape{c.batch, c.seq, c.total * c.hd};
  Tensor x = gpu_randn(ctx, shape, DType::kBF16);
  for (bool inverse : {false, true}) {
    const std::string name = std::string(inverse ? "rope_bwd " : "rope_fwd ") + sz;
    Tensor ref = cpu_copy_f32(ctx, x);  // the bf16 input, before the GPU rotates x in place
    ops::cuda::rope_apply(x, c.batch, c.seq, c.total, c.n, c.hd, table_g, c.offset, inverse, ctx.stream);
    ops::cpu::rope_apply(ref, c.batch, c.seq, c.total, c.n, c.hd, table, c.offset, inverse, Stream::cpu());
    ctx.check("rope", name, x, ref, kTolBF16);
    if (timed) {
      const double ms = ctx.time_ms([&] {
        ops::cuda::rope_apply(x, c.batch, c.seq, c.total, c.n, c.hd, table_g, c.offset, inverse, ctx.stream);
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
  // Llama-3-8B q and k of one micro-batch (32 + 8 rotated heads of a fused [q | k | v] row), 4 x 4096 tokens.
  rope_case(ctx, {4, 4096, 48, 40, 128, 0, true}, true);
}

}  // namespace primus::gputest
