#include "checkpoint/hf_weights.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/log.h"

namespace fs = std::filesystem;

namespace primus::ckpt {

namespace {

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      u = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even (F. Giesen's float_to_half_fast3_rtne).
uint16_t float_to_half(float f) {
  const uint32_t f32infty = 255u << 23, f16max = (127u + 16) << 23;
  const uint32_t denorm_magic_u = ((127u - 15) + (23 - 10) + 1) << 23;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint16_t o;
  if (u >= f16max) {
    o = u > f32infty ? 0x7e00 : 0x7c00;
  } else if (u < (113u << 23)) {
    float fu, dm;
    std::memcpy(&fu, &u, 4);
    std::memcpy(&dm, &denorm_magic_u, 4);
    fu += dm;
    std::memcpy(&u, &fu, 4);
    o = static_cast<uint16_t>(u - denorm_magic_u);
  } else {
    const uint32_t mant_odd = (u >> 13) & 1;
    u += (static_cast<uint32_t>(15 - 127) << 23) + 0xfff;
    u += mant_odd;
    o = static_cast<uint16_t>(u >> 13);
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}

std::string layer_prefix(int l) {
  return "layers." + std::to_string(l) + ".";
}

// Concatenates f32 tensors along dim 0.
Tensor cat_rows(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const Tensor& p : parts) rows += p.size(0);
  Shape shape = parts[0].shape();
  shape[0] = rows;
  Tensor out = Tensor::empty(shape, DType::kF32);
  char* dst = static_cast<char*>(out.data_ptr());
  for (const Tensor& p : parts) {
    std::memcpy(dst, p.data_ptr(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

Tensor rows(const Tensor& t, int64_t begin, int64_t end) {
  Shape shape = t.shape();
  shape[0] = end - begin;
  Tensor out = Tensor::empty(shape, t.dtype());
  const size_t row_bytes = t.nbytes() / static_cast<size_t>(t.size(0));
  std::memcpy(out.data_ptr(), static_cast<const char*>(t.data_ptr()) + begin * row_bytes,
              static_cast<size_t>(end - begin) * row_bytes);
  return out;
}

Tensor expect(const HfCheckpoint& hf, const std::string& name, const Shape& shape) {
  if (!hf.has(name))
    throw Error(ErrorKind::kRuntime, fmt::format("{}: tensor {} is missing", hf.dir(), name), {},
                "the weights do not match config.json (model_type, attention_bias, tie_word_embeddings)");
  Tensor t = hf.read_f32(name);
  if (t.shape() != shape)
    throw Error(ErrorKind::kRuntime, fmt::format("{}: tensor {} has shape {}, config.json implies {}",
                                                 hf.dir(), name, shape_str(t.shape()), shape_str(shape)));
  return t;
}

}  // namespace

Tensor to_f32(const Tensor& t) {
  if (t.dtype() == DType::kF32) return t;
  if (t.dtype() == DType::kF16) {
    Tensor out = Tensor::empty(t.shape(), DType::kF32);
    const uint16_t* src = static_cast<const uint16_t*>(t.data_ptr());
    float* dst = out.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) dst[i] = half_to_float(src[i]);
    return out;
  }
  if (t.dtype() == DType::kBF16 || t.dtype() == DType::kF64) return cpu_cast(t, DType::kF32);
  throw Error(ErrorKind::kRuntime, fmt::format("cannot convert {} weights to f32", dtype_name(t.dtype())));
}

Tensor from_f32(const Tensor& t, DType to) {
  PRIMUS_CHECK(t.dtype() == DType::kF32, "from_f32 needs f32, got {}", dtype_name(t.dtype()));
  if (to == DType::kF32) return t;
  if (to == DType::kF16) {
    Tensor out = Tensor::empty(t.shape(), DType::kF16);
    const float* src = t.data<float>();
    uint16_t* dst = static_cast<uint16_t*>(out.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i) dst[i] = float_to_half(src[i]);
    return out;
  }
  return cpu_cast(t, to);
}

DType torch_dtype_to_dtype(const std::string& s) {
  if (s == "bfloat16" || s == "bf16") return DType::kBF16;
  if (s == "float16" || s == "fp16" || s == "f16" || s == "half") return DType::kF16;
  if (s == "float32" || s == "fp32" || s == "f32" || s == "float") return DType::kF32;
  throw ConfigError(fmt::format("dtype '{}' (expected bfloat16, float16 or float32)", s));
}

std::string dtype_to_torch(DType t) {
  switch (t) {
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kF32:
      return "float32";
    default:
      PRIMUS_FAIL("no torch dtype for {}", dtype_name(t));
  }
}

HfCheckpoint::HfCheckpoint(const std::string& dir) : dir_(dir) {
  const std::string cpath = dir + "/config.json";
  try {
    config_ = nlohmann::json::parse(read_text_file(cpath));
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}: not valid JSON ({})", cpath, e.what()));
  }
  info_ = model_config_from_hf(config_, cpath);
  info_.model.name = fs::path(dir).filename().string();

  const std::string index_path = dir + "/model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;
  std::vector<std::string> file_names;
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    nlohmann::json idx;
    try {
      idx = nlohmann::json::parse(read_text_file(index_path));
    } catch (const nlohmann::json::exception& e) {
      throw Error(ErrorKind::kRuntime, fmt::format("{}: not valid JSON ({})", index_path, e.what()));
    }
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      throw Error(ErrorKind::kRuntime, fmt::format("{}: no weight_map object", index_path));
    std::set<std::string> files;
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        throw Error(ErrorKind::kRuntime,
                    fmt::format("{}: weight_map[{}] is not a file name", index_path, it.key()));
      const std::string f = it.value().get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f[0] == '.')
        throw Error(ErrorKind::kRuntime, fmt::format("{}: '{}' is not a plain file name", index_path, f));
      weight_map[it.key()] = f;
      files.insert(f);
    }
    file_names.assign(files.begin(), files.end());
  } else if (fs::exists(dir + "/model.safetensors", ec)) {
    file_names.push_back("model.safetensors");
  } else {
    throw Error(ErrorKind::kRuntime,
                fmt::format("{}: neither model.safetensors nor model.safetensors.index.json", dir));
  }
  for (const std::string& f : file_names) {
    File file;
    file.reader = std::make_unique<FileReader>(dir + "/" + f);
    file.header = read_safetensors_header(*file.reader);
    files_.push_back(std::move(file));
    const size_t fi = files_.size() - 1;
    for (size_t e = 0; e < files_[fi].header.entries.size(); ++e) {
      const std::string& name = files_[fi].header.entries[e].name;
      if (!weight_map.empty()) {
        auto w = weight_map.find(name);
        if (w == weight_map.end() || w->second != f)
          throw Error(ErrorKind::kRuntime,
                      fmt::format("{}/{}: tensor {} is not mapped to this file by the index", dir, f, name));
      }
      if (!where_.emplace(name, std::make_pair(fi, e)).second)
        throw Error(ErrorKind::kRuntime, fmt::format("{}: tensor {} appears in two files", dir, name));
    }
  }
  for (const auto& [name, f] : weight_map)
    if (!where_.count(name))
      throw Error(ErrorKind::kRuntime,
                  fmt::format("{}: the index maps {} to {}, which does not hold it", dir, name, f));
}

HfCheckpoint::~HfCheckpoint() = default;

std::vector<std::string> HfCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& kv : where_) out.push_back(kv.first);
  return out;
}

std::string HfCheckpoint::st_dtype(const std::string& name) const {
  const auto& [f, e] = where_.at(name);
  return files_[f].header.entries[e].dtype;
}

Tensor HfCheckpoint::read(const std::string& name) const {
  auto it = where_.find(name);
  PRIMUS_CHECK(it != where_.end(), "{}: no tensor {}", dir_, name);
  const File& f = files_[it->second.first];
  return read_st_tensor(*f.reader, f.header, f.header.entries[it->second.second]);
}

Tensor HfCheckpoint::read_f32(const std::string& name) const {
  return to_f32(read(name));
}

Tensor hf_tensor_for_param(const HfCheckpoint& hf, const std::string& name, const ModelSpec& spec) {
  const int64_t d = spec.hidden, qd = spec.q_dim(), kvd = spec.kv_dim(), f = spec.ffn;
  const int64_t v = hf.info().model.vocab_size;
  if (name == "embed_tokens.weight") return expect(hf, "model.embed_tokens.weight", {v, d});
  if (name == "norm.weight") return expect(hf, "model.norm.weight", {d});
  if (name == "lm_head.weight") return expect(hf, "lm_head.weight", {v, d});
  PRIMUS_CHECK(name.rfind("layers.", 0) == 0, "unknown parameter {}", name);
  const size_t dot = name.find('.', 7);
  const std::string layer = name.substr(0, dot + 1);  // "layers.3."
  const std::string rest = name.substr(dot + 1);
  const std::string p = "model." + layer;
  if (rest == "self_attn.qkv_proj.weight") {
    if (hf.has(p + "self_attn.o_proj.bias")) {
      // attention_bias models carry an o_proj bias we do not implement; accept it only when it is zero.
      Tensor ob = expect(hf, p + "self_attn.o_proj.bias", {d});
      const float* b = ob.data<float>();
      for (int64_t i = 0; i < d; ++i)
        if (b[i] != 0.0f)
          throw Error(
              ErrorKind::kRuntime,
              fmt::format("{}: {}self_attn.o_proj.bias is not zero (element {} = {}); output-projection "
                          "biases are not supported",
                          hf.dir(), p, i, b[i]));
    }
    return cat_rows({expect(hf, p + "self_attn.q_proj.weight", {qd, d}),
                     expect(hf, p + "self_attn.k_proj.weight", {kvd, d}),
                     expect(hf, p + "self_attn.v_proj.weight", {kvd, d})});
  }
  if (rest == "self_attn.qkv_proj.bias")
    return cat_rows({expect(hf, p + "self_attn.q_proj.bias", {qd}),
                     expect(hf, p + "self_attn.k_proj.bias", {kvd}),
                     expect(hf, p + "self_attn.v_proj.bias", {kvd})});
  if (rest == "mlp.gate_up_proj.weight")
    return cat_rows(
        {expect(hf, p + "mlp.gate_proj.weight", {f, d}), expect(hf, p + "mlp.up_proj.weight", {f, d})});
  if (rest == "self_attn.o_proj.weight") return expect(hf, p + rest, {d, qd});
  if (rest == "mlp.down_proj.weight") return expect(hf, p + rest, {d, f});
  if (rest == "input_layernorm.weight" || rest == "post_attention_layernorm.weight")
    return expect(hf, p + rest, {d});
  if (rest == "self_attn.q_norm.weight" || rest == "self_attn.k_norm.weight")
    return expect(hf, p + rest, {spec.head_dim});
  PRIMUS_FAIL("no HF tensor for parameter {}", name);
}

void check_hf_names(const HfCheckpoint& hf, const ModelSpec& spec) {
  std::set<std::string> known = {"model.embed_tokens.weight", "model.norm.weight"};
  if (!spec.tied_embeddings) known.insert("lm_head.weight");
  for (int l = 0; l < spec.layers; ++l) {
    const std::string p = "model." + layer_prefix(l);
    for (const char* s :
         {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
          "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
          "input_layernorm.weight", "post_attention_layernorm.weight"})
      known.insert(p + s);
    if (spec.qkv_bias)
      for (const char* s : {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
                            "self_attn.o_proj.bias"})
        known.insert(p + s);
    if (spec.qk_norm)
      for (const char* s : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"}) known.insert(p + s);
  }
  std::vector<std::string> unexpected;
  for (const std::string& n : hf.names()) {
    if (known.count(n) || n.ends_with(".rotary_emb.inv_freq")) continue;
    if (spec.tied_embeddings && n == "lm_head.weight") {
      // Some tied checkpoints store the head anyway; it must then equal the embedding.
      Tensor a = hf.read_f32("lm_head.weight"), b = hf.read_f32("model.embed_tokens.weight");
      if (a.shape() == b.shape() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0) continue;
      throw Error(ErrorKind::kRuntime,
                  fmt::format("{}: tie_word_embeddings is true but lm_head.weight differs from the embedding",
                              hf.dir()));
    }
    unexpected.push_back(n);
  }
  if (!unexpected.empty())
    throw Error(ErrorKind::kRuntime,
                fmt::format("{}: tensors that do not belong to a {} model of this configuration: {}",
                            hf.dir(), hf.info().model_type, fmt::join(unexpected, ", ")));
}

void load_hf_into_params(const HfCheckpoint& hf, ParamStore& params, const Stream& s) {
  const ModelSpec spec = ModelSpec::from_config(hf.info().model);
  check_hf_names(hf, spec);
  for (int i = 0; i < static_cast<int>(params.entries().size()); ++i) {
    Tensor t = hf_tensor_for_param(hf, params.entry(i).name, spec);
    const ParamEntry& e = params.entry(i);
    Tensor dst = params.master_flat().slice(e.offset, e.offset + e.numel).view(e.shape);
    if (t.shape() != e.shape) {
      const bool pad = t.ndim() == 2 && t.size(1) == e.shape[1] && t.size(0) < e.shape[0];
      PRIMUS_CHECK(pad, "{}: {} has shape {}, the model expects {}", hf.dir(), e.name, shape_str(t.shape()),
                   shape_str(e.shape));
      Tensor padded = Tensor::zeros(e.shape, DType::kF32);  // vocabulary padding rows start at zero
      std::memcpy(padded.data_ptr(), t.data_ptr(), t.nbytes());
      t = padded;
    }
    if (dst.dtype() != DType::kF32) t = cpu_cast(t, dst.dtype());
    dst.copy_from(t, s);
  }
  params.sync_compute_copy(s);
  params.adam_m_flat().zero_(s);
  params.adam_v_flat().zero_(s);
  stream_sync(s);
}

std::vector<std::pair<std::string, Tensor>> hf_tensors_from_params(
    const std::map<std::string, Tensor>& params, const ModelConfig& m, const std::string& model_type,
    DType dtype) {
  const ModelSpec spec = ModelSpec::from_config(m);
  auto get = [&](const std::string& n) -> const Tensor& {
    auto it = params.find(n);
    PRIMUS_CHECK(it != params.end(), "checkpoint has no parameter {}", n);
    PRIMUS_CHECK(it->second.dtype() == DType::kF32, "{} must be f32", n);
    return it->second;
  };
  std::vector<std::pair<std::string, Tensor>> out;
  auto put = [&](const std::string& n, const Tensor& t) { out.emplace_back(n, from_f32(t, dtype)); };
  const int64_t v = m.vocab_size, qd = spec.q_dim(), kvd = spec.kv_dim(), f = spec.ffn;
  put("model.embed_tokens.weight", rows(get("embed_tokens.weight"), 0, v));
  for (int l = 0; l < spec.layers; ++l) {
    const std::string lp = layer_prefix(l), p = "model." + lp;
    put(p + "input_layernorm.weight", get(lp + "input_layernorm.weight"));
    const Tensor& qkv = get(lp + "self_attn.qkv_proj.weight");
    put(p + "self_attn.q_proj.weight", rows(qkv, 0, qd));
    put(p + "self_attn.k_proj.weight", rows(qkv, qd, qd + kvd));
    put(p + "self_attn.v_proj.weight", rows(qkv, qd + kvd, qd + 2 * kvd));
    if (spec.qkv_bias || model_type == "qwen2") {
      // qwen2 always has q/k/v biases: a model without them exports zeros (the same function).
      Tensor b =
          spec.qkv_bias ? get(lp + "self_attn.qkv_proj.bias") : Tensor::zeros({qd + 2 * kvd}, DType::kF32);
      put(p + "self_attn.q_proj.bias", rows(b, 0, qd));
      put(p + "self_attn.k_proj.bias", rows(b, qd, qd + kvd));
      put(p + "self_attn.v_proj.bias", rows(b, qd + kvd, qd + 2 * kvd));
    }
    put(p + "self_attn.o_proj.weight", get(lp + "self_attn.o_proj.weight"));
    // llama/qwen3 attention_bias also biases o_proj: exported as zeros (the function has none).
    if (spec.qkv_bias && model_type != "qwen2")
      put(p + "self_attn.o_proj.bias", Tensor::zeros({spec.hidden}, DType::kF32));
    if (spec.qk_norm) {
      put(p + "self_attn.q_norm.weight", get(lp + "self_attn.q_norm.weight"));
      put(p + "self_attn.k_norm.weight", get(lp + "self_attn.k_norm.weight"));
    }
    put(p + "post_attention_layernorm.weight", get(lp + "post_attention_layernorm.weight"));
    const Tensor& gu = get(lp + "mlp.gate_up_proj.weight");
    put(p + "mlp.gate_proj.weight", rows(gu, 0, f));
    put(p + "mlp.up_proj.weight", rows(gu, f, 2 * f));
    put(p + "mlp.down_proj.weight", get(lp + "mlp.down_proj.weight"));
  }
  put("model.norm.weight", get("norm.weight"));
  if (!spec.tied_embeddings) put("lm_head.weight", rows(get("lm_head.weight"), 0, v));
  return out;
}

HfWriteStats write_hf_dir(const std::string& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                          const nlohmann::ordered_json& config, uint64_t max_shard_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(ErrorKind::kRuntime, fmt::format("cannot create {}: {}", dir, ec.message()));
  // Greedy sharding in tensor order, as transformers' save_pretrained does.
  std::vector<std::vector<size_t>> shards(1);
  uint64_t fill = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t b = tensors[i].second.nbytes();
    if (fill > 0 && max_shard_bytes > 0 && fill + b > max_shard_bytes) {
      shards.emplace_back();
      fill = 0;
    }
    shards.back().push_back(i);
    fill += b;
    total += b;
  }
  HfWriteStats st;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  const size_t n = shards.size();
  for (size_t s = 0; s < n; ++s) {
    const std::string name =
        n == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n);
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    for (size_t i : shards[s]) {
      const Tensor& t = tensors[i].second;
      w.add(tensors[i].first, t.dtype(), t.shape(), t.data_ptr());
      weight_map[tensors[i].first] = name;
    }
    st.bytes += w.write(dir + "/" + name).bytes;
    st.files.push_back(name);
  }
  if (n > 1) {
    nlohmann::ordered_json idx;
    idx["metadata"] = {{"total_size", total}};
    idx["weight_map"] = weight_map;
    write_file_durable(dir + "/model.safetensors.index.json", idx.dump(2) + "\n");
    st.files.push_back("model.safetensors.index.json");
  }
  write_file_durable(dir + "/config.json", config.dump(2) + "\n");
  st.files.push_back("config.json");
  return st;
}

}  // namespace primus::ckpt
