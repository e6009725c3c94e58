#pragma once
// Checkpoints of a model split over ranks (expert parallelism: each rank holds some experts; tensor
// parallelism: each rank holds part of the heads, ffn and vocabulary). A checkpoint always holds the whole
// model, so it loads into any layout: saving all-gathers every split tensor over the group that splits it and
// places each rank's part where its EntrySlice (model/param_store.h) says; loading keeps this rank's part.
// The stores here are whole over data parallelism (ShardMode::kNone); data parallelism's own gather /
// scatter (ZeRO-1 and FSDP chunks) runs before / after these (parallel/data_parallel.h).
#include <vector>

#include "comm/communicator.h"
#include "model/param_store.h"

namespace primus::parallel {

// `global` (a whole-model store of the unsplit spec, allocated on the CPU) from `local` (this rank's store of
// the split spec, whole, on `s`'s device; masters may be in remainders): master weights, Adam moments, and
// the compute copy made from the masters. Collective over `group` (the tp, ep or, split over both, tp_ep
// group, tp fastest as ParallelDims orders them: split entries are all-gathered, whole ones copied); every
// rank of the group ends with the same `global`. `device`: the GPU stream an NCCL group gathers on when
// `local` is on the host (the ZeRO-1 / FSDP staging store).
void gather_split_state(ParamStore& local, const Stream& s, comm::Communicator& group, const Stream& device,
                        ParamStore& global);

// Pipeline parallelism: `global` (the whole model, on the CPU, f32 masters) from every stage's `stage` store
// (its modules, whole over tp / ep / dp; on `s`'s device; masters may be in remainders). Collective over the
// pipeline group `pp`; stage_specs[r] is rank r's spec (ModelSpec::with_pipeline_share), whose entries it
// holds in store order. Every rank ends with the same `global`. A tied embedding's copy on the head's stage
// (ModelSpec::holds_tied_copy) is checked to equal stage 0's embedding bitwise; the weight is stored once.
void gather_pipeline_state(ParamStore& stage, const Stream& s, comm::Communicator& pp, const Stream& device,
                           const std::vector<ModelSpec>& stage_specs, ParamStore& global);

// This rank's share of a whole-model store: every entry of `local` (whole, on the CPU, f32 masters) from the
// entry of the same name in `global`, split entries from the part their EntrySlice names.
void take_split_share(ParamStore& global, ParamStore& local);

// Master weights, moments and compute copy of `dst` from `src`: stores laid out alike (same spec and
// padding); `src` whole with f32 masters on the CPU, `dst` whole on any device, masters in either layout.
void copy_param_state(ParamStore& src, ParamStore& dst, const Stream& s);

}  // namespace primus::parallel
