#include "ops/mla.h"

#include "ops/cpu/mla_cpu.h"
#include "ops/op_dispatch.h"
#ifdef PRIMUS_WITH_CUDA
#include "ops/cuda/mla_cuda.h"
#endif

namespace primus::ops {

void mla_pack_qkv(const Tensor& q, const Tensor& kv, const Tensor& k_pe, const MlaDims& d,
                  const Tensor& table, int64_t pos_offset, Tensor& qkv, const Stream& s,
                  const Tensor* positions) {
  check_same_device("mla_pack_qkv", q.device(), {&q, &kv, &k_pe, &table, &qkv, positions});
  PRIMUS_DISPATCH(q, mla_pack_qkv, q, kv, k_pe, d, table, pos_offset, qkv, s, positions);
}

void mla_unpack_dqkv(const Tensor& dqkv, const MlaDims& d, const Tensor& table, int64_t pos_offset,
                     Tensor& dq, Tensor& dkv, Tensor& dk_pe, const Stream& s, const Tensor* positions) {
  check_same_device("mla_unpack_dqkv", dqkv.device(), {&dqkv, &table, &dq, &dkv, &dk_pe, positions});
  PRIMUS_DISPATCH(dqkv, mla_unpack_dqkv, dqkv, d, table, pos_offset, dq, dkv, dk_pe, s, positions);
}

}  // namespace primus::ops
