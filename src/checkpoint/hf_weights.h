#pragma once
// Hugging Face model directories: config.json plus model.safetensors, or model-0000i-of-0000n.safetensors
// with model.safetensors.index.json (reference.md §1.3-1.4). Reading validates every file (the safetensors
// rules, the index's weight map against the files' headers) and, before any tensor byte is read, every
// tensor name, shape and dtype against the model's name map (checkpoint/hf_name_map.h). Conversions between
// bf16/f16/f32 are exact on the way in and round-to-nearest-even on the way out, so hf -> primus -> hf is
// byte-identical for bf16, f16 and f32 checkpoints. Block-quantised FP8 weights (DeepSeek-V3's release) are
// dequantised to bf16 on the way in (checkpoint/fp8_dequant.h); exports are never quantised.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/hf_config.h"
#include "checkpoint/hf_name_map.h"
#include "checkpoint/safetensors.h"
#include "core/tensor.h"
#include "model/param_store.h"

namespace primus::ckpt {

class HfCheckpoint {
 public:
  // Opens and validates `dir` (headers only; tensors are read on demand). Detects the experts' layout
  // (per-expert tensors, or transformers 5's fused gate_up_proj / down_proj) and whether DeepSeek-V3's MTP
  // layers are present (transformers drops them; the model is then imported without MTP, with a warning).
  explicit HfCheckpoint(const std::string& dir);
  ~HfCheckpoint();
  const std::string& dir() const { return dir_; }
  const HfModelInfo& info() const { return info_; }
  const nlohmann::json& config() const { return config_; }
  const HfNameMap& name_map() const { return *map_; }
  HfExpertLayout expert_layout() const { return layout_; }
  bool has(const std::string& name) const { return where_.count(name) > 0; }
  std::vector<std::string> names() const;
  const StEntry& entry(const std::string& name) const;  // throws naming the tensor when absent
  std::string st_dtype(const std::string& name) const { return entry(name).dtype; }
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
  HfExpertLayout layout_ = HfExpertLayout::kPerExpert;
  std::unique_ptr<HfNameMap> map_;
  std::vector<File> files_;
  std::map<std::string, std::pair<size_t, size_t>> where_;  // name -> (file, entry)
};

// Checks every tensor of the directory against the name map without reading data: each one belongs to the
// model (or is a rotary inv_freq buffer, or the weight_scale_inv of an FP8 weight), each parameter's parts
// exist with the expected shapes and floating dtypes, each FP8 weight has its scale and the config.json a
// quantization_config. Throws naming the tensors.
void check_hf_names(const HfCheckpoint& hf);
// Reads the tensors the model has no parameter for and checks them: zero where the function has them as
// zeros (o_proj biases), equal to their parameter where they are copies (a tied head, MTP's embedding).
void check_hf_extras(const HfCheckpoint& hf);

// The dtype a converted checkpoint keeps for a kParam entry: its parts' (bf16 for FP8), f32 when they differ.
DType hf_param_dtype(const HfCheckpoint& hf, const HfMapEntry& e);
// The parameter assembled from its parts in `out` (bf16, f16 or f32): FP8 parts dequantised, DeepSeek's RoPE
// rows de-interleaved.
Tensor hf_param(const HfCheckpoint& hf, const HfMapEntry& e, DType out);

// Loads an HF directory's weights into an allocated ParamStore (master and compute copy; Adam moments zero).
// Embedding/head rows are zero-padded when the store's vocabulary is padded.
void load_hf_into_params(const HfCheckpoint& hf, ParamStore& params, const Stream& s);

// One HF tensor of an export, made when the writer reaches it.
struct HfOutTensor {
  std::string name;
  DType dtype;
  Shape shape;
  std::function<Tensor()> produce;
};
// The HF tensors (in table order) of a model whose f32 parameters `param_f32` returns by ParamStore name,
// each made on demand: an export holds one parameter in memory at a time (its parts are consecutive).
// `dtype` is the output element type (bf16, f16 or f32); rows beyond m.vocab_size (padding) are dropped. The
// producers must run in order, while `map` and `param_f32` live.
std::vector<HfOutTensor> hf_export_plan(const HfNameMap& map,
                                        const std::function<Tensor(const std::string&)>& param_f32,
                                        DType dtype);
// The same, made at once from parameters in memory.
std::vector<std::pair<std::string, Tensor>> hf_tensors_from_params(
    const std::map<std::string, Tensor>& params, const HfNameMap& map, DType dtype);

struct HfWriteStats {
  std::vector<std::string> files;
  uint64_t bytes = 0;
};
// Writes config.json and the weights (one file, or shards of at most max_shard_bytes with an index, greedily
// in tensor order as transformers' save_pretrained does). Lazy tensors are made as the files are written.
HfWriteStats write_hf_dir(const std::string& dir, const std::vector<HfOutTensor>& tensors,
                          const nlohmann::ordered_json& config, uint64_t max_shard_bytes);
HfWriteStats write_hf_dir(const std::string& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                          const nlohmann::ordered_json& config, uint64_t max_shard_bytes);

// Exact conversions used on the way in; RNE on the way out.
Tensor to_f32(const Tensor& t);
Tensor from_f32(const Tensor& t, DType to);
DType torch_dtype_to_dtype(const std::string& torch_dtype);  // "bfloat16" -> kBF16, ...
std::string dtype_to_torch(DType t);

}  // namespace primus::ckpt
