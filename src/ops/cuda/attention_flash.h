#pragma once
// Our own FA2-style flash attention (attention_flash.cu): bf16 tensor-core mma.sync, f32 accumulation, online
// softmax, never an S x S matrix. Any sequence length; head dims 32, 64, 128. The backward recomputes P from
// lse and is deterministic: dK/dV of a kv head are summed over its query-head group inside one block, and dQ
// is computed by a separate pass over key blocks (no atomics).
#include <string>

#include "core/device.h"
#include "ops/attention.h"

namespace primus::ops::cuda {

bool flash_attention_supported(const AttentionShape& s, std::string* why);

void flash_attention_forward(const AttentionShape& s, const void* qkv, void* out, float* lse,
                             const Stream& st);
void flash_attention_backward(const AttentionShape& s, const void* dout, const void* qkv, const void* out,
                              const float* lse, void* dqkv, const Stream& st);

}  // namespace primus::ops::cuda
