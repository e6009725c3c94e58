#pragma once
// CPU reference implementations (src/ops/cpu/mla.cpp): f32 and f64, OpenMP.
// Same contract as ops/mla.h, which documents every function; the dispatcher ops/mla.cpp routes here.
#include "ops/mla.h"

namespace primus::ops::cpu {

void mla_pack_qkv(const Tensor& q, const Tensor& kv, const Tensor& k_pe, const MlaDims& d,
                  const Tensor& table, int64_t pos_offset, Tensor& qkv, const Stream& s,
                  const Tensor* positions);
void mla_unpack_dqkv(const Tensor& dqkv, const MlaDims& d, const Tensor& table, int64_t pos_offset,
                     Tensor& dq, Tensor& dkv, Tensor& dk_pe, const Stream& s, const Tensor* positions);

}  // namespace primus::ops::cpu
