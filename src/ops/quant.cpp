// The FP8 cast family (ops/fp8.h): argument checks shared by both backends, then dispatch on x's device to
// the CPU emulation (cpu/quant.cpp) or the CUDA kernels (cuda/quant.cu). Every message starts with the
// caller's `what` (or the op's name), names the offending tensor and says what was expected.
#include <fmt/format.h>

#include "ops/cpu/quant_cpu.h"
#include "ops/fp8.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/quant_cuda.h"
#endif

namespace primus::ops {

namespace {

std::string expected(DType dtype, const Shape& shape, Device dev) {
  return fmt::format("{}{} on {}", dtype_name(dtype), shape_str(shape), dev.str());
}

// Defined, on `dev`, contiguous, of this dtype and shape.
void check_tensor(const char* what, const char* name, const Tensor& t, DType dtype, const Shape& shape,
                  Device dev) {
  PRIMUS_CHECK(t.defined(), "{}: {} is undefined (expected {})", what, name, expected(dtype, shape, dev));
  PRIMUS_CHECK(t.device() == dev && t.dtype() == dtype && t.shape() == shape, "{}: {} must be {}, got {}",
               what, name, expected(dtype, shape, dev), t.describe());
  PRIMUS_CHECK(t.is_contiguous(), "{}: {} must be contiguous, got {} with strides {}", what, name,
               t.describe(), shape_str(t.strides()));
}

// An FP8 tensor of [rows, cols] on `dev` whose data and scale_inv match its format and granularity.
void check_fp8(const char* what, const std::string& name, const Fp8Tensor& t, int64_t rows, int64_t cols,
               Device dev) {
  const std::string data = name + ".data", inv = name + ".scale_inv";
  check_tensor(what, data.c_str(), t.data, fp8_dtype(t.format), {rows, cols}, dev);
  check_tensor(what, inv.c_str(), t.scale_inv, DType::kF32, fp8_scale_shape(t.granularity, rows, cols), dev);
}

// x: 2-D, contiguous, at least one element; bf16 / f32 on CUDA, f32 / f64 on the CPU.
void check_input(const char* what, const char* name, const Tensor& x) {
  PRIMUS_CHECK(x.defined(), "{}: {} is undefined", what, name);
  PRIMUS_CHECK(x.is_contiguous(), "{}: {} must be contiguous, got {} with strides {}", what, name,
               x.describe(), shape_str(x.strides()));
  if (x.device().is_cpu()) {
    PRIMUS_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kF64,
                 "{}: {} must be f32 or f64 on the cpu, got {}", what, name, x.describe());
  } else {
    PRIMUS_CHECK(x.dtype() == DType::kBF16 || x.dtype() == DType::kF32,
                 "{}: {} must be bf16 or f32 on {}, got {}", what, name, x.device().str(), x.describe());
  }
}

bool overlaps(const Tensor& a, const Tensor& b) {
  const char* a0 = static_cast<const char*>(a.data_ptr());
  const char* b0 = static_cast<const char*>(b.data_ptr());
  return a.nbytes() > 0 && b.nbytes() > 0 && a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

}  // namespace

void quantize(const Tensor& x, Fp8Tensor* out, Fp8Tensor* out_t, const QuantizeArgs& args, const Stream& s,
              const char* what) {
  check_input(what, "x", x);
  PRIMUS_CHECK(x.ndim() == 2 && x.size(0) >= 1 && x.size(1) >= 1,
               "{}: x must be 2-D [rows, cols] with rows, cols >= 1, got {}", what, x.describe());
  PRIMUS_CHECK(out != nullptr || out_t != nullptr, "{}: neither out nor out_t was given (x {})", what,
               x.describe());
  const int64_t rows = x.size(0), cols = x.size(1);
  const Device dev = x.device();
  if (out != nullptr) check_fp8(what, "out", *out, rows, cols, dev);
  if (out_t != nullptr) check_fp8(what, "out_t", *out_t, cols, rows, dev);
  if (args.scale != nullptr) {
    check_tensor(what, "args.scale", *args.scale, DType::kF32, {1}, dev);
    for (const Fp8Tensor* o : {out, out_t}) {
      PRIMUS_CHECK(o == nullptr || o->granularity == Fp8Granularity::kTensorwise,
                   "{}: args.scale is the multiplier of tensorwise outputs, but {} {} is {} (computed scales "
                   "take no args.scale)",
                   what, o == out ? "out" : "out_t", o->describe(), fp8_granularity_name(o->granularity));
    }
  }
  if (args.amax_out != nullptr) check_tensor(what, "args.amax_out", *args.amax_out, DType::kF32, {1}, dev);

  // Nothing written may overlap x or anything else written.
  struct Named {
    const char* name;
    const Tensor* t;
  };
  std::vector<Named> written;
  if (out != nullptr)
    written.insert(written.end(), {{"out.data", &out->data}, {"out.scale_inv", &out->scale_inv}});
  if (out_t != nullptr)
    written.insert(written.end(), {{"out_t.data", &out_t->data}, {"out_t.scale_inv", &out_t->scale_inv}});
  if (args.amax_out != nullptr) written.push_back({"args.amax_out", args.amax_out});
  for (size_t i = 0; i < written.size(); ++i) {
    PRIMUS_CHECK(!overlaps(*written[i].t, x), "{}: {} overlaps the input x {}", what, written[i].name,
                 x.describe());
    if (args.scale != nullptr)
      PRIMUS_CHECK(!overlaps(*written[i].t, *args.scale), "{}: {} overlaps args.scale", what,
                   written[i].name);
    for (size_t j = 0; j < i; ++j)
      PRIMUS_CHECK(!overlaps(*written[i].t, *written[j].t), "{}: {} overlaps {}", what, written[i].name,
                   written[j].name);
  }
  PRIMUS_DISPATCH(x, quantize, x, out, out_t, args, s, what);
}

void dequantize(const Fp8Tensor& t, Tensor& x, const Stream& s) {
  constexpr const char* op = "dequantize";
  PRIMUS_CHECK(t.defined() && t.data.ndim() == 2, "{}: t must be a 2-D FP8 tensor, got {}", op,
               t.defined() ? t.data.describe() : std::string("an undefined one"));
  const Device dev = t.data.device();
  check_fp8(op, "t", t, t.rows(), t.cols(), dev);
  check_tensor(op, "x", x, DType::kF32, {t.rows(), t.cols()}, dev);
  PRIMUS_CHECK(!overlaps(x, t.data) && !overlaps(x, t.scale_inv), "{}: x overlaps t ({})", op, t.describe());
  PRIMUS_DISPATCH(t.data, dequantize, t, x, s);
}

void amax(const Tensor& x, Tensor& amax, const Stream& s) {
  constexpr const char* op = "amax";
  check_input(op, "x", x);
  check_tensor(op, "amax", amax, DType::kF32, {1}, x.device());
  PRIMUS_CHECK(!overlaps(x, amax), "{}: amax overlaps x {}", op, x.describe());
  PRIMUS_DISPATCH(x, amax, x, amax, s);
}

}  // namespace primus::ops
