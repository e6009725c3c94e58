#include "projection/memory_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "config/plan.h"
#include "core/master_split.h"
#include "model/model_spec.h"
#include "train/sparse_embedding.h"

namespace primus::projection {
namespace {

constexpr double kLogitsBudget = 1024.0 * 1024 * 1024;  // model/lm_head.cpp: logits per chunk
constexpr double kGemmWorkspace = 32.0 * 1024 * 1024;   // ops/cuda/gemm_lt.h: kWorkspaceBytes
// Outside the allocator: the CUDA context with cuBLAS / cuDNN handles, and NCCL's buffers per communicator
// (NCCL_BUFFSIZE 4 MiB x channels x peers, rounded up).
constexpr double kCudaContext = 0.6e9, kNcclPerGroup = 0.25e9;

struct Dims {
  double e = 2;      // bytes per activation element
  double n = 1;      // tokens of a micro-batch on this rank
  double h = 0;      // hidden
  double hs = 0;     // hidden per token of the residual stream on this rank (/ TP under sequence parallelism)
  double q = 0;      // query width on this rank
  double kv = 0;     // key (= value) width on this rank
  double heads = 0;  // query heads on this rank
  double kvh = 0;    // kv heads on this rank
  double f = 0;      // dense FFN width on this rank
};

Dims dims_of(const Setup& s) {
  const ModelConfig& m = s.train.model;
  Dims d;
  d.e = s.gpu && s.train.bf16 ? 2.0 : 4.0;
  d.n = static_cast<double>(s.tokens_per_rank());
  const double tp = s.tp();
  d.h = static_cast<double>(m.hidden_size);
  d.hs = s.sequence_parallel() ? d.h / tp : d.h;
  const double hd = static_cast<double>(
      m.kv_channels > 0 ? m.kv_channels : m.hidden_size / std::max<int64_t>(1, m.num_attention_heads));
  d.heads = static_cast<double>(m.num_attention_heads) / tp;
  // kv heads fewer than TP are replicated: every rank holds one
  d.kvh = std::max(
      1.0, static_cast<double>(m.num_query_groups > 0 ? m.num_query_groups : m.num_attention_heads) / tp);
  d.q = d.heads * hd;
  d.kv = d.kvh * hd;
  d.f = static_cast<double>(m.ffn_hidden_size) / tp;
  return d;
}

// Routed rows an MoE layer's experts process on this rank per micro-batch: tokens x top-k (dropless; with
// expert parallelism the rows of this rank's experts come from every peer, the same number on average), or
// the capacity's when tokens are dropped.
double routed_rows(const Setup& s, const Dims& d) {
  const MoeConfig& e = s.train.model.moe;
  double rows = d.n * static_cast<double>(e.topk);
  if (e.capacity_factor > 0) rows = std::min(rows, e.capacity_factor * rows);
  if (e.capacity_factor > 0 && e.pad_to_capacity)
    rows = e.capacity_factor * d.n * static_cast<double>(e.topk);
  return rows;
}

enum class Mode { kNone, kSelective, kFull };

Mode mode_of_layer(const Setup& s, int index_on_rank, int layer) {
  const RecomputeConfig& r = s.train.recompute;
  if (r.granularity == "selective") return Mode::kSelective;
  if (r.granularity != "full") return Mode::kNone;
  // recompute_layer_ids: exactly the listed (global) layers
  if (!r.layer_ids.empty())
    return std::binary_search(r.layer_ids.begin(), r.layer_ids.end(), layer) ? Mode::kFull : Mode::kNone;
  // block: the first num_layers layers of the stage are recomputed, the rest keep everything
  if (r.method == "block" && index_on_rank >= r.num_layers) return Mode::kNone;
  return Mode::kFull;
}

// What forward_full saves (model/decoder_layer.h, LayerActivations), per micro-batch.
struct LayerBytes {
  double saved_none = 0;         // everything
  double dropped_selective = 0;  // what selective recompute drops
  double input = 0;              // x_in: what full recompute keeps
  double backward_work = 0;      // the largest working set of its backward
};

LayerBytes layer_bytes(const Setup& s, const Dims& d, bool moe) {
  const ModelConfig& m = s.train.model;
  const double n = d.n, e = d.e;
  LayerBytes b;
  b.input = n * d.hs * e;
  // residual stream (x_in, x_mid) on this rank's tokens, the norms' outputs on every token, rstd f32
  double saved = n * (2 * d.hs + 2 * d.h) * e + 2 * n * 4;
  double dropped = n * 2 * d.h * e;  // h1, h2
  double attn_work;
  if (m.mla.enabled) {
    const MlaConfig& a = m.mla;
    const double H = d.heads, dq = static_cast<double>(a.qk_head_dim + a.qk_pos_emb_head_dim),
                 dv = static_cast<double>(a.v_head_dim);
    const double lat = static_cast<double>(a.q_lora_rank + a.kv_lora_rank + a.qk_pos_emb_head_dim);
    saved += n * (H * (2 * dq + dv) + H * dv + 2 * lat) * e + n * H * 4;
    dropped += n * static_cast<double>(a.q_lora_rank + a.kv_lora_rank) * e;
    attn_work = n * (2 * H * (2 * dq + dv) + H * dv + 3 * d.h) * e;
  } else {
    saved += n * (d.q + 2 * d.kv + d.q) * e + n * d.heads * 4;  // packed qkv, attention output, lse
    if (m.qk_layernorm) saved += n * (d.q + 2 * d.kv) * e + n * (d.heads + d.kvh) * 4;
    attn_work = n * (2 * (d.q + 2 * d.kv) + d.q + 3 * d.h) * e;
  }
  double mlp_work;
  if (moe) {
    const MoeConfig& x = m.moe;
    const double E = static_cast<double>(x.num_experts), k = static_cast<double>(x.topk);
    const double F = static_cast<double>(x.ffn_hidden_size) / s.tp();
    const double Fs = static_cast<double>(x.shared_ffn_hidden_size) / s.tp();
    const double R = routed_rows(s, d);
    // router logits f32, ids / probs / kept probs, the permutation plan (int32 per row, both ways)
    saved += n * E * 4 + 3 * n * k * 4 + 3 * R * 4;
    saved += R * (d.h + 2 * F + F + d.h) * e;  // x_perm, gu_perm, act_perm, y_perm
    dropped += R * F * e;
    if (Fs > 0) {
      saved += n * (2 * Fs + Fs + d.h) * e + (x.shared_expert_gate ? n * 4 : 0);
      dropped += n * Fs * e;
    }
    mlp_work = R * (2 * F + F + 2 * d.h) * e + n * 3 * d.h * e;
  } else {
    saved += n * 3 * d.f * e;  // gate|up, swiglu output
    dropped += n * d.f * e;
    mlp_work = n * (3 * d.f + 3 * d.h) * e;
  }
  b.saved_none = saved;
  b.dropped_selective = dropped;
  b.backward_work = std::max(attn_work, mlp_work);
  return b;
}

double saved_for_mode(const LayerBytes& b, Mode mode) {
  switch (mode) {
    case Mode::kNone:
      return b.saved_none;
    case Mode::kSelective:
      return b.saved_none - b.dropped_selective;
    case Mode::kFull:
      return b.input;
  }
  return b.saved_none;
}

}  // namespace

double lora_parameters_per_layer(const ModelConfig& m, const LoraConfig& l, int tp_size) {
  const double tp = tp_size, hd = static_cast<double>(
                                 m.kv_channels > 0 ? m.kv_channels : m.hidden_size / m.num_attention_heads);
  const double q = m.num_attention_heads * hd, kv = m.num_query_groups * hd, dm = m.hidden_size,
               f = static_cast<double>(m.ffn_hidden_size);
  double per_layer = 0;  // in + out per adapted projection, this rank's share under tp
  if (m.mla.enabled) {   // model/param_store.cpp: per-head sides split over tp, the latents whole
    const MlaConfig& a = m.mla;
    const double H = static_cast<double>(m.num_attention_heads),
                 dq = static_cast<double>(a.qk_head_dim + a.qk_pos_emb_head_dim),
                 ql = static_cast<double>(a.q_lora_rank), kvl = static_cast<double>(a.kv_lora_rank);
    if (l.targets_projection("q_proj") && a.q_lora_rank == 0) per_layer += dm + H * dq / tp;
    if (l.targets_projection("q_a_proj") && a.q_lora_rank > 0) per_layer += dm + ql;
    if (l.targets_projection("q_b_proj") && a.q_lora_rank > 0) per_layer += ql + H * dq / tp;
    if (l.targets_projection("kv_a_proj_with_mqa"))
      per_layer += dm + kvl + static_cast<double>(a.qk_pos_emb_head_dim);
    if (l.targets_projection("kv_b_proj"))
      per_layer += kvl + H * static_cast<double>(a.qk_head_dim + a.v_head_dim) / tp;
    if (l.targets_projection("o_proj")) per_layer += H * static_cast<double>(a.v_head_dim) / tp + dm;
  } else {
    if (l.targets_projection("qkv_proj")) per_layer += dm + (q + 2 * kv) / tp;
    if (l.targets_projection("o_proj")) per_layer += q / tp + dm;
  }
  if (l.targets_projection("gate_up_proj")) per_layer += dm + 2 * f / tp;
  if (l.targets_projection("down_proj")) per_layer += f / tp + dm;
  return static_cast<double>(l.rank) * per_layer;
}

MemoryProjection project_memory(const Setup& s, const GpuSpec& gpu) {
  MemoryProjection out;
  const ModelConfig& m = s.train.model;
  const Dims d = dims_of(s);
  const bool bf16 = s.gpu && s.train.bf16;
  const parallel::Sharding sh = s.layout.sharding;
  const bool fsdp = sh == parallel::Sharding::kOptimGradsParams;
  const bool zero1 = sh == parallel::Sharding::kOptim || sh == parallel::Sharding::kOptimGrads;
  const auto& dims = s.layout.dims;
  const double dp = dims.dp();
  const StateShards shards = state_shards(s);
  const double dense_shards = shards.dense, expert_shards = shards.expert;
  const bool remainders =
      use_master_remainders(s.gpu, bf16 ? DType::kBF16 : DType::kF32, DType::kF32, zero1 || fsdp);
  // bytes per parameter of each piece of state (core/master_split.h, train/optimizer.h)
  // The moments: f32 each, or bf16 under the precision-aware optimizer (exp_avg_dtype, exp_avg_sq_dtype).
  const OptimConfig& oc = s.train.optim;
  const double mv_bytes = static_cast<double>(dtype_size(oc.exp_avg_dtype) + dtype_size(oc.exp_avg_sq_dtype));
  const double w_bytes = bf16 ? 2 : 4, g_bytes = 4;
  const std::string mv_what = oc.exp_avg_dtype == oc.exp_avg_sq_dtype
                                  ? fmt::format("Adam m, v in {}", dtype_name(oc.exp_avg_dtype))
                                  : fmt::format("Adam m in {}, v in {}", dtype_name(oc.exp_avg_dtype),
                                                dtype_name(oc.exp_avg_sq_dtype));
  // the master: a 16-bit remainder, or f32 (bf16 compute); on the CPU the f32 weights are the master except
  // under ZeRO-1, which keeps a sharded f32 master beside the whole compute copy (model/param_store.cpp)
  const double master_bytes = bf16 ? (remainders ? 2 : 4) : zero1 ? 4 : 0;

  out.device = s.gpu ? fmt::format("{} ({:.1f} GB)", gpu.name, gpu.memory_gb) : "CPU";
  out.capacity_bytes = s.gpu ? gpu.memory_gb * 1e9 : 0;
  int groups = 0;
  for (int size : {dims.tp(), dims.cp(), dims.pp() > 1 ? 2 : 1, static_cast<int>(dp), dims.ep()})
    if (size > 1) ++groups;
  out.outside_allocator_bytes = s.gpu ? kCudaContext + groups * kNcclPerGroup : 0;

  for (const RankPlan& r : s.ranks) {
    RankMemory rm;
    rm.pp_rank = r.pp_rank;
    rm.holds = r.holds;
    const RankParams p = rank_parameters(s, r);
    auto sharded = [&](double bytes_per_param, bool is_sharded) {
      return (p.dense * bytes_per_param) / (is_sharded ? dense_shards : 1) +
             (p.expert * bytes_per_param) / (is_sharded ? expert_shards : 1);
    };
    if (s.train.lora.enabled) {
      // LoRA (model/lora_adapter.h): the base model is frozen, whole on every data-parallel rank, weights
      // only; the adapters carry the whole training state, sharded like a model's.
      rm.items.push_back({"frozen base weights", (p.dense + p.expert) * w_bytes,
                          fmt::format("{:.3g} B parameters x {} B, no master, gradients or optimizer state",
                                      p.dense + p.expert, w_bytes)});
      const LoraConfig& l = s.train.lora;
      const double per_layer = lora_parameters_per_layer(m, l, s.tp());
      const double adapters = per_layer * static_cast<double>(r.layers.size());
      const double state = (master_bytes + g_bytes + mv_bytes) / (zero1 || fsdp ? dense_shards : 1);
      rm.items.push_back({"LoRA adapters", adapters * (w_bytes + state),
                          fmt::format("{:.3g} M trainable parameters: weights, master, gradients and Adam",
                                      adapters / 1e6)});
    } else {
      rm.items.push_back(
          {"weights", sharded(w_bytes, fsdp),
           fmt::format("{:.3g} B parameters ({:.3g} B in routed experts) x {} B{}", p.dense + p.expert,
                       p.expert, w_bytes, fsdp ? ", sharded (FSDP)" : "")});
      if (master_bytes > 0)
        rm.items.push_back({"master weights", sharded(master_bytes, zero1 || fsdp),
                            remainders ? "f32 masters as 16-bit remainders of the bf16 weights"
                                       : "f32 masters, sharded with the optimizer state"});
      const int64_t sparse_rows = r.pp_rank == 0 ? sparse_embedding_rows(s.train, s.world) : 0;
      if (sparse_rows > 0) {
        // The input embedding's gradient row-sparse (train/sparse_embedding.h): its slots and maps instead of
        // V x D.
        const double vocab = static_cast<double>(ModelSpec::from_config(m).vocab),
                     hidden = static_cast<double>(m.hidden_size), rows = static_cast<double>(sparse_rows);
        rm.items.push_back(
            {"gradients",
             sharded(g_bytes, false) - g_bytes * vocab * hidden + 4 * (rows * (hidden + 1) + vocab),
             fmt::format("f32; the input embedding's row-sparse: {} rows of {}", sparse_rows,
                         static_cast<int64_t>(vocab))});
      } else {
        rm.items.push_back({"gradients", sharded(g_bytes, fsdp), fsdp ? "f32, sharded (FSDP)" : "f32"});
      }
      rm.items.push_back({"optimizer state", sharded(mv_bytes, zero1 || fsdp),
                          zero1 || fsdp ? mv_what + ", sharded over data parallel" : mv_what});
    }

    // Saved activations: every layer of the rank, times the micro-batches in flight.
    // The backward runs the layers last to first, freeing each one's activations: while layer i runs, the
    // layers after it are gone, so its working set (and the activations it recomputes) sits on top of the
    // layers up to i only.
    std::vector<double> kept, extra;
    double dense_saved = 0, moe_saved = 0;
    int idx = 0;
    for (int layer : r.layers) {
      const bool moe = m.moe.enabled() && m.moe.is_moe_layer(layer);
      const LayerBytes b = layer_bytes(s, d, moe);
      const Mode mode = mode_of_layer(s, idx++, layer);
      kept.push_back(saved_for_mode(b, mode));
      (moe ? moe_saved : dense_saved) += kept.back();
      const double recomputed = mode == Mode::kFull        ? b.saved_none - b.input
                                : mode == Mode::kSelective ? b.dropped_selective
                                                           : 0;
      extra.push_back(b.backward_work + recomputed);
    }
    for (int i = 0; i < r.mtp_layers; ++i) {
      const bool moe = m.moe.enabled() && m.moe.is_moe_layer(m.num_layers - 1);
      const LayerBytes b = layer_bytes(s, d, moe);
      kept.push_back(b.saved_none +
                     d.n * 3 * d.h * d.e);  // the depth's layer, its norms and projection input
      extra.push_back(b.backward_work);
    }
    double saved = 0, after = 0, layer_peak = 0;
    for (double k : kept) saved += k;
    for (size_t i = kept.size(); i-- > 0;) {
      layer_peak = std::max(layer_peak, extra[i] - after);
      after += kept[i];
    }
    const std::string mode_name =
        s.train.recompute.granularity.empty() ? "no recompute" : s.train.recompute.granularity + " recompute";
    rm.items.push_back(
        {"activations", saved * r.inflight,
         fmt::format("{} layers, {}{}{}, x {:.3g} micro-batch{} in flight", r.layers.size(), mode_name,
                     moe_saved > 0 ? fmt::format(" (MoE layers {:.2f} GB, dense {:.2f} GB per micro-batch)",
                                                 moe_saved / 1e9, dense_saved / 1e9)
                                   : "",
                     s.sequence_parallel() ? ", sequence parallel" : "", r.inflight,
                     r.inflight == 1 ? "" : "es")});

    // The transient peak: the head's logits chunk at the end of the forward, or a layer's backward working
    // set (plus the layer being recomputed).
    double head = 0;
    if (r.loss) {
      const double vocab = static_cast<double>(m.vocab_rows()) / s.tp();
      const double full_rows = d.n * (s.sequence_parallel() ? s.tp() : 1);
      const double rows = std::min(full_rows, std::max(64.0, std::floor(kLogitsBudget / (vocab * d.e))));
      head = rows * vocab * d.e + full_rows * d.h * d.e + full_rows * 8;  // logits chunk, normed h, losses
    }
    rm.items.push_back({"peak working set", std::max(head, layer_peak),
                        head >= layer_peak ? "the output layer's logits chunk (1 GiB budget) and its input"
                                           : "one layer's backward (and the layer it recomputes)"});

    if (fsdp) {
      // the layer in use and the next one prefetched, in bf16, and one layer's full-size gradient before its
      // reduce-scatter; under a zero-bubble schedule the gradients of the layers whose weight-gradient pass
      // is queued too (their weights are released after the input-gradient pass: the GEMMs do not read them)
      const int gl = std::max(1, r.grad_layers);
      rm.items.push_back(
          {"FSDP gathered layers", p.largest_layer * (2 * w_bytes + gl * g_bytes),
           gl == 1 ? std::string("two layers' weights gathered (current + prefetch) and one layer's gradient")
                   : fmt::format("two layers' weights gathered (current + prefetch) and {} layers' gradients "
                                 "(held from the input-gradient pass to the deferred weight-gradient pass)",
                                 gl)});
    }
    if (s.pp() > 1)
      rm.items.push_back(
          {"pipeline buffers", 4 * d.n * d.hs * d.e, "activation and gradient send / receive buffers"});
    if (s.train.fp8.enabled) {
      // the casts of the largest projection's weight (and its transpose) and of its input, per GEMM
      const double proj = std::max({d.f * 2 * d.h, (d.q + 2 * d.kv) * d.h, d.h * d.h});
      double fp8 = 2 * proj + 2 * d.n * std::max(d.h, d.f);
      std::string note = "FP8 copies of one projection's weight and input (and their transposes)";
      if (s.train.fp8.output_layer && r.loss) {
        fp8 += 2 * static_cast<double>(config::count_parameters(m).lm_head) / s.tp();
        note += " + the output layer's weight in FP8";
      }
      rm.items.push_back({"FP8 buffers", fp8, note});
    }
    if (s.gpu) rm.items.push_back({"GEMM / attention workspace", kGemmWorkspace * 2, "cuBLASLt and cuDNN"});
    for (const MemoryItem& it : rm.items) rm.peak_bytes += it.bytes;
    out.ranks.push_back(std::move(rm));
  }
  for (size_t i = 0; i < out.ranks.size(); ++i)
    if (out.ranks[i].peak_bytes > out.peak_bytes)
      out.peak_bytes = out.ranks[i].peak_bytes, out.peak_rank = int(i);
  out.assumptions.push_back(
      fmt::format("state per parameter: {} B weights + {} B master + {} B gradients + {} B Adam; dense state "
                  "sharded over {}, "
                  "experts over {}",
                  w_bytes, master_bytes, g_bytes, mv_bytes, dense_shards, expert_shards));
  out.assumptions.push_back(
      fmt::format("activations: {} B per element, {} tokens per micro-batch per rank", d.e, d.n));
  if (s.gpu)
    out.assumptions.push_back(
        fmt::format("outside the allocator: CUDA context {:.1f} GB + {} NCCL group(s) x {:.2f} GB",
                    kCudaContext / 1e9, groups, kNcclPerGroup / 1e9));
  for (const std::string& n : s.notes) out.assumptions.push_back(n);
  return out;
}

}  // namespace primus::projection
