#pragma once
// CUDA implementations (src/ops/cuda/mla.cu): bf16 tensors, f32 table and arithmetic.
// Same contract as ops/mla.h, which documents every function; the dispatcher ops/mla.cpp routes here.
#include "ops/mla.h"

namespace primus::ops::cuda {

void mla_pack_qkv(const Tensor& q, const Tensor& kv, const Tensor& k_pe, const MlaDims& d,
                  const Tensor& table, int64_t pos_offset, Tensor& qkv, const Stream& s,
                  const Tensor* positions);
void mla_unpack_dqkv(const Tensor& dqkv, const MlaDims& d, const Tensor& table, int64_t pos_offset,
                     Tensor& dq, Tensor& dkv, Tensor& dk_pe, const Stream& s, const Tensor* positions);

}  // namespace primus::ops::cuda
