#pragma once
// Hugging Face model directories: config.json plus model.safetensors, or model-0000i-of-0000n.safetensors
// with model.safetensors.index.json (reference.md §1.3-1.4). Reading validates every file (the safetensors
// rules, the index's weight map against the files' headers); names are mapped to ParamStore names, q/k/v are
// concatenated into qkv_proj and gate/up into gate_up_proj (and split again on export). Conversions between
// bf16/f16/f32 are exact on the way in (to f32) and round-to-nearest-even on the way out, so
// hf -> primus -> hf is byte-identical for bf16, f16 and f32 checkpoints.
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/hf_config.h"
#include "checkpoint/safetensors.h"
#include "core/tensor.h"
#include "model/param_store.h"

namespace primus::ckpt {

class HfCheckpoint {
 public:
  // Opens and validates `dir` (headers only; tensors are read on demand).
  explicit HfCheckpoint(const std::string& dir);
  ~HfCheckpoint();
  const std::string& dir() const { return dir_; }
  const HfModelInfo& info() const { return info_; }
  const nlohmann::json& config() const { return config_; }
  bool has(const std::string& name) const { return where_.count(name) > 0; }
  std::vector<std::string> names() const;
  std::string st_dtype(const std::string& name) const;
  Tensor read(const std::string& name) const;  // in the stored dtype
  Tensor read_f32(const std::string& name) const;

 private:
  struct File {
    std::unique_ptr<FileReader> reader;
    StHeader header;
  };
  std::string dir_;
  nlohmann::json config_;
  HfModelInfo info_;
  std::vector<File> files_;
  std::map<std::string, std::pair<size_t, size_t>> where_;  // name -> (file, entry)
};

// The f32 tensor for ParamStore entry `name`, assembled from the HF tensors (q/k/v and gate/up concatenated).
// Checks shapes against `spec`, and that an o_proj bias (attention_bias models) is zero.
Tensor hf_tensor_for_param(const HfCheckpoint& hf, const std::string& name, const ModelSpec& spec);
// Checks that every HF tensor maps to a parameter of `spec` (rotary inv_freq buffers are ignored); throws
// naming the unexpected tensors.
void check_hf_names(const HfCheckpoint& hf, const ModelSpec& spec);

// Loads an HF directory's weights into an allocated ParamStore (master and compute copy; Adam moments zero).
// Embedding/head rows are zero-padded when the store's vocabulary is padded.
void load_hf_into_params(const HfCheckpoint& hf, ParamStore& params, const Stream& s);

// HF tensors (in order) for a model given its f32 parameters by ParamStore name. `dtype` is the output
// element type (bf16, f16 or f32); rows beyond m.vocab_size (padding) are dropped.
std::vector<std::pair<std::string, Tensor>> hf_tensors_from_params(
    const std::map<std::string, Tensor>& params, const ModelConfig& m, const std::string& model_type,
    DType dtype);

struct HfWriteStats {
  std::vector<std::string> files;
  uint64_t bytes = 0;
};
// Writes config.json and the weights (one file, or shards of at most max_shard_bytes with an index).
HfWriteStats write_hf_dir(const std::string& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                          const nlohmann::ordered_json& config, uint64_t max_shard_bytes);

// Exact conversions used on the way in; RNE on the way out.
Tensor to_f32(const Tensor& t);
Tensor from_f32(const Tensor& t, DType to);
DType torch_dtype_to_dtype(const std::string& torch_dtype);  // "bfloat16" -> kBF16, ...
std::string dtype_to_torch(DType t);

}  // namespace primus::ckpt
