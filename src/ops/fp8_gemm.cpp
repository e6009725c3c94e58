// The FP8 GEMM's contract (check_fp8_gemm) and its dispatch to the CPU reference or cuBLASLt (ops/fp8.h,
// docs/kernels/fp8.md).
#include <fmt/format.h>

#include "ops/cpu/fp8_gemm_cpu.h"
#include "ops/fp8.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/fp8_gemm_cuda.h"
#endif

namespace primus::ops {

namespace {

bool is_block(Fp8Granularity g) {
  return g == Fp8Granularity::kBlock1x128 || g == Fp8Granularity::kBlock128x128;
}

// One operand on its own: defined, 2-D data of its format's dtype, f32 scale_inv of its granularity's shape,
// both contiguous and on one device.
void check_operand(const Fp8Tensor& t, const char* name, const char* what) {
  PRIMUS_CHECK(t.data.defined(), "{}: {} is undefined (an Fp8Tensor without data)", what, name);
  PRIMUS_CHECK(t.data.ndim() == 2, "{}: {}.data must be 2-D [rows, K], got {}", what, name,
               t.data.describe());
  PRIMUS_CHECK(t.data.dtype() == fp8_dtype(t.format), "{}: {}.data is {} but {}.format is {}: expected {}",
               what, name, t.data.describe(), name, fp8_format_name(t.format),
               dtype_name(fp8_dtype(t.format)));
  PRIMUS_CHECK(t.data.is_contiguous(), "{}: {}.data must be contiguous, got {} with strides {}", what, name,
               t.data.describe(), shape_str(t.data.strides()));
  PRIMUS_CHECK(t.scale_inv.defined(), "{}: {}.scale_inv is undefined ({} {})", what, name,
               fp8_granularity_name(t.granularity), t.data.describe());
  PRIMUS_CHECK(t.scale_inv.dtype() == DType::kF32, "{}: {}.scale_inv must be f32, got {}", what, name,
               t.scale_inv.describe());
  const Shape want = fp8_scale_shape(t.granularity, t.rows(), t.cols());
  PRIMUS_CHECK(t.scale_inv.shape() == want, "{}: {}.scale_inv must be {} for a {} operand [{}, {}], got {}",
               what, name, shape_str(want), fp8_granularity_name(t.granularity), t.rows(), t.cols(),
               t.scale_inv.describe());
  PRIMUS_CHECK(t.scale_inv.is_contiguous(), "{}: {}.scale_inv must be contiguous, got {} with strides {}",
               what, name, t.scale_inv.describe(), shape_str(t.scale_inv.strides()));
  PRIMUS_CHECK(t.scale_inv.device() == t.data.device(), "{}: {}.scale_inv is on {} but {}.data on {}", what,
               name, t.scale_inv.device().str(), name, t.data.device().str());
}

bool supported_pair(Fp8Granularity a, Fp8Granularity b) {
  for (const Fp8ScalingPair& p : kFp8GemmPairs)
    if (p.a == a && p.b == b) return true;
  return false;
}

}  // namespace

void check_fp8_gemm(const Fp8Tensor& a, const Fp8Tensor& b, const char* what) {
  check_operand(a, "a", what);
  check_operand(b, "b", what);
  PRIMUS_CHECK(b.data.device() == a.data.device(), "{}: b is on {} but a is on {}", what,
               b.data.device().str(), a.data.device().str());
  PRIMUS_CHECK(a.cols() == b.cols(),
               "{}: a and b must share K (their cols; b is stored [N, K]): a is {}, b is {} (K {} vs {})",
               what, a.describe(), b.describe(), a.cols(), b.cols());
  PRIMUS_CHECK(a.format == Fp8Format::kE4M3 || b.format == Fp8Format::kE4M3,
               "{}: a and b are both e5m2 ({} x {}); Hopper's FP8 GEMM needs at least one e4m3 operand", what,
               a.describe(), b.describe());
  if (a.granularity == Fp8Granularity::kBlock128x128 && b.granularity == Fp8Granularity::kBlock128x128)
    throw Error(
        ErrorKind::kRuntime,
        fmt::format("{}: scaling pair a=128x128 x b=128x128 is not supported: cuBLASLt on Hopper has no "
                    "BLK128x128 x BLK128x128 kernel (quantise one operand 1x128)",
                    what));
  PRIMUS_CHECK(supported_pair(a.granularity, b.granularity),
               "{}: scaling pair a={} x b={} is not supported (supported: tensorwise x tensorwise, rowwise x "
               "rowwise, 1x128 x 128x128, 1x128 x 1x128, 128x128 x 1x128)",
               what, fp8_granularity_name(a.granularity), fp8_granularity_name(b.granularity));
  const int64_t m = a.rows(), n = b.rows(), k = a.cols();
  const bool block = is_block(a.granularity) || is_block(b.granularity);
  const int64_t k_mult = block ? 128 : 16;
  PRIMUS_CHECK(k > 0 && k % k_mult == 0, "{}: K = {} must be a positive multiple of {}{} (a {}, b {})", what,
               k, k_mult, block ? " for blockwise scaling" : "", a.describe(), b.describe());
  // M (a's rows, the tokens) may be any count -- only leading dimensions and pointers need 16-byte alignment
  // (a's rows are K bytes apart), which is how the MoE experts run their routed rows (model/fp8_experts.h) --
  // except for a 1x128-scaled a: cuBLASLt (13.1, H100) has no kernel for one whose rows are not a multiple of
  // 16 (measured 2026-11-28: 1, 31, 33, 127, 270, 967 rows; tests/gpu/fp8_gemm_gpu_test.cpp "odd rows").
  PRIMUS_CHECK(m > 0, "{}: M = a's rows = {} must be positive (a {})", what, m, a.describe());
  PRIMUS_CHECK(a.granularity != Fp8Granularity::kBlock1x128 || m % 16 == 0,
               "{}: M = a's rows = {} must be a multiple of 16 for a 1x128-scaled a (cuBLASLt has no kernel "
               "otherwise; a {})",
               what, m, a.describe());
  PRIMUS_CHECK(n > 0 && n % 16 == 0, "{}: N = b's rows = {} must be a positive multiple of 16 (b {})", what,
               n, b.describe());
}

void fp8_gemm(const Fp8Tensor& a, const Fp8Tensor& b, Tensor& c, float alpha, float beta, bool fast_accum,
              const Stream& s, const Tensor* c_in) {
  check_fp8_gemm(a, b, "fp8_gemm");
  check_same_device("fp8_gemm", a.data.device(), {&a.data, &a.scale_inv, &b.data, &b.scale_inv, &c, c_in});
  PRIMUS_DISPATCH(a.data, fp8_gemm, a, b, c, alpha, beta, fast_accum, s, c_in);
}

}  // namespace primus::ops
