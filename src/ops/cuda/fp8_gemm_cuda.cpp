// FP8 GEMM on CUDA: validate, describe the problem in row-major terms with a scale mode per operand, hand it
// to the cuBLASLt layer (gemm_lt.h), which swaps to its column-major view (its A = our b, its B = our a),
// caches the descriptors per problem and picks the algorithm. Both operands are stored [outer, K] with K
// contiguous, so cuBLASLt sees A transposed and B not: the "TN" layout, the only one Hopper's FP8 tensor
// cores take. docs/kernels/fp8.md.
#include "ops/cuda/fp8_gemm_cuda.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/cuda/gemm_lt.h"

namespace primus::ops::cuda {

namespace {

constexpr const char* kOp = "fp8_gemm";

void check_gpu_tensor(const char* name, const Tensor& t, const Stream& s) {
  PRIMUS_CHECK(t.defined(), "{}: {} is undefined", kOp, name);
  PRIMUS_CHECK(t.device().is_cuda(), "{}: {} must be on the GPU, got {}", kOp, name, t.describe());
  PRIMUS_CHECK(t.device() == s.device, "{}: {} is on {} but the stream is on {}", kOp, name, t.device().str(),
               s.device.str());
  PRIMUS_CHECK(t.is_contiguous(), "{}: {} must be contiguous, got {}", kOp, name, t.describe());
}

lt::ScaleMode scale_mode(Fp8Granularity g) {
  switch (g) {
    case Fp8Granularity::kTensorwise:
      return lt::ScaleMode::kScalar;
    case Fp8Granularity::kRowwise:
      return lt::ScaleMode::kOuterVec;
    case Fp8Granularity::kBlock1x128:
      return lt::ScaleMode::kVec128;
    case Fp8Granularity::kBlock128x128:
      return lt::ScaleMode::kBlk128x128;
  }
  PRIMUS_FAIL("{}: unknown granularity {}", kOp, static_cast<int>(g));
}

// A 128x128 operand's scale_inv [rb, kb] copied into a zeroed [rb, round_up(kb, 4)] buffer on s (freed on s
// after the GEMM that reads it, by the stream-ordered allocator).
Tensor padded_block_scale(const Tensor& scale, const Stream& s) {
  const int64_t rb = scale.size(0), kb = scale.size(1), ld = (kb + 3) / 4 * 4;
  Tensor out = Tensor::empty({rb, ld}, DType::kF32, s);
  device_memset(out.data_ptr(), 0, out.nbytes(), s);
  PRIMUS_CUDA_CHECK(cudaMemcpy2DAsync(out.data_ptr(), static_cast<size_t>(ld) * 4, scale.data_ptr(),
                                      static_cast<size_t>(kb) * 4, static_cast<size_t>(kb) * 4,
                                      static_cast<size_t>(rb), cudaMemcpyDeviceToDevice, cuda_stream(s)));
  return out;
}

// One call, ready for lt::matmul: the problem, its pointers, and the padded scale copies they may point into.
struct Call {
  lt::Problem p;
  lt::Operands o;
  Tensor a_scale_pad, b_scale_pad;
};

Call prepare(const Fp8Tensor& a, const Fp8Tensor& b, const Tensor& c, float alpha, float beta,
             bool fast_accum, const Stream& s, const Tensor* c_in) {
  check_fp8_gemm(a, b, kOp);
  check_gpu_tensor("a.data", a.data, s);
  check_gpu_tensor("a.scale_inv", a.scale_inv, s);
  check_gpu_tensor("b.data", b.data, s);
  check_gpu_tensor("b.scale_inv", b.scale_inv, s);
  check_gpu_tensor("c", c, s);
  const int64_t m = a.rows(), n = b.rows(), k = a.cols();
  PRIMUS_CHECK(c.ndim() == 2 && c.size(0) == m && c.size(1) == n,
               "{}: c must be [{}, {}] (a {}, b {}), got {}", kOp, m, n, a.describe(), b.describe(),
               c.describe());
  PRIMUS_CHECK(c.dtype() == DType::kBF16 || c.dtype() == DType::kF32,
               "{}: c must be bf16 or f32 on the GPU (cuBLASLt's FP8 outputs used here), got {}", kOp,
               c.describe());
  if (c_in != nullptr) {
    check_gpu_tensor("c_in", *c_in, s);
    PRIMUS_CHECK(c_in->shape() == c.shape() && c_in->dtype() == c.dtype(), "{}: c_in {} must match c {}", kOp,
                 c_in->describe(), c.describe());
  }
  Call call;
  lt::Problem& p = call.p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.trans_a = false;  // a [M, K]: cuBLASLt's B, not transposed
  p.trans_b = true;   // b [N, K]: cuBLASLt's A, transposed
  p.a_type = fp8_dtype(a.format);
  p.b_type = fp8_dtype(b.format);
  p.c_type = c.dtype();
  p.a_scale = scale_mode(a.granularity);
  p.b_scale = scale_mode(b.granularity);
  // Fast accumulation is for tensorwise scaling only (ops/fp8.h); elsewhere it is ignored, and kept out of
  // the plan key so that an ignored flag does not build a second plan.
  p.fast_accum = fast_accum && a.granularity == Fp8Granularity::kTensorwise &&
                 b.granularity == Fp8Granularity::kTensorwise;
  lt::Operands& o = call.o;
  o.a = a.data.data_ptr();
  o.b = b.data.data_ptr();
  o.d = c.data_ptr();
  o.c = c_in != nullptr ? c_in->data_ptr() : c.data_ptr();
  o.alpha = alpha;
  o.beta = beta;
  o.a_scale = a.scale_inv.data_ptr();
  o.b_scale = b.scale_inv.data_ptr();
  // cuBLASLt (13.1, H100) reads a 128x128 operand's scales with a leading dimension rounded up to a multiple
  // of 4 K-blocks: measured 2026-11-27 (tests/gpu/fp8_gemm_gpu_test.cpp, K = 640: the unpadded layout gave
  // rel_err 0.42 and 5e23, the padded one 2e-4). Fp8Tensor keeps ld = ceil(K / 128), so a K whose block count
  // is not a multiple of 4 gets a padded copy; the Llama shapes (K = 4096, 14336) need none.
  if (a.granularity == Fp8Granularity::kBlock128x128 && a.scale_inv.size(1) % 4 != 0) {
    call.a_scale_pad = padded_block_scale(a.scale_inv, s);
    o.a_scale = call.a_scale_pad.data_ptr();
  }
  if (b.granularity == Fp8Granularity::kBlock128x128 && b.scale_inv.size(1) % 4 != 0) {
    call.b_scale_pad = padded_block_scale(b.scale_inv, s);
    o.b_scale = call.b_scale_pad.data_ptr();
  }
  return call;
}

}  // namespace

void fp8_gemm(const Fp8Tensor& a, const Fp8Tensor& b, Tensor& c, float alpha, float beta, bool fast_accum,
              const Stream& s, const Tensor* c_in) {
  Call call = prepare(a, b, c, alpha, beta, fast_accum, s, c_in);
  lt::matmul(call.p, call.o, s);
}

std::string fp8_gemm_algo(const Fp8Tensor& a, const Fp8Tensor& b, const Tensor& c, bool fast_accum,
                          const Stream& s) {
  Call call = prepare(a, b, c, 1.0f, 0.0f, fast_accum, s, nullptr);
  return lt::plan_info(call.p, call.o, s).description;
}

}  // namespace primus::ops::cuda
