#include "parallel/split_state.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "ops/elementwise.h"

namespace primus::parallel {

namespace {
Tensor flat_entry(Tensor& flat, const ParamEntry& e) {
  return flat.slice(e.offset, e.offset + e.numel);
}

// x itself when f32, else an f32 copy on x's device (on `s`): the gathers exchange f32.
Tensor as_f32(const Tensor& x, const Stream& s) {
  if (x.dtype() == DType::kF32) return x;
  Tensor out = Tensor::empty(x.shape(), DType::kF32, x.device().is_cpu() ? Stream::cpu() : s);
  ops::copy_cast(x, out, s);
  return out;
}

// The whole model's entry of `local`'s entry e, checked against e's slice.
const ParamEntry& whole_entry(const char* op, const ParamEntry& e, const ParamStore& global) {
  const int j = global.find(e.name);
  PRIMUS_CHECK(j >= 0, "{}: '{}' is not in the whole model", op, e.name);
  const ParamEntry& g = global.entry(j);
  PRIMUS_CHECK(g.numel == e.slice.whole_numel, "{}: '{}' is part of {} elements here, {} in the whole model",
               op, e.name, e.slice.whole_numel, g.numel);
  return g;
}

// The layout of every rank of the group that splits `local` (the same spec, split for rank r). The group is
// ordered as ParallelDims builds it, tp fastest (tp, ep or tp_ep): rank r holds the tp share r % TP of the
// experts r / TP (EP x TP: each expert's columns split over tp, the experts over ep).
std::vector<std::unique_ptr<ParamStore>> peer_layouts(const ParamStore& local, const ParamStore& global,
                                                      const comm::Communicator& group) {
  const ModelSpec::ExpertShard ep = local.expert_shard();
  const ModelSpec::TensorShard tp = local.tensor_shard();
  PRIMUS_CHECK(ep.size * tp.size == group.size() && group.rank() == tp.rank + tp.size * ep.rank,
               "the store is split over ep {} x tp {} ranks (this rank's shares: experts {}, tp {}), the "
               "group has {} (this rank {}, tp fastest)",
               ep.size, tp.size, ep.rank, tp.rank, group.size(), group.rank());
  std::vector<std::unique_ptr<ParamStore>> out;
  for (int r = 0; r < group.size(); ++r) {
    ModelSpec spec = global.spec();
    if (ep.size > 1) spec = spec.with_expert_shard(ep.size, r / tp.size);
    if (tp.size > 1) spec = spec.with_tensor_shard(tp.size, r % tp.size, tp.sequence_parallel);
    out.push_back(std::make_unique<ParamStore>(spec));
  }
  return out;
}
}  // namespace

void gather_split_state(ParamStore& local, const Stream& s, comm::Communicator& group, const Stream& device,
                        ParamStore& global) {
  PRIMUS_CHECK(local.shard_mode() == ShardMode::kNone && global.shard_mode() == ShardMode::kNone,
               "gather_split_state takes whole (unsharded) stores");
  PRIMUS_CHECK(global.master_dtype() == DType::kF32 && !global.master_in_remainders(),
               "gather_split_state: the whole-model store needs an f32 master buffer");
  const int size = group.size();
  const auto peers = peer_layouts(local, global, group);
  // Where the gathers run: NCCL takes GPU tensors (a host-side `local` goes there first); host backends take
  // them where they are.
  const Stream cs = group.device_type() == DeviceType::kCUDA ? device : s;
  for (int i = 0; i < static_cast<int>(local.entries().size()); ++i) {
    const ParamEntry& e = local.entry(i);
    const ParamEntry& g = whole_entry("gather_split_state", e, global);
    Tensor parts[3] = {local.master_f32(i, s).flatten(), flat_entry(local.adam_m_flat(), e),
                       flat_entry(local.adam_v_flat(), e)};
    for (Tensor& part : parts) part = as_f32(part, s);  // bf16 moments (precision-aware optimizer) widen
    Tensor* dst[3] = {&global.master_flat(), &global.adam_m_flat(), &global.adam_v_flat()};
    for (int b = 0; b < 3; ++b) {
      Tensor out = flat_entry(*dst[b], g);
      if (e.slice.whole()) {
        out.copy_from(parts[b], s);
        continue;
      }
      Tensor mine = parts[b].device() == cs.device ? parts[b] : parts[b].to(cs);
      Tensor all = Tensor::empty({size * e.numel}, DType::kF32, cs);
      group.all_gather(mine, all, cs, "checkpoint gather of split tensors");
      const Tensor host = all.device().is_cpu() ? all : all.to(Stream::cpu());
      stream_sync(cs);
      const float* from = host.data<float>();
      float* to = out.data<float>();
      for (int r = 0; r < size; ++r) {
        const ParamEntry& pe = peers[r]->entry(i);
        PRIMUS_CHECK(pe.name == e.name && pe.numel == e.numel, "rank {}'s layout differs at '{}'", r, e.name);
        pe.slice.for_each_run(pe.numel, pe.cols(), [&](int64_t lo, int64_t wo, int64_t len) {
          std::memcpy(to + wo, from + r * e.numel + lo, static_cast<size_t>(len) * sizeof(float));
        });
      }
    }
  }
  stream_sync(s);
  global.sync_compute_copy(Stream::cpu());
}

void gather_pipeline_state(ParamStore& stage, const Stream& s, comm::Communicator& pp, const Stream& device,
                           const std::vector<ModelSpec>& stage_specs, ParamStore& global) {
  PRIMUS_CHECK(static_cast<int>(stage_specs.size()) == pp.size(), "{} stage specs for {} pipeline ranks",
               stage_specs.size(), pp.size());
  PRIMUS_CHECK(global.master_dtype() == DType::kF32 && !global.master_in_remainders() &&
                   stage.shard_mode() == ShardMode::kNone,
               "gather_pipeline_state: whole stores with an f32 master buffer on the whole-model side");
  // Each stage packs master, moments (m, v) of its entries, in its store's order; the packs are padded to
  // the largest and all-gathered, then every rank unpacks each stage's by that stage's layout.
  auto packed_size = [](const ParamStore& p) {
    int64_t n = 0;
    for (const ParamEntry& e : p.entries()) n += 3 * e.numel;
    return n;
  };
  std::vector<std::unique_ptr<ParamStore>> layouts;
  int64_t widest = 0;
  for (const ModelSpec& spec : stage_specs) {
    layouts.push_back(std::make_unique<ParamStore>(spec));
    widest = std::max(widest, packed_size(*layouts.back()));
  }
  PRIMUS_CHECK(packed_size(stage) == packed_size(*layouts[static_cast<size_t>(pp.rank())]),
               "pipeline rank {}: the stage store differs from its spec", pp.rank());
  Tensor mine = Tensor::zeros({widest}, DType::kF32);
  int64_t at = 0;
  for (int i = 0; i < static_cast<int>(stage.entries().size()); ++i) {
    const ParamEntry& e = stage.entry(i);
    const Tensor parts[3] = {stage.master_f32(i, s).flatten(),
                             stage.adam_m_flat().slice(e.offset, e.offset + e.numel),
                             stage.adam_v_flat().slice(e.offset, e.offset + e.numel)};
    for (const Tensor& part : parts) {
      Tensor to = mine.slice(at, at + e.numel);
      ops::copy_cast(part, to, Stream::cpu());  // bf16 moments (precision-aware optimizer) widen exactly
      at += e.numel;
    }
  }
  stream_sync(s);
  const Stream cs = pp.device_type() == DeviceType::kCUDA ? device : Stream::cpu();
  Tensor send = pp.device_type() == DeviceType::kCUDA ? mine.to(cs) : mine;
  Tensor all = Tensor::empty({pp.size() * widest}, DType::kF32, cs);
  pp.all_gather(send, all, cs, "checkpoint gather of pipeline stages");
  const Tensor host = all.device().is_cpu() ? all : all.to(Stream::cpu());
  stream_sync(cs);
  for (int r = 0; r < pp.size(); ++r) {
    const float* from = host.data<float>() + r * widest;
    for (const ParamEntry& e : layouts[static_cast<size_t>(r)]->entries()) {
      const int j = global.find(e.name);
      PRIMUS_CHECK(j >= 0 && global.entry(j).numel == e.numel,
                   "gather_pipeline_state: '{}' of stage {} is not "
                   "in the whole model as it is here",
                   e.name, r);
      const int64_t off = global.entry(j).offset;
      // A tied embedding's copy on the head's stage must equal the embedding (stage 0, unpacked first) bit
      // for bit, moments included: both take the same summed gradients. The checkpoint stores it once.
      const bool copy = layouts[static_cast<size_t>(r)]->spec().holds_tied_copy() && e.region == 0;
      PRIMUS_CHECK(!copy || layouts[0]->spec().pp.embedding, "the tied embedding is not on pipeline stage 0");
      for (Tensor* dst : {&global.master_flat(), &global.adam_m_flat(), &global.adam_v_flat()}) {
        float* to = dst->data<float>() + off;
        const size_t bytes = static_cast<size_t>(e.numel) * sizeof(float);
        PRIMUS_CHECK(
            !copy || std::memcmp(to, from, bytes) == 0,
            "gather_pipeline_state: pipeline stage {}'s copy of the tied '{}' differs from stage 0's "
            "embedding",
            r, e.name);
        std::memcpy(to, from, bytes);
        from += e.numel;
      }
    }
  }
  global.sync_compute_copy(Stream::cpu());
}

void take_split_share(ParamStore& global, ParamStore& local) {
  for (int i = 0; i < static_cast<int>(local.entries().size()); ++i) {
    const ParamEntry& e = local.entry(i);
    const ParamEntry& g = whole_entry("take_split_share", e, global);
    Tensor* from[3] = {&global.master_flat(), &global.adam_m_flat(), &global.adam_v_flat()};
    Tensor* to[3] = {&local.master_flat(), &local.adam_m_flat(), &local.adam_v_flat()};
    for (int b = 0; b < 3; ++b) {
      const float* src = from[b]->data<float>() + g.offset;
      float* dst = to[b]->data<float>() + e.offset;
      e.slice.for_each_run(e.numel, e.cols(), [&](int64_t lo, int64_t wo, int64_t len) {
        std::memcpy(dst + lo, src + wo, static_cast<size_t>(len) * sizeof(float));
      });
    }
  }
  local.sync_compute_copy(Stream::cpu());
}

void copy_param_state(ParamStore& src, ParamStore& dst, const Stream& s) {
  PRIMUS_CHECK(src.total_numel() == dst.total_numel() && src.entries().size() == dst.entries().size() &&
                   src.shard_mode() == ShardMode::kNone && dst.shard_mode() == ShardMode::kNone,
               "copy_param_state: the stores are laid out differently");
  for (int i = 0; i < static_cast<int>(src.entries().size()); ++i) dst.set_master(i, src.master(i), s);
  // The training store's moments may be bf16 (precision-aware optimizer): a staged f32 value that came from
  // one rounds back to it exactly.
  ops::copy_cast(src.adam_m_flat(), dst.adam_m_flat(), s);
  ops::copy_cast(src.adam_v_flat(), dst.adam_v_flat(), s);
  stream_sync(s);
}

}  // namespace primus::parallel
