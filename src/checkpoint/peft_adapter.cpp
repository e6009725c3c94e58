#include "checkpoint/peft_adapter.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/file_io.h"
#include "checkpoint/hf_config.h"
#include "checkpoint/hf_name_map.h"
#include "checkpoint/hf_weights.h"
#include "checkpoint/publish.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace primus::ckpt {

namespace {

// PeftModelForCausalLM wraps the transformers model as base_model.model; its saved keys keep that prefix.
constexpr const char* kKeyPrefix = "base_model.model.";
constexpr const char* kLoraA = ".lora_A.weight";
constexpr const char* kLoraB = ".lora_B.weight";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string strip(const std::string& s, const std::string& suffix) {
  return s.substr(0, s.size() - suffix.size());
}

std::string leaf(const std::string& module) {
  const size_t dot = module.rfind('.');
  return dot == std::string::npos ? module : module.substr(dot + 1);
}

[[noreturn]] void bad_adapter(const std::string& what, const std::string& msg, const std::string& hint = {}) {
  throw ConfigError(fmt::format("{}: {}", what, msg), hint);
}

// Our adapter pairs by projection ("layers.0.self_attn.qkv_proj"), validated against the rank.
struct OurPair {
  Tensor a, b;
};
std::map<std::string, OurPair> pair_adapters(const std::vector<LoraTensor>& adapters, int64_t r) {
  std::map<std::string, OurPair> pairs;
  for (const LoraTensor& t : adapters) {
    const bool is_a = ends_with(t.name, kLoraA), is_b = ends_with(t.name, kLoraB);
    if (!is_a && !is_b)
      bad_adapter("PEFT export", fmt::format("adapter tensor {} is not <projection>.lora_A.weight or "
                                             "<projection>.lora_B.weight",
                                             t.name));
    PRIMUS_CHECK(t.value.defined() && t.value.dtype() == DType::kF32 && t.value.device().is_cpu() &&
                     t.value.is_contiguous() && t.value.ndim() == 2,
                 "PEFT export: adapter {} must be a contiguous 2-D f32 host tensor, got {}", t.name,
                 t.value.defined() ? t.value.describe() : "nothing");
    const int64_t rank_dim = is_a ? 0 : 1;
    PRIMUS_CHECK(t.value.size(static_cast<int>(rank_dim)) == r,
                 "PEFT export: {} is {}; lora rank {} needs {}", t.name, shape_str(t.value.shape()), r,
                 is_a ? "[r, in]" : "[out, r]");
    OurPair& p = pairs[strip(t.name, is_a ? kLoraA : kLoraB)];
    Tensor& slot = is_a ? p.a : p.b;
    PRIMUS_CHECK(!slot.defined(), "PEFT export: adapter {} given twice", t.name);
    slot = t.value;
  }
  for (const auto& [proj, p] : pairs)
    PRIMUS_CHECK(p.a.defined() && p.b.defined(), "PEFT export: {}{} has no {}", proj,
                 p.a.defined() ? kLoraA : kLoraB, p.a.defined() ? "lora_B" : "lora_A");
  return pairs;
}

// The model family whose module names the adapter takes, as convert primus-to-hf chooses it.
std::string hf_family(const ModelConfig& m, const std::string& hf_config_json, nlohmann::json* base) {
  if (!hf_config_json.empty()) {
    try {
      *base = nlohmann::json::parse(hf_config_json);
    } catch (const nlohmann::json::exception& e) {
      bad_adapter("PEFT export", fmt::format("the base config.json is not valid JSON: {}", e.what()));
    }
  }
  std::string type = base->is_object() ? base->value("model_type", "") : "";
  if (type.empty()) type = default_model_type(m);
  hf_config_from_model(m, type, "float32", *base);  // refuses a model the family cannot express, saying why
  return type;
}

nlohmann::ordered_json peft_config_json(const LoraConfig& lora, const std::vector<std::string>& targets,
                                        const std::string& base_model) {
  nlohmann::ordered_json c;
  c["peft_type"] = "LORA";
  c["task_type"] = "CAUSAL_LM";
  c["base_model_name_or_path"] =
      base_model.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(base_model);
  c["r"] = lora.rank;
  // PEFT documents lora_alpha as an int; an integral alpha is written as one.
  if (lora.alpha == static_cast<double>(static_cast<int64_t>(lora.alpha)))
    c["lora_alpha"] = static_cast<int64_t>(lora.alpha);
  else
    c["lora_alpha"] = lora.alpha;
  c["lora_dropout"] = lora.dropout;
  c["target_modules"] = targets;
  c["bias"] = "none";
  c["fan_in_fan_out"] = false;
  c["use_rslora"] = false;  // scale alpha / r, ours
  c["use_dora"] = false;
  c["inference_mode"] = true;
  c["modules_to_save"] = nullptr;
  // A targeted module the file has no weights for (another layer's) starts as PEFT initialises it: B = 0,
  // which adds nothing.
  c["init_lora_weights"] = true;
  c["rank_pattern"] = nlohmann::ordered_json::object();
  c["alpha_pattern"] = nlohmann::ordered_json::object();
  c["layers_to_transform"] = nullptr;
  c["layers_pattern"] = nullptr;
  c["revision"] = nullptr;
  return c;
}

}  // namespace

std::string peft_export_problem(const ModelConfig& m, const std::string& hf_config_json) {
  try {
    nlohmann::json base;
    hf_family(m, hf_config_json, &base);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

PeftWriteReport write_peft_adapter(const std::string& dir, const std::vector<LoraTensor>& adapters,
                                   const ModelConfig& m, const LoraConfig& lora,
                                   const std::string& hf_config_json,
                                   const std::string& base_model_name_or_path) {
  PRIMUS_CHECK(lora.rank > 0, "PEFT export: lora rank {} must be positive", lora.rank);
  PRIMUS_CHECK(!adapters.empty(), "PEFT export to {}: no adapter tensors", dir);
  nlohmann::json base;
  const std::string type = hf_family(m, hf_config_json, &base);
  const HfNameMap map(m, type, HfMapOptions{});
  const std::map<std::string, OurPair> pairs = pair_adapters(adapters, lora.rank);

  // Split every fused adapter into its HF parts' adapters, in the name map's (the model's) order, so that
  // target_modules lists q/k/v before o and gate/up before down, as PEFT's own files do.
  std::vector<std::pair<std::string, Tensor>> out;  // PEFT key -> tensor; keeps the split B blocks alive
  std::vector<std::string> targets;
  int64_t modules = 0;
  size_t used = 0;
  for (const HfMapEntry& e : map.entries()) {
    if (e.kind != HfMapKind::kParam || !ends_with(e.param, ".weight")) continue;
    const std::string proj = strip(e.param, ".weight");
    auto it = pairs.find(proj);
    if (it == pairs.end()) continue;
    ++used;
    const OurPair& p = it->second;
    const int64_t rows = p.b.size(0), cols = p.a.size(1);
    PRIMUS_CHECK(e.param_shape == Shape({rows, cols}),
                 "PEFT export: adapter {} gives B A of shape [{}, {}] but {} is {}", proj, rows, cols,
                 e.param, shape_str(e.param_shape));
    int64_t at = 0;  // first row of the current part in our weight
    for (const HfPart& part : e.parts) {
      PRIMUS_CHECK(part.shape.size() == 2 && part.shape[1] == cols && ends_with(part.name, ".weight"),
                   "PEFT export: {} part {} {} is not a row block of a linear weight", e.param, part.name,
                   shape_str(part.shape));
      const std::string module = strip(part.name, ".weight");
      const int64_t n = part.shape[0];
      Tensor b = Tensor::empty({n, lora.rank}, DType::kF32);
      const size_t row = static_cast<size_t>(lora.rank) * sizeof(float);
      // Our row j of the part is the HF row src[j] (DeepSeek's RoPE rows are stored permuted).
      const std::vector<int64_t> src = rope_deinterleave_rows(part);
      for (int64_t j = 0; j < n; ++j)
        std::memcpy(b.data<float>() + src[j] * lora.rank, p.b.data<float>() + (at + j) * lora.rank, row);
      out.emplace_back(kKeyPrefix + module + kLoraA, p.a);
      out.emplace_back(kKeyPrefix + module + kLoraB, b);
      if (std::find(targets.begin(), targets.end(), leaf(module)) == targets.end())
        targets.push_back(leaf(module));
      at += n;
      ++modules;
    }
    PRIMUS_CHECK(at == rows, "PEFT export: the parts of {} have {} rows, lora_B has {}", e.param, at, rows);
  }
  if (used != pairs.size())
    for (const auto& [proj, p] : pairs)
      PRIMUS_CHECK(map.find(proj + ".weight"),
                   "PEFT export: adapter {} adapts {}.weight, which a {} model does not have", proj, proj,
                   type);

  PeftWriteReport r;
  r.model_type = type;
  r.target_modules = targets;
  r.modules = modules;
  const std::string config = peft_config_json(lora, targets, base_model_name_or_path).dump(2) + "\n";
  publish_new_dir(dir, [&](const std::string& staging) {
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    for (const auto& [key, t] : out) w.add(key, DType::kF32, t.shape(), t.data_ptr());
    r.bytes = w.write(staging + "/" + kPeftWeightsFile).bytes;
    write_file_durable(staging + "/" + kPeftConfigFile, config);
  });
  r.dir = dir;
  return r;
}

namespace {

// adapter_config.json's LoRA settings, refusing what would change the meaning of the weights.
void read_peft_config(const std::string& path, PeftAdapter* a) {
  nlohmann::json c;
  try {
    c = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    bad_adapter(path, fmt::format("not valid JSON: {}", e.what()));
  }
  if (!c.is_object()) bad_adapter(path, "expected a JSON object (PEFT's adapter config)");
  if (!c.contains("peft_type") || !c["peft_type"].is_string())
    bad_adapter(path, "'peft_type' is missing (expected \"LORA\")");
  if (c["peft_type"] != "LORA")
    bad_adapter(path,
                fmt::format("peft_type {} is not supported (expected \"LORA\")", c["peft_type"].dump()));
  if (!c.contains("r") || !c["r"].is_number_integer() || c["r"].get<int64_t>() <= 0)
    bad_adapter(path,
                fmt::format("'r' must be a positive integer, got {}", c.value("r", nlohmann::json()).dump()));
  a->r = c["r"].get<int64_t>();
  if (!c.contains("lora_alpha") || !c["lora_alpha"].is_number())
    bad_adapter(path, fmt::format("'lora_alpha' must be a number, got {}",
                                  c.value("lora_alpha", nlohmann::json()).dump()));
  a->alpha = c["lora_alpha"].get<double>();
  if (!c.contains("target_modules") || !(c["target_modules"].is_array() || c["target_modules"].is_string()))
    bad_adapter(path, "'target_modules' must be a list of module names or a regular expression");
  if (c["target_modules"].is_string()) {
    a->targets_regex = true;
    a->target_modules = {c["target_modules"].get<std::string>()};
  } else {
    for (const auto& t : c["target_modules"]) {
      if (!t.is_string()) bad_adapter(path, fmt::format("'target_modules' holds {}, not a name", t.dump()));
      a->target_modules.push_back(t.get<std::string>());
    }
  }
  // Variants whose weights mean something else than W + (alpha / r) B A.
  auto refuse_true = [&](const char* key, const char* why) {
    if (c.contains(key) && c[key].is_boolean() && c[key].get<bool>())
      bad_adapter(path, fmt::format("'{}' true is not supported ({}; expected false)", key, why));
  };
  refuse_true("use_dora", "DoRA rescales the merged weight's columns");
  refuse_true("use_rslora", "rsLoRA scales by alpha / sqrt(r)");
  refuse_true("fan_in_fan_out", "the weights would be stored transposed");
  auto refuse_nonempty = [&](const char* key, const char* why) {
    if (c.contains(key) && !c[key].is_null() && !c[key].empty())
      bad_adapter(path,
                  fmt::format("'{}' {} is not supported ({}; expected it empty)", key, c[key].dump(), why));
  };
  refuse_nonempty("rank_pattern", "per-module ranks");
  refuse_nonempty("alpha_pattern", "per-module alphas");
  refuse_nonempty("modules_to_save", "whole trained modules besides the adapters");
  if (c.contains("bias") && c["bias"] != "none")
    bad_adapter(path, fmt::format("'bias' {} is not supported (trained biases; expected \"none\")",
                                  c["bias"].dump()));
}

// Whether PEFT would have adapted `module` under the config's target_modules (a list: a name equal to the
// module or to its last components).
bool is_targeted(const PeftAdapter& a, const std::string& module) {
  if (a.targets_regex) return true;  // full-match regexes: taken as written
  for (const std::string& t : a.target_modules)
    if (module == t || ends_with(module, "." + t)) return true;
  return false;
}

}  // namespace

PeftAdapter read_peft_adapter(const std::string& dir) {
  PeftAdapter a;
  a.dir = dir;
  const std::string cfg = dir + "/" + kPeftConfigFile, weights = dir + "/" + kPeftWeightsFile;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) bad_adapter(dir, "is not a directory (expected a PEFT adapter directory)");
  if (!fs::is_regular_file(cfg, ec))
    bad_adapter(cfg,
                "missing (a PEFT adapter directory holds adapter_config.json and adapter_model.safetensors)");
  if (!fs::is_regular_file(weights, ec)) {
    if (fs::is_regular_file(dir + "/adapter_model.bin", ec))
      bad_adapter(weights, "missing; only adapter_model.bin (pickle) is there",
                  "save the adapter with safe_serialization=True (PEFT's default)");
    bad_adapter(weights,
                "missing (a PEFT adapter directory holds adapter_config.json and "
                "adapter_model.safetensors)");
  }
  read_peft_config(cfg, &a);

  FileReader f(weights);
  const StHeader h = read_safetensors_header(f);
  const std::string prefix = kKeyPrefix;
  for (const StEntry& e : h.entries) {
    const bool is_a = ends_with(e.name, kLoraA), is_b = ends_with(e.name, kLoraB);
    if (e.name.rfind(prefix, 0) != 0 || (!is_a && !is_b))
      bad_adapter(weights, fmt::format("tensor {} is not a LoRA weight (expected "
                                       "base_model.model.<module>.lora_A.weight or .lora_B.weight)",
                                       e.name));
    const std::string module = strip(e.name, is_a ? kLoraA : kLoraB).substr(prefix.size());
    DType dt;
    if (!st_dtype_to_primus(e.dtype, &dt) || (dt != DType::kF32 && dt != DType::kBF16 && dt != DType::kF16))
      bad_adapter(weights, fmt::format("tensor {} is {} (expected F32, BF16 or F16)", e.name, e.dtype));
    const int64_t rank_dim = is_a ? 0 : 1;
    if (e.shape.size() != 2 || e.shape[rank_dim] != a.r)
      bad_adapter(weights,
                  fmt::format("tensor {} has shape {}; r = {} (adapter_config.json) needs {}", e.name,
                              shape_str(e.shape), a.r, is_a ? "[r, in_features]" : "[out_features, r]"));
    if (!is_targeted(a, module))
      bad_adapter(weights, fmt::format("tensor {} adapts {}, which target_modules {} of adapter_config.json "
                                       "does not name",
                                       e.name, module, nlohmann::json(a.target_modules).dump()));
    PeftModule& m = a.modules[module];
    (is_a ? m.a : m.b) = to_f32(read_st_tensor(f, h, e));
  }
  if (a.modules.empty()) bad_adapter(weights, "holds no LoRA weights");
  for (const auto& [module, m] : a.modules)
    if (!m.a.defined() || !m.b.defined())
      bad_adapter(weights, fmt::format("{}{}{} has no {}{}{} (every adapted module needs both)", prefix,
                                       module, m.a.defined() ? kLoraA : kLoraB, prefix, module,
                                       m.a.defined() ? kLoraB : kLoraA));
  return a;
}

}  // namespace primus::ckpt
