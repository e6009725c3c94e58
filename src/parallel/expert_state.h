#pragma once
// Checkpoints under expert parallelism. A checkpoint always holds the whole model (every expert), so it loads
// into any layout: saving gathers each MoE layer's experts from the ep ranks in expert order (rank j holds
// experts [j E/ep, (j+1) E/ep), the stacked tensor's rows in that order), loading keeps this rank's rows.
// The stores here are whole (ShardMode::kNone); data parallelism's own gather / scatter (ZeRO-1 chunks)
// runs before / after these (parallel/data_parallel.h).
#include "comm/communicator.h"
#include "model/param_store.h"

namespace primus::parallel {

// `global` (a whole-model store of the unsplit spec, allocated on the CPU) from `local` (this rank's store of
// the split spec, whole, on `s`'s device; masters may be in remainders): master weights, Adam moments, and
// the compute copy made from the masters. Collective over `ep` (expert entries are all-gathered, the rest
// copied); every rank of the group ends with the same `global`. `device`: the GPU stream an NCCL group
// gathers on when `local` is on the host (the ZeRO-1 / FSDP staging store).
void gather_expert_state(ParamStore& local, const Stream& s, comm::Communicator& ep, const Stream& device,
                         ParamStore& global);

// This rank's share of a whole-model store: every entry of `local` (whole, on the CPU, f32 masters) from the
// entry of the same name in `global`, expert tensors from the rows of the experts `local` holds.
void take_expert_share(ParamStore& global, ParamStore& local);

// Master weights, moments and compute copy of `dst` from `src`: stores laid out alike (same spec and
// padding); `src` whole with f32 masters on the CPU, `dst` whole on any device, masters in either layout.
void copy_param_state(ParamStore& src, ParamStore& dst, const Stream& s);

}  // namespace primus::parallel
