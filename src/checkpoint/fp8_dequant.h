#pragma once
// FP8 (E4M3, "float8_e4m3fn") block-quantised weights as DeepSeek-V3's released checkpoints store them
// (reference.md §1.3): a weight q [R, C] in F8_E4M3 plus `<name>_scale_inv` f32 [ceil(R/br), ceil(C/bc)] for
// blocks of br x bc elements (quantization_config.weight_block_size, [128, 128]). The weight is
//   w[r, c] = e4m3_to_f32(q[r, c]) * scale_inv[r / br, c / bc]
// computed in f32 (one rounding) and then rounded to bf16 (round to nearest even) -- what DeepSeek's own
// fp8_cast_bf16.py conversion produces, so a conversion here and theirs give the same bf16 bits.
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace primus::ckpt {

// The value of an E4M3FN byte: 1 sign, 4 exponent (bias 7), 3 mantissa bits, subnormals when the exponent
// is 0, no infinities, NaN for S.1111.111 (0x7f and 0xff). Exact (every E4M3 value is an f32).
float e4m3fn_to_float(uint8_t bits);

// w as bf16 [R, C] from q (kFP8E4M3 [R, C]) and scale_inv (f32 [ceil(R/br), ceil(C/bc)]). `what` names the
// tensor in errors. Throws primus::Error naming `what` when the scale's shape does not match, a scale is not
// finite, or a weight is NaN (a NaN byte is a corrupt checkpoint: it would poison training silently).
Tensor dequantize_fp8_blocks(const Tensor& q, const Tensor& scale_inv, int64_t block_rows, int64_t block_cols,
                             const std::string& what);

}  // namespace primus::ckpt
