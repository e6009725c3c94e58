// Rotating operand sets and event timing for the GEMM benchmarks and the tuner. See gemm_timing.h.
#include "bench/gemm_timing.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/fp8.h"

namespace primus::bench {

namespace {

constexpr size_t kPatternElems = (1u << 22) + 4093;  // not a power of two: rows do not repeat in step

// One random host pattern per dtype, generated once per process.
const std::vector<uint8_t>& host_pattern(DType t) {
  static std::mutex mu;
  static std::vector<uint8_t> pats[4];
  const int slot = t == DType::kF32 ? 0 : t == DType::kBF16 ? 1 : t == DType::kF16 ? 2 : 3;
  std::lock_guard<std::mutex> lock(mu);
  auto& pat = pats[slot];
  if (!pat.empty()) return pat;
  std::mt19937_64 rng(0x5eed0000u + static_cast<unsigned>(slot));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  pat.resize(kPatternElems * dtype_size(t));
  for (size_t i = 0; i < kPatternElems; ++i) {
    float v = nd(rng);
    if (t == DType::kF32) {
      std::memcpy(pat.data() + 4 * i, &v, 4);
    } else if (t == DType::kBF16) {
      uint16_t b = float_to_bf16(v).bits;
      std::memcpy(pat.data() + 2 * i, &b, 2);
    } else if (t == DType::kF16) {
      __half h = __float2half(v);
      std::memcpy(pat.data() + 2 * i, &h, 2);
    } else {  // e4m3 of N(0, 4^2): every exponent of the format is used, NaN never (saturating cast)
      pat[i] = ops::float_to_fp8(4.0f * v, ops::Fp8Format::kE4M3);
    }
  }
  return pat;
}

}  // namespace

void fill_random(void* p, size_t elems, DType t, uint64_t seed, const Stream& s) {
  PRIMUS_CHECK(t == DType::kF32 || t == DType::kBF16 || t == DType::kF16 || t == DType::kFP8E4M3,
               "fill_random: unsupported dtype {}", dtype_name(t));
  if (elems == 0) return;
  const auto& pat = host_pattern(t);
  const size_t es = dtype_size(t);
  const size_t shift = static_cast<size_t>(seed % (kPatternElems / 2));
  const size_t first = std::min(elems, kPatternElems - shift);
  cudaStream_t cs = cuda_stream(s);
  PRIMUS_CUDA_CHECK(cudaMemcpyAsync(p, pat.data() + shift * es, first * es, cudaMemcpyHostToDevice, cs));
  size_t done = first;
  char* base = static_cast<char*>(p);
  while (done < elems) {
    const size_t n = std::min(done, elems - done);
    PRIMUS_CUDA_CHECK(cudaMemcpyAsync(base + done * es, base, n * es, cudaMemcpyDeviceToDevice, cs));
    done += n;
  }
  // The pageable host source must stay put until the copy has read it; it is static, but the copies must also
  // finish before timing starts.
  PRIMUS_CUDA_CHECK(cudaStreamSynchronize(cs));
}

GemmOperandSets::GemmOperandSets(const lt::Problem& p, COperand c, size_t rotate_bytes, size_t max_bytes,
                                 const Stream& s, uint64_t seed) {
  const size_t a_bytes = static_cast<size_t>(p.m * p.k) * dtype_size(p.a_type);
  const size_t b_bytes = static_cast<size_t>(p.k * p.n) * dtype_size(p.b_type);
  const size_t d_bytes = static_cast<size_t>(p.m * p.n) * dtype_size(p.c_type);
  const size_t c_bytes = c == COperand::kSeparate ? d_bytes : 0;
  const size_t bias_bytes =
      p.epilogue == lt::Epilogue::kBias ? static_cast<size_t>(p.n) * dtype_size(p.c_type) : 0;
  const size_t bgrad_bytes =
      p.epilogue == lt::Epilogue::kBgrad ? static_cast<size_t>(p.m) * dtype_size(p.c_type) : 0;
  bytes_per_set_ = a_bytes + b_bytes + d_bytes + c_bytes + bias_bytes + bgrad_bytes;
  size_t n_sets = std::max<size_t>(1, (rotate_bytes + bytes_per_set_ - 1) / bytes_per_set_);
  n_sets = std::min<size_t>(n_sets, std::max<size_t>(1, max_bytes / bytes_per_set_));
  n_sets = std::min<size_t>(n_sets, 256);
  PRIMUS_CUDA_CHECK(cudaSetDevice(s.device.index));
  try {
    for (size_t i = 0; i < n_sets; ++i) {
      lt::Operands o;
      uint64_t sd = seed + 7919 * i;
      void* a = alloc(a_bytes);
      fill_random(a, a_bytes / dtype_size(p.a_type), p.a_type, sd + 1, s);
      void* b = alloc(b_bytes);
      fill_random(b, b_bytes / dtype_size(p.b_type), p.b_type, sd + 2, s);
      void* d = alloc(d_bytes);
      fill_random(d, d_bytes / dtype_size(p.c_type), p.c_type, sd + 3, s);
      o.a = a;
      o.b = b;
      o.d = d;
      o.alpha = 1.0f;
      o.beta = c == COperand::kNone ? 0.0f : 1.0f;
      o.c = d;
      if (c == COperand::kSeparate) {
        void* cc = alloc(c_bytes);
        fill_random(cc, c_bytes / dtype_size(p.c_type), p.c_type, sd + 4, s);
        o.c = cc;
      }
      if (bias_bytes) {
        void* bias = alloc(bias_bytes);
        fill_random(bias, static_cast<size_t>(p.n), p.c_type, sd + 5, s);
        o.bias = bias;
      }
      if (bgrad_bytes) o.bgrad = alloc(bgrad_bytes);
      sets_.push_back(o);
    }
  } catch (...) {
    for (void* q : allocations_) cudaFree(q);
    throw;
  }
}

void* GemmOperandSets::alloc(size_t bytes) {
  void* q = nullptr;
  cudaError_t e = cudaMalloc(&q, std::max<size_t>(bytes, 256));
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(ErrorKind::kRuntime,
                fmt::format("GEMM benchmark: cannot allocate {:.2f} GiB for operand set {} ({})",
                            bytes / 1073741824.0, sets_.size(), cudaGetErrorString(e)));
  }
  allocations_.push_back(q);
  return q;
}

GemmOperandSets::~GemmOperandSets() {
  for (void* q : allocations_) cudaFree(q);
}

std::vector<float> download_as_float(const void* p, size_t elems, DType t, const Stream& s) {
  std::vector<float> out(elems);
  if (elems == 0) return out;
  if (t == DType::kF32) {
    PRIMUS_CUDA_CHECK(cudaMemcpyAsync(out.data(), p, elems * 4, cudaMemcpyDeviceToHost, cuda_stream(s)));
    PRIMUS_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(s)));
    return out;
  }
  std::vector<uint16_t> raw(elems);
  PRIMUS_CUDA_CHECK(cudaMemcpyAsync(raw.data(), p, elems * 2, cudaMemcpyDeviceToHost, cuda_stream(s)));
  PRIMUS_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(s)));
  const bool bf = t == DType::kBF16;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(elems); ++i) {
    if (bf) {
      out[i] = bf16_to_float(bf16_t{raw[i]});
    } else {
      __half_raw hr;
      hr.x = raw[i];
      out[i] = __half2float(__half(hr));
    }
  }
  return out;
}

double relative_error(const std::vector<float>& x, const std::vector<float>& ref) {
  if (x.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  bool finite = true;
#pragma omp parallel for reduction(+ : num, den) reduction(&& : finite) schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    const double a = x[i], b = ref[i];
    finite = finite && std::isfinite(a);
    num += (a - b) * (a - b);
    den += b * b;
  }
  if (!finite) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace primus::bench
