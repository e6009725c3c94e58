#pragma once
// Rotary position embedding, rotate-half convention (HF Llama/Qwen): dim i pairs with i + D/2;
// out = x * cos + rotate_half(x) * sin with rotate_half(x) = [-x2, x1].
#include "core/tensor.h"

namespace primus::ops {

struct RopeConfig {
  double theta = 10000.0;
  // Llama-3 frequency scaling (`use_rope_scaling`; HF rope_type "llama3").
  bool llama3_scaling = false;
  double factor = 8.0;  // llama3 and YaRN
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;  // llama3 and YaRN
  // YaRN (DeepSeek-V2/V3; Megatron rope_type: yarn, HF rope_scaling type "yarn"): frequencies between the
  // beta_fast and beta_slow rotation counts blend from f to f / factor, and cos/sin are scaled by
  // yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim).
  bool yarn = false;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
};

// YaRN's attention temperature m(s, k) = 0.1 k ln s + 1, or 1 when s <= 1 (reference.md §1.5).
double yarn_mscale(double scale, double k);
// The factor rope_table multiplies cos and sin by (1 without YaRN).
double rope_cos_sin_scale(const RopeConfig& cfg);

// Inverse frequencies [D/2] in f32, after scaling (reference.md §1.5).
std::vector<float> rope_inv_freq(const RopeConfig& cfg, int64_t head_dim);
// Host table [max_pos, D]: columns [0, D/2) hold c cos(pos * f_i), [D/2, D) hold c sin(pos * f_i), f32, with
// c = rope_cos_sin_scale(cfg).
Tensor rope_table(const RopeConfig& cfg, int64_t max_pos, int64_t head_dim);

// In place on x [B, T, total_heads * D]: rotates heads [0, n_heads) of every token by angle (pos_offset + t)
// * f. The table's width R (even, <= D) is the rotated part of each head: R = D rotates the whole head, a
// smaller R (partial rotary: Megatron's rotary_percent, HF's partial_rotary_factor, with the table and its
// frequencies built for R) rotates elements [0, R) by rotate-half within them and leaves [R, D) as they are.
// inverse = true rotates by the negative angle: the transpose of the forward map, which is the backward pass
// (also with YaRN's scaled table, where the forward is c R and its transpose c R^T). table lives on x's
// device.
void rope_apply(Tensor& x, int64_t batch, int64_t seq, int64_t total_heads, int64_t n_heads, int64_t head_dim,
                const Tensor& table, int64_t pos_offset, bool inverse, const Stream& s);

// Per-token positions (packed SFT rows, where every sample of a row restarts at position 0): with positions
// an int32 [B, T] tensor on x's device, token t of row b rotates by positions[b, t] * f (inverse: its
// negative) instead of (pos_offset + t) * f, and pos_offset must then be 0 (a context-parallel chunk passes
// its own slice of positions, so an offset on top would only be a second way to say the same thing).
// positions = null is exactly the overload above: the same kernels, bitwise the same result, no extra cost.
// Every position must lie in [0, table.size(0)): the CPU reference checks them and throws naming the bad one;
// the CUDA path does not read them back (that would be a host sync per call) and clamps each into the table,
// so invalid values give wrong results but never a read outside it: valid positions are the caller's
// responsibility.
void rope_apply(Tensor& x, int64_t batch, int64_t seq, int64_t total_heads, int64_t n_heads, int64_t head_dim,
                const Tensor& table, int64_t pos_offset, const Tensor* positions, bool inverse,
                const Stream& s);

}  // namespace primus::ops
