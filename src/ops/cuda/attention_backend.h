#pragma once
// Backends behind ops::cuda::attention_forward/backward and how one is chosen. Plain C++ (no CUDA types), but
// the functions exist only in CUDA builds (attention_cuda.cpp is a *_cuda.cpp source).
//
//   cudnn  cuDNN's fused flash attention, through the backend graph API (attention_cudnn_cuda.cpp)
//   flash  our own FA2-style kernels (attention_flash.cu): any T, D in {32, 64, 128}, deterministic backward
//   auto   cuDNN where it supports the shape (decided once per shape, then cached), else flash
//
// The default comes from the environment variable PRIMUS_ATTENTION_BACKEND=cudnn|flash|auto (auto when
// unset).
#include <string>

#include "ops/attention.h"

namespace primus::ops::cuda {

enum class AttentionBackend { kAuto, kCudnn, kFlash };

AttentionBackend attention_backend();            // the current choice
void set_attention_backend(AttentionBackend b);  // overrides the environment (tests, benchmarks)
AttentionBackend parse_attention_backend(const std::string& name);  // throws ConfigError on an unknown name
const char* attention_backend_name(AttentionBackend b);

// Which backend attention_forward / attention_backward would run for this shape right now ("cudnn" or
// "flash"). May build (and cache) a cuDNN plan to find out.
std::string attention_backend_for(const AttentionShape& shape, bool backward);

}  // namespace primus::ops::cuda
