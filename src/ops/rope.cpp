#include "ops/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "ops/cpu/rope_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/rope_cuda.h"
#endif

namespace primus::ops {

double yarn_mscale(double scale, double k) {
  return scale <= 1.0 ? 1.0 : 0.1 * k * std::log(scale) + 1.0;
}

double rope_cos_sin_scale(const RopeConfig& cfg) {
  return cfg.yarn ? yarn_mscale(cfg.factor, cfg.mscale) / yarn_mscale(cfg.factor, cfg.mscale_all_dim) : 1.0;
}

namespace {

// reference.md §1.5: dims whose wavelength fits more than beta_fast rotations into the original context keep
// f; fewer than beta_slow use f / factor; a linear ramp over the dims between.
void apply_yarn(const RopeConfig& cfg, int64_t head_dim, std::vector<float>& f) {
  PRIMUS_CHECK(
      cfg.factor > 0.0 && cfg.original_max_position > 0 && cfg.beta_fast > 0.0 && cfg.beta_slow > 0.0,
      "rope_inv_freq: YaRN needs factor > 0, original_max_position > 0 and beta_fast, beta_slow > 0, got "
      "factor={} orig={} beta_fast={} beta_slow={}",
      cfg.factor, cfg.original_max_position, cfg.beta_fast, cfg.beta_slow);
  const double d = static_cast<double>(head_dim);
  const double orig = static_cast<double>(cfg.original_max_position);
  auto corr = [&](double rotations) {
    return d * std::log(orig / (2.0 * std::numbers::pi * rotations)) / (2.0 * std::log(cfg.theta));
  };
  double lo = std::max(std::floor(corr(cfg.beta_fast)), 0.0);
  double hi = std::min(std::ceil(corr(cfg.beta_slow)), d - 1.0);
  if (lo == hi) hi += 0.001;  // no zero-width ramp
  for (size_t i = 0; i < f.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0);
    const double fi = f[i];
    f[i] = static_cast<float>(fi / cfg.factor * ramp + fi * (1.0 - ramp));
  }
}

}  // namespace

std::vector<float> rope_inv_freq(const RopeConfig& cfg, int64_t head_dim) {
  PRIMUS_CHECK(head_dim >= 2 && head_dim % 2 == 0, "rope_inv_freq: head_dim must be even and >= 2, got {}",
               head_dim);
  PRIMUS_CHECK(cfg.theta > 1.0, "rope_inv_freq: theta must be > 1, got {}", cfg.theta);
  const int64_t half = head_dim / 2;
  std::vector<float> f(static_cast<size_t>(half));
  // theta^(-2i/D) evaluated in double and rounded once: the f32 value HF computes, without powf's last-bit
  // noise.
  for (int64_t i = 0; i < half; ++i)
    f[i] = static_cast<float>(
        std::pow(cfg.theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim)));
  PRIMUS_CHECK(!(cfg.yarn && cfg.llama3_scaling), "rope_inv_freq: YaRN and llama3 scaling are exclusive");
  if (cfg.yarn) {
    apply_yarn(cfg, head_dim, f);
    return f;
  }
  if (!cfg.llama3_scaling) return f;

  PRIMUS_CHECK(cfg.factor > 0.0 && cfg.low_freq_factor > 0.0 && cfg.high_freq_factor > cfg.low_freq_factor &&
                   cfg.original_max_position > 0,
               "rope_inv_freq: llama3 scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
               "original_max_position > 0, got factor={} low={} high={} orig={}",
               cfg.factor, cfg.low_freq_factor, cfg.high_freq_factor, cfg.original_max_position);
  // reference.md §1.5: wavelengths shorter than orig/high keep f, longer than orig/low use f/factor, and the
  // band between blends the two linearly in orig/λ.
  const double orig = static_cast<double>(cfg.original_max_position);
  const double low_wavelen = orig / cfg.low_freq_factor;
  const double high_wavelen = orig / cfg.high_freq_factor;
  for (int64_t i = 0; i < half; ++i) {
    const double fi = f[i];
    const double wavelen = 2.0 * std::numbers::pi / fi;
    double out;
    if (wavelen < high_wavelen) {
      out = fi;
    } else if (wavelen > low_wavelen) {
      out = fi / cfg.factor;
    } else {
      const double t = (orig / wavelen - cfg.low_freq_factor) / (cfg.high_freq_factor - cfg.low_freq_factor);
      out = (1.0 - t) * fi / cfg.factor + t * fi;
    }
    f[i] = static_cast<float>(out);
  }
  return f;
}

Tensor rope_table(const RopeConfig& cfg, int64_t max_pos, int64_t head_dim) {
  PRIMUS_CHECK(max_pos >= 1, "rope_table: max_pos must be >= 1, got {}", max_pos);
  const std::vector<float> f = rope_inv_freq(cfg, head_dim);
  const double c = rope_cos_sin_scale(cfg);
  const int64_t half = head_dim / 2;
  Tensor table = Tensor::empty({max_pos, head_dim}, DType::kF32);
  float* p = table.data<float>();
  for (int64_t pos = 0; pos < max_pos; ++pos) {
    float* row = p + pos * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      // The angle in double from the f32 frequency, so large positions lose no accuracy before cos/sin.
      const double angle = static_cast<double>(pos) * static_cast<double>(f[i]);
      row[i] = static_cast<float>(c * std::cos(angle));
      row[half + i] = static_cast<float>(c * std::sin(angle));
    }
  }
  return table;
}

void rope_apply(Tensor& x, int64_t batch, int64_t seq, int64_t total_heads, int64_t n_heads, int64_t head_dim,
                const Tensor& table, int64_t pos_offset, bool inverse, const Stream& s) {
  rope_apply(x, batch, seq, total_heads, n_heads, head_dim, table, pos_offset, nullptr, inverse, s);
}

void rope_apply(Tensor& x, int64_t batch, int64_t seq, int64_t total_heads, int64_t n_heads, int64_t head_dim,
                const Tensor& table, int64_t pos_offset, const Tensor* positions, bool inverse,
                const Stream& s) {
  check_same_device("rope_apply", x.device(), {&x, &table, positions});
  PRIMUS_DISPATCH(x, rope_apply, x, batch, seq, total_heads, n_heads, head_dim, table, pos_offset, positions,
                  inverse, s);
}

}  // namespace primus::ops
