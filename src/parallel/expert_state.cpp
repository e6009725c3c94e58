#include "parallel/expert_state.h"

#include "core/error.h"

namespace primus::parallel {

namespace {
Tensor flat_entry(Tensor& flat, const ParamEntry& e) {
  return flat.slice(e.offset, e.offset + e.numel);
}

// The whole model's entry of `local`'s entry e, checked: expert entries hold 1/split of it, the rest all of
// it.
const ParamEntry& whole_entry(const char* op, const ParamStore& local, const ParamEntry& e,
                              const ParamStore& global, int split) {
  const int j = global.find(e.name);
  PRIMUS_CHECK(j >= 0, "{}: '{}' is not in the whole model", op, e.name);
  const ParamEntry& g = global.entry(j);
  const int64_t parts = local.regions()[e.region].experts ? split : 1;
  PRIMUS_CHECK(g.numel == e.numel * parts, "{}: '{}' has {} elements here, {} in the whole model", op, e.name,
               e.numel, g.numel);
  return g;
}
}  // namespace

void gather_expert_state(ParamStore& local, const Stream& s, comm::Communicator& ep, const Stream& device,
                         ParamStore& global) {
  PRIMUS_CHECK(local.shard_mode() == ShardMode::kNone && global.shard_mode() == ShardMode::kNone,
               "gather_expert_state takes whole (unsharded) stores");
  PRIMUS_CHECK(global.master_dtype() == DType::kF32 && !global.master_in_remainders(),
               "gather_expert_state: the whole-model store needs an f32 master buffer");
  // Where the gathers run: NCCL takes GPU tensors (a host-side `local` goes there first); host backends take
  // them where they are.
  const Stream cs = ep.device_type() == DeviceType::kCUDA ? device : s;
  for (int i = 0; i < static_cast<int>(local.entries().size()); ++i) {
    const ParamEntry& e = local.entry(i);
    const ParamEntry& g = whole_entry("gather_expert_state", local, e, global, ep.size());
    Tensor parts[3] = {local.master_f32(i, s).flatten(), flat_entry(local.adam_m_flat(), e),
                       flat_entry(local.adam_v_flat(), e)};
    Tensor* dst[3] = {&global.master_flat(), &global.adam_m_flat(), &global.adam_v_flat()};
    for (int b = 0; b < 3; ++b) {
      Tensor out = flat_entry(*dst[b], g);
      if (!local.regions()[e.region].experts) {
        out.copy_from(parts[b], s);
        continue;
      }
      Tensor mine = parts[b].device() == cs.device ? parts[b] : parts[b].to(cs);
      Tensor all = Tensor::empty({g.numel}, DType::kF32, cs);
      ep.all_gather(mine, all, cs, "checkpoint experts");
      out.copy_from(all, cs);
    }
  }
  stream_sync(s);
  global.sync_compute_copy(Stream::cpu());
}

void take_expert_share(ParamStore& global, ParamStore& local) {
  const ModelSpec::ExpertShard& share = local.expert_shard();
  for (int i = 0; i < static_cast<int>(local.entries().size()); ++i) {
    const ParamEntry& e = local.entry(i);
    const ParamEntry& g = whole_entry("take_expert_share", local, e, global, share.size);
    // This rank's expert rows, or the whole tensor.
    const int64_t first = local.regions()[e.region].experts ? g.offset + share.rank * e.numel : g.offset;
    Tensor* from[3] = {&global.master_flat(), &global.adam_m_flat(), &global.adam_v_flat()};
    Tensor* to[3] = {&local.master_flat(), &local.adam_m_flat(), &local.adam_v_flat()};
    for (int b = 0; b < 3; ++b)
      flat_entry(*to[b], e).copy_from(from[b]->slice(first, first + e.numel), Stream::cpu());
  }
  local.sync_compute_copy(Stream::cpu());
}

void copy_param_state(ParamStore& src, ParamStore& dst, const Stream& s) {
  PRIMUS_CHECK(src.total_numel() == dst.total_numel() && src.entries().size() == dst.entries().size() &&
                   src.shard_mode() == ShardMode::kNone && dst.shard_mode() == ShardMode::kNone,
               "copy_param_state: the stores are laid out differently");
  for (int i = 0; i < static_cast<int>(src.entries().size()); ++i) dst.set_master(i, src.master(i), s);
  dst.adam_m_flat().copy_from(src.adam_m_flat(), s);
  dst.adam_v_flat().copy_from(src.adam_v_flat(), s);
  stream_sync(s);
}

}  // namespace primus::parallel
