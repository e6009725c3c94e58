#include "model/param_store.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>

#include "core/master_split.h"
#include "core/memory_owner.h"
#include "core/philox.h"
#include "ops/elementwise.h"
#include "ops/optimizer.h"

namespace primus {

namespace {
// Tensor starts are aligned to 64 elements (256 bytes in f32, 128 in bf16): cuBLASLt and vector loads want 16
// B.
constexpr int64_t kAlign = 64;

}  // namespace

ParamStore::ParamStore(const ModelSpec& spec, int region_multiple, int expert_region_multiple)
    : region_multiple_(region_multiple),
      expert_region_multiple_(expert_region_multiple > 0 ? expert_region_multiple : region_multiple),
      spec_(spec),
      ep_(spec.ep),
      tp_(spec.tp) {
  PRIMUS_CHECK(region_multiple >= 1 && expert_region_multiple >= 0,
               "region multiples must be >= 1, got {} and {}", region_multiple, expert_region_multiple);
  const int L = static_cast<int>(spec.layers);
  const double std = spec.init_std;
  const double out_std = spec.init_std / std::sqrt(2.0 * spec.layers);  // Megatron's scaled init for outputs
  hook_regions_ = L + 2;
  regions_.resize(L + 2);
  const bool split_experts = spec.ep.size > 1;
  // Tensor parallelism (model/model_spec.h): the spec's sizes are this rank's; T x them are the whole
  // model's.
  const int64_t T = spec.tp.size, tr = spec.tp.rank, d = spec.hidden;
  auto rows = [&](std::vector<std::pair<int64_t, int64_t>> blocks, int64_t whole_rows, int64_t cols) {
    EntrySlice sl;
    if (T == 1) return sl;
    sl.row_blocks = std::move(blocks);
    sl.whole_cols = cols;
    sl.whole_numel = whole_rows * cols;
    return sl;
  };
  // Column-parallel: this rank's rows of each packed part; parts[i] = (local rows of part i, ranks sharing a
  // block of it): the part has T / sharing blocks in the whole tensor, and this rank holds block rank /
  // sharing.
  auto column_parallel = [&](std::vector<std::pair<int64_t, int64_t>> parts, int64_t cols) {
    std::vector<std::pair<int64_t, int64_t>> blocks;
    int64_t whole_first = 0;
    for (const auto& [p, sharing] : parts) {
      blocks.emplace_back(whole_first + tr / sharing * p, p);
      whole_first += p * (T / sharing);
    }
    return rows(std::move(blocks), whole_first, cols);
  };
  const int64_t kv_share = spec.tp.kv_replicas;
  // q|k|v rows: this rank's q heads, its kv heads (or the one kv head it shares with kv_share - 1 others).
  auto qkv_parts = [&] {
    return std::vector<std::pair<int64_t, int64_t>>{
        {spec.q_dim(), 1}, {spec.kv_dim(), kv_share}, {spec.kv_dim(), kv_share}};
  };
  // Replicated key/value rows (elements [q rows, q + 2 kv rows) x cols) sum their gradients over the sharing
  // ranks.
  auto share_kv_rows = [&](int64_t cols) {
    if (kv_share == 1) return;
    entries_.back().tp_sum = {spec.q_dim() * cols, 2 * spec.kv_dim() * cols, /*kv_group=*/true};
  };
  auto sum_whole = [&](bool on) {
    if (on) entries_.back().tp_sum = {0, entries_.back().numel, false};
  };
  // Row-parallel [out, in]: every row, this rank's columns.
  auto row_parallel = [&](int64_t out, int64_t in_local) {
    EntrySlice sl = rows({{0, out}}, out, in_local * T);
    sl.col_begin = T == 1 ? 0 : tr * in_local;
    return sl;
  };
  const bool sp = spec.tp.sequence_parallel;
  std::vector<std::pair<std::string, int>> expert_prefixes;  // MoE layers (and their hook region) whose
                                                             // experts get a region after the head

  auto begin_region = [&](int r) { regions_[r].begin = total_; };
  auto end_decay = [&](int r) { regions_[r].decay_end = total_; };
  auto end_region = [&](int r) {
    // Zero padding so that the region splits into region_multiple aligned chunks (data-parallel shards).
    const int64_t unit = kAlign * (regions_[r].experts ? expert_region_multiple_ : region_multiple_);
    total_ = regions_[r].begin + (total_ - regions_[r].begin + unit - 1) / unit * unit;
    regions_[r].end = total_;
  };

  if (spec.adapters.enabled) {
    // LoRA adapters (model/lora_adapter.h): per targeted projection A [r, in] then B [out, r], in the
    // layer's region; the embedding and head regions stay empty. Under tensor parallelism each factor is
    // split like the side of the base weight it meets: a column-parallel projection's B by its rows (A whole,
    // its gradient partial over tp), a row-parallel one's A by its columns (B whole, partial likewise).
    const LoraConfig& lo = spec.adapters;
    const int64_t R = lo.rank;
    auto a_std = [&](int64_t whole_in) {
      // xavier: N(0, 2 / (fan_in + fan_out)); kaiming: the variance of PEFT's kaiming_uniform(a = sqrt 5),
      // U(-1/sqrt(in), 1/sqrt(in)).
      const double in = static_cast<double>(whole_in);
      return lo.a_init == "kaiming" ? 1.0 / std::sqrt(3.0 * in)
                                    : std::sqrt(2.0 / (in + static_cast<double>(R)));
    };
    auto column_adapter = [&](const std::string& n, int r, int64_t in, int64_t out,
                              std::vector<std::pair<int64_t, int64_t>> parts, bool kv_rows) {
      add(n + ".lora_A.weight", {R, in}, r, true, InitKind::kNormal, a_std(in));
      sum_whole(T > 1);
      add(n + ".lora_B.weight", {out, R}, r, true, InitKind::kZeros, 0, column_parallel(std::move(parts), R));
      if (kv_rows) share_kv_rows(R);
    };
    // A projection every tp rank holds whole (MLA's down-projections) but whose output gradient is partial
    // over tp (it feeds per-head projections): both factors whole, both gradients partial.
    auto whole_adapter = [&](const std::string& n, int r, int64_t in, int64_t out) {
      add(n + ".lora_A.weight", {R, in}, r, true, InitKind::kNormal, a_std(in));
      sum_whole(T > 1);
      add(n + ".lora_B.weight", {out, R}, r, true, InitKind::kZeros, 0);
      sum_whole(T > 1);
    };
    auto row_adapter = [&](const std::string& n, int r, int64_t in_local) {
      add(n + ".lora_A.weight", {R, in_local}, r, true, InitKind::kNormal, a_std(in_local * T),
          row_parallel(R, in_local));
      add(n + ".lora_B.weight", {d, R}, r, true, InitKind::kZeros, 0);
      sum_whole(T > 1);
    };
    for (int r = 0; r < L + 2; ++r) {
      begin_region(r);
      const int l = r - 1;
      if (r >= 1 && r <= L && spec.holds_layer(l)) {
        const std::string p = "layers." + std::to_string(l) + ".";
        if (spec.mla.enabled) {  // the base's split (above, layer_matrices) decides the factors'
          const MlaConfig& a = spec.mla;
          const int64_t H = spec.heads, dq = a.qk_head_dim + a.qk_pos_emb_head_dim;
          const std::string s = p + "self_attn.";
          if (lo.targets_projection("q_proj") && a.q_lora_rank == 0)
            column_adapter(s + "q_proj", r, d, H * dq, {{H * dq, 1}}, false);
          if (lo.targets_projection("q_a_proj") && a.q_lora_rank > 0)
            whole_adapter(s + "q_a_proj", r, d, a.q_lora_rank);
          if (lo.targets_projection("q_b_proj") && a.q_lora_rank > 0)
            column_adapter(s + "q_b_proj", r, a.q_lora_rank, H * dq, {{H * dq, 1}}, false);
          if (lo.targets_projection("kv_a_proj_with_mqa"))
            whole_adapter(s + "kv_a_proj_with_mqa", r, d, a.kv_lora_rank + a.qk_pos_emb_head_dim);
          if (lo.targets_projection("kv_b_proj")) {
            const int64_t rows = H * (a.qk_head_dim + a.v_head_dim);
            column_adapter(s + "kv_b_proj", r, a.kv_lora_rank, rows, {{rows, 1}}, false);
          }
          if (lo.targets_projection("o_proj")) row_adapter(s + "o_proj", r, H * a.v_head_dim);
        } else {
          if (lo.targets_projection("qkv_proj"))
            column_adapter(p + "self_attn.qkv_proj", r, d, spec.qkv_dim(), qkv_parts(), true);
          if (lo.targets_projection("o_proj")) row_adapter(p + "self_attn.o_proj", r, spec.q_dim());
        }
        // (MoE layers: no MLP adapters; config validation refuses MLP targets on MoE models.)
        if (lo.targets_projection("gate_up_proj") && !spec.is_moe_layer(l))
          column_adapter(p + "mlp.gate_up_proj", r, d, 2 * spec.ffn, {{spec.ffn, 1}, {spec.ffn, 1}}, false);
        if (lo.targets_projection("down_proj") && !spec.is_moe_layer(l))
          row_adapter(p + "mlp.down_proj", r, spec.ffn);
      }
      end_decay(r);
      end_region(r);
    }
    return;
  }

  // Pipeline parallelism: a module this rank does not hold leaves its region empty, so that regions keep
  // their numbers (the model's hook regions) on every stage. The head's stage of a tied or a
  // multi-token-prediction model (ModelSpec::holds_tied_copy) holds its copy of the embedding in region 0
  // too: laid out, padded and sharded exactly as on the embedding's stage, so that the two stages' gradient
  // chunks line up element for element (ZeRO-1 and FSDP sum shards), and named alike, so that it initialises
  // and loads as the embedding.
  begin_region(0);
  if (spec.pp.embedding || spec.holds_tied_copy())
    add("embed_tokens.weight", {spec.vocab, d}, 0, true, InitKind::kNormal, std,
        column_parallel({{spec.vocab, 1}}, d));
  end_decay(0);
  end_region(0);

  // One decoder layer at prefix p in region r: its matrices (weight decay) first, then (layer_rest) its
  // norms, biases and the expert bias, so that a region can hold several layers and still keep its
  // decay-taking tensors in one leading span.
  auto layer_matrices = [&](const std::string& p, int r, bool moe_layer) {  // r: the layer's hook region
    if (spec.mla.enabled) {
      // model/mla_attention.h; HF DeepSeek names and shapes, rope rows in our rotate-half order. Tensor
      // parallelism splits the per-head projections (q / q_b, kv_b rows, o_proj columns) by heads; the
      // low-rank down-projections feed every head, so each rank holds them whole and computes part of their
      // gradient (summed over tp).
      const MlaConfig& a = spec.mla;
      const int64_t H = spec.heads, dq = a.qk_head_dim + a.qk_pos_emb_head_dim;
      if (a.q_lora_rank > 0) {
        add(p + "self_attn.q_a_proj.weight", {a.q_lora_rank, d}, r, true, InitKind::kNormal, std);
        sum_whole(T > 1);
        add(p + "self_attn.q_b_proj.weight", {H * dq, a.q_lora_rank}, r, true, InitKind::kNormal, std,
            column_parallel({{H * dq, 1}}, a.q_lora_rank));
      } else {
        add(p + "self_attn.q_proj.weight", {H * dq, d}, r, true, InitKind::kNormal, std,
            column_parallel({{H * dq, 1}}, d));
      }
      add(p + "self_attn.kv_a_proj_with_mqa.weight", {a.kv_lora_rank + a.qk_pos_emb_head_dim, d}, r, true,
          InitKind::kNormal, std);
      sum_whole(T > 1);
      add(p + "self_attn.kv_b_proj.weight", {H * (a.qk_head_dim + a.v_head_dim), a.kv_lora_rank}, r, true,
          InitKind::kNormal, std, column_parallel({{H * (a.qk_head_dim + a.v_head_dim), 1}}, a.kv_lora_rank));
      add(p + "self_attn.o_proj.weight", {d, H * a.v_head_dim}, r, true, InitKind::kScaledNormal, out_std,
          row_parallel(d, H * a.v_head_dim));
    } else {
      add(p + "self_attn.qkv_proj.weight", {spec.qkv_dim(), d}, r, true, InitKind::kNormal, std,
          column_parallel(qkv_parts(), d));
      share_kv_rows(d);
      add(p + "self_attn.o_proj.weight", {d, spec.q_dim()}, r, true, InitKind::kScaledNormal, out_std,
          row_parallel(d, spec.q_dim()));
    }
    if (moe_layer) {
      // model/moe_mlp.h: the router, E stacked experts, an optional shared expert.
      const MoeConfig& m = spec.moe;
      const int64_t E = m.num_experts, F = m.ffn_hidden_size;
      // Tensor parallelism (expert TP = TP): every rank routes every token (the router, its bias and the
      // shared expert's gate whole, their gradients whole on each rank) and holds its F / TP columns of every
      // expert, split like the dense MLP's gate|up and down.
      add(p + "mlp.router.weight", {E, spec.hidden}, r, true, InitKind::kNormal, std);
      if (split_experts) {
        expert_prefixes.emplace_back(p, r);
      } else {
        // gate|up viewed as [E x 2F, d]: expert e's gate rows, then its up rows, this rank's F of each.
        std::vector<std::pair<int64_t, int64_t>> gu_parts;
        for (int64_t e = 0; e < E; ++e) gu_parts.insert(gu_parts.end(), {{F, 1}, {F, 1}});
        add(p + "mlp.experts.gate_up_proj.weight", {E, 2 * F, spec.hidden}, r, true, InitKind::kNormal, std,
            column_parallel(std::move(gu_parts), d));
        // down viewed as [E x d, F]: every row, this rank's columns.
        add(p + "mlp.experts.down_proj.weight", {E, spec.hidden, F}, r, true, InitKind::kScaledNormal,
            out_std, row_parallel(E * d, F));
      }
      if (m.shared_ffn_hidden_size > 0) {
        const int64_t Fs = m.shared_ffn_hidden_size;
        add(p + "mlp.shared_expert.gate_up_proj.weight", {2 * Fs, spec.hidden}, r, true, InitKind::kNormal,
            std, column_parallel({{Fs, 1}, {Fs, 1}}, d));
        add(p + "mlp.shared_expert.down_proj.weight", {spec.hidden, Fs}, r, true, InitKind::kScaledNormal,
            out_std, row_parallel(d, Fs));
        // Qwen2-MoE: one logit per token, sigmoid(h . w) scales the shared expert's output.
        if (m.shared_expert_gate)
          add(p + "mlp.shared_expert_gate.weight", {1, spec.hidden}, r, true, InitKind::kNormal, std);
      }
    } else {
      add(p + "mlp.gate_up_proj.weight", {2 * spec.ffn, d}, r, true, InitKind::kNormal, std,
          column_parallel({{spec.ffn, 1}, {spec.ffn, 1}}, d));
      add(p + "mlp.down_proj.weight", {d, spec.ffn}, r, true, InitKind::kScaledNormal, out_std,
          row_parallel(d, spec.ffn));
    }
  };
  auto layer_rest = [&](const std::string& p, int r, bool moe_layer) {
    // The expert bias: a replicated buffer (ParamEntry::replicated) updated by the balancing rule.
    if (moe_layer && spec.moe.expert_bias) {
      add(p + "mlp.router.expert_bias", {spec.moe.num_experts}, r, false, InitKind::kZeros, 0);
      entries_.back().replicated = true;
    }
    // Under sequence parallelism each tp rank normalises its own tokens: the weights' gradients are partial.
    add(p + "input_layernorm.weight", {spec.hidden}, r, false, InitKind::kOnes, 0);
    sum_whole(sp);
    add(p + "post_attention_layernorm.weight", {spec.hidden}, r, false, InitKind::kOnes, 0);
    sum_whole(sp);
    if (spec.mla.enabled) {
      if (spec.mla.q_lora_rank > 0) {
        add(p + "self_attn.q_a_layernorm.weight", {spec.mla.q_lora_rank}, r, false, InitKind::kOnes, 0);
        sum_whole(T > 1);
      }
      add(p + "self_attn.kv_a_layernorm.weight", {spec.mla.kv_lora_rank}, r, false, InitKind::kOnes, 0);
      sum_whole(T > 1);
      return;
    }
    if (spec.qkv_bias) {
      add(p + "self_attn.qkv_proj.bias", {spec.qkv_dim()}, r, false, InitKind::kZeros, 0,
          column_parallel(qkv_parts(), 1));
      share_kv_rows(1);
    }
    if (spec.qk_norm) {  // shared by every head, of which each tp rank holds some
      add(p + "self_attn.q_norm.weight", {spec.head_dim}, r, false, InitKind::kOnes, 0);
      sum_whole(T > 1);
      add(p + "self_attn.k_norm.weight", {spec.head_dim}, r, false, InitKind::kOnes, 0);
      sum_whole(T > 1);
    }
  };

  for (int l = 0; l < L; ++l) {
    const int r = l + 1;
    const std::string p = "layers." + std::to_string(l) + ".";
    begin_region(r);
    if (spec.holds_layer(l)) layer_matrices(p, r, spec.is_moe_layer(l));
    end_decay(r);
    if (spec.holds_layer(l)) layer_rest(p, r, spec.is_moe_layer(l));
    end_region(r);
  }

  // The head region also holds the multi-token-prediction modules (model/mtp.h): they run between the head's
  // forward and backward hooks. Each depth's layer has the kind of the last main layer (DeepSeek-V3: MoE).
  // Under pipeline parallelism they are the head's stage's (ModelSpec::local_mtp_layers).
  const int rf = L + 1;
  const int64_t mtp_layers = spec.local_mtp_layers();
  const bool mtp_moe = L > 0 && spec.is_moe_layer(L - 1);
  begin_region(rf);
  if (!spec.tied_embeddings && spec.pp.head)
    add("lm_head.weight", {spec.vocab, d}, rf, true, InitKind::kNormal, std,
        column_parallel({{spec.vocab, 1}}, d));
  for (int k = 0; k < mtp_layers; ++k) {
    const std::string p = "mtp." + std::to_string(k) + ".";
    // Whole on every tp rank (model/mtp.cpp says why): under sequence parallelism each projects its own
    // tokens, so its gradient, like the depth's norms', is partial.
    add(p + "eh_proj.weight", {spec.hidden, 2 * spec.hidden}, rf, true, InitKind::kNormal, std);
    sum_whole(sp);
    layer_matrices(p + "layer.", rf, mtp_moe);
  }
  end_decay(rf);
  if (spec.pp.head) {
    add("norm.weight", {spec.hidden}, rf, false, InitKind::kOnes, 0);
    sum_whole(sp);
  }
  for (int k = 0; k < mtp_layers; ++k) {
    const std::string p = "mtp." + std::to_string(k) + ".";
    for (const char* norm : {"enorm.weight", "hnorm.weight", "final_layernorm.weight"}) {
      add(p + norm, {spec.hidden}, rf, false, InitKind::kOnes, 0);
      sum_whole(sp);
    }
    layer_rest(p + "layer.", rf, mtp_moe);
  }
  end_region(rf);

  // Expert parallelism: each MoE layer's local experts, a region each (all decay).
  for (const auto& [p, owner] : expert_prefixes) {
    const int r = static_cast<int>(regions_.size());
    regions_.emplace_back();
    regions_[r].experts = true;
    regions_[r].owner = owner;
    const int64_t El = spec.local_experts(), e0 = spec.first_local_expert(), F = spec.moe.ffn_hidden_size;
    const int64_t E = spec.moe.num_experts;
    // The stacked experts viewed as [E x 2 F T, d] and [E x d, F T] (F: this rank's columns of an expert, F T
    // the whole): this rank's experts are one block of rows, of which tensor parallelism (expert TP = TP)
    // keeps each expert's F gate rows and F up rows (column-parallel, as the unsplit experts above) and F
    // columns of down (row-parallel).
    EntrySlice gu, down;
    for (int64_t e = e0; e < e0 + El; ++e)
      for (int64_t part = 0; part < 2; ++part) gu.row_blocks.emplace_back((2 * e + part) * F * T + tr * F, F);
    gu.whole_cols = d;
    gu.whole_numel = E * 2 * F * T * d;
    down.row_blocks = {{e0 * d, El * d}};
    down.col_begin = tr * F;
    down.whole_cols = F * T;
    down.whole_numel = E * d * F * T;
    begin_region(r);
    add(p + "mlp.experts.gate_up_proj.weight", {El, 2 * F, d}, r, true, InitKind::kNormal, std, gu);
    add(p + "mlp.experts.down_proj.weight", {El, d, F}, r, true, InitKind::kScaledNormal, out_std, down);
    end_decay(r);
    end_region(r);
  }
}

void ParamStore::add(const std::string& name, const Shape& shape, int region, bool decay, InitKind init,
                     double std, EntrySlice slice) {
  ParamEntry e;
  e.slice = std::move(slice);
  e.name = name;
  e.shape = shape;
  e.numel = shape_numel(shape);
  if (e.slice.whole()) {
    e.slice.whole_numel = e.numel;
    e.slice.whole_cols = e.cols();
  }
  e.offset = total_;
  e.region = region;
  e.decay = decay;
  e.init = init;
  e.std = std;
  total_ += (e.numel + kAlign - 1) / kAlign * kAlign;
  entries_.push_back(e);
}

int64_t ParamStore::parameter_count() const {
  int64_t n = 0;
  for (const auto& e : entries_) n += e.numel;
  return n;
}

int ParamStore::find(const std::string& name) const {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return static_cast<int>(i);
  return -1;
}

int ParamStore::require(const std::string& name) const {
  int i = find(name);
  PRIMUS_CHECK(i >= 0, "no parameter named '{}'", name);
  return i;
}

namespace {
constexpr const char* kRemaindersHint =
    "it is stored as the bf16 compute copy + an i16 remainder (ParamStore::master_in_remainders()): read it "
    "with master_f32(i), write it with set_master(i), or allocate with MasterStorage::kF32";
}  // namespace

Tensor ParamStore::master(int i) const {
  if (frozen_) {
    PRIMUS_CHECK(compute_aliases_master_, "master(): '{}' is frozen and its weights are {} (read master_f32)",
                 entries_[i].name, dtype_name(compute_.dtype()));
    return view(compute_, i);
  }
  PRIMUS_CHECK(shard_mode_ == ShardMode::kNone,
               "master weights of '{}' are sharded over {} data-parallel ranks (this rank holds chunk {})",
               entries_[i].name, shard_ranks_, shard_rank_);
  PRIMUS_CHECK(!remainders_, "master(): the f32 master of '{}' has no buffer of its own: {}",
               entries_[i].name, kRemaindersHint);
  if (gate_) gate_->before_read(i);
  return view(master_, i);
}

Tensor& ParamStore::master_flat() {
  PRIMUS_CHECK(!remainders_, "master_flat(): the f32 master weights have no buffer of their own: {}",
               kRemaindersHint);
  return master_;
}

Tensor& ParamStore::remainder_flat() {
  PRIMUS_CHECK(
      remainders_,
      "remainder_flat(): this store keeps an f32 master buffer (master_flat()); remainders exist only "
      "with MasterStorage::kRemainders (bf16 compute on CUDA by default)");
  return remainder_;
}

DType ParamStore::master_dtype() const {
  if (frozen_) return compute_.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  return remainders_ ? DType::kF32 : master_.dtype();
}

Tensor ParamStore::replicated_view(int i) const {
  const int64_t at = replicated_at_.empty() ? -1 : replicated_at_[i];
  PRIMUS_CHECK(at >= 0, "'{}' is not a replicated entry", entries_[i].name);
  return replicated_.slice(at, at + entries_[i].numel).view(entries_[i].shape);
}

Tensor ParamStore::master_f32(int i, const Stream& s) const {
  const ParamEntry& e = entries_[i];
  if (gate_) gate_->before_read(i);
  if (shard_mode_ != ShardMode::kNone && e.replicated) return replicated_view(i);
  PRIMUS_CHECK(shard_mode_ == ShardMode::kNone,
               "master_f32('{}'): master weights are sharded over {} data-parallel ranks", e.name,
               shard_ranks_);
  if (frozen_) {  // the weights themselves, widened
    if (compute_.dtype() == DType::kF32) return view(compute_, i);
    Tensor out = Tensor::empty(e.shape, DType::kF32, s);
    ops::cast(view(compute_, i), out, s);
    return out;
  }
  if (!remainders_) {
    PRIMUS_CHECK(master_.dtype() == DType::kF32,
                 "master_f32('{}'): the master weights are {} (a gradient-check store): use master(i)",
                 e.name, dtype_name(master_.dtype()));
    return view(master_, i);
  }
  Tensor out = Tensor::empty(e.shape, DType::kF32, s);
  ops::master_join(view(compute_, i), view(remainder_, i), out, s);
  return out;
}

void ParamStore::set_master(int i, const Tensor& value, const Stream& s) {
  const ParamEntry& e = entries_[i];
  PRIMUS_CHECK(shard_mode_ == ShardMode::kNone || e.replicated,
               "set_master('{}'): master weights are sharded over {} data-parallel ranks", e.name,
               shard_ranks_);
  PRIMUS_CHECK(
      value.defined() && value.numel() == e.numel && is_floating(value.dtype()) && value.is_contiguous(),
      "set_master('{}'): expected a contiguous float tensor of {} elements ({}), got {}", e.name, e.numel,
      shape_str(e.shape), value.defined() ? value.describe() : "an undefined tensor");
  const Device dev = compute_.device();
  PRIMUS_CHECK(value.device().is_cpu() || value.device() == dev,
               "set_master('{}'): the value is on {}, the parameters on {}", e.name, value.device().str(),
               dev.str());
  // On the host, convert there (no device temporary as large as the tensor); on the device, cast there.
  auto to_dtype = [&](const Tensor& v, DType dt) {
    if (v.dtype() == dt) return v.view(e.shape);
    if (v.device().is_cpu()) return cpu_cast(v, dt).view(e.shape);
    Tensor out = Tensor::empty(e.shape, dt, s);
    ops::cast(v, out, s);
    return out;
  };
  if (shard_mode_ != ShardMode::kNone) {
    set_replicated(i, to_dtype(value, DType::kF32), s);
    return;
  }
  Tensor hi = view(compute_, i);
  if (frozen_) {  // no master: the weights take the value rounded to their dtype
    Tensor v = to_dtype(value, compute_.dtype());
    if (v.data_ptr() != hi.data_ptr()) hi.copy_from(v, s);
    return;
  }
  if (!remainders_) {
    Tensor dst = view(master_, i);
    if (value.data_ptr() != dst.data_ptr()) dst.copy_from(to_dtype(value, dst.dtype()), s);
    if (!compute_aliases_master_) compute_from_master(dst, hi, s);
    return;
  }
  Tensor f32 = to_dtype(value, DType::kF32);
  Tensor rem = view(remainder_, i);
  if (f32.device() == dev) {
    ops::master_split(f32, hi, &rem, s);
    return;
  }
  Tensor h = Tensor::empty(e.shape, DType::kBF16), r = Tensor::empty(e.shape, DType::kI16);
  ops::master_split(f32, h, &r, Stream::cpu());
  hi.copy_from(h, s);
  rem.copy_from(r, s);
}

void ParamStore::set_replicated(int i, const Tensor& value, const Stream& s) {
  const ParamEntry& e = entries_[i];
  Tensor whole = replicated_view(i);
  if (value.data_ptr() != whole.data_ptr()) whole.copy_from(value, s);
  // The entry's elements in this rank's chunk of its region (checkpoints gather the chunks).
  const int r = e.region;
  const int64_t cb = chunk_begin(r), ce = cb + chunk_len(r);
  const int64_t b = std::max(cb, e.offset), end = std::min(ce, e.offset + e.numel);
  if (b < end) {
    const int64_t at = shard_offset(r) + (b - cb);
    Tensor chunk = master_.slice(at, at + (end - b));
    chunk.copy_from(whole.view({e.numel}).slice(b - e.offset, end - e.offset), s);
  }
  if (shard_mode_ == ShardMode::kOptimizer) {  // ZeRO-1's compute copy is whole
    Tensor c = view(compute_, i);
    compute_from_master(whole, c, s);
  }
}

void ParamStore::compute_from_master(const Tensor& master, Tensor& compute, const Stream& s) {
  if (compute.dtype() == master.dtype()) {
    compute.copy_from(master, s);
  } else if (compute.dtype() == DType::kBF16 && master.dtype() == DType::kF32) {
    ops::master_split(master, compute, nullptr, s);
  } else {
    ops::cast(master, compute, s);
  }
}

Tensor ParamStore::region_view(const Tensor& flat, bool compute, int i) const {
  if (!flat.defined()) return Tensor();  // a frozen store's gradients
  if (shard_mode_ != ShardMode::kFull) return view(flat, i);
  const ParamEntry& e = entries_[i];
  const Tensor& buf = compute ? attached_compute_[e.region] : attached_grad_[e.region];
  // A region gathered for forward only (evaluation) has no gradient buffer: its gradient views are empty.
  if (!compute && !buf.defined() && attached_compute_[e.region].defined()) return Tensor();
  PRIMUS_CHECK(buf.defined(), "'{}': its {} is sharded (FSDP) and region {} is not gathered right now",
               e.name, compute ? "parameter" : "gradient", e.region);
  const int64_t off = e.offset - regions_[e.region].begin;
  return buf.slice(off, off + e.numel).view(e.shape);
}

void ParamStore::attach_region(int r, const Tensor& compute, const Tensor& grad) {
  PRIMUS_CHECK(shard_mode_ == ShardMode::kFull, "attach_region needs ShardMode::kFull");
  attached_compute_[r] = compute;
  attached_grad_[r] = grad;
}

void ParamStore::detach_region(int r) {
  attached_compute_[r] = Tensor();
  attached_grad_[r] = Tensor();
}

Tensor ParamStore::view(const Tensor& flat, int i) const {
  const ParamEntry& e = entries_[i];
  return flat.slice(e.offset, e.offset + e.numel).view(e.shape);
}

namespace {
// The owners the memory report shows a store's buffers under (core/memory_owner.h).
constexpr const char* kParametersOwner = "parameters";
constexpr const char* kGradientsOwner = "gradients";
constexpr const char* kOptimizerOwner = "optimizer state";  // Adam moments, and masters beside a compute copy

Tensor zeros_owned_by(const char* owner, const Shape& shape, DType dt, const Stream& s) {
  PRIMUS_MEMORY_OWNER(owner);
  return Tensor::zeros(shape, dt, s);
}
}  // namespace

void ParamStore::allocate(DType compute_dtype, const Stream& s, DType master_dtype, MasterStorage storage) {
  PRIMUS_CHECK(master_dtype == DType::kF32 || (master_dtype == DType::kF64 && s.device.is_cpu()),
               "master weights must be f32 (or f64 on the CPU), got {}", dtype_name(master_dtype));
  remainders_ = storage == MasterStorage::kRemainders ||
                (storage == MasterStorage::kAuto &&
                 use_master_remainders(s.device.is_cuda(), compute_dtype, master_dtype, /*sharded=*/false));
  PRIMUS_CHECK(!remainders_ || (compute_dtype == DType::kBF16 && master_dtype == DType::kF32),
               "master weights in remainders need a bf16 compute copy of f32 masters, got {} compute and {} "
               "master weights",
               dtype_name(compute_dtype), dtype_name(master_dtype));
  grad_base_ = 0;
  if (sparse_entry_ >= 0) {
    PRIMUS_CHECK(master_dtype == DType::kF32,
                 "a row-sparse embedding gradient needs f32 master weights, got {}",
                 dtype_name(master_dtype));
    const ParamEntry& e = entries_[sparse_entry_];
    grad_base_ = regions_[0].end;
    PRIMUS_MEMORY_OWNER(kGradientsOwner);
    sparse_ = ops::row_sparse_grad(e.shape[0], e.shape[1], sparse_capacity_, s);
  }
  grad_ = zeros_owned_by(kGradientsOwner, {total_ - grad_base_}, master_dtype, s);
  PRIMUS_CHECK(master_dtype == DType::kF32 || (moment_m_ == DType::kF32 && moment_v_ == DType::kF32),
               "bf16 Adam moments need f32 master weights, got {}", dtype_name(master_dtype));
  // f32 moments follow the master's dtype (f64 in a gradient-check store).
  auto moment_dtype = [&](DType d) { return d == DType::kF32 ? master_dtype : d; };
  adam_m_ = zeros_owned_by(kOptimizerOwner, {total_}, moment_dtype(moment_m_), s);
  adam_v_ = zeros_owned_by(kOptimizerOwner, {total_}, moment_dtype(moment_v_), s);
  if (remainders_) {
    master_ = Tensor();
    remainder_ = zeros_owned_by(kOptimizerOwner, {total_}, DType::kI16, s);
    compute_ = zeros_owned_by(kParametersOwner, {total_}, compute_dtype, s);
    compute_aliases_master_ = false;
    return;
  }
  compute_aliases_master_ = compute_dtype == master_dtype;
  // A master the forward reads itself is the parameters; one beside a compute copy is optimizer state.
  master_ =
      zeros_owned_by(compute_aliases_master_ ? kParametersOwner : kOptimizerOwner, {total_}, master_dtype, s);
  compute_ = compute_aliases_master_ ? master_ : zeros_owned_by(kParametersOwner, {total_}, compute_dtype, s);
}

void ParamStore::set_moment_dtypes(DType m, DType v) {
  for (DType d : {m, v})
    PRIMUS_CHECK(d == DType::kF32 || d == DType::kBF16, "Adam moments must be f32 or bf16, got {}",
                 dtype_name(d));
  PRIMUS_CHECK(!adam_m_.defined() && !frozen_, "set_moment_dtypes: the store is already allocated");
  moment_m_ = m;
  moment_v_ = v;
}

void ParamStore::set_sparse_embedding_grad(int64_t capacity) {
  const int e = find("embed_tokens.weight");
  PRIMUS_CHECK(e >= 0 && !spec_.tied_embeddings && !grad_.defined() && !adam_m_.defined(),
               "set_sparse_embedding_grad: needs an untied input embedding and a store not yet allocated");
  const ParamEntry& en = entries_[e];
  PRIMUS_CHECK(
      en.region == 0 && en.offset == regions_[0].begin && en.shape.size() == 2 && capacity >= 1 &&
          capacity <= en.shape[0],
      "set_sparse_embedding_grad: region 0 must hold the [V, D] embedding and 1 <= capacity ({}) <= V",
      capacity);
  for (const ParamEntry& x : entries_)
    PRIMUS_CHECK(&x == &en || x.region != 0, "set_sparse_embedding_grad: region 0 holds '{}' too", x.name);
  sparse_entry_ = e;
  sparse_capacity_ = capacity;
}

Tensor ParamStore::grad(int i) const {
  PRIMUS_CHECK(i != sparse_entry_,
               "'{}': its gradient is row-sparse (ParamStore::sparse_grad), it has no dense view",
               entries_[i].name);
  if (grad_base_ == 0) return region_view(grad_, false, i);
  const ParamEntry& e = entries_[i];
  return grad_span(e.offset, e.offset + e.numel).view(e.shape);
}

Tensor ParamStore::grad_span(int64_t b, int64_t e) const {
  PRIMUS_CHECK(b >= grad_base_ && b <= e && e - grad_base_ <= grad_.numel(),
               "gradient span [{}, {}) outside the dense gradient buffer [{}, {})", b, e, grad_base_,
               grad_base_ + grad_.numel());
  return grad_.slice(b - grad_base_, e - grad_base_);
}

void ParamStore::allocate_frozen(DType dtype, const Stream& s) {
  PRIMUS_CHECK(is_floating(dtype), "frozen weights must be a float dtype, got {}", dtype_name(dtype));
  PRIMUS_CHECK(sparse_entry_ < 0, "a frozen store has no gradients to hold row-sparse");
  frozen_ = true;
  remainders_ = false;
  compute_ = zeros_owned_by(kParametersOwner, {total_}, dtype, s);
  compute_aliases_master_ = dtype != DType::kBF16 && dtype != DType::kF16;
  master_ = compute_aliases_master_ ? compute_ : Tensor();
}

void ParamStore::allocate_sharded(DType compute_dtype, const Stream& s, ShardMode mode, int ranks, int rank,
                                  int expert_ranks, int expert_rank) {
  if (mode == ShardMode::kNone) {
    allocate(compute_dtype, s);
    return;
  }
  PRIMUS_CHECK(sparse_entry_ < 0, "a sharded store cannot hold the embedding gradient row-sparse");
  if (expert_ranks < 0) {
    expert_ranks = ranks;
    expert_rank = rank;
  }
  PRIMUS_CHECK(ranks >= 1 && region_multiple_ % ranks == 0 && rank >= 0 && rank < ranks,
               "sharding over {} ranks (rank {}) needs a layout padded for it (region multiple {})", ranks,
               rank, region_multiple_);
  PRIMUS_CHECK(
      expert_ranks >= 1 && expert_region_multiple_ % expert_ranks == 0 && expert_rank >= 0 &&
          expert_rank < expert_ranks,
      "sharding experts over {} ranks (rank {}) needs a layout padded for it (expert region multiple "
      "{})",
      expert_ranks, expert_rank, expert_region_multiple_);
  shard_mode_ = mode;
  shard_ranks_ = ranks;
  shard_rank_ = rank;
  expert_ranks_ = expert_ranks;
  expert_rank_ = expert_rank;
  shard_offsets_.assign(regions_.size(), 0);
  shard_total_ = 0;
  for (size_t r = 0; r < regions_.size(); ++r) {
    shard_offsets_[r] = shard_total_;
    shard_total_ += chunk_len(static_cast<int>(r));
  }
  const bool aliased = mode != ShardMode::kOptimizer && compute_dtype == DType::kF32;
  master_ = zeros_owned_by(aliased ? kParametersOwner : kOptimizerOwner, {shard_total_}, DType::kF32, s);
  adam_m_ = zeros_owned_by(kOptimizerOwner, {shard_total_}, moment_m_, s);
  adam_v_ = zeros_owned_by(kOptimizerOwner, {shard_total_}, moment_v_, s);
  if (mode == ShardMode::kOptimizer) {
    grad_ = zeros_owned_by(kGradientsOwner, {total_}, DType::kF32, s);
    // whole, never an alias of the (sharded) master
    compute_ = zeros_owned_by(kParametersOwner, {total_}, compute_dtype, s);
    compute_aliases_master_ = false;
  } else {
    grad_ = zeros_owned_by(kGradientsOwner, {shard_total_}, DType::kF32, s);
    compute_aliases_master_ = aliased;
    compute_ = aliased ? master_ : zeros_owned_by(kParametersOwner, {shard_total_}, compute_dtype, s);
    attached_compute_.assign(regions_.size(), Tensor());
    attached_grad_.assign(regions_.size(), Tensor());
  }
  // The replicated entries whole (a few floats per MoE layer), for the forward and their own update rule.
  replicated_at_.assign(entries_.size(), -1);
  int64_t n = 0;
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].replicated) {
      replicated_at_[i] = n;
      n += entries_[i].numel;
    }
  if (n > 0) replicated_ = zeros_owned_by(kParametersOwner, {n}, DType::kF32, s);
}

void ParamStore::initialize(uint64_t seed, const Stream& s) {
  // Generated on the host in f32 and copied: bitwise the same initial model on every device and layout.
  Tensor host = Tensor::zeros({total_}, DType::kF32);
  float* h = host.data<float>();
  for (const ParamEntry& e : entries_) {
    float* dst = h + e.offset;
    const uint64_t key = mix64(seed ^ name_hash64(e.name));
    switch (e.init) {
      case InitKind::kOnes:
        for (int64_t j = 0; j < e.numel; ++j) dst[j] = 1.0f;
        break;
      case InitKind::kZeros:
        break;
      case InitKind::kNormal:
      case InitKind::kScaledNormal: {
        const float sd = static_cast<float>(e.std);
        // Keyed by the element's index in the whole tensor: a split rank draws exactly its part.
        std::vector<std::array<int64_t, 3>> runs;
        e.slice.for_each_run(e.numel, e.cols(), [&](int64_t local, int64_t whole, int64_t len) {
          runs.push_back({local, whole, len});
        });
        auto fill = [&](const std::array<int64_t, 3>& r, int64_t j) {
          dst[r[0] + j] = sd * philox_normal(key, static_cast<uint64_t>(r[1] + j));
        };
        if (runs.size() == 1) {
#pragma omp parallel for schedule(static)
          for (int64_t j = 0; j < runs[0][2]; ++j) fill(runs[0], j);
        } else {
#pragma omp parallel for schedule(static)
          for (size_t k = 0; k < runs.size(); ++k)
            for (int64_t j = 0; j < runs[k][2]; ++j) fill(runs[k], j);
        }
        break;
      }
    }
  }
  if (shard_mode_ != ShardMode::kNone) {
    // This rank's chunk of every region; ZeRO-1 also fills the whole compute copy.
    for (size_t r = 0; r < regions_.size(); ++r) {
      const int ri = static_cast<int>(r);
      master_.slice(shard_offset(ri), shard_offset(ri) + chunk_len(ri))
          .copy_from(host.slice(chunk_begin(ri), chunk_begin(ri) + chunk_len(ri)), s);
    }
    if (shard_mode_ == ShardMode::kOptimizer) {
      Tensor c = Tensor::empty({total_}, compute_.dtype());
      compute_from_master(host, c, Stream::cpu());
      compute_.copy_from(c, s);
    } else if (!compute_aliases_master_) {
      compute_from_master(master_, compute_, s);
    }
    for (size_t i = 0; i < entries_.size(); ++i) {
      const ParamEntry& e = entries_[i];
      if (!e.replicated) continue;
      const int64_t at = replicated_at_[i];
      replicated_.slice(at, at + e.numel).copy_from(host.slice(e.offset, e.offset + e.numel), s);
    }
    return;
  }
  if (frozen_) {
    Tensor c = Tensor::empty({total_}, compute_.dtype());
    if (compute_.dtype() == DType::kF32)
      c = host;
    else
      compute_from_master(host, c, Stream::cpu());
    compute_.copy_from(c, s);
    return;
  }
  if (remainders_) {
    // Split on the host in slices (no whole-model temporaries beyond `host`), then copy both halves.
    constexpr int64_t kSlice = int64_t{1} << 24;
    Tensor h = Tensor::empty({std::min(kSlice, total_)}, DType::kBF16);
    Tensor r = Tensor::empty({std::min(kSlice, total_)}, DType::kI16);
    for (int64_t b = 0; b < total_; b += kSlice) {
      const int64_t e = std::min(total_, b + kSlice);
      Tensor hs = h.slice(0, e - b), rs = r.slice(0, e - b);
      ops::master_split(host.slice(b, e), hs, &rs, Stream::cpu());
      compute_.slice(b, e).copy_from(hs, s);
      remainder_.slice(b, e).copy_from(rs, s);
      stream_sync(s);  // the slices are reused by the next round
    }
    return;
  }
  if (master_.dtype() == DType::kF32) {
    master_.copy_from(host, s);
  } else {
    master_.copy_from(cpu_cast(host, master_.dtype()), s);
  }
  sync_compute_copy(s);
}

void ParamStore::sync_compute_copy(const Stream& s) {
  if (compute_aliases_master_ || remainders_ || frozen_) return;
  PRIMUS_CHECK(shard_mode_ == ShardMode::kNone,
               "sync_compute_copy on sharded parameters: the data-parallel engine gathers them");
  compute_from_master(master_, compute_, s);
}

void ParamStore::set_overwritten_grads(const std::vector<int>& entries) {
  overwritten_.assign(entries_.size(), 0);
  written_.assign(entries_.size(), 0);
  for (int i : entries) {
    PRIMUS_CHECK(i >= 0 && i < static_cast<int>(entries_.size()), "set_overwritten_grads: no entry {}", i);
    overwritten_[i] = 1;
  }
  // The complement of the listed entries, padding included, as a few contiguous spans.
  std::vector<std::pair<int64_t, int64_t>> taken;
  for (size_t i = 0; i < entries_.size(); ++i)
    if (overwritten_[i]) taken.emplace_back(entries_[i].offset, entries_[i].offset + entries_[i].numel);
  std::sort(taken.begin(), taken.end());
  zero_spans_.clear();
  int64_t at = 0;
  for (const auto& [b, e] : taken) {
    if (b > at) zero_spans_.emplace_back(at, b);
    at = std::max(at, e);
  }
  if (at < total_) zero_spans_.emplace_back(at, total_);
  // Per region, relative to its start (FSDP's region buffers).
  region_zero_spans_.assign(regions_.size(), {});
  for (size_t r = 0; r < regions_.size(); ++r) {
    const int64_t rb = regions_[r].begin, re = regions_[r].end;
    for (const auto& [b, e] : zero_spans_) {
      const int64_t lo = std::max(b, rb), hi = std::min(e, re);
      if (lo < hi) region_zero_spans_[r].emplace_back(lo - rb, hi - rb);
    }
  }
}

namespace {
void zero_spans(const Tensor& buf, const std::vector<std::pair<int64_t, int64_t>>& spans, const Stream& s) {
  for (const auto& [b, e] : spans) {
    Tensor span = buf.slice(b, e);
    span.zero_(s);
  }
}
}  // namespace

void ParamStore::begin_grad_step(const Stream& s) {
  if (frozen_) return;
  std::fill(written_.begin(), written_.end(), 0);
  if (sparse_entry_ >= 0) ops::row_sparse_clear(sparse_, s);
  if (overwritten_.empty()) {
    grad_.zero_(s);
    return;
  }
  for (const auto& [b, e] : zero_spans_) {  // whole-model spans; the buffer starts at grad_base_
    const int64_t lo = std::max(b, grad_base_);
    if (lo < e) grad_.slice(lo - grad_base_, e - grad_base_).zero_(s);
  }
}

void ParamStore::begin_region_grads(int r, const Stream& s) {
  if (sparse_region(r)) {
    ops::row_sparse_clear(sparse_, s);
    return;
  }
  Tensor g = grad_span(regions_[r].begin, regions_[r].end);
  begin_region_grads(r, g, s);
}

void ParamStore::begin_region_grads(int r, Tensor& region_grads, const Stream& s) {
  if (overwritten_.empty()) {
    region_grads.zero_(s);
    return;
  }
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].region == r) written_[i] = 0;
  zero_spans(region_grads, region_zero_spans_[r], s);
}

bool ParamStore::grad_accumulate(int i) {
  if (overwritten_.empty() || !overwritten_[i] || written_[i]) return true;
  written_[i] = 1;
  return false;
}

void ParamStore::zero_if_unwritten(int i, const Stream& s) {
  if (overwritten_.empty() || !overwritten_[i] || written_[i]) return;
  Tensor g = grad(i);  // the attached region buffer under FSDP
  if (g.defined()) g.zero_(s);
  written_[i] = 1;
}

void ParamStore::zero_unwritten(int region, const Stream& s) {
  for (size_t i = 0; i < overwritten_.size(); ++i)
    if (region < 0 || entries_[i].region == region) zero_if_unwritten(static_cast<int>(i), s);
}

void ParamStore::end_entry_grads(std::span<const int> entries, const Stream& s) {
  for (int i : entries) zero_if_unwritten(i, s);
}

}  // namespace primus
