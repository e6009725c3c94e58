#include "checkpoint/state.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <vector>

#include "core/error.h"

namespace primus::ckpt {

namespace {

nlohmann::ordered_json model_json(const ModelConfig& m) {
  nlohmann::ordered_json j;
  j["name"] = m.name;
  j["family"] = m.family;
  j["num_layers"] = m.num_layers;
  j["hidden_size"] = m.hidden_size;
  j["ffn_hidden_size"] = m.ffn_hidden_size;
  j["num_attention_heads"] = m.num_attention_heads;
  j["num_query_groups"] = m.num_query_groups;
  j["kv_channels"] = m.kv_channels;
  j["vocab_size"] = m.vocab_size;
  j["padded_vocab_size"] = m.padded_vocab_size;
  j["make_vocab_size_divisible_by"] = m.make_vocab_size_divisible_by;
  j["max_position_embeddings"] = m.max_position_embeddings;
  j["untie_embeddings_and_output_weights"] = m.untie_embeddings_and_output_weights;
  j["add_qkv_bias"] = m.add_qkv_bias;
  j["add_bias_linear"] = m.add_bias_linear;
  j["qk_layernorm"] = m.qk_layernorm;
  j["swiglu"] = m.swiglu;
  j["normalization"] = m.normalization;
  j["norm_epsilon"] = m.norm_epsilon;
  j["rotary_base"] = m.rotary_base;
  j["rotary_percent"] = m.rotary_percent;
  j["final_logit_softcapping"] = m.final_logit_softcap;
  j["use_rope_scaling"] = m.use_rope_scaling;
  j["rope_scaling_factor"] = m.rope_scaling_factor;
  j["rope_low_freq_factor"] = m.rope_low_freq_factor;
  j["rope_high_freq_factor"] = m.rope_high_freq_factor;
  j["rope_original_max_position"] = m.rope_original_max_position;
  j["init_method_std"] = m.init_method_std;
  // Mixture of experts: written only when used, so a dense model's state.json is
  // unchanged and older files (without them) read as dense.
  if (m.moe.enabled()) {
    const MoeConfig& e = m.moe;
    nlohmann::ordered_json o;
    o["num_experts"] = e.num_experts;
    o["topk"] = e.topk;
    o["ffn_hidden_size"] = e.ffn_hidden_size;
    o["shared_ffn_hidden_size"] = e.shared_ffn_hidden_size;
    o["shared_expert_gate"] = e.shared_expert_gate;
    std::vector<int> layers(e.layer_is_moe.begin(), e.layer_is_moe.end());
    o["layer_is_moe"] = layers;
    o["score_function"] = e.score_function;
    o["pre_softmax"] = e.pre_softmax;
    o["normalize_topk"] = e.normalize_topk;
    o["num_groups"] = e.num_groups;
    o["group_topk"] = e.group_topk;
    o["topk_scaling_factor"] = e.topk_scaling_factor;
    o["expert_bias"] = e.expert_bias;
    o["bias_update_rate"] = e.bias_update_rate;
    o["load_balancing"] = e.load_balancing;
    o["aux_loss_coeff"] = e.aux_loss_coeff;
    o["z_loss_coeff"] = e.z_loss_coeff;
    o["router_logit_softcapping"] = e.router_softcap;
    o["capacity_factor"] = e.capacity_factor;
    o["pad_to_capacity"] = e.pad_to_capacity;
    o["drop_policy"] = e.drop_policy;
    j["moe"] = o;
  }
  // Multi-latent attention and MTP change the parameter set: recorded only when on, so that other checkpoints
  // keep their exact bytes.
  if (m.mla.enabled) {
    const MlaConfig& a = m.mla;
    j["mla"] = {{"q_lora_rank", a.q_lora_rank},
                {"kv_lora_rank", a.kv_lora_rank},
                {"qk_head_dim", a.qk_head_dim},
                {"qk_pos_emb_head_dim", a.qk_pos_emb_head_dim},
                {"v_head_dim", a.v_head_dim},
                {"yarn", a.yarn},
                {"rotary_scaling_factor", a.rotary_scaling_factor},
                {"original_max_position", a.original_max_position},
                {"beta_fast", a.beta_fast},
                {"beta_slow", a.beta_slow},
                {"mscale", a.mscale},
                {"mscale_all_dim", a.mscale_all_dim}};
  }
  if (m.mtp_num_layers > 0) {
    j["mtp_num_layers"] = m.mtp_num_layers;
    j["mtp_loss_scaling_factor"] = m.mtp_loss_scaling_factor;
  }
  return j;
}

ModelConfig model_from(const nlohmann::json& j) {
  ModelConfig m;
  m.name = j.at("name").get<std::string>();
  m.family = j.at("family").get<std::string>();
  m.num_layers = j.at("num_layers").get<int64_t>();
  m.hidden_size = j.at("hidden_size").get<int64_t>();
  m.ffn_hidden_size = j.at("ffn_hidden_size").get<int64_t>();
  m.num_attention_heads = j.at("num_attention_heads").get<int64_t>();
  m.num_query_groups = j.at("num_query_groups").get<int64_t>();
  m.kv_channels = j.at("kv_channels").get<int64_t>();
  m.vocab_size = j.at("vocab_size").get<int64_t>();
  m.padded_vocab_size = j.at("padded_vocab_size").get<int64_t>();
  m.make_vocab_size_divisible_by = j.at("make_vocab_size_divisible_by").get<int64_t>();
  m.max_position_embeddings = j.at("max_position_embeddings").get<int64_t>();
  m.untie_embeddings_and_output_weights = j.at("untie_embeddings_and_output_weights").get<bool>();
  m.add_qkv_bias = j.at("add_qkv_bias").get<bool>();
  m.add_bias_linear = j.at("add_bias_linear").get<bool>();
  m.qk_layernorm = j.at("qk_layernorm").get<bool>();
  m.swiglu = j.at("swiglu").get<bool>();
  m.normalization = j.at("normalization").get<std::string>();
  m.norm_epsilon = j.at("norm_epsilon").get<double>();
  m.rotary_base = j.at("rotary_base").get<double>();
  m.rotary_percent = j.value("rotary_percent", 1.0);  // absent before partial rotary: the whole head
  m.final_logit_softcap = j.value("final_logit_softcapping", 0.0);  // absent before soft-capping: off
  m.use_rope_scaling = j.at("use_rope_scaling").get<bool>();
  m.rope_scaling_factor = j.at("rope_scaling_factor").get<double>();
  m.rope_low_freq_factor = j.at("rope_low_freq_factor").get<double>();
  m.rope_high_freq_factor = j.at("rope_high_freq_factor").get<double>();
  m.rope_original_max_position = j.at("rope_original_max_position").get<int64_t>();
  m.init_method_std = j.at("init_method_std").get<double>();
  if (j.contains("moe")) {
    const nlohmann::json& o = j.at("moe");
    MoeConfig& e = m.moe;
    e.num_experts = o.at("num_experts").get<int64_t>();
    e.topk = o.at("topk").get<int64_t>();
    e.ffn_hidden_size = o.at("ffn_hidden_size").get<int64_t>();
    e.shared_ffn_hidden_size = o.at("shared_ffn_hidden_size").get<int64_t>();
    e.shared_expert_gate = o.at("shared_expert_gate").get<bool>();
    for (int x : o.at("layer_is_moe").get<std::vector<int>>())
      e.layer_is_moe.push_back(static_cast<char>(x != 0));
    e.score_function = o.at("score_function").get<std::string>();
    e.pre_softmax = o.at("pre_softmax").get<bool>();
    e.normalize_topk = o.at("normalize_topk").get<bool>();
    e.num_groups = o.at("num_groups").get<int64_t>();
    e.group_topk = o.at("group_topk").get<int64_t>();
    e.topk_scaling_factor = o.at("topk_scaling_factor").get<double>();
    e.expert_bias = o.at("expert_bias").get<bool>();
    e.bias_update_rate = o.at("bias_update_rate").get<double>();
    e.load_balancing = o.at("load_balancing").get<std::string>();
    e.aux_loss_coeff = o.at("aux_loss_coeff").get<double>();
    e.z_loss_coeff = o.at("z_loss_coeff").get<double>();
    e.router_softcap = o.value("router_logit_softcapping", 0.0);  // absent before soft-capping: off
    e.capacity_factor = o.at("capacity_factor").get<double>();
    e.pad_to_capacity = o.at("pad_to_capacity").get<bool>();
    e.drop_policy = o.at("drop_policy").get<std::string>();
  }
  if (j.contains("mla")) {
    const nlohmann::json& x = j.at("mla");
    MlaConfig& a = m.mla;
    a.enabled = true;
    a.q_lora_rank = x.at("q_lora_rank").get<int64_t>();
    a.kv_lora_rank = x.at("kv_lora_rank").get<int64_t>();
    a.qk_head_dim = x.at("qk_head_dim").get<int64_t>();
    a.qk_pos_emb_head_dim = x.at("qk_pos_emb_head_dim").get<int64_t>();
    a.v_head_dim = x.at("v_head_dim").get<int64_t>();
    a.yarn = x.at("yarn").get<bool>();
    a.rotary_scaling_factor = x.at("rotary_scaling_factor").get<double>();
    a.original_max_position = x.at("original_max_position").get<int64_t>();
    a.beta_fast = x.at("beta_fast").get<double>();
    a.beta_slow = x.at("beta_slow").get<double>();
    a.mscale = x.at("mscale").get<double>();
    a.mscale_all_dim = x.at("mscale_all_dim").get<double>();
  }
  if (j.contains("mtp_num_layers")) {
    m.mtp_num_layers = j.at("mtp_num_layers").get<int64_t>();
    m.mtp_loss_scaling_factor = j.at("mtp_loss_scaling_factor").get<double>();
  }
  return m;
}

}  // namespace

std::string model_config_to_json(const ModelConfig& m) {
  return model_json(m).dump(1) + "\n";
}

ModelConfig model_config_from_json(const std::string& text, const std::string& what) {
  try {
    return model_from(nlohmann::json::parse(text));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kRuntime, fmt::format("{}: malformed model configuration ({})", what, e.what()));
  }
}

namespace {

// f32 values as 8 hex digits of their bits each: exact, and a quarter of the size of decimal JSON numbers.
std::string floats_to_hex(const std::vector<float>& v) {
  std::string out;
  out.reserve(v.size() * 8);
  for (float f : v) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    out += fmt::format("{:08x}", u);
  }
  return out;
}

std::vector<float> floats_from_hex(const std::string& h, const std::string& what) {
  if (h.size() % 8 != 0) throw Error(ErrorKind::kRuntime, fmt::format("{}: hex floats of odd length", what));
  std::vector<float> v(h.size() / 8);
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u = 0;
    for (size_t k = 0; k < 8; ++k) {
      const char c = h[i * 8 + k];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) throw Error(ErrorKind::kRuntime, fmt::format("{}: '{}' in hex floats", what, c));
      u = (u << 4) | static_cast<uint32_t>(d);
    }
    std::memcpy(&v[i], &u, 4);
  }
  return v;
}

}  // namespace

std::string state_to_json(const TrainingState& s) {
  nlohmann::ordered_json j;
  j["iteration"] = s.iteration;
  j["consumed_samples"] = s.consumed_samples;
  j["optimizer_steps"] = s.optimizer_steps;
  j["skipped_iterations"] = s.skipped_iterations;
  j["global_batch_size"] = s.global_batch_size;
  j["loss_reference"] = s.loss_reference;
  j["lr_schedule"] = {{"lr", s.lr_schedule.lr},
                      {"min_lr", s.lr_schedule.min_lr},
                      {"warmup_iters", s.lr_schedule.warmup_iters},
                      {"decay_iters", s.lr_schedule.decay_iters},
                      {"decay_style", s.lr_schedule.decay_style},
                      {"position", s.iteration}};
  if (s.rng) {
    j["rng"] = {{"generator", s.rng->generator}, {"seed", s.rng->seed}, {"step", s.rng->step}};
  }
  j["has_optimizer"] = s.has_optimizer;
  j["compute_dtype"] = s.compute_dtype;
  j["config_xxh3"] = s.config_xxh3;
  j["model"] = model_json(s.model);
  if (!s.hf_config.empty()) j["hf_config"] = nlohmann::json::parse(s.hf_config);
  if (s.fp8) {
    const Fp8State::Saved& f = *s.fp8;
    j["fp8"] = {{"recipe", f.recipe},
                {"history_len", f.history_len},
                {"steps", f.steps},
                {"projections", f.names},
                {"history_f32_hex", floats_to_hex(f.history)},
                {"scale_f32_hex", floats_to_hex(f.scale)}};
  }
  if (s.lora)
    j["lora"] = {{"rank", s.lora->rank},
                 {"alpha", s.lora->alpha},
                 {"targets", s.lora->targets},
                 {"base", s.lora->base}};
  return j.dump(1) + "\n";
}

TrainingState state_from_json(const std::string& text, const std::string& what) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    TrainingState s;
    s.iteration = j.at("iteration").get<int64_t>();
    s.consumed_samples = j.at("consumed_samples").get<int64_t>();
    s.optimizer_steps = j.at("optimizer_steps").get<int64_t>();
    s.skipped_iterations = j.at("skipped_iterations").get<int64_t>();
    s.global_batch_size = j.at("global_batch_size").get<int64_t>();
    if (j.contains("loss_reference")) s.loss_reference = j["loss_reference"].get<std::vector<double>>();
    const auto& l = j.at("lr_schedule");
    s.lr_schedule.lr = l.at("lr").get<double>();
    s.lr_schedule.min_lr = l.at("min_lr").get<double>();
    s.lr_schedule.warmup_iters = l.at("warmup_iters").get<int64_t>();
    s.lr_schedule.decay_iters = l.at("decay_iters").get<int64_t>();
    s.lr_schedule.decay_style = l.at("decay_style").get<std::string>();
    if (j.contains("rng")) {
      RngState r;
      r.generator = j["rng"].at("generator").get<std::string>();
      r.seed = j["rng"].at("seed").get<uint64_t>();
      r.step = j["rng"].at("step").get<int64_t>();
      s.rng = r;
    }
    s.has_optimizer = j.at("has_optimizer").get<bool>();
    s.compute_dtype = j.at("compute_dtype").get<std::string>();
    s.config_xxh3 = j.at("config_xxh3").get<std::string>();
    s.model = model_from(j.at("model"));
    if (j.contains("hf_config")) s.hf_config = j["hf_config"].dump();
    if (j.contains("fp8")) {
      const auto& f = j["fp8"];
      Fp8State::Saved v;
      v.recipe = f.at("recipe").get<std::string>();
      v.history_len = f.at("history_len").get<int64_t>();
      v.steps = f.at("steps").get<int64_t>();
      v.names = f.at("projections").get<std::vector<std::string>>();
      v.history = floats_from_hex(f.at("history_f32_hex").get<std::string>(), what + " fp8.history_f32_hex");
      v.scale = floats_from_hex(f.at("scale_f32_hex").get<std::string>(), what + " fp8.scale_f32_hex");
      s.fp8 = std::move(v);
    }
    if (j.contains("lora")) {
      const auto& l = j["lora"];
      TrainingState::Lora v;
      v.rank = l.at("rank").get<int64_t>();
      v.alpha = l.at("alpha").get<double>();
      v.targets = l.at("targets").get<std::vector<std::string>>();
      v.base = l.at("base").get<std::string>();
      s.lora = std::move(v);
    }
    if (s.iteration < 0 || s.consumed_samples < 0 || s.optimizer_steps < 0)
      throw Error(ErrorKind::kRuntime, fmt::format("{}: negative counters", what));
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kRuntime, fmt::format("{}: malformed training state ({})", what, e.what()));
  }
}

}  // namespace primus::ckpt
