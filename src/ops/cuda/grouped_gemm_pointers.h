#pragma once
// Device-side operand pointer arrays for cuBLAS's batched and grouped GEMMs (grouped_gemm_pointers.cu).
//
// cublasGemmGroupedBatchedEx reads its A/B/C pointer arrays from device memory. Copying a host array there
// from pageable memory would synchronise the stream, and a pinned staging ring would need events to know
// when a slot is free; instead the experts and row offsets travel as a kernel parameter (by value, up to
// kMaxPointerGroups problems) and one small kernel writes the arrays on the stream, in order with the GEMM.
#include <cuda_runtime.h>

#include <cstdint>

namespace primus::ops::cuda {

constexpr int kMaxPointerGroups = 1024;

// One operand: the matrix of problem g starts at base + expert[g] * expert_bytes + row[g] * row_bytes
// (weights have row_bytes 0, token matrices expert_bytes 0).
struct PointerOperand {
  const char* base = nullptr;
  int64_t expert_bytes = 0;
  int64_t row_bytes = 0;
};

struct PointerParams {
  PointerOperand op[3];  // A, B, C in cuBLAS's terms
  int count = 0;
  int32_t expert[kMaxPointerGroups];
  int64_t row[kMaxPointerGroups];
};

// Writes out[i * count + g] (i = 0, 1, 2 for A, B, C) for every problem g: 3 * count device pointers.
cudaError_t launch_fill_group_pointers(const PointerParams& p, const void** out, cudaStream_t stream);

}  // namespace primus::ops::cuda
