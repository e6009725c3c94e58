// f32 masters as (bf16 hi, i16 remainder) pairs on the GPU (core/master_split.h, family optimizer_remainder):
//  - master_split / master_join bitwise against the CPU ops on random bit patterns of every class (NaNs,
//  ties,
//    subnormals, infinities), odd sizes and unaligned views;
//  - adamw_step_split bitwise against the GPU's own f32-master adamw_step followed by master_split (and the
//    fused bf16 copy of adamw_step bitwise equal to hi), several steps, against the CPU reference within the
//    optimizer tolerance, and its bandwidth at model size;
//  - embedding_forward_updated_split bitwise against the lookup on the joined master and against
//    adamw_step_split + the plain lookup of hi;
//  - ParamStore on CUDA: remainders by default, initialisation / set_master / master_f32 bitwise like a store
//    with an f32 master buffer, and a checkpoint saved from remainders that loads into both layouts bitwise;
//  - an MoE model whose expert bias (read through master_f32, updated through set_master) trains bitwise the
//    same in both layouts.
#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <span>

#include "checkpoint/load.h"
#include "checkpoint/publish.h"
#include "checkpoint/snapshot.h"
#include "core/log.h"
#include "core/master_split.h"
#include "gpu/fused_test_util.h"
#include "model/llama_model.h"
#include "model/param_store.h"
#include "ops/cpu/embedding_cpu.h"
#include "ops/cpu/optimizer_cpu.h"
#include "ops/cuda/embedding_cuda.h"
#include "ops/cuda/optimizer_cuda.h"
#include "train/optimizer.h"

namespace primus::gputest {
namespace {

using fused::gpu_poisoned_view;
using fused::gpu_view;

using fused::bitwise_equal;
using fused::check_true;

constexpr const char* kFamily = "optimizer_remainder";
constexpr double kTolOpt = 1e-6;

// Random f32 bit patterns: a third uniform bits (every class: NaN, inf, subnormal), a third normal floats,
// every 7th a tie (low half 0x8000).
Tensor random_patterns(Context& ctx, int64_t n) {
  Tensor t = Tensor::empty({n}, DType::kF32);
  auto* b = static_cast<uint32_t*>(t.data_ptr());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t x = static_cast<uint32_t>(ctx.rng());
    if (i % 3 == 1) {
      const float f = nd(ctx.rng);
      std::memcpy(&x, &f, 4);
    }
    if (i % 7 == 0) x = (x & 0xffff0000u) | 0x8000u;
    b[i] = x;
  }
  return t;
}

void split_join_case(Context& ctx, int64_t n, int64_t offset) {
  const std::string sz = fmt::format("n={}{}", n, offset ? " unaligned" : "");
  Tensor master_c = random_patterns(ctx, n);
  Tensor master = gpu_view(ctx, master_c, offset);
  Tensor hi = gpu_poisoned_view(ctx, n, DType::kBF16, offset),
         rem = gpu_poisoned_view(ctx, n, DType::kI16, offset);
  ops::cuda::master_split(master, hi, &rem, ctx.stream);
  Tensor hi_c = Tensor::empty({n}, DType::kBF16), rem_c = Tensor::empty({n}, DType::kI16);
  ops::cpu::master_split(master_c, hi_c, &rem_c, Stream::cpu());
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "master_split hi " + sz, bitwise_equal(hi, hi_c), "bitwise vs CPU");
  check_true(ctx, kFamily, "master_split rem " + sz, bitwise_equal(rem, rem_c), "bitwise vs CPU");
  Tensor hi_only = gpu_poisoned_view(ctx, n, DType::kBF16, offset);
  ops::cuda::master_split(master, hi_only, nullptr, ctx.stream);
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "master_split hi only " + sz, bitwise_equal(hi_only, hi_c), "bitwise vs CPU");
  Tensor back = gpu_poisoned_view(ctx, n, DType::kF32, offset);
  ops::cuda::master_join(hi, rem, back, ctx.stream);
  Tensor back_c = Tensor::empty({n}, DType::kF32);
  ops::cpu::master_join(hi_c, rem_c, back_c, Stream::cpu());
  // The join gives every pattern back, NaNs as the canonical NaN of their sign.
  Tensor want = Tensor::empty({n}, DType::kF32);
  const auto* b = static_cast<const uint32_t*>(master_c.data_ptr());
  auto* w = static_cast<uint32_t*>(want.data_ptr());
  for (int64_t i = 0; i < n; ++i) w[i] = master_canonical_bits(b[i]);
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "master_join " + sz, bitwise_equal(back, want) && bitwise_equal(back_c, want),
             "bitwise: split + join is the identity (NaNs canonical)");
}

void adamw_split_case(Context& ctx, int64_t n, int64_t offset, int steps) {
  const std::string sz = fmt::format("n={}{}", n, offset ? " unaligned" : "");
  Tensor w_c = ctx.randn_cpu({n}, DType::kF32), m_c = ctx.randn_cpu({n}, DType::kF32, 0.01);
  Tensor v_c = ctx.randn_cpu({n}, DType::kF32, 1e-4);
  for (float& x : std::span(v_c.data<float>(), static_cast<size_t>(n))) x = std::fabs(x);
  // GPU f32 path, GPU pair path, CPU reference.
  Tensor w = gpu_view(ctx, w_c, offset), m = gpu_view(ctx, m_c, offset), v = gpu_view(ctx, v_c, offset);
  Tensor copy = gpu_poisoned_view(ctx, n, DType::kBF16, offset);
  Tensor hi = gpu_poisoned_view(ctx, n, DType::kBF16, offset),
         rem = gpu_poisoned_view(ctx, n, DType::kI16, offset);
  ops::cuda::master_split(w, hi, &rem, ctx.stream);
  Tensor m2 = gpu_view(ctx, m_c, offset), v2 = gpu_view(ctx, v_c, offset);
  Tensor w_ref = w_c, m_ref = m_c, v_ref = v_c;
  for (int step = 1; step <= steps; ++step) {
    const ops::AdamWParams p = fused::adamw_test_params(step);
    Tensor g_c = ctx.randn_cpu({n}, DType::kF32, 0.1);
    Tensor g = gpu_view(ctx, g_c, offset);
    ops::cuda::adamw_step(w, g, m, v, p, &copy, ctx.stream);
    ops::cuda::adamw_step_split(hi, rem, g, m2, v2, p, ctx.stream);
    ops::cpu::adamw_step(w_ref, g_c, m_ref, v_ref, p, nullptr, Stream::cpu());
  }
  Tensor hi_ref = gpu_poisoned_view(ctx, n, DType::kBF16, 0),
         rem_ref = gpu_poisoned_view(ctx, n, DType::kI16, 0);
  ops::cuda::master_split(w, hi_ref, &rem_ref, ctx.stream);
  stream_sync(ctx.stream);
  const std::string name = fmt::format("adamw_step_split {} steps {}", steps, sz);
  check_true(ctx, kFamily, name + " hi", bitwise_equal(hi, hi_ref), "bitwise vs adamw_step + master_split");
  check_true(ctx, kFamily, name + " rem", bitwise_equal(rem, rem_ref),
             "bitwise vs adamw_step + master_split");
  check_true(ctx, kFamily, name + " m, v", bitwise_equal(m2, m) && bitwise_equal(v2, v),
             "bitwise vs adamw_step");
  check_true(ctx, kFamily, name + " = adamw_step's bf16 copy", bitwise_equal(hi, copy),
             "one compute rounding in both layouts");
  Tensor joined = gpu_poisoned_view(ctx, n, DType::kF32, 0);
  ops::cuda::master_join(hi, rem, joined, ctx.stream);
  ctx.check(kFamily, name + " master vs CPU", joined, w_ref, kTolOpt, "vs f64 AdamW");
  ctx.check(kFamily, name + " v vs CPU", v2, v_ref, kTolOpt, "vs f64 AdamW");
}

// Model size: one adamw_step_split over n parameters (28 bytes each); the first 2^20 checked against the CPU
// reference (join -> f64 AdamW).
void model_size(Context& ctx, int64_t n) {
  constexpr int64_t kPool = int64_t{1} << 24;
  Tensor hi = Tensor::empty({n}, DType::kBF16, ctx.stream), rem = Tensor::empty({n}, DType::kI16, ctx.stream);
  {
    Tensor w = fused::gpu_randn(ctx, {n}, DType::kF32, 1.0, kPool);
    ops::cuda::master_split(w, hi, &rem, ctx.stream);
    stream_sync(ctx.stream);
  }  // the pair is the master: no f32 buffer stays
  Tensor g = fused::gpu_randn(ctx, {n}, DType::kF32, 0.1, kPool);
  Tensor m = fused::gpu_randn(ctx, {n}, DType::kF32, 0.01, kPool);
  Tensor v = Tensor::empty({n}, DType::kF32, ctx.stream);
  {
    Tensor pool = ctx.randn_cpu({kPool}, DType::kF32, 1e-4);
    for (float& x : std::span(pool.data<float>(), static_cast<size_t>(kPool))) x = std::fabs(x);
    Tensor dev = pool.to(ctx.stream);
    for (int64_t off = 0; off < n; off += kPool) {
      Tensor dst = v.slice(off, std::min(n, off + kPool));
      dst.copy_from(dev.slice(0, dst.numel()), ctx.stream);
    }
  }
  const int64_t k = int64_t{1} << 20;
  Tensor hb = hi.slice(0, k).to(Stream::cpu()), rb = rem.slice(0, k).to(Stream::cpu());
  Tensor w_ref = Tensor::empty({k}, DType::kF32);
  ops::cpu::master_join(hb, rb, w_ref, Stream::cpu());
  Tensor g_ref = fused::cpu_copy_f32(ctx, g.slice(0, k)), m_ref = fused::cpu_copy_f32(ctx, m.slice(0, k));
  Tensor v_ref = fused::cpu_copy_f32(ctx, v.slice(0, k));
  ops::AdamWParams p = fused::adamw_test_params(10);
  ops::cuda::adamw_step_split(hi, rem, g, m, v, p, ctx.stream);
  ops::cpu::adamw_step(w_ref, g_ref, m_ref, v_ref, p, nullptr, Stream::cpu());
  Tensor joined = Tensor::empty({k}, DType::kF32, ctx.stream);
  ops::cuda::master_join(hi.slice(0, k), rem.slice(0, k), joined, ctx.stream);
  const std::string sz = "n=" + fused::size_str(n);
  ctx.check(kFamily, "adamw_step_split master " + sz, joined, w_ref, kTolOpt, "first 2^20 checked");
  const double ms = ctx.time_ms([&] { ops::cuda::adamw_step_split(hi, rem, g, m, v, p, ctx.stream); }, 2, 5);
  fused::set_rate(ctx, ms, n * 28.0);
}

void embedding_case(Context& ctx, int64_t n, int64_t vocab, int64_t d) {
  const std::string sz = fmt::format("N={} V={} D={}", n, vocab, d);
  Tensor tokens = ctx.randint_cpu({n}, static_cast<int32_t>(vocab));
  Tensor tokens_g = tokens.to(ctx.stream);
  Tensor master_c = ctx.randn_cpu({vocab, d}, DType::kF32),
         grad_c = ctx.randn_cpu({vocab, d}, DType::kF32, 0.1);
  Tensor m_c = ctx.randn_cpu({vocab, d}, DType::kF32, 0.01),
         v_c = ctx.randn_cpu({vocab, d}, DType::kF32, 1e-4);
  for (float& x : std::span(v_c.data<float>(), static_cast<size_t>(vocab * d))) x = std::fabs(x);
  const ops::AdamWParams p = fused::adamw_test_params(3, 0.7f);
  Tensor master = ctx.to_gpu(master_c, DType::kF32), grad = ctx.to_gpu(grad_c, DType::kF32);
  Tensor m = ctx.to_gpu(m_c, DType::kF32), v = ctx.to_gpu(v_c, DType::kF32);
  Tensor hi = ctx.poisoned({vocab, d}, DType::kBF16), rem = ctx.poisoned({vocab, d}, DType::kI16);
  ops::cuda::master_split(master, hi, &rem, ctx.stream);
  Tensor out = ctx.poisoned({n, d}, DType::kBF16), ref = ctx.poisoned({n, d}, DType::kBF16);
  ops::cuda::embedding_forward_updated_split(tokens_g, hi, rem, grad, m, v, p, out, ctx.stream);
  ops::cuda::embedding_forward_updated(tokens_g, master, grad, m, v, p, ref, ctx.stream);
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "embedding_fwd_updated_split " + sz + " vs f32 master", bitwise_equal(out, ref),
             "bitwise");
  Tensor cpu_ref = Tensor::empty({n, d}, DType::kF32);
  ops::cpu::embedding_forward_updated(tokens, master_c, grad_c, m_c, v_c, p, cpu_ref, Stream::cpu());
  ctx.check(kFamily, "embedding_fwd_updated_split " + sz, out, cpu_ref, kTolBF16, "vs f64 AdamW rows");
  // What it stands in for: the table's adamw_step_split, then the plain lookup of hi.
  ops::cuda::adamw_step_split(hi, rem, grad, m, v, p, ctx.stream);
  Tensor looked_up = ctx.poisoned({n, d}, DType::kBF16);
  ops::cuda::embedding_forward(tokens_g, hi, looked_up, ctx.stream);
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "embedding_fwd_updated_split " + sz + " vs adamw_step_split + lookup",
             bitwise_equal(out, looked_up), "bitwise");
}

// ParamStore on CUDA.
ModelConfig store_model() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 256;
  m.ffn_hidden_size = 704;
  m.num_attention_heads = 4;
  m.num_query_groups = 2;
  m.kv_channels = 64;
  m.vocab_size = m.padded_vocab_size = 1000;
  m.untie_embeddings_and_output_weights = true;
  return m;
}

// Bitwise equality of two stores' flat buffers over the parameters (padding is not saved in checkpoints).
bool entries_equal(const ParamStore& p, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.numel() != b.numel()) return false;
  const Tensor ha = a.to(Stream::cpu()), hb = b.to(Stream::cpu());
  const size_t es = dtype_size(a.dtype());
  for (const ParamEntry& e : p.entries())
    if (std::memcmp(static_cast<const char*>(ha.data_ptr()) + e.offset * es,
                    static_cast<const char*>(hb.data_ptr()) + e.offset * es, e.numel * es) != 0)
      return false;
  return true;
}

std::vector<uint32_t> master_bits(ParamStore& p, const Stream& s) {
  std::vector<uint32_t> out;
  for (int i = 0; i < static_cast<int>(p.entries().size()); ++i) {
    const Tensor t = p.master_f32(i, s).to(Stream::cpu());
    const auto* b = static_cast<const uint32_t*>(t.data_ptr());
    out.insert(out.end(), b, b + t.numel());
  }
  return out;
}

void store_case(Context& ctx) {
  const ModelSpec spec = ModelSpec::from_config(store_model());
  ParamStore rem(spec), f32(spec);
  rem.allocate(DType::kBF16, ctx.stream);  // the default rule on CUDA
  f32.allocate(DType::kBF16, ctx.stream, DType::kF32, MasterStorage::kF32);
  check_true(ctx, kFamily, "ParamStore: remainders by default on CUDA", rem.master_in_remainders(),
             "PRIMUS_MASTER_REMAINDERS unset or 1");
  const double mb = static_cast<double>(rem.total_numel()) * 2 / 1e6;
  ctx.info(kFamily, "ParamStore: master bytes",
           fmt::format("{:.1f} MB of remainders vs {:.1f} MB of f32", mb, 2 * mb));
  rem.initialize(5, ctx.stream);
  f32.initialize(5, ctx.stream);
  stream_sync(ctx.stream);
  check_true(ctx, kFamily, "ParamStore init: compute copy",
             bitwise_equal(rem.compute_flat(), f32.compute_flat()), "bitwise, remainders vs f32 master");
  check_true(ctx, kFamily, "ParamStore init: master_f32",
             master_bits(rem, ctx.stream) == master_bits(f32, ctx.stream), "bitwise, joined vs f32 buffer");
  // set_master from the host and from the device; master_f32 reads back the value, param() its rounding.
  const int i = rem.find("layers.0.mlp.down_proj.weight");
  const ParamEntry& e = rem.entry(i);
  Tensor val = random_patterns(ctx, e.numel);
  auto* vb = static_cast<uint32_t*>(val.data_ptr());
  for (int64_t j = 0; j < e.numel; ++j)
    if ((vb[j] & 0x7f800000u) == 0x7f800000u) vb[j] &= 0xbfffffffu;  // finite only
  bool ok = true;
  for (bool from_device : {false, true}) {
    Tensor src = from_device ? val.to(ctx.stream) : val;
    rem.set_master(i, src, ctx.stream);
    f32.set_master(i, src, ctx.stream);
    const Tensor back = rem.master_f32(i, ctx.stream).to(Stream::cpu());
    stream_sync(ctx.stream);
    ok = ok && std::memcmp(back.data_ptr(), val.data_ptr(), val.nbytes()) == 0 &&
         bitwise_equal(rem.param(i), f32.param(i));
  }
  check_true(ctx, kFamily, "ParamStore set_master / master_f32 (host and device values)", ok, "bitwise");
  bool threw = false;
  try {
    rem.master_flat();
  } catch (const Error&) {
    threw = true;
  }
  check_true(ctx, kFamily, "ParamStore: master_flat() refuses remainders", threw);

  // AdamW over both stores, then a checkpoint saved from the remainders, loaded into both layouts.
  OptimConfig oc;
  oc.weight_decay = 0.1;
  AdamW a(oc, rem), b(oc, f32);
  for (int step = 0; step < 3; ++step) {
    Tensor g = fused::gpu_randn(ctx, {rem.total_numel()}, DType::kF32, 0.05);
    rem.grad_flat().copy_from(g, ctx.stream);
    f32.grad_flat().copy_from(g, ctx.stream);
    a.step(1e-2, 0.8f, ctx.stream);
    b.step(1e-2, 0.8f, ctx.stream);
  }
  stream_sync(ctx.stream);
  const std::vector<uint32_t> master = master_bits(rem, ctx.stream);
  check_true(ctx, kFamily, "AdamW over ParamStore: 3 steps",
             master == master_bits(f32, ctx.stream) &&
                 bitwise_equal(rem.compute_flat(), f32.compute_flat()) &&
                 bitwise_equal(rem.adam_v_flat(), f32.adam_v_flat()),
             "bitwise: master, compute copy, v; remainders vs f32 master");

  const log::Level saved = log::level();
  log::set_level(log::Level::kError);
  const std::string root = (std::filesystem::temp_directory_path() / "primus-gpu-rem-ckpt").string();
  std::filesystem::remove_all(root);
  ckpt::Stager stager;
  ckpt::TrainingState st;
  st.iteration = 3;
  st.optimizer_steps = 3;
  st.global_batch_size = 1;
  st.model.name = "remainder-gpu-test";
  const std::string dir =
      ckpt::publish_checkpoint(stager.stage(rem, ctx.stream, st, "seed: 1\n", true), root, 0).dir;
  const ckpt::Verification v = ckpt::verify_checkpoint(dir);
  bool files_ok = v.ok;
  if (v.ok) {
    ckpt::CheckpointReader r(v);
    std::vector<uint32_t> from_file;
    for (const ParamEntry& pe : rem.entries()) {
      const Tensor t = r.read("master", pe.name);
      files_ok = files_ok && t.dtype() == DType::kF32;
      const auto* fb = static_cast<const uint32_t*>(t.data_ptr());
      from_file.insert(from_file.end(), fb, fb + t.numel());
    }
    files_ok = files_ok && from_file == master;
  }
  check_true(ctx, kFamily, "checkpoint from remainders: f32 master file", files_ok,
             "bitwise the joined masters");
  ParamStore rem2(spec), f32b(spec);
  rem2.allocate(DType::kBF16, ctx.stream);
  f32b.allocate(DType::kBF16, ctx.stream, DType::kF32, MasterStorage::kF32);
  bool load_ok = v.ok;
  if (v.ok) {
    ckpt::load_into_params(v, rem2, ctx.stream, ckpt::LoadOptions{});
    ckpt::load_into_params(v, f32b, ctx.stream, ckpt::LoadOptions{});
    stream_sync(ctx.stream);
    load_ok = master_bits(rem2, ctx.stream) == master && master_bits(f32b, ctx.stream) == master &&
              entries_equal(rem, rem2.compute_flat(), rem.compute_flat()) &&
              entries_equal(rem, rem2.remainder_flat(), rem.remainder_flat()) &&
              entries_equal(rem, f32b.compute_flat(), rem.compute_flat()) &&
              entries_equal(rem, rem2.adam_m_flat(), rem.adam_m_flat());
  }
  check_true(ctx, kFamily, "checkpoint from remainders loads into remainders and f32 master", load_ok,
             "bitwise: master, compute copy, remainder, m");
  std::filesystem::remove_all(root);
  log::set_level(saved);
}

// Three steps of a 2-layer MoE model with the expert bias, masters in remainders vs an f32 master buffer:
// losses, the bias (f32, moved by the balancing rule every step) and every weight bitwise.
void moe_bias_case(Context& ctx) {
  ModelConfig m = store_model();
  m.moe.num_experts = 8;
  m.moe.topk = 2;
  m.moe.ffn_hidden_size = 128;
  m.moe.layer_is_moe = {1, 1};
  m.moe.expert_bias = true;
  m.moe.score_function = "sigmoid";
  m.moe.normalize_topk = true;
  m.moe.load_balancing = "none";
  const ModelSpec spec = ModelSpec::from_config(m);
  const int64_t B = 2, T = 128;
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int step = 0; step < 3; ++step)
    batches.emplace_back(ctx.randint_cpu({B, T}, static_cast<int32_t>(m.vocab_size)).to(ctx.stream),
                         ctx.randint_cpu({B, T}, static_cast<int32_t>(m.vocab_size)).to(ctx.stream));
  struct Out {
    std::vector<double> losses;
    std::vector<uint32_t> master;
    Tensor compute;
    std::vector<float> bias;
  };
  auto train = [&](MasterStorage storage) {
    ParamStore params(spec);
    params.allocate(DType::kBF16, ctx.stream, DType::kF32, storage);
    params.initialize(9, ctx.stream);
    LlamaModel model(m, RecomputeConfig{}, params, ctx.stream, T);
    OptimConfig oc;
    AdamW optim(oc, params);
    Out o;
    for (const auto& [tokens, targets] : batches) {
      params.begin_grad_step(ctx.stream);
      Tensor l = model.forward_backward(tokens, targets, 1.0f / static_cast<float>(B * T), 1.0f);
      params.end_grad_step(ctx.stream);
      model.end_step();
      optim.step(1e-3, 1.0f, ctx.stream);
      double sum = 0;
      for (double v : l.to_vector<double>()) sum += v;
      o.losses.push_back(sum);
    }
    stream_sync(ctx.stream);
    o.master = master_bits(params, ctx.stream);
    o.compute = params.compute_flat().to(Stream::cpu());
    o.bias = params.master_f32(params.find("layers.1.mlp.router.expert_bias"), ctx.stream).to_vector<float>();
    return o;
  };
  const Out f32 = train(MasterStorage::kF32), rem = train(MasterStorage::kRemainders);
  bool moved = false;
  for (float b : rem.bias) moved = moved || b != 0.0f;
  check_true(ctx, kFamily, "MoE expert bias: 3 steps, remainders vs f32 master",
             moved && rem.losses == f32.losses && rem.bias == f32.bias && rem.master == f32.master &&
                 bitwise_equal(rem.compute, f32.compute),
             "bitwise: losses, expert bias (moved), masters, compute copy");
}

}  // namespace

PRIMUS_GPU_TEST(optimizer_remainder) {
  for (auto [n, off] : std::initializer_list<std::pair<int64_t, int64_t>>{{1, 0},
                                                                          {31, 0},
                                                                          {33, 1},
                                                                          {127, 0},
                                                                          {1000, 1},
                                                                          {(int64_t{1} << 22) + 5, 0},
                                                                          {(int64_t{1} << 22) + 5, 3}})
    split_join_case(ctx, n, off);
  adamw_split_case(ctx, 31, 0, 3);
  adamw_split_case(ctx, 33, 1, 3);
  adamw_split_case(ctx, 127, 0, 4);
  adamw_split_case(ctx, 1000, 1, 5);
  adamw_split_case(ctx, (int64_t{1} << 20) + 3, 0, 5);
  adamw_split_case(ctx, (int64_t{1} << 20) + 1, 2, 2);
  embedding_case(ctx, 127, 31, 33);
  embedding_case(ctx, 1000, 127, 64);
  embedding_case(ctx, 4099, 32000, 256);
  store_case(ctx);
  moe_bias_case(ctx);
  model_size(ctx, ctx.quick ? int64_t{100} * 1000 * 1000 : int64_t{1500} * 1000 * 1000);
}

}  // namespace primus::gputest
