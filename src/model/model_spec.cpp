#include "model/model_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "core/error.h"
#include "ops/rope.h"

namespace primus {

ModelSpec ModelSpec::from_config(const ModelConfig& m) {
  ModelSpec s;
  s.layers = m.num_layers;
  s.hidden = m.hidden_size;
  s.heads = m.num_attention_heads;
  s.kv_heads = m.num_query_groups > 0 ? m.num_query_groups : m.num_attention_heads;
  s.head_dim = m.kv_channels > 0 ? m.kv_channels : m.hidden_size / m.num_attention_heads;
  s.ffn = m.ffn_hidden_size;
  s.vocab = m.vocab_rows();
  s.qkv_bias = m.add_qkv_bias;
  s.qk_norm = m.qk_layernorm;
  s.tied_embeddings = !m.untie_embeddings_and_output_weights;
  s.norm_eps = static_cast<float>(m.norm_epsilon);
  s.init_std = m.init_method_std;
  s.moe = m.moe;
  s.logit_softcap = static_cast<float>(m.final_logit_softcap);
  s.mla = m.mla;
  s.mtp_layers = m.mtp_num_layers;
  s.mtp_loss_scale = m.mtp_loss_scaling_factor;
  if (s.mla.enabled) {
    const MlaConfig& a = s.mla;
    PRIMUS_CHECK(a.q_lora_rank >= 0 && a.kv_lora_rank > 0 && a.qk_head_dim >= 0 &&
                     a.qk_pos_emb_head_dim >= 2 && a.qk_pos_emb_head_dim % 2 == 0 && a.v_head_dim > 0,
                 "MLA sizes: q_lora_rank {} kv_lora_rank {} qk_head_dim {} qk_pos_emb_head_dim {} (even) "
                 "v_head_dim {}",
                 a.q_lora_rank, a.kv_lora_rank, a.qk_head_dim, a.qk_pos_emb_head_dim, a.v_head_dim);
    PRIMUS_CHECK(s.kv_heads == s.heads,
                 "MLA has one key/value head per query head, got {} query groups for {} "
                 "heads",
                 s.kv_heads, s.heads);
    // Megatron's MLA: the softmax temperature of YaRN, m(factor, mscale_all_dim)^2, whatever the rope type.
    const double m2 = std::pow(ops::yarn_mscale(a.rotary_scaling_factor, a.mscale_all_dim), 2);
    s.attn_scale =
        static_cast<float>(m2 / std::sqrt(static_cast<double>(a.qk_head_dim + a.qk_pos_emb_head_dim)));
  } else {
    s.attn_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
    if (m.rotary_percent != 1.0) {
      // Megatron's RotaryEmbedding: int(kv_channels * rotary_percent) dimensions (validate.cpp names a bad
      // one).
      s.rotary_dim = static_cast<int64_t>(static_cast<double>(s.head_dim) * m.rotary_percent);
      PRIMUS_CHECK(s.rotary_dim >= 2 && s.rotary_dim % 2 == 0,
                   "rotary_percent {} of head_dim {} rotates {} dimensions: must be even and at least 2",
                   m.rotary_percent, s.head_dim, s.rotary_dim);
    }
  }
  PRIMUS_CHECK(s.mtp_layers >= 0, "mtp_num_layers must be >= 0, got {}", s.mtp_layers);
  if (s.moe.enabled()) {
    PRIMUS_CHECK(s.moe.ffn_hidden_size > 0 && s.moe.topk > 0 && s.moe.topk <= s.moe.num_experts &&
                     static_cast<int64_t>(s.moe.layer_is_moe.size()) == s.layers,
                 "MoE sizes: {} experts, top-{}, expert FFN {}, {} layer flags for {} layers",
                 s.moe.num_experts, s.moe.topk, s.moe.ffn_hidden_size, s.moe.layer_is_moe.size(), s.layers);
  }
  PRIMUS_CHECK(s.layers > 0 && s.hidden > 0 && s.heads > 0 && s.ffn > 0 && s.vocab > 0,
               "model sizes must be positive: {}", s.describe());
  PRIMUS_CHECK(s.heads % s.kv_heads == 0, "num_attention_heads {} not divisible by num_query_groups {}",
               s.heads, s.kv_heads);
  return s;
}

ModelSpec ModelSpec::with_expert_shard(int size, int rank) const {
  PRIMUS_CHECK(size >= 1 && rank >= 0 && rank < size, "expert shard {} of {}", rank, size);
  PRIMUS_CHECK(size == 1 || (moe.enabled() && moe.num_experts % size == 0),
               "expert parallelism over {} ranks needs an MoE model whose num_experts ({}) it divides", size,
               moe.num_experts);
  ModelSpec s = *this;
  s.ep = ExpertShard{size, rank};
  return s;
}

ModelSpec ModelSpec::with_tensor_shard(int size, int rank, bool sequence_parallel) const {
  PRIMUS_CHECK(size >= 1 && rank >= 0 && rank < size, "tensor shard {} of {}", rank, size);
  PRIMUS_CHECK(tp.size == 1, "with_tensor_shard: the spec is already split over {} ranks", tp.size);
  ModelSpec s = *this;
  s.tp = TensorShard{size, rank, sequence_parallel && size > 1};
  if (size == 1) return s;
  // The layout's validation (ParallelDims::validate_training) names the keys; these guard direct callers.
  PRIMUS_CHECK(heads % size == 0 && ffn % size == 0 && vocab % size == 0,
               "tensor parallelism over {} ranks needs heads ({}), ffn ({}) and the padded vocabulary ({}) "
               "divisible by it",
               size, heads, ffn, vocab);
  // Fewer key/value heads than ranks: each rank keeps the one kv head its q heads read (GQA groups then never
  // straddle ranks), replicated over size / kv_heads ranks (Megatron's rule as well: one divides the other).
  PRIMUS_CHECK(kv_heads % size == 0 || size % kv_heads == 0,
               "tensor parallelism over {} ranks with {} key/value heads: one must divide the other", size,
               kv_heads);
  s.heads /= size;
  if (kv_heads % size == 0) {
    s.kv_heads /= size;
  } else {
    s.tp.kv_replicas = size / static_cast<int>(kv_heads);
    s.kv_heads = 1;
  }
  s.ffn /= size;
  s.vocab /= size;
  if (moe.enabled()) {
    // Expert tensor parallelism (ETP = TP): each expert's and the shared expert's hidden columns split.
    PRIMUS_CHECK(moe.ffn_hidden_size % size == 0 && moe.shared_ffn_hidden_size % size == 0,
                 "tensor parallelism over {} ranks needs moe_ffn_hidden_size ({}) and the shared expert's "
                 "size ({}) divisible by it",
                 size, moe.ffn_hidden_size, moe.shared_ffn_hidden_size);
    s.moe.ffn_hidden_size /= size;
    s.moe.shared_ffn_hidden_size /= size;
  }
  return s;
}

ModelSpec ModelSpec::with_pipeline_share(bool embedding, std::vector<char> held, bool head) const {
  PRIMUS_CHECK(static_cast<int64_t>(held.size()) == layers, "pipeline share: {} layer flags for {} layers",
               held.size(), layers);
  PRIMUS_CHECK(!pp.split, "with_pipeline_share: the spec is already split");
  ModelSpec s = *this;
  s.pp.split = true;
  s.pp.embedding = embedding;
  s.pp.head = head;
  s.pp.layers = std::move(held);
  return s;
}

std::string ModelSpec::pipeline_modules() const {
  std::vector<std::string> parts;
  if (pp.embedding) parts.push_back("embedding");
  std::string runs;
  for (int64_t l = 0; l < layers;) {
    if (!holds_layer(l)) {
      ++l;
      continue;
    }
    int64_t e = l;
    while (e + 1 < layers && holds_layer(e + 1)) ++e;
    runs += fmt::format("{}{}", runs.empty() ? "layers " : ", ",
                        e == l ? std::to_string(l) : fmt::format("{}-{}", l, e));
    l = e + 1;
  }
  if (!runs.empty()) parts.push_back(runs);
  if (pp.head)
    parts.push_back(holds_tied_copy() ? (tied_embeddings ? "head (a copy of the tied embedding)"
                                                         : "head (+ a copy of the embedding)")
                                      : "head");
  if (pp.head && mtp_layers > 0)
    parts.push_back(fmt::format("{} MTP layer{}", mtp_layers, mtp_layers == 1 ? "" : "s"));
  return parts.empty() ? std::string("(nothing)") : fmt::format("{}", fmt::join(parts, " + "));
}

std::string ModelSpec::describe() const {
  return fmt::format("L={} d={} heads={}/{} head_dim={}{} ffn={} vocab={}{}{}{}", layers, hidden, heads,
                     kv_heads, head_dim, rotary_dim > 0 ? fmt::format(" rotary={}", rotary_dim) : "", ffn,
                     vocab, qkv_bias ? " qkv-bias" : "", qk_norm && !mla.enabled ? " qk-norm" : "",
                     tied_embeddings ? " tied" : "") +
         (moe.enabled() ? fmt::format(" experts={} top-{} expert-ffn={} moe-layers={}", moe.num_experts,
                                      moe.topk, moe.ffn_hidden_size, moe.moe_layers())
                        : "") +
         (mla.enabled
              ? fmt::format(" mla(q_lora={} kv_lora={} qk={}+{} v={}{})", mla.q_lora_rank, mla.kv_lora_rank,
                            mla.qk_head_dim, mla.qk_pos_emb_head_dim, mla.v_head_dim,
                            mla.yarn ? fmt::format(" yarn x{}", mla.rotary_scaling_factor) : "")
              : "") +
         (mtp_layers > 0 ? fmt::format(" mtp={}", mtp_layers) : "") +
         (logit_softcap > 0 ? fmt::format(" logit-softcap={}", logit_softcap) : "") +
         (moe.enabled() && moe.router_softcap > 0 ? fmt::format(" router-softcap={}", moe.router_softcap)
                                                  : "") +
         (ep.size > 1 ? fmt::format(" experts-here={}..{}", first_local_expert(),
                                    first_local_expert() + local_experts() - 1)
                      : "") +
         (pp.split ? " pipeline-stage=" + pipeline_modules() : "") +
         (tp.size > 1 ? fmt::format(" tp-shard={}/{}{}{} (sizes above are this rank's)", tp.rank, tp.size,
                                    tp.sequence_parallel ? " sp" : "",
                                    tp.kv_replicas > 1 ? fmt::format(" kv-head x{}", tp.kv_replicas) : "")
                      : "");
}

}  // namespace primus
