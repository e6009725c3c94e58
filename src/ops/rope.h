#pragma once
// Rotary position embedding, rotate-half convention (HF Llama/Qwen): dim i pairs with i + D/2;
// out = x * cos + rotate_half(x) * sin with rotate_half(x) = [-x2, x1].
#include "core/tensor.h"

namespace primus::ops {

struct RopeConfig {
  double theta = 10000.0;
  // Llama-3 frequency scaling (`use_rope_scaling`; HF rope_type "llama3").
  bool llama3_scaling = false;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

// Inverse frequencies [D/2] in f32, after scaling (reference.md §1.5).
std::vector<float> rope_inv_freq(const RopeConfig& cfg, int64_t head_dim);
// Host table [max_pos, D]: columns [0, D/2) hold cos(pos * f_i), [D/2, D) hold sin(pos * f_i), f32.
Tensor rope_table(const RopeConfig& cfg, int64_t max_pos, int64_t head_dim);

// In place on x [B, T, total_heads * D]: rotates heads [0, n_heads) of every token by angle (pos_offset + t)
// * f. inverse = true rotates by the negative angle, which is the backward pass (the rotation is orthogonal).
// table lives on x's device.
void rope_apply(Tensor& x, int64_t batch, int64_t seq, int64_t total_heads, int64_t n_heads, int64_t head_dim,
                const Tensor& table, int64_t pos_offset, bool inverse, const Stream& s);

}  // namespace primus::ops
