// merge_lora_into_hf (declared in peft_adapter.h): base HF directory + PEFT LoRA adapter -> HF directory.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "checkpoint/file_io.h"
#include "checkpoint/hf_weights.h"
#include "checkpoint/peft_adapter.h"
#include "checkpoint/publish.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace primus::ckpt {

namespace {

// w [out, in] += scale * (b [out, r] @ a [r, in]), in f32: each row's B A is summed over r first, then
// scaled and added once, as PEFT's merge does (delta = B @ A * scale).
void add_lora_delta(Tensor& w, const PeftModule& m, double scale) {
  const int64_t out = w.size(0), in = w.size(1), r = m.a.size(0);
  const float* a = m.a.data<float>();
  const float* b = m.b.data<float>();
  float* wp = w.data<float>();
  const float s = static_cast<float>(scale);
  std::vector<float> acc(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t k = 0; k < r; ++k) {
      const float bk = b[o * r + k];
      const float* ak = a + k * in;
      for (int64_t i = 0; i < in; ++i) acc[i] += bk * ak[i];
    }
    float* row = wp + o * in;
    for (int64_t i = 0; i < in; ++i) row[i] += s * acc[i];
  }
}

// The module a weight belongs to ("model.layers.0.self_attn.q_proj" of its ".weight"), or "" for others.
std::string module_of(const std::string& tensor) {
  constexpr std::string_view kWeight = ".weight";
  if (tensor.size() <= kWeight.size() ||
      tensor.compare(tensor.size() - kWeight.size(), kWeight.size(), kWeight) != 0)
    return {};
  return tensor.substr(0, tensor.size() - kWeight.size());
}

// Files of an HF directory that hold weights (rewritten by the merge, never copied).
bool is_weight_file(const std::string& name) {
  static const char* kExt[] = {".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf"};
  for (const char* e : kExt)
    if (name.size() >= std::strlen(e) && name.compare(name.size() - std::strlen(e), std::strlen(e), e) == 0)
      return true;
  return name.find(".index.json") != std::string::npos;  // model.safetensors.index.json, ...
}

// config.json as the base has it (key order kept), with the merged weights' dtype and no quantisation.
nlohmann::ordered_json merged_config(const std::string& base_dir, const std::string& torch_dtype) {
  nlohmann::ordered_json c = nlohmann::ordered_json::parse(read_text_file(base_dir + "/config.json"));
  c.erase("quantization_config");  // FP8 weights are written dequantised
  // Newer transformers spell it `dtype`, older ones `torch_dtype`: follow the base.
  const bool new_key = c.contains("dtype") && !c.contains("torch_dtype");
  c[new_key ? "dtype" : "torch_dtype"] = torch_dtype;
  return c;
}

}  // namespace

MergeLoraReport merge_lora_into_hf(const std::string& base_hf_dir, const std::string& adapter_dir,
                                   const std::string& out_dir, const std::string& dtype,
                                   uint64_t max_shard_bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  HfCheckpoint hf(base_hf_dir);
  check_hf_names(hf);   // every name, shape and dtype of the base before any tensor byte is read
  check_hf_extras(hf);  // tensors the export writes as zeros / copies must be so
  const PeftAdapter adapter = read_peft_adapter(adapter_dir);
  std::string torch_dtype = dtype;
  if (torch_dtype.empty()) torch_dtype = hf.info().torch_dtype;
  if (torch_dtype.empty()) torch_dtype = "bfloat16";
  const DType dt = torch_dtype_to_dtype(torch_dtype);

  // The base's tensors as the HF export of its parameters writes them (FP8 dequantised, RoPE rows back in
  // HF order): the same names, shapes and layout as the base. Two plans over the same producers: one in the
  // output dtype (names, shapes, which tensors stay f32), one in f32 to merge into.
  const HfNameMap& map = hf.name_map();
  auto param_f32 = [&hf, &map](const std::string& name) {
    return hf_param(hf, *map.find(name), DType::kF32);
  };
  const std::vector<HfOutTensor> plan = hf_export_plan(map, param_f32, dt);
  const std::vector<HfOutTensor> plan_f32 = hf_export_plan(map, param_f32, DType::kF32);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < plan.size(); ++i) index[plan[i].name] = i;

  // Every adapter module against the base, before anything is written.
  for (const auto& [module, m] : adapter.modules) {
    const Shape delta = {m.b.size(0), m.a.size(1)};
    auto it = index.find(module + ".weight");
    if (it == index.end())
      throw ConfigError(
          fmt::format("{}: adapter module {} (B A of shape {}) is not in the base model {} ({}): it "
                      "has no tensor {}.weight",
                      adapter_dir, module, shape_str(delta), base_hf_dir, hf.info().model_type, module),
          "was the adapter trained on another base model?");
    const Shape& w = plan[it->second].shape;
    if (w != delta)
      throw ConfigError(
          fmt::format("{}: adapter module {} has B A of shape {} (lora_B {}, lora_A {}) but the base's "
                      "{}.weight in {} is {}",
                      adapter_dir, module, shape_str(delta), shape_str(m.b.shape()), shape_str(m.a.shape()),
                      module, base_hf_dir, shape_str(w)),
          "was the adapter trained on another base model?");
  }

  std::vector<HfOutTensor> tensors;
  int64_t merged = 0;
  const double scale = adapter.scale();
  for (size_t i = 0; i < plan.size(); ++i) {
    auto mod = adapter.modules.find(module_of(plan[i].name));
    HfOutTensor t = plan[i];
    if (mod != adapter.modules.end()) {
      ++merged;
      const PeftModule* m = &mod->second;
      t.produce = [f32 = plan_f32[i].produce, m, scale, out = t.dtype] {
        Tensor w = f32();
        add_lora_delta(w, *m, scale);
        return from_f32(w, out);
      };
    } else {
      t.produce = [f32 = plan_f32[i].produce, out = t.dtype] { return from_f32(f32(), out); };
    }
    tensors.push_back(std::move(t));
  }
  const nlohmann::ordered_json config = merged_config(base_hf_dir, dtype_to_torch(dt));

  MergeLoraReport r;
  publish_new_dir(out_dir, [&](const std::string& staging) {
    r.bytes = write_hf_dir(staging, tensors, config, max_shard_bytes).bytes;
    // Tokenizer files, generation_config.json, chat templates, ...: everything that is not weights.
    for (const auto& f : fs::directory_iterator(base_hf_dir)) {
      const std::string name = f.path().filename().string();
      if (!f.is_regular_file() || name == "config.json" || is_weight_file(name)) continue;
      write_file_durable(staging + "/" + name, read_text_file(f.path().string()));
    }
  });
  r.output = out_dir;
  r.model_type = hf.info().model_type;
  r.dtype = dtype_to_torch(dt);
  r.tensors = static_cast<int64_t>(tensors.size());
  r.merged = merged;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace primus::ckpt
