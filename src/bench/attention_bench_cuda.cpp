// GPU half of the attention benchmark (CUDA builds only).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "bench/attention_bench.h"
#include "bench/event_timing.h"
#include "core/cuda_check.h"
#include "core/device.h"
#include "core/tensor.h"
#include "ops/cuda/attention_backend.h"
#include "ops/cuda/attention_cuda.h"

namespace primus::bench {

namespace {

// Fills a bf16 device tensor with N(0, 1) values: a random 1 Mi-element host block copied over the tensor
// (timing needs realistic values, not zeros; it does not need every element independent).
void fill_random(Tensor& t, std::mt19937_64& rng, const Stream& s) {
  constexpr int64_t kBlock = 1 << 20;
  std::vector<bf16_t> host(static_cast<size_t>(std::min<int64_t>(kBlock, t.numel())));
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& v : host) v = float_to_bf16(nd(rng));
  auto* dst = static_cast<char*>(t.data_ptr());
  for (int64_t off = 0; off < t.numel(); off += kBlock) {
    const int64_t n = std::min<int64_t>(kBlock, t.numel() - off);
    device_copy(dst + off * 2, t.device(), host.data(), Device::cpu(), static_cast<size_t>(n) * 2, s);
  }
}

double median_ms(const std::function<void()>& fn, int warmup, int iters, const Stream& s) {
  return bench::time_runs([&](int) { fn(); }, warmup, iters, s).median_ms;
}

}  // namespace

std::vector<AttentionBenchResult> run_attention_benchmark_cuda(const AttentionBenchOptions& opt) {
  using ops::cuda::AttentionBackend;
  PRIMUS_CUDA_CHECK(cudaSetDevice(opt.device));
  const Stream s = cuda_compute_stream(opt.device);
  cudaDeviceProp prop;
  PRIMUS_CUDA_CHECK(cudaGetDeviceProperties(&prop, opt.device));

  ops::AttentionShape shape;
  shape.batch = opt.batch;
  shape.seq = opt.seq;
  shape.heads = opt.heads;
  shape.kv_heads = opt.kv_heads;
  shape.head_dim = opt.head_dim;
  shape.scale = 1.0f / std::sqrt(static_cast<float>(opt.head_dim));
  shape.causal = opt.causal;
  const int64_t w = (opt.heads + 2 * opt.kv_heads) * opt.head_dim;

  std::mt19937_64 rng(1234);
  Tensor qkv = Tensor::empty({opt.batch, opt.seq, w}, DType::kBF16, s);
  Tensor dout = Tensor::empty({opt.batch, opt.seq, opt.heads * opt.head_dim}, DType::kBF16, s);
  Tensor out = Tensor::empty({opt.batch, opt.seq, opt.heads * opt.head_dim}, DType::kBF16, s);
  Tensor lse = Tensor::empty({opt.batch, opt.heads, opt.seq}, DType::kF32, s);
  Tensor dqkv = Tensor::empty({opt.batch, opt.seq, w}, DType::kBF16, s);
  fill_random(qkv, rng, s);
  fill_random(dout, rng, s);

  std::vector<std::string> backends = opt.backend == "all" ? std::vector<std::string>{"cudnn", "flash"}
                                                           : std::vector<std::string>{opt.backend};
  const AttentionBackend saved = ops::cuda::attention_backend();
  const double fwd_flop = attention_fwd_flops(opt.batch, opt.heads, opt.seq, opt.head_dim, opt.causal);
  std::vector<AttentionBenchResult> results;
  for (const auto& be : backends) {
    ops::cuda::set_attention_backend(ops::cuda::parse_attention_backend(be));
    AttentionBenchResult r;
    r.batch = opt.batch;
    r.heads = opt.heads;
    r.kv_heads = opt.kv_heads;
    r.seq = opt.seq;
    r.head_dim = opt.head_dim;
    r.causal = opt.causal;
    r.backend = be;
    r.device_name = prop.name;
    r.fwd_backend = ops::cuda::attention_backend_for(shape, false);
    r.bwd_backend = ops::cuda::attention_backend_for(shape, true);
    r.fwd_ms =
        median_ms([&] { ops::cuda::attention_forward(qkv, shape, out, lse, s); }, opt.warmup, opt.iters, s);
    r.bwd_ms = median_ms([&] { ops::cuda::attention_backward(dout, qkv, out, lse, shape, dqkv, s); },
                         opt.warmup, opt.iters, s);
    r.fwd_tflops = fwd_flop / (r.fwd_ms * 1e-3) / 1e12;
    r.bwd_tflops = 2.5 * fwd_flop / (r.bwd_ms * 1e-3) / 1e12;
    results.push_back(r);
  }
  ops::cuda::set_attention_backend(saved);
  return results;
}

}  // namespace primus::bench
