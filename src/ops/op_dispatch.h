#pragma once
// Routes an op to its CPU reference or CUDA implementation by the device of a tensor.
#include "core/error.h"
#include "core/tensor.h"

#ifdef PRIMUS_WITH_CUDA
#define PRIMUS_DISPATCH(device_tensor, fn, ...)                         \
  do {                                                                  \
    if ((device_tensor).device().is_cpu()) return cpu::fn(__VA_ARGS__); \
    return cuda::fn(__VA_ARGS__);                                       \
  } while (0)
#else
#define PRIMUS_DISPATCH(device_tensor, fn, ...)                                                          \
  do {                                                                                                   \
    if ((device_tensor).device().is_cpu()) return cpu::fn(__VA_ARGS__);                                  \
    throw ::primus::Error(::primus::ErrorKind::kRuntime, #fn ": CUDA tensor given to a CPU-only build"); \
  } while (0)
#endif

namespace primus::ops {
// Throws unless every tensor is defined, contiguous and on `dev`.
void check_same_device(const char* op, Device dev, std::initializer_list<const Tensor*> tensors);
}  // namespace primus::ops
