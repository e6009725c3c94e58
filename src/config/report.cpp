#include "config/report.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "config/plan.h"

namespace primus::config {
namespace {

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return n < 0 ? "-" + out : out;
}

std::string human(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000.0 && i < 5) {
    v /= 1000.0;
    ++i;
  }
  return fmt::format("{:.3g} {}{}", v, prefixes[i], unit);
}

// Parameter counts read as 8.03 B (billions), 151 M, ...
std::string count(double v) {
  const char* suffix[] = {"", " K", " M", " B", " T"};
  int i = 0;
  while (v >= 1000.0 && i < 4) {
    v /= 1000.0;
    ++i;
  }
  return fmt::format("{:.3g}{}", v, suffix[i]);
}

// Appends `items` as comma-separated text wrapped at ~110 columns with the given indent.
void wrap_list(std::string& out, const std::vector<std::string>& items, const std::string& indent) {
  std::string line = indent;
  for (size_t i = 0; i < items.size(); ++i) {
    std::string piece = items[i] + (i + 1 < items.size() ? ", " : "");
    if (line.size() + piece.size() > 110 && line.size() > indent.size()) {
      out += line + "\n";
      line = indent;
    }
    line += piece;
  }
  if (line.size() > indent.size()) out += line + "\n";
}

// Nests dotted keys ("training.seq_len") into sections for the YAML dump.
struct Node {
  std::vector<std::pair<std::string, Node>> children;
  const KeyEntry* entry = nullptr;
  Node& child(const std::string& name) {
    for (auto& [n, c] : children)
      if (n == name) return c;
    children.emplace_back(name, Node{});
    return children.back().second;
  }
};

void emit_yaml(std::string& out, const Node& node, int indent) {
  for (const auto& [name, child] : node.children) {
    std::string pad(static_cast<size_t>(indent), ' ');
    if (child.entry != nullptr) {
      std::string line = fmt::format("{}{}: {}", pad, name, child.entry->value.repr());
      out += fmt::format("{:<60}  # {}\n", line, child.entry->value.origin().str());
    } else {
      out += fmt::format("{}{}:\n", pad, name);
      emit_yaml(out, child, indent + 2);
    }
  }
}

// The forced-balancing clause of the routing line (docs/moe.md).
std::string force_balance_text(const std::string& mode) {
  if (mode == "even")
    return "; FORCED BALANCING even (round-robin dispatch, the router's top-k weights carried)";
  if (mode == "uniform") return "; FORCED BALANCING uniform (routing by random logits)";
  if (mode == "round_robin")
    return "; FORCED BALANCING round-robin (dispatch weighed by the router's probabilities of those experts)";
  return "";
}

}  // namespace

std::string resolved_yaml(const ResolvedConfig& rc) {
  std::string out;
  out += fmt::format("# Resolved by primus {} from {}\n", PRIMUS_VERSION, rc.info.path);
  out += fmt::format("# work_group: {}, user_name: {}, exp_name: {}, workspace: {}\n", rc.info.work_group,
                     rc.info.user_name, rc.info.exp_name, rc.info.workspace);
  out += fmt::format("# module {} (framework {}): module preset {}, model preset {}\n", rc.info.module_name,
                     rc.info.framework, rc.info.module_preset,
                     rc.info.model_preset.empty() ? "none" : rc.info.model_preset);
  for (const std::string& d : rc.derived) out += "# derived: " + d + "\n";
  Node root;
  for (const KeyEntry& e : rc.keys.entries) {
    Node* n = &root;
    const std::string& name = e.decl->name;
    size_t start = 0;
    while (true) {
      size_t dot = name.find('.', start);
      n = &n->child(name.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    n->entry = &e;
  }
  emit_yaml(out, root, 0);
  return out;
}

DeviceGuess guess_device(const std::string& device_key) {
  if (device_key == "cpu") return {false, "cpu (device: cpu)"};
  if (device_key == "cuda") return {true, "cuda:0 (device: cuda)"};
#ifdef PRIMUS_WITH_CUDA
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  bool hidden = visible != nullptr && (std::string(visible).empty() || std::string(visible) == "-1");
  std::error_code ec;
  bool node = std::filesystem::exists("/dev/nvidiactl", ec) || std::filesystem::exists("/dev/nvidia0", ec);
  if (node && !hidden)
    return {true, "cuda:0 (device: auto; a GPU device node is present, not opened by a dry run)"};
  return {false, "cpu (device: auto; no visible GPU device node)"};
#else
  return {false, "cpu (device: auto; this build has no CUDA backend)"};
#endif
}

std::string dry_run_report(const ResolvedConfig& rc) {
  const TrainConfig& t = rc.train;
  std::string out;
  out +=
      "Primus-C++ dry run: the configuration is resolved and checked; nothing is built, no GPU is "
      "touched.\n\n";
  out += fmt::format("experiment    {}\n", rc.info.path);
  out += fmt::format("run directory {}\n", t.run.run_dir());
  out += fmt::format("module        {} (framework {})\n", rc.info.module_name, rc.info.framework);
  out += fmt::format("module preset {}\n", rc.info.module_preset);
  out += fmt::format("model preset  {}\n", rc.info.model_preset.empty() ? "none" : rc.info.model_preset);
  out +=
      fmt::format("platform      {}\n", rc.info.platform_preset.empty() ? "none" : rc.info.platform_preset);
  out += "config roots  ";
  for (size_t i = 0; i < rc.info.roots.size(); ++i)
    out += fmt::format("{}{}. {}", i ? "; " : "", i + 1, rc.info.roots[i]);
  out += "\n";

  // Implemented keys, grouped as the tables group them.
  size_t implemented = 0, no_effect = 0, inert = 0;
  std::vector<std::string> groups;
  std::map<std::string, std::vector<const KeyEntry*>> by_group;
  std::map<std::string, std::vector<std::string>> by_reason;
  std::vector<std::string> reasons_in_order;
  std::vector<std::string> inert_keys;
  for (const KeyEntry& e : rc.keys.entries) {
    switch (e.decl->status) {
      case KeyStatus::kImplemented:
        ++implemented;
        if (by_group[e.decl->group].empty()) groups.push_back(e.decl->group);
        by_group[e.decl->group].push_back(&e);
        break;
      case KeyStatus::kNoEffect:
        ++no_effect;
        if (by_reason[e.decl->reason].empty()) reasons_in_order.push_back(e.decl->reason);
        by_reason[e.decl->reason].push_back(e.is_default() ? e.decl->name
                                                           : e.decl->name + "=" + e.value.repr());
        break;
      case KeyStatus::kNotSupported:
        ++inert;
        inert_keys.push_back(e.decl->name + "=" + e.value.repr());
        break;
    }
  }
  out +=
      fmt::format("\n== Resolved configuration: {} implemented keys (key = value  # where it came from) ==\n",
                  implemented);
  for (const std::string& g : groups) {
    out += fmt::format("[{}]\n", g);
    for (const KeyEntry* e : by_group[g]) {
      std::string line = fmt::format("  {} = {}", e->decl->name, e->value.repr());
      out += fmt::format("{:<58}  # {}\n", line, e->value.origin().str());
    }
  }
  if (!rc.derived.empty()) {
    out += "\n== Derived values ==\n";
    for (const std::string& d : rc.derived) out += "  " + d + "\n";
  }
  out += fmt::format(
      "\n== Keys accepted with no effect here: {} (by reason; key=value where a file sets it) ==\n",
      no_effect);
  for (const std::string& reason : reasons_in_order) {
    out += fmt::format("- {}:\n", reason);
    wrap_list(out, by_reason[reason], "    ");
  }
  out +=
      fmt::format("\n== Keys of features not supported yet, at values that change nothing: {} ==\n", inert);
  wrap_list(out, inert_keys, "  ");
  if (!rc.warnings.empty()) {
    out += "\n== Warnings ==\n";
    for (const std::string& w : rc.warnings) out += "  ! " + w + "\n";
  }

  // The plan.
  const ModelConfig& m = t.model;
  const ParamCounts params = count_parameters(m);
  const FlopsPerToken flops = flops_per_token(m, t.data.seq_length);
  const DeviceGuess device = guess_device(t.device);
  const BatchLayout batch = batch_layout(t);
  out += "\n== Plan ==\n";
  out += fmt::format(
      "model          {}: {} layers, hidden {}, {} heads / {} KV heads (head dim {}), FFN {}, vocab {} "
      "(padded {}){}{}{}\n",
      m.name.empty() ? "(unnamed)" : m.name, m.num_layers, m.hidden_size, m.num_attention_heads,
      m.num_query_groups, m.kv_channels, m.ffn_hidden_size, m.vocab_size, m.padded_vocab_size,
      m.untie_embeddings_and_output_weights ? "" : ", tied embeddings", m.add_qkv_bias ? ", qkv bias" : "",
      m.qk_layernorm && !m.mla.enabled ? ", qk-norm" : "");
  if (m.mla.enabled) {
    const MlaConfig& a = m.mla;
    out += fmt::format(
        "attention      multi-latent (docs/mla.md): q {}, kv latent {}, q/k heads {} + {} rotary, v heads "
        "{}; "
        "{}, softmax scale m^2/sqrt({})\n",
        a.q_lora_rank > 0 ? fmt::format("latent {}", a.q_lora_rank) : std::string("direct"), a.kv_lora_rank,
        a.qk_head_dim, a.qk_pos_emb_head_dim, a.v_head_dim,
        a.yarn ? fmt::format("YaRN x{} from {} positions (beta {}/{}, mscale {}/{})", a.rotary_scaling_factor,
                             a.original_max_position, a.beta_fast, a.beta_slow, a.mscale, a.mscale_all_dim)
               : std::string("plain RoPE"),
        a.qk_head_dim + a.qk_pos_emb_head_dim);
  }
  if (m.mtp_num_layers > 0)
    out += fmt::format("mtp            {} depth(s), loss weight {} / {} per depth, {} parameters per depth\n",
                       m.mtp_num_layers, m.mtp_loss_scaling_factor, m.mtp_num_layers,
                       with_commas(params.per_mtp_depth));
  out +=
      fmt::format("parameters     {} total ({}); {} non-embedding; embedding {}, lm-head {}, per layer {}\n",
                  count(static_cast<double>(params.total)), with_commas(params.total),
                  count(static_cast<double>(params.non_embedding)), with_commas(params.embedding),
                  with_commas(params.lm_head), with_commas(params.per_layer));
  if (m.moe.enabled()) {
    const MoeConfig& e = m.moe;
    out += fmt::format(
        "experts        {} MoE + {} dense layers; {} experts of FFN {} per MoE layer, top-{} ({} "
        "routing{}{}){}; "
        "{} active non-embedding parameters per token (the FLOP count uses these)\n",
        params.moe_layers, params.dense_layers, e.num_experts, e.ffn_hidden_size, e.topk, e.score_function,
        e.num_groups > 0 ? fmt::format(", {} groups keep {}", e.num_groups, e.group_topk) : "",
        e.expert_bias ? ", expert bias" : "",
        e.shared_ffn_hidden_size > 0 ? fmt::format(", shared expert FFN {}{}", e.shared_ffn_hidden_size,
                                                   e.shared_expert_gate ? " gated" : "")
                                     : "",
        count(static_cast<double>(params.active_non_embedding)));
    out += fmt::format(
        "routing        {}; load balancing {} (coeff {}), z-loss coeff {}{}\n",
        e.capacity_factor > 0 ? fmt::format("capacity factor {} ({} policy{})", e.capacity_factor,
                                            e.drop_policy, e.pad_to_capacity ? ", padded to capacity" : "")
                              : std::string("dropless"),
        e.load_balancing, e.aux_loss_coeff, e.z_loss_coeff, force_balance_text(e.force_balance));
  }
  out += fmt::format(
      "FLOPs/token    {}FLOP (6N' + 6·L·S·d, causal attention: what the trainer logs); {}FLOP with "
      "full attention (6N' + 12·L·S·d, PaLM/TorchTitan MFU convention); S = {}\n",
      human(flops.causal, ""), human(flops.full, ""), t.data.seq_length);
  out += fmt::format(
      "batch          global {} = micro {} x {} micro-batches x data-parallel {}; {} tokens/step; "
      "{} steps ({} tokens)\n",
      t.global_batch_size, t.micro_batch_size, batch.micro_batches, batch.data_parallel,
      with_commas(batch.tokens_per_step), t.train_iters,
      count(static_cast<double>(batch.tokens_per_step) * static_cast<double>(t.train_iters)));
  out += fmt::format("precision      {}\n",
                     device.gpu ? (t.bf16 ? "bf16 compute, fp32 master weights and moments" : "fp32")
                                : "fp32 (the CPU backend computes in fp32)");
  out += fmt::format(
      "recompute      {}\n",
      t.recompute.granularity.empty()
          ? "off"
          : fmt::format("{} {} {}", t.recompute.granularity, t.recompute.method,
                        t.recompute.granularity == "full" ? std::to_string(t.recompute.num_layers) : ""));
  std::string data = t.data.mock_data                 ? "mock data (random tokens)"
                     : !t.data.text_data_path.empty() ? "text from " + t.data.text_data_path
                     : !t.data.data_path.empty()      ? "indexed dataset " + t.data.data_path.front()
                                                      : "none set";
  out += fmt::format("data           {}; tokenizer {}{}\n", data,
                     t.data.tokenizer_type.empty() ? "(none)" : t.data.tokenizer_type,
                     t.data.tokenizer_model.empty() ? "" : " " + t.data.tokenizer_model);
  out += fmt::format("device         {}\n", device.text);
  out += fmt::format("world          {} process(es); TP {} PP {} CP {} EP {}\n", rc.world_size,
                     t.parallel.tensor_model_parallel_size, t.parallel.pipeline_model_parallel_size,
                     t.parallel.context_parallel_size, t.parallel.expert_model_parallel_size);
  return out;
}

}  // namespace primus::config
