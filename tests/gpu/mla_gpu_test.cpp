// Multi-latent attention on the GPU against the CPU reference: the pack / unpack step (ops/mla.h) with a YaRN
// table, the column concat / split of multi-token prediction, and a whole model (MLA + YaRN + MTP, with and
// without the low-rank query) whose losses and gradients on the GPU (bf16) track the CPU (f32) reference
// from the same bf16-rounded weights.
#include <fmt/format.h>

#include "gpu/fused_test_util.h"
#include "model/llama_model.h"
#include "ops/cpu/elementwise_cpu.h"
#include "ops/cpu/mla_cpu.h"
#include "ops/cuda/elementwise_cuda.h"
#include "ops/cuda/mla_cuda.h"
#include "ops/elementwise.h"
#include "ops/rope.h"

namespace primus::gputest {
namespace {

using fused::cpu_copy_f32;
using fused::gpu_randn;

ops::RopeConfig yarn(int64_t orig) {
  ops::RopeConfig c;
  c.yarn = true;
  c.factor = 40.0;
  c.original_max_position = orig;
  c.mscale = 1.0;
  c.mscale_all_dim = 0.707;  // cos/sin scaled by m(40, 1) / m(40, 0.707) != 1
  return c;
}

// packed: per-token positions (samples of 7 tokens, each from 0: packed SFT rows) instead of off + t.
void pack_case(Context& ctx, int64_t b, int64_t t, int64_t h, int64_t nope, int64_t rope, int64_t v,
               int64_t off, bool timed, bool packed = false) {
  ops::MlaDims d;
  d.batch = b;
  d.seq = t;
  d.heads = h;
  d.nope = nope;
  d.rope = rope;
  d.v_dim = v;
  const int64_t n = d.tokens();
  const std::string sz = fmt::format("B={} T={} H={} nope={} rope={} v={} {}", b, t, h, nope, rope, v,
                                     packed ? "packed" : fmt::format("off={}", off));
  Tensor table = ops::rope_table(yarn(16), off + t, rope);
  Tensor table_g = table.to(ctx.stream);
  std::vector<int32_t> pos_host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos_host[i] = static_cast<int32_t>((i % t) % 7);
  const Tensor pos = Tensor::from_vector(pos_host, {b, t}), pos_g = pos.to(ctx.stream);
  const Tensor* p_cpu = packed ? &pos : nullptr;
  const Tensor* p_gpu = packed ? &pos_g : nullptr;
  Tensor q = gpu_randn(ctx, {n, d.q_width()}, DType::kBF16),
         kv = gpu_randn(ctx, {n, d.kv_width()}, DType::kBF16);
  Tensor kpe = gpu_randn(ctx, {n, rope}, DType::kBF16);
  Tensor qkv = ctx.poisoned({n, d.qkv_width()}, DType::kBF16);
  ops::cuda::mla_pack_qkv(q, kv, kpe, d, table_g, off, qkv, ctx.stream, p_gpu);
  Tensor ref = Tensor::empty({n, d.qkv_width()}, DType::kF32);
  ops::cpu::mla_pack_qkv(cpu_copy_f32(ctx, q), cpu_copy_f32(ctx, kv), cpu_copy_f32(ctx, kpe), d, table, off,
                         ref, Stream::cpu(), p_cpu);
  ctx.check("mla", "pack " + sz, qkv, ref, kTolBF16);
  if (timed) {
    const double ms =
        ctx.time_ms([&] { ops::cuda::mla_pack_qkv(q, kv, kpe, d, table_g, off, qkv, ctx.stream, p_gpu); });
    fused::set_rate(ctx, ms, 2.0 * n * (d.q_width() + d.kv_width() + rope + d.qkv_width()));
  }

  Tensor dqkv = gpu_randn(ctx, {n, d.qkv_width()}, DType::kBF16);
  Tensor dq = ctx.poisoned({n, d.q_width()}, DType::kBF16),
         dkv = ctx.poisoned({n, d.kv_width()}, DType::kBF16);
  Tensor dkpe = ctx.poisoned({n, rope}, DType::kBF16);
  ops::cuda::mla_unpack_dqkv(dqkv, d, table_g, off, dq, dkv, dkpe, ctx.stream, p_gpu);
  Tensor rq = Tensor::empty({n, d.q_width()}, DType::kF32),
         rkv = Tensor::empty({n, d.kv_width()}, DType::kF32);
  Tensor rkpe = Tensor::empty({n, rope}, DType::kF32);
  ops::cpu::mla_unpack_dqkv(cpu_copy_f32(ctx, dqkv), d, table, off, rq, rkv, rkpe, Stream::cpu(), p_cpu);
  ctx.check("mla", "unpack dq " + sz, dq, rq, kTolBF16);
  ctx.check("mla", "unpack dkv " + sz, dkv, rkv, kTolBF16);
  ctx.check("mla", "unpack dk_pe " + sz, dkpe, rkpe, kTolBF16);
  if (timed) {
    const double ms = ctx.time_ms(
        [&] { ops::cuda::mla_unpack_dqkv(dqkv, d, table_g, off, dq, dkv, dkpe, ctx.stream, p_gpu); });
    fused::set_rate(ctx, ms, 2.0 * n * (d.q_width() + d.kv_width() + rope + d.qkv_width()));
  }
}

void columns_case(Context& ctx, int64_t rows, int64_t ca, int64_t cb) {
  const std::string sz = fmt::format("{}x[{}|{}]", rows, ca, cb);
  Tensor a = gpu_randn(ctx, {rows, ca}, DType::kBF16), b = gpu_randn(ctx, {rows, cb}, DType::kBF16);
  Tensor out = ctx.poisoned({rows, ca + cb}, DType::kBF16);
  ops::cuda::concat_columns(a, b, out, ctx.stream);
  Tensor ref = Tensor::empty({rows, ca + cb}, DType::kF32);
  ops::cpu::concat_columns(cpu_copy_f32(ctx, a), cpu_copy_f32(ctx, b), ref, Stream::cpu());
  ctx.check("mla", "concat_columns " + sz, out, ref, 0.0);
  Tensor a2 = ctx.poisoned({rows, ca}, DType::kBF16), b2 = ctx.poisoned({rows, cb}, DType::kBF16);
  ops::cuda::split_columns(out, a2, b2, ctx.stream);
  fused::check_true(ctx, "mla", "split_columns " + sz,
                    fused::bitwise_equal(a, a2) && fused::bitwise_equal(b, b2));
}

// The same model on the GPU (bf16 compute copy, bf16 activations) and on the CPU (f32) from the same weights,
// rounded to bf16 on both sides: per-token losses (main and MTP) and every gradient.
void model_case(Context& ctx, int64_t q_lora, int64_t mtp) {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 256;
  m.ffn_hidden_size = 512;
  m.num_attention_heads = 4;
  m.num_query_groups = 4;
  m.kv_channels = 64;
  m.vocab_size = m.padded_vocab_size = 384;
  m.qk_layernorm = true;
  m.untie_embeddings_and_output_weights = true;
  m.init_method_std = 0.05;
  MlaConfig& a = m.mla;
  a.enabled = true;
  a.q_lora_rank = q_lora;
  a.kv_lora_rank = 96;
  a.qk_head_dim = 128;  // DeepSeek's q/k 192 / v 128 heads
  a.qk_pos_emb_head_dim = 64;
  a.v_head_dim = 128;
  a.yarn = true;
  a.rotary_scaling_factor = 40.0;
  a.original_max_position = 64;  // shorter than the sequence: the YaRN ramp is active
  a.mscale = 1.0;
  a.mscale_all_dim = 0.707;
  m.mtp_num_layers = mtp;
  m.mtp_loss_scaling_factor = 0.3;
  const std::string name = fmt::format("model q_lora={} mtp={} (B=2 T=160)", q_lora, mtp);
  const int64_t B = 2, T = 160;
  const ModelSpec spec = ModelSpec::from_config(m);

  ParamStore pc(spec), pg(spec);
  pc.allocate(DType::kF32, Stream::cpu());
  pc.initialize(11, Stream::cpu());
  // bf16-round the CPU master so both sides compute with the same weights.
  Tensor rounded = cpu_cast(cpu_cast(pc.master_flat(), DType::kBF16), DType::kF32);
  pc.master_flat().copy_from(rounded, Stream::cpu());
  pg.allocate(DType::kBF16, ctx.stream);
  pg.initialize(11, ctx.stream);
  LlamaModel cpu(m, {}, pc, Stream::cpu(), T), gpu(m, {}, pg, ctx.stream, T);

  Tensor tokens = ctx.randint_cpu({B, T}, static_cast<int32_t>(m.vocab_size));
  Tensor targets = ctx.randint_cpu({B, T}, static_cast<int32_t>(m.vocab_size));
  targets.data<int32_t>()[5] = -1;
  targets.data<int32_t>()[T + 17] = -1;
  const float scale = 1.0f / static_cast<float>(B * T - 2);
  pc.grad_flat().zero_(Stream::cpu());
  pg.grad_flat().zero_(ctx.stream);
  const MtpBatch shifted = mtp_batch(tokens, targets, mtp);  // the trainer's host-built depth rows
  Tensor lc = cpu.forward_backward(tokens, targets, scale, 0.0f, &shifted);
  Tensor lg = gpu.forward_backward(tokens.to(ctx.stream), targets.to(ctx.stream), scale, 0.0f, &shifted);
  stream_sync(ctx.stream);
  ctx.check("mla", "losses " + name, lg, lc, kTolBF16);
  for (int64_t k = 0; k < mtp; ++k)
    ctx.check("mla", fmt::format("mtp {} losses {}", k + 1, name), gpu.mtp_losses()[k], cpu.mtp_losses()[k],
              kTolBF16);
  // Gradients: bf16 activations through two layers and the heads; per tensor, so a wrong one is named.
  for (const ParamEntry& e : pc.entries()) {
    const int i = pc.find(e.name);
    ctx.check("mla", "grad " + e.name + " " + name, pg.grad(i), pc.grad(i), 3e-2);
  }
}

}  // namespace

PRIMUS_GPU_TEST(mla) {
  pack_case(ctx, 2, 33, 3, 5, 6, 7, 3, false);
  pack_case(ctx, 1, 127, 16, 128, 64, 128, 0, false);
  pack_case(ctx, 3, 31, 2, 0, 2, 1, 9, false);
  // DeepSeek-V3's per-layer shape for one 4096-token micro-batch: 128 heads.
  pack_case(ctx, 1, 4096, 128, 128, 64, 128, 0, true);
  // Packed SFT rows: per-token positions.
  pack_case(ctx, 2, 33, 3, 5, 6, 7, 0, false, /*packed=*/true);
  pack_case(ctx, 1, 127, 16, 128, 64, 128, 0, false, /*packed=*/true);
  columns_case(ctx, 37, 64, 64);
  columns_case(ctx, 5, 3, 11);
  model_case(ctx, 96, 1);
  model_case(ctx, 0, 2);
}

}  // namespace primus::gputest
