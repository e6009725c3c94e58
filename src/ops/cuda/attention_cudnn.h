#pragma once
// cuDNN fused attention over the packed qkv layout (internal to ops/cuda; see attention_cudnn_cuda.cpp).
// Pointers are raw: the entry points in attention_cuda.cpp have already validated shapes, dtypes and devices.
#include <string>

#include "core/device.h"
#include "ops/attention.h"

namespace primus::ops::cuda {

// Static check (cuDNN runtime version, head dim, alignment) before any plan is built; `why` says what is
// missing.
bool cudnn_attention_supported(const AttentionShape& s, bool backward, std::string* why);

// Builds (or fetches from the cache) the plan for this shape. Returns false when cuDNN refuses the shape;
// `why` then holds cuDNN's answers. Other failures throw.
bool cudnn_attention_prepare(const AttentionShape& s, bool backward, int device, std::string* why);

// out[B,T,H*D] bf16, lse[B,H,T] f32 from qkv[B,T,(H+2KV)*D] bf16. The plan must exist (prepare returned
// true).
void cudnn_attention_forward(const AttentionShape& s, const void* qkv, void* out, float* lse,
                             const Stream& st);
// dqkv (overwritten) from dout, qkv, out, lse.
void cudnn_attention_backward(const AttentionShape& s, const void* dout, const void* qkv, const void* out,
                              const float* lse, void* dqkv, const Stream& st);

}  // namespace primus::ops::cuda
