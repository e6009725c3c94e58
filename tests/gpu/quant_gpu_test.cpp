// FP8 quantize / dequantize / amax on the GPU against the CPU emulation, byte for byte: the FP8 bytes must be
// equal and scale_inv / amax bit-equal (rel_err 0, or +inf with the first difference in the note). GPU
// outputs are poisoned first (0xff bytes: a NaN in both formats that no cast produces -- NaN becomes 0x7f --
// and NaN scales, which no computed scale is), so an unwritten element fails. Model sizes are timed against
// the floor (bytes / 3 TB/s, docs/kernels/fp8.md).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "gpu/fused_test_util.h"
#include "gpu/gpu_test.h"
#include "ops/fp8.h"

namespace primus::gputest {
namespace {

using ops::Fp8Format;
using ops::Fp8Granularity;
using ops::Fp8Tensor;
using ops::QuantizeArgs;

constexpr const char* kFam = "quant";
constexpr double kFloorBytesPerSec = 3.0e12;
const Fp8Format kE4 = Fp8Format::kE4M3, kE5 = Fp8Format::kE5M2;

// One requested output: its granularity and format.
struct Spec {
  bool on = false;
  Fp8Granularity g = Fp8Granularity::kTensorwise;
  Fp8Format f = Fp8Format::kE4M3;
};
Spec spec(Fp8Granularity g, Fp8Format f) {
  return Spec{true, g, f};
}
constexpr Spec kNone{};

struct Case {
  Spec out, out_t;
  bool given_scale = false;  // tensorwise with args.scale
  bool amax_out = false;
};

std::string case_str(const Case& c) {
  std::string s;
  auto one = [&](const char* name, const Spec& o) {
    if (!o.on) return;
    s += fmt::format("{}{}={}/{}", s.empty() ? "" : " ", name, ops::fp8_format_name(o.f),
                     ops::fp8_granularity_name(o.g));
  };
  one("out", c.out);
  one("out_t", c.out_t);
  if (c.given_scale) s += " scale";
  if (c.amax_out) s += " amax_out";
  return s;
}

Fp8Tensor poisoned_fp8(Context& ctx, int64_t rows, int64_t cols, const Spec& o) {
  Fp8Tensor t = Fp8Tensor::empty(rows, cols, o.f, o.g, ctx.stream);
  PRIMUS_CUDA_CHECK(cudaMemsetAsync(t.data.data_ptr(), 0xff, t.data.nbytes(), cuda_stream(ctx.stream)));
  PRIMUS_CUDA_CHECK(
      cudaMemsetAsync(t.scale_inv.data_ptr(), 0xff, t.scale_inv.nbytes(), cuda_stream(ctx.stream)));
  return t;
}

Tensor host_copy(Context& ctx, const Tensor& t) {
  stream_sync(ctx.stream);
  return t.device().is_cpu() ? t : t.to(Stream::cpu());
}

// "" when the bytes are equal, else the count and the first difference at (row, col) of a [rows, cols]
// tensor.
std::string diff_bytes(Context& ctx, const char* name, const Tensor& gpu, const Tensor& ref) {
  const Tensor g = host_copy(ctx, gpu);
  if (g.nbytes() != ref.nbytes()) return fmt::format("{}: {} vs {}", name, g.describe(), ref.describe());
  const auto* a = static_cast<const uint8_t*>(g.data_ptr());
  const auto* b = static_cast<const uint8_t*>(ref.data_ptr());
  if (std::memcmp(a, b, g.nbytes()) == 0) return {};
  const int64_t cols = ref.ndim() == 2 ? ref.size(1) : 1;
  int64_t first = -1, count = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(g.nbytes()); ++i)
    if (a[i] != b[i]) {
      if (first < 0) first = i;
      ++count;
    }
  return fmt::format("{}: {} bytes differ, first ({}, {}) gpu {:#04x} cpu {:#04x}", name, count, first / cols,
                     first % cols, a[first], b[first]);
}

// Bitwise equality of f32 tensors, any NaN equal to any NaN.
std::string diff_floats(Context& ctx, const char* name, const Tensor& gpu, const Tensor& ref) {
  const Tensor g = host_copy(ctx, gpu);
  if (g.numel() != ref.numel()) return fmt::format("{}: {} vs {}", name, g.describe(), ref.describe());
  const float* a = g.data<float>();
  const float* b = ref.data<float>();
  int64_t first = -1, count = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, a + i, 4);
    std::memcpy(&y, b + i, 4);
    if (x != y && !(std::isnan(a[i]) && std::isnan(b[i]))) {
      if (first < 0) first = i;
      ++count;
    }
  }
  if (count == 0) return {};
  return fmt::format("{}: {} values differ, first [{}] gpu {:a} cpu {:a}", name, count, first, a[first],
                     b[first]);
}

void append(std::string& notes, const std::string& n) {
  if (!n.empty()) notes += (notes.empty() ? "" : "; ") + n;
}

// Bytes a quantize call must move: x once, each output's bytes and scales.
double min_bytes(const Tensor& x, const Case& c) {
  const double n = static_cast<double>(x.numel());
  double b = n * dtype_size(x.dtype());
  for (const Spec* o : {&c.out, &c.out_t})
    if (o->on)
      b += n + 4.0 * shape_numel(ops::fp8_scale_shape(o->g, o == &c.out ? x.size(0) : x.size(1),
                                                      o == &c.out ? x.size(1) : x.size(0)));
  return b;
}

// Quantises x (GPU) and x_ref (its exact f32 values on the CPU) with the same request; "" when every byte and
// scale agrees. With `timed`, records the checked row itself (named `label`) and then a timing row against
// the floor.
std::string run_case(Context& ctx, const Tensor& x, const Tensor& x_ref, const Case& c,
                     const std::string& label, bool timed) {
  const int64_t rows = x.size(0), cols = x.size(1);
  Fp8Tensor g_out, g_out_t, c_out, c_out_t;
  if (c.out.on) {
    g_out = poisoned_fp8(ctx, rows, cols, c.out);
    c_out = Fp8Tensor::empty(rows, cols, c.out.f, c.out.g, Stream::cpu());
  }
  if (c.out_t.on) {
    g_out_t = poisoned_fp8(ctx, cols, rows, c.out_t);
    c_out_t = Fp8Tensor::empty(cols, rows, c.out_t.f, c.out_t.g, Stream::cpu());
  }
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  // A given scale large enough that the biggest values saturate; an amax history below or above x's amax.
  const double scale = 20.0 + 200.0 * ud(ctx.rng), history = ud(ctx.rng) < 0.5 ? 0.25 : 1e3;
  Tensor c_scale = Tensor::from_vector(std::vector<float>{static_cast<float>(scale)}, {1});
  Tensor c_acc = Tensor::from_vector(std::vector<float>{static_cast<float>(history)}, {1});
  Tensor g_scale = c_scale.to(ctx.stream), g_acc = c_acc.to(ctx.stream);
  QuantizeArgs ga, ca;
  if (c.given_scale) {
    ga.scale = &g_scale;
    ca.scale = &c_scale;
  }
  if (c.amax_out) {
    ga.amax_out = &g_acc;
    ca.amax_out = &c_acc;
  }
  Fp8Tensor* go = c.out.on ? &g_out : nullptr;
  Fp8Tensor* got = c.out_t.on ? &g_out_t : nullptr;
  std::string notes;
  try {
    ops::quantize(x, go, got, ga, ctx.stream, "quant_gpu_test");
    ops::quantize(x_ref, c.out.on ? &c_out : nullptr, c.out_t.on ? &c_out_t : nullptr, ca, Stream::cpu());
    stream_sync(ctx.stream);
  } catch (const std::exception& e) {
    notes = fmt::format("threw {}", e.what());
    if (timed) ctx.record(kFam, label, INFINITY, 0, notes);
    return label + ": " + notes;
  }
  if (c.out.on) {
    append(notes, diff_bytes(ctx, "out.data", g_out.data, c_out.data));
    append(notes, diff_floats(ctx, "out.scale_inv", g_out.scale_inv, c_out.scale_inv));
  }
  if (c.out_t.on) {
    append(notes, diff_bytes(ctx, "out_t.data", g_out_t.data, c_out_t.data));
    append(notes, diff_floats(ctx, "out_t.scale_inv", g_out_t.scale_inv, c_out_t.scale_inv));
  }
  if (c.amax_out) append(notes, diff_floats(ctx, "amax_out", g_acc, c_acc));
  if (timed) {
    ctx.record(kFam, label, notes.empty() ? 0.0 : INFINITY, 0, notes);
    const double ms = ctx.time_ms([&] { ops::quantize(x, go, got, ga, ctx.stream, "quant_gpu_test"); });
    const double bytes = min_bytes(x, c);
    const bool two_pass = (c.out.on && c.out.g == Fp8Granularity::kRowwise) ||
                          (c.out_t.on && c.out_t.g == Fp8Granularity::kRowwise) ||
                          (!c.given_scale && ((c.out.on && c.out.g == Fp8Granularity::kTensorwise) ||
                                              (c.out_t.on && c.out_t.g == Fp8Granularity::kTensorwise)));
    const double floor_ms = bytes / kFloorBytesPerSec * 1e3;
    ctx.timing(
        kFam, "time " + label, ms, bytes / (ms * 1e-3) / 1e9, "GB/s",
        fmt::format("floor {:.1f} us ({:.1f} MB at 3 TB/s) = {:.0f}% of it{}", floor_ms * 1e3, bytes / 1e6,
                    100.0 * floor_ms / ms, two_pass ? "; amax pass first: x read twice" : ""));
  }
  return notes.empty() ? std::string{} : label + ": " + notes;
}

// x [rows, cols] with magnitudes varying by row (2^-6 .. 2^6), a zero 1x128 segment, a zero column and a few
// exact zeros: groups with different scales and groups of scale 1.
Tensor varied_cpu(Context& ctx, int64_t rows, int64_t cols) {
  Tensor x = ctx.randn_cpu({rows, cols}, DType::kF64);
  double* p = x.data<double>();
  std::uniform_int_distribution<int> ui(-6, 6);
  for (int64_t r = 0; r < rows; ++r) {
    const double m = std::ldexp(1.0, ui(ctx.rng));
    for (int64_t c = 0; c < cols; ++c) p[r * cols + c] *= m;
  }
  if (rows > 2)
    for (int64_t c = 0; c < std::min<int64_t>(cols, 128); ++c) p[2 * cols + c] = 0.0;
  if (cols > 3)
    for (int64_t r = 0; r < rows; ++r) p[r * cols + 3] = 0.0;
  for (int64_t i = 0; i < rows * cols; i += 37) p[i] = 0.0;
  return x;
}

// Every granularity kind x {out, out_t, both} x {e4m3, e5m2}, then mixed requests: one checked row per kind.
void size_cases(Context& ctx, int64_t rows, int64_t cols, DType dt) {
  const Tensor x = ctx.to_gpu(varied_cpu(ctx, rows, cols), dt);
  const Tensor x_ref = fused::host_f32(ctx, x);
  const std::string sz = fmt::format("{} {}x{}", dtype_name(dt), rows, cols);
  struct Kind {
    const char* name;
    Fp8Granularity g;
    bool given;
  };
  const Kind kinds[] = {{"tensorwise current", Fp8Granularity::kTensorwise, false},
                        {"tensorwise scale", Fp8Granularity::kTensorwise, true},
                        {"rowwise", Fp8Granularity::kRowwise, false},
                        {"1x128", Fp8Granularity::kBlock1x128, false},
                        {"128x128", Fp8Granularity::kBlock128x128, false}};
  for (const Kind& k : kinds) {
    std::string notes;
    int runs = 0;
    for (Fp8Format f : {kE4, kE5}) {
      for (int which = 0; which < 3; ++which) {
        Case c;
        if (which != 1) c.out = spec(k.g, f);
        if (which != 0) c.out_t = spec(k.g, f);
        c.given_scale = k.given;
        c.amax_out = which == 2 || k.given;
        append(notes, run_case(ctx, x, x_ref, c, case_str(c), false));
        ++runs;
      }
    }
    ctx.record(kFam, fmt::format("{} {} ({} requests)", sz, k.name, runs), notes.empty() ? 0.0 : INFINITY, 0,
               notes);
  }
  const Case mixed[] = {
      {spec(Fp8Granularity::kBlock1x128, kE4), spec(Fp8Granularity::kBlock128x128, kE4), false, true},
      {spec(Fp8Granularity::kBlock128x128, kE4), spec(Fp8Granularity::kBlock1x128, kE5), false, false},
      {spec(Fp8Granularity::kRowwise, kE4), spec(Fp8Granularity::kBlock1x128, kE5), false, true},
      {spec(Fp8Granularity::kBlock1x128, kE5), spec(Fp8Granularity::kRowwise, kE4), false, false},
      {spec(Fp8Granularity::kTensorwise, kE4), spec(Fp8Granularity::kRowwise, kE5), false, true},
      {spec(Fp8Granularity::kBlock1x128, kE4), spec(Fp8Granularity::kTensorwise, kE5), false, false},
      {spec(Fp8Granularity::kBlock1x128, kE4), spec(Fp8Granularity::kBlock1x128, kE5), false, true}};
  std::string notes;
  for (const Case& c : mixed) append(notes, run_case(ctx, x, x_ref, c, case_str(c), false));
  ctx.record(kFam, fmt::format("{} mixed granularities/formats ({} requests)", sz, std::size(mixed)),
             notes.empty() ? 0.0 : INFINITY, 0, notes);
}

// The conversion itself at the edges: every FP8 value, the midpoints between neighbours and the floats on
// either side, values past the largest finite one, +-inf, NaN, f32 subnormals, random bit patterns. With a
// given scale of 1 the kernels cast x itself, so this checks cvt.rn.satfinite against float_to_fp8. Then the
// same data with computed 1x128 scales, including row segments of subnormals (scale FLT_MAX) and of tiny
// normals whose products are subnormal: fast-math's flush-to-zero would show there.
void special_values(Context& ctx, DType dt) {
  std::vector<float> v;
  for (Fp8Format f : {kE4, kE5}) {
    for (int b = 0; b < 256; ++b) {
      const float a = ops::fp8_to_float(static_cast<uint8_t>(b), f);
      const float c = ops::fp8_to_float(static_cast<uint8_t>(b + 1 < 256 ? b + 1 : b), f);
      v.push_back(a);
      if (std::isfinite(a) && std::isfinite(c) && ((a >= 0) == (c >= 0)) && a != c) {
        const float mid = (a + c) / 2;
        v.insert(v.end(), {mid, std::nextafter(mid, a), std::nextafter(mid, c)});
      }
    }
    const float m = ops::fp8_max(f);
    v.insert(v.end(), {m * 1.03f, m * 1.0625f, m * 1.07f, -m * 1.5f, m * 1e3f});
  }
  const float inf = std::numeric_limits<float>::infinity(), den = std::numeric_limits<float>::denorm_min();
  v.insert(v.end(),
           {inf, -inf, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(), den,
            -den, 1e-39f, -1e-40f, std::numeric_limits<float>::min(), std::numeric_limits<float>::max()});
  std::uniform_int_distribution<uint32_t> bits(0, 0xffffffffu);
  std::uniform_int_distribution<int> ex(-22, 18);
  while (v.size() % 128 != 0 || v.size() < 128 * 40) {
    uint32_t u = bits(ctx.rng);
    u = (u & 0x807fffffu) | (static_cast<uint32_t>(127 + ex(ctx.rng)) << 23);  // exponent in FP8's range
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  // Rows of subnormals and of tiny normals with subnormal neighbours (their own 1x128 groups).
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 128; ++c) {
      const float sub = static_cast<float>(c + 1) * 1e-41f * (c % 2 ? 1.f : -1.f);
      v.push_back(r % 2 ? sub : (c == 5 ? 1e-35f : sub * 1e3f));
    }
  const int64_t cols = 128, rows = static_cast<int64_t>(v.size()) / cols;
  const Tensor x = ctx.to_gpu(Tensor::from_vector(v, {rows, cols}), dt);
  const Tensor x_ref = fused::host_f32(ctx, x);
  for (Fp8Format f : {kE4, kE5}) {
    const Spec tw = spec(Fp8Granularity::kTensorwise, f);
    const std::string name =
        fmt::format("special values {} {} ({} values)", dtype_name(dt), ops::fp8_format_name(f), v.size());
    // Given scale 1 (run_case draws a random one): x itself is cast.
    Fp8Tensor g = poisoned_fp8(ctx, rows, cols, tw), gt = poisoned_fp8(ctx, cols, rows, tw);
    Fp8Tensor r = Fp8Tensor::empty(rows, cols, f, tw.g, Stream::cpu());
    Fp8Tensor rt = Fp8Tensor::empty(cols, rows, f, tw.g, Stream::cpu());
    Tensor one_c = Tensor::from_vector(std::vector<float>{1.0f}, {1}), one_g = one_c.to(ctx.stream);
    Tensor acc_c = Tensor::from_vector(std::vector<float>{0.0f}, {1}), acc_g = acc_c.to(ctx.stream);
    QuantizeArgs ga, ca;
    ga.scale = &one_g;
    ga.amax_out = &acc_g;
    ca.scale = &one_c;
    ca.amax_out = &acc_c;
    ops::quantize(x, &g, &gt, ga, ctx.stream);
    ops::quantize(x_ref, &r, &rt, ca, Stream::cpu());
    std::string notes;
    append(notes, diff_bytes(ctx, "out.data", g.data, r.data));
    append(notes, diff_bytes(ctx, "out_t.data", gt.data, rt.data));
    append(notes, diff_floats(ctx, "scale_inv", g.scale_inv, r.scale_inv));
    append(notes, diff_floats(ctx, "amax_out (NaN)", acc_g, acc_c));
    ctx.record(kFam, name, notes.empty() ? 0.0 : INFINITY, 0, notes);
    // Computed scales over the same data (groups with NaN / inf get scale 1).
    std::string n2;
    for (Fp8Granularity gr :
         {Fp8Granularity::kBlock1x128, Fp8Granularity::kRowwise, Fp8Granularity::kBlock128x128})
      append(n2, run_case(ctx, x, x_ref, Case{spec(gr, f), spec(gr, f), false, true},
                          fmt::format("computed {}", ops::fp8_granularity_name(gr)), false));
    ctx.record(kFam, name + " computed scales", n2.empty() ? 0.0 : INFINITY, 0, n2);
  }
}

// amax over whole tensors: aligned (16-byte path) and offset by one element (scalar path), with and without
// NaN.
void amax_cases(Context& ctx, DType dt) {
  for (int64_t n : {int64_t{1}, int64_t{31 * 33}, int64_t{1000 * 4096 + 3}}) {
    for (bool nan : {false, true}) {
      Tensor h = ctx.randn_cpu({n + 1}, DType::kF64);
      double* p = h.data<double>();
      p[n / 2] = -9.5;
      if (nan) p[n / 3 + 1] = std::nan("");
      const Tensor g = ctx.to_gpu(h, dt);
      const Tensor ref_all = fused::host_f32(ctx, g);
      std::string notes;
      for (int64_t off : {0, 1}) {
        const Tensor gx = g.slice(off, off + n), rx = ref_all.slice(off, off + n);
        Tensor ga = ctx.poisoned({1}, DType::kF32), ra = Tensor::empty({1}, DType::kF32);
        ops::amax(gx, ga, ctx.stream);
        ops::amax(rx, ra, Stream::cpu());
        append(notes, diff_floats(ctx, off ? "offset view" : "aligned", ga, ra));
      }
      ctx.record(kFam, fmt::format("amax {} n={}{}", dtype_name(dt), n, nan ? " with NaN" : ""),
                 notes.empty() ? 0.0 : INFINITY, 0, notes);
    }
  }
  const int64_t n = int64_t{8192} * 4096;
  const Tensor x = fused::gpu_randn(ctx, {n}, dt);
  Tensor a = Tensor::empty({1}, DType::kF32, ctx.stream);
  const double ms = ctx.time_ms([&] { ops::amax(x, a, ctx.stream); });
  const double bytes = static_cast<double>(n) * dtype_size(dt);
  ctx.timing(kFam, fmt::format("time amax {} n=8192x4096", dtype_name(dt)), ms, bytes / (ms * 1e-3) / 1e9,
             "GB/s", fmt::format("floor {:.1f} us", bytes / kFloorBytesPerSec * 1e6));
}

// dequantize of random bytes (NaN and inf codes included) and random scales, every granularity and format.
void dequant_cases(Context& ctx) {
  std::uniform_int_distribution<int> ub(0, 255);
  std::uniform_real_distribution<float> us(1e-3f, 10.f);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{31, 33}, {127, 129}, {256, 384}}) {
    std::string notes;
    for (Fp8Granularity g : {Fp8Granularity::kTensorwise, Fp8Granularity::kRowwise,
                             Fp8Granularity::kBlock1x128, Fp8Granularity::kBlock128x128}) {
      for (Fp8Format f : {kE4, kE5}) {
        Fp8Tensor c = Fp8Tensor::empty(rows, cols, f, g, Stream::cpu());
        auto* q = static_cast<uint8_t*>(c.data.data_ptr());
        for (int64_t i = 0; i < c.data.numel(); ++i) q[i] = static_cast<uint8_t>(ub(ctx.rng));
        float* s = c.scale_inv.data<float>();
        for (int64_t i = 0; i < c.scale_inv.numel(); ++i) s[i] = us(ctx.rng);
        Fp8Tensor gt = c;
        gt.data = c.data.to(ctx.stream);
        gt.scale_inv = c.scale_inv.to(ctx.stream);
        Tensor gx = ctx.poisoned({rows, cols}, DType::kF32), cx = Tensor::empty({rows, cols}, DType::kF32);
        ops::dequantize(gt, gx, ctx.stream);
        ops::dequantize(c, cx, Stream::cpu());
        append(notes, diff_floats(ctx, gt.describe().c_str(), gx, cx));
      }
    }
    ctx.record(kFam, fmt::format("dequantize {}x{} (4 granularities x 2 formats)", rows, cols),
               notes.empty() ? 0.0 : INFINITY, 0, notes);
  }
}

// Model sizes, checked and timed: Llama-3-8B activations [8192, 4096] (and [8192, 14336] unless --quick).
void model_cases(Context& ctx, int64_t rows, int64_t cols, DType dt, bool all) {
  const Tensor x = fused::gpu_randn(ctx, {rows, cols}, dt);
  const Tensor x_ref = fused::host_f32(ctx, x);
  const std::string sz = fmt::format("{} {}x{}", dtype_name(dt), rows, cols);
  std::vector<std::pair<const char*, Case>> cases = {
      {"fwd operand + transpose",
       {spec(Fp8Granularity::kBlock1x128, kE4), spec(Fp8Granularity::kBlock1x128, kE4)}}};
  if (all) {
    cases.push_back({"grad operand", {spec(Fp8Granularity::kBlock1x128, kE5), kNone}});
    cases.push_back({"grad transpose", {kNone, spec(Fp8Granularity::kBlock1x128, kE5)}});
    cases.push_back({"weight blocks",
                     {spec(Fp8Granularity::kBlock128x128, kE4), spec(Fp8Granularity::kBlock128x128, kE4)}});
    cases.push_back({"rowwise", {spec(Fp8Granularity::kRowwise, kE4), spec(Fp8Granularity::kRowwise, kE4)}});
    cases.push_back(
        {"current tensorwise",
         {spec(Fp8Granularity::kTensorwise, kE4), spec(Fp8Granularity::kTensorwise, kE4), false, true}});
    cases.push_back(
        {"delayed tensorwise",
         {spec(Fp8Granularity::kTensorwise, kE4), spec(Fp8Granularity::kTensorwise, kE4), true, true}});
  }
  for (const auto& [what, c] : cases) {
    const std::string label = fmt::format("{} {} ({})", sz, what, case_str(c));
    run_case(ctx, x, x_ref, c, label, true);
  }
}

}  // namespace

PRIMUS_GPU_TEST(quant) {
  for (DType dt : {DType::kBF16, DType::kF32}) special_values(ctx, dt);
  for (auto [r, c] : {std::pair<int64_t, int64_t>{31, 33}, {127, 129}, {96, 200}, {256, 384}, {1000, 4096}})
    for (DType dt : {DType::kBF16, DType::kF32}) size_cases(ctx, r, c, dt);
  dequant_cases(ctx);
  for (DType dt : {DType::kBF16, DType::kF32}) amax_cases(ctx, dt);
  model_cases(ctx, 8192, 4096, DType::kBF16, true);
  model_cases(ctx, 8192, 4096, DType::kF32, false);
  if (!ctx.quick) model_cases(ctx, 8192, 14336, DType::kBF16, false);
}

}  // namespace primus::gputest
