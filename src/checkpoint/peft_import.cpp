// PEFT LoRA directories into our fused adapter store (checkpoint/peft_adapter.h): the inverse of the export's
// split, for `primus checkpoint logits --adapter` (the device check against HF `peft`).
#include <cstring>

#include "checkpoint/hf_name_map.h"
#include "checkpoint/peft_adapter.h"
#include "config/not_supported.h"
#include "core/error.h"
#include "model/param_store.h"

namespace primus::ckpt {

namespace {

// Every projection that can hold an adapter (model/param_store.cpp), packed-QKV attention's and MLA's; a
// model's name map has those of its attention only.
constexpr const char* kProjections[] = {"self_attn.qkv_proj",
                                        "self_attn.q_proj",
                                        "self_attn.q_a_proj",
                                        "self_attn.q_b_proj",
                                        "self_attn.kv_a_proj_with_mqa",
                                        "self_attn.kv_b_proj",
                                        "self_attn.o_proj",
                                        "mlp.gate_up_proj",
                                        "mlp.down_proj"};

std::string module_of(const HfPart& p) {
  const std::string suffix = ".weight";
  return p.name.substr(0, p.name.size() - suffix.size());
}

// The HF modules of our projection `proj` in layer l, in row order; empty parts when the map lacks it.
std::vector<HfPart> parts_of(const HfNameMap& map, int64_t l, const std::string& proj) {
  const HfMapEntry* e = map.find("layers." + std::to_string(l) + "." + proj + ".weight");
  return e ? e->parts : std::vector<HfPart>{};
}

}  // namespace

LoraConfig lora_config_of(const PeftAdapter& a, const ModelConfig& m, const std::string& model_type) {
  const HfNameMap map(m, model_type, HfMapOptions{});
  LoraConfig l;
  l.enabled = true;
  l.rank = a.r;
  l.alpha = a.alpha;
  size_t used = 0;
  for (const char* proj : kProjections) {
    int64_t layers_with = 0;
    for (int64_t i = 0; i < m.num_layers; ++i) {
      const std::vector<HfPart> parts = parts_of(map, i, proj);
      int64_t present = 0;
      for (const HfPart& p : parts) present += a.modules.count(module_of(p)) ? 1 : 0;
      if (present > 0 && present < static_cast<int64_t>(parts.size()))
        throw config::NotSupportedError(fmt::format(
            "{}: not supported yet: an adapter on part of the fused layers.{}.{} ({} of its {} HF "
            "modules)",
            a.dir, i, proj, present, parts.size()));
      if (present > 0) ++layers_with;
      used += static_cast<size_t>(present);
    }
    if (layers_with == 0) continue;
    if (layers_with != m.num_layers)
      throw config::NotSupportedError(
          fmt::format("{}: not supported yet: adapters on {} in {} of the {} layers", a.dir, proj,
                      layers_with, m.num_layers));
    l.targets.push_back(std::string(proj).substr(std::string(proj).find('.') + 1));
  }
  if (used != a.modules.size())
    for (const auto& [module, _] : a.modules) {
      bool known = false;
      for (int64_t i = 0; i < m.num_layers && !known; ++i)
        for (const char* proj : kProjections)
          for (const HfPart& p : parts_of(map, i, proj)) known = known || module_of(p) == module;
      if (!known)
        throw ConfigError(fmt::format("{}: adapter module {} is not a decoder projection of this {} model",
                                      a.dir, module, model_type),
                          "the adapter belongs to another base model");
    }
  if (l.targets.empty()) throw ConfigError(fmt::format("{}: the adapter adapts no projection", a.dir));
  return l;
}

void load_peft_into_adapters(const PeftAdapter& a, const ModelConfig& m, const std::string& model_type,
                             ParamStore& adapters, const Stream& s) {
  const HfNameMap map(m, model_type, HfMapOptions{});
  for (int i = 0; i < static_cast<int>(adapters.entries().size()); ++i) {
    const ParamEntry& e = adapters.entry(i);
    const bool is_a = e.name.find(".lora_A.weight") != std::string::npos;
    const std::string proj = e.name.substr(0, e.name.find(is_a ? ".lora_A.weight" : ".lora_B.weight"));
    const HfMapEntry* me = map.find(proj + ".weight");
    PRIMUS_CHECK(me, "adapter {}: {}.weight is not in the {} name map", e.name, proj, model_type);
    Tensor value = Tensor::empty(e.shape, DType::kF32);
    int64_t row = 0;
    for (const HfPart& p : me->parts) {
      const PeftModule& mod = a.modules.at(module_of(p));
      const Tensor& src = is_a ? mod.a : mod.b;
      if (is_a) {
        PRIMUS_CHECK(src.shape() == e.shape, "{}: {}.lora_A is {}, expected {}", a.dir, module_of(p),
                     shape_str(src.shape()), shape_str(e.shape));
        if (row == 0) {
          std::memcpy(value.data_ptr(), src.data_ptr(), src.nbytes());
        } else if (std::memcmp(value.data_ptr(), src.data_ptr(), src.nbytes()) != 0) {
          throw config::NotSupportedError(fmt::format(
              "{}: not supported yet: {} has its own lora_A, unlike the other modules of the fused "
              "{} (one adapter here)",
              a.dir, module_of(p), proj));
        }
        row = 1;
        continue;
      }
      PRIMUS_CHECK(src.ndim() == 2 && src.size(1) == e.shape[1] && row + src.size(0) <= e.shape[0],
                   "{}: {}.lora_B is {}, which does not fit rows {}.. of {} {}", a.dir, module_of(p),
                   shape_str(src.shape()), row, e.name, shape_str(e.shape));
      // Our row j of the part is the HF row src_rows[j] (DeepSeek's RoPE rows are stored permuted).
      const std::vector<int64_t> src_rows = rope_deinterleave_rows(p);
      const int64_t r = e.shape[1];
      for (int64_t j = 0; j < src.size(0); ++j)
        std::memcpy(value.data<float>() + (row + j) * r, src.data<float>() + src_rows[j] * r,
                    static_cast<size_t>(r) * sizeof(float));
      row += src.size(0);
    }
    PRIMUS_CHECK(is_a || row == e.shape[0], "{}: the parts of {} give {} rows of lora_B, expected {}", a.dir,
                 proj, row, e.shape[0]);
    adapters.set_master(i, value, s);
  }
}

}  // namespace primus::ckpt
