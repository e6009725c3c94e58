#include "checkpoint/hf_weights.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "checkpoint/fp8_dequant.h"
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
  throw Error(ErrorKind::kRuntime,
              fmt::format("cannot convert {} weights to f32{}", dtype_name(t.dtype()),
                          t.dtype() == DType::kFP8E4M3 ? " (FP8 weights need their weight_scale_inv)" : ""));
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

  // transformers 5 may save experts fused ([E, 2F, d] gate_up_proj, [E, d, F] down_proj, no ".weight").
  for (const auto& kv : where_)
    if (kv.first.ends_with(".mlp.experts.gate_up_proj")) layout_ = HfExpertLayout::kFused;
  // transformers drops DeepSeek-V3's MTP layers (model.layers.{num_hidden_layers + k}) on load, so its
  // save_pretrained writes none while config.json still counts them: import without MTP then, and say so.
  ModelConfig& m = info_.model;
  if (m.mtp_num_layers > 0) {
    const std::string prefix = fmt::format("model.layers.{}.", m.num_layers);
    bool any = false;
    for (const auto& kv : where_) any = any || kv.first.rfind(prefix, 0) == 0;
    if (!any) {
      log::warn(
          "{}: num_nextn_predict_layers is {} but there are no {}* tensors; importing without the "
          "multi-token-prediction layers",
          cpath, m.mtp_num_layers, prefix);
      m.mtp_num_layers = 0;
    }
  }
  HfMapOptions o;
  o.experts = layout_;
  o.rope_interleaved = info_.rope_interleaved;
  o.qkv_bias_tensors = hf_has_qkv_bias_tensors(m, info_.model_type, config_);
  map_ = std::make_unique<HfNameMap>(m, info_.model_type, o);
}

HfCheckpoint::~HfCheckpoint() = default;

std::vector<std::string> HfCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& kv : where_) out.push_back(kv.first);
  return out;
}

const StEntry& HfCheckpoint::entry(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end())
    throw Error(ErrorKind::kRuntime, fmt::format("{}: tensor {} is missing", dir_, name), {},
                "the weights do not match config.json");
  return files_[it->second.first].header.entries[it->second.second];
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

HfWriteStats write_hf_dir(const std::string& dir, const std::vector<HfOutTensor>& tensors,
                          const nlohmann::ordered_json& config, uint64_t max_shard_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(ErrorKind::kRuntime, fmt::format("cannot create {}: {}", dir, ec.message()));
  // Greedy sharding in tensor order, as transformers' save_pretrained does.
  std::vector<std::vector<size_t>> shards(1);
  uint64_t fill = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t b = static_cast<uint64_t>(shape_numel(tensors[i].shape)) * dtype_size(tensors[i].dtype);
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
      w.add_lazy(tensors[i].name, tensors[i].dtype, tensors[i].shape, tensors[i].produce);
      weight_map[tensors[i].name] = name;
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

HfWriteStats write_hf_dir(const std::string& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                          const nlohmann::ordered_json& config, uint64_t max_shard_bytes) {
  std::vector<HfOutTensor> lazy;
  for (const auto& [name, t] : tensors) {
    // Tensors primus has no safetensors name for (none today) would fail in add_lazy, naming them.
    lazy.push_back({name, t.dtype(), t.shape(), [t] { return t; }});
  }
  return write_hf_dir(dir, lazy, config, max_shard_bytes);
}

}  // namespace primus::ckpt
