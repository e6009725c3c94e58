// ops::cuda::attention_forward / attention_backward: validate, pick a backend per shape, run it.
//
// auto (the default) uses cuDNN's fused attention wherever it takes the shape and our flash kernels
// elsewhere. The decision is made once per (shape, direction) and logged at debug level; a cuDNN refusal
// (NOT_SUPPORTED from the graph or from every engine) is remembered, so the hot path costs one map lookup.
// Packed sequences (shape.seg_starts) always run on the flash kernels: cuDNN's graph here has no document
// mask, so auto routes them to flash and a forced cudnn refuses them.
#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "core/cuda_check.h"
#include "core/device.h"
#include "core/log.h"
#include "ops/cuda/attention_backend.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/attention_flash.h"

namespace primus::ops::cuda {

namespace {

std::mutex& mu() {
  static std::mutex m;
  return m;
}

AttentionBackend& current() {
  static AttentionBackend b = [] {
    const char* e = std::getenv("PRIMUS_ATTENTION_BACKEND");
    return e && *e ? parse_attention_backend(e) : AttentionBackend::kAuto;
  }();
  return b;
}

struct ChoiceKey {
  int device;
  bool backward;
  int64_t b, t, h, kv, d, dv;
  bool causal;
  float scale;
  AttentionBackend mode;
  bool deterministic;  // backward only: cuDNN's deterministic variant may be refused where the default is not
  bool segmented;      // packed sequences: flash only (the segment values do not change the choice)
  bool operator<(const ChoiceKey& o) const {
    return std::tie(device, backward, b, t, h, kv, d, dv, causal, scale, mode, deterministic, segmented) <
           std::tie(o.device, o.backward, o.b, o.t, o.h, o.kv, o.d, o.dv, o.causal, o.scale, o.mode,
                    o.deterministic, o.segmented);
  }
};

std::string shape_str(const AttentionShape& s) {
  return fmt::format("B={} T={} H={} KV={} D={}{} causal={}{}", s.batch, s.seq, s.heads, s.kv_heads,
                     s.head_dim, s.dv() != s.head_dim ? fmt::format(" Dv={}", s.dv()) : "", s.causal,
                     s.segmented() ? " packed" : "");
}

// true = cuDNN, false = flash. Throws when the forced backend cannot run the shape.
bool choose(const AttentionShape& s, bool backward, int device) {
  const AttentionBackend mode = attention_backend();
  static std::map<ChoiceKey, bool> memo;
  const ChoiceKey key{device,       backward,   s.batch,    s.seq,
                      s.heads,      s.kv_heads, s.head_dim, s.dv(),
                      s.causal,     s.scale,    mode,       backward && deterministic_attention(),
                      s.segmented()};
  {
    std::lock_guard<std::mutex> lock(mu());
    auto it = memo.find(key);
    if (it != memo.end()) return it->second;
  }
  const char* dir = backward ? "backward" : "forward";
  std::string why_cudnn, why_flash;
  const bool flash_ok = flash_attention_supported(s, &why_flash);
  bool use_cudnn = false;
  if (mode != AttentionBackend::kFlash) {
    use_cudnn = cudnn_attention_supported(s, backward, &why_cudnn) &&
                cudnn_attention_prepare(s, backward, device, &why_cudnn);
    if (!use_cudnn && mode == AttentionBackend::kCudnn)
      throw Error(ErrorKind::kRuntime,
                  fmt::format("attention {}: PRIMUS_ATTENTION_BACKEND=cudnn but cuDNN refuses {}: {}", dir,
                              shape_str(s), why_cudnn),
                  {}, "use PRIMUS_ATTENTION_BACKEND=auto to fall back to the flash kernels");
  }
  if (!use_cudnn && !flash_ok)
    throw Error(ErrorKind::kRuntime,
                fmt::format("attention {}: no backend for {}: flash: {}; cudnn: {}", dir, shape_str(s),
                            why_flash, why_cudnn.empty() ? "not tried" : why_cudnn));
  log::debug("attention {} {}: {} backend{}", dir, shape_str(s), use_cudnn ? "cudnn" : "flash",
             !use_cudnn && !why_cudnn.empty() ? " (cudnn: " + why_cudnn + ")" : "");
  std::lock_guard<std::mutex> lock(mu());
  memo[key] = use_cudnn;
  return use_cudnn;
}

void check_tensor(const char* op, const char* name, const Tensor& t, const Shape& want, DType dt,
                  const Stream& s) {
  PRIMUS_CHECK(t.defined(), "{}: {} is undefined", op, name);
  PRIMUS_CHECK(t.shape() == want && t.dtype() == dt, "{}: {} must be {} {}, got {}", op, name, dtype_name(dt),
               primus::shape_str(want), t.describe());
  PRIMUS_CHECK(t.is_contiguous(), "{}: {} must be contiguous, got {}", op, name, t.describe());
  PRIMUS_CHECK(t.device() == s.device, "{}: {} is on {}, the stream on {}", op, name, t.device().str(),
               s.device.str());
  // cuDNN and the flash kernels both read 16-byte rows.
  PRIMUS_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, "{}: {} is not 16-byte aligned", op,
               name);
}

void check_shape(const char* op, const AttentionShape& s, const Stream& st) {
  PRIMUS_CHECK(st.device.is_cuda(), "{}: stream is not a CUDA stream", op);
  PRIMUS_CHECK(s.batch >= 1 && s.seq >= 1 && s.heads >= 1 && s.kv_heads >= 1 && s.head_dim >= 1,
               "{}: bad shape {}", op, shape_str(s));
  PRIMUS_CHECK(s.heads % s.kv_heads == 0, "{}: heads {} is not a multiple of kv_heads {}", op, s.heads,
               s.kv_heads);
  PRIMUS_CHECK(s.head_dim % 8 == 0 && s.dv() % 8 == 0 && s.v_head_dim >= 0,
               "{}: head_dim {} and v_head_dim {} must be multiples of 8", op, s.head_dim, s.dv());
  if (const Tensor* seg = s.seg_starts) {
    // Only the shape is checked: reading the values back would cost a host sync per call (the kernels clamp
    // them instead; the CPU reference validates them).
    PRIMUS_CHECK(s.causal, "{}: seg_starts (packed sequences) needs causal attention", op);
    PRIMUS_CHECK(seg->defined(), "{}: seg_starts is undefined", op);
    PRIMUS_CHECK(seg->shape() == Shape({s.batch, s.seq}) && seg->dtype() == DType::kI32,
                 "{}: seg_starts must be i32 [{}, {}], got {}", op, s.batch, s.seq, seg->describe());
    PRIMUS_CHECK(seg->is_contiguous(), "{}: seg_starts must be contiguous, got {}", op, seg->describe());
    PRIMUS_CHECK(seg->device() == st.device, "{}: seg_starts is on {}, the stream on {}", op,
                 seg->device().str(), st.device.str());
  }
}

}  // namespace

AttentionBackend attention_backend() {
  std::lock_guard<std::mutex> lock(mu());
  return current();
}

void set_attention_backend(AttentionBackend b) {
  std::lock_guard<std::mutex> lock(mu());
  current() = b;
}

AttentionBackend parse_attention_backend(const std::string& name) {
  if (name == "auto") return AttentionBackend::kAuto;
  if (name == "cudnn") return AttentionBackend::kCudnn;
  if (name == "flash") return AttentionBackend::kFlash;
  throw ConfigError(fmt::format("unknown attention backend '{}'", name), "expected cudnn, flash or auto");
}

const char* attention_backend_name(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::kCudnn:
      return "cudnn";
    case AttentionBackend::kFlash:
      return "flash";
    default:
      return "auto";
  }
}

std::string attention_backend_for(const AttentionShape& shape, bool backward) {
  int device = 0;
  PRIMUS_CUDA_CHECK(cudaGetDevice(&device));
  return choose(shape, backward, device) ? "cudnn" : "flash";
}

void attention_forward(const Tensor& qkv, const AttentionShape& s, Tensor& out, Tensor& lse,
                       const Stream& st) {
  constexpr const char* op = "attention_forward";
  check_shape(op, s, st);
  const int64_t w = s.qkv_width();
  check_tensor(op, "qkv", qkv, {s.batch, s.seq, w}, DType::kBF16, st);
  check_tensor(op, "out", out, {s.batch, s.seq, s.out_width()}, DType::kBF16, st);
  check_tensor(op, "lse", lse, {s.batch, s.heads, s.seq}, DType::kF32, st);
  if (choose(s, false, st.device.index))
    cudnn_attention_forward(s, qkv.data_ptr(), out.data_ptr(), lse.data<float>(), st);
  else
    flash_attention_forward(s, qkv.data_ptr(), out.data_ptr(), lse.data<float>(), st);
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const AttentionShape& s, Tensor& dqkv, const Stream& st) {
  constexpr const char* op = "attention_backward";
  check_shape(op, s, st);
  const int64_t w = s.qkv_width();
  check_tensor(op, "qkv", qkv, {s.batch, s.seq, w}, DType::kBF16, st);
  check_tensor(op, "dqkv", dqkv, {s.batch, s.seq, w}, DType::kBF16, st);
  check_tensor(op, "out", out, {s.batch, s.seq, s.out_width()}, DType::kBF16, st);
  check_tensor(op, "dout", dout, {s.batch, s.seq, s.out_width()}, DType::kBF16, st);
  check_tensor(op, "lse", lse, {s.batch, s.heads, s.seq}, DType::kF32, st);
  PRIMUS_CHECK(dqkv.data_ptr() != qkv.data_ptr(), "{}: dqkv must not alias qkv", op);
  if (choose(s, true, st.device.index))
    cudnn_attention_backward(s, dout.data_ptr(), qkv.data_ptr(), out.data_ptr(), lse.data<float>(),
                             dqkv.data_ptr(), st);
  else
    flash_attention_backward(s, dout.data_ptr(), qkv.data_ptr(), out.data_ptr(), lse.data<float>(),
                             dqkv.data_ptr(), st);
}

}  // namespace primus::ops::cuda
