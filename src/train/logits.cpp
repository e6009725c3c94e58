#include "train/logits.h"

#include <cstring>

#include "checkpoint/hf_config.h"
#include "checkpoint/hf_weights.h"
#include "checkpoint/load.h"
#include "checkpoint/peft_adapter.h"
#include "core/error.h"
#include "model/decoder_layer.h"
#include "model/llama_model.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/softcap.h"
#include "train/trainer.h"

namespace primus {

InferenceModel load_inference_model(const std::string& path, const std::string& device) {
  InferenceModel m;
  m.stream = select_stream(device);
  const DType compute = m.stream.device.is_cpu() ? DType::kF32 : DType::kBF16;
  switch (ckpt::classify_path(path)) {
    case ckpt::PathKind::kHuggingFace: {
      ckpt::HfCheckpoint hf(path);
      // Everything that can be refused (a model we cannot build, names, shapes, dtypes) is, before any
      // device memory is allocated.
      ckpt::check_hf_names(hf);
      m.config = hf.info().model;
      m.params = std::make_unique<ParamStore>(ModelSpec::from_config(m.config));
      m.params->allocate(compute, m.stream);
      ckpt::load_hf_into_params(hf, *m.params, m.stream);
      m.source = fmt::format("Hugging Face {} model {}", hf.info().model_type, path);
      m.model_type = hf.info().model_type;
      return m;
    }
    case ckpt::PathKind::kCheckpoint:
    case ckpt::PathKind::kSaveRoot: {
      ckpt::Selection sel = ckpt::select_explicit(path);
      if (sel.verification.state.lora)
        throw ConfigError(fmt::format("{} holds LoRA adapters only", sel.verification.dir),
                          "load the base model and pass the run's PEFT adapter with --adapter");
      m.config = sel.verification.state.model;
      m.params = std::make_unique<ParamStore>(ModelSpec::from_config(m.config));
      m.params->allocate(compute, m.stream);
      ckpt::LoadOptions o;
      o.load_optim = false;
      ckpt::load_into_params(sel.verification, *m.params, m.stream, o);
      m.source =
          fmt::format("checkpoint {} (iteration {})", sel.verification.dir, sel.verification.state.iteration);
      const std::string& hf_config = sel.verification.state.hf_config;
      if (!hf_config.empty()) m.model_type = nlohmann::json::parse(hf_config).value("model_type", "");
      if (m.model_type.empty()) m.model_type = ckpt::default_model_type(m.config);
      return m;
    }
    default:
      throw ConfigError(
          fmt::format("{} is neither a Primus checkpoint nor a Hugging Face model directory", path));
  }
}

void attach_peft_adapter(InferenceModel& m, const std::string& dir) {
  const ckpt::PeftAdapter a = ckpt::read_peft_adapter(dir);
  ModelSpec spec = ModelSpec::from_config(m.config);
  spec.adapters = ckpt::lora_config_of(a, m.config, m.model_type);
  m.adapters = std::make_unique<ParamStore>(spec);
  m.adapters->allocate(m.params->compute_flat().dtype(), m.stream);
  ckpt::load_peft_into_adapters(a, m.config, m.model_type, *m.adapters, m.stream);
  m.source +=
      fmt::format(" + LoRA adapter {} (r {}, alpha {}, {} modules)", dir, a.r, a.alpha, a.modules.size());
}

Tensor compute_logits(const InferenceModel& im, const Tensor& tokens_host) {
  PRIMUS_CHECK(tokens_host.ndim() == 2 && tokens_host.dtype() == DType::kI32,
               "tokens must be i32 [B, T], got {}", tokens_host.describe());
  const ModelSpec spec = ModelSpec::from_config(im.config);
  ParamStore& params = *im.params;
  const Stream& s = im.stream;
  const int64_t b = tokens_host.size(0), t = tokens_host.size(1), n = b * t;
  for (int32_t id : tokens_host.to_vector<int32_t>())
    PRIMUS_CHECK(id >= 0 && id < im.config.vocab_size, "token id {} outside the vocabulary [0, {})", id,
                 im.config.vocab_size);
  StepContext ctx;
  ctx.stream = s;
  ctx.act_dtype = s.device.is_cpu() ? params.compute_flat().dtype() : DType::kBF16;
  ctx.batch = b;
  ctx.seq = t;
  Tensor rope = ops::rope_table(rope_config(im.config), t, spec.rope_dim()).to(s);  // MLA: the rotary slice
  ctx.rope_table = &rope;
  Tensor tokens = s.device.is_cpu() ? tokens_host : tokens_host.to(s);
  // The forward of LlamaModel::forward_loss, stopped at the logits.
  Tensor x = ctx.act({n, spec.hidden});
  ops::embedding_forward(tokens.view({n}), params.param("embed_tokens.weight"), x, s);
  for (int l = 0; l < spec.layers; ++l) {
    DecoderLayer layer(spec, params, l);
    if (im.adapters) layer.set_adapters(*im.adapters);
    x = layer.forward(ctx, x, nullptr, RecomputeMode::kNone);
  }
  Tensor h = ctx.act({n, spec.hidden});
  Tensor rstd = ctx.empty({n}, ctx.stat_dtype());
  ops::rmsnorm_forward(x, params.param("norm.weight"), spec.norm_eps, h, rstd, s);
  Tensor w = params.param(spec.tied_embeddings ? "embed_tokens.weight" : "lm_head.weight");
  Tensor logits = ctx.act({n, spec.vocab});
  ops::linear_forward(h, w, nullptr, logits, s);
  if (spec.logit_softcap > 0) ops::softcap_forward(logits, spec.logit_softcap, logits, s);
  Tensor host = logits.to(Stream::cpu());
  if (host.dtype() != DType::kF32) host = cpu_cast(host, DType::kF32);
  const int64_t v = im.config.vocab_size;
  Tensor out = Tensor::empty({b, t, v}, DType::kF32);
  for (int64_t r = 0; r < n; ++r)
    std::memcpy(out.data<float>() + r * v, host.data<float>() + r * spec.vocab, static_cast<size_t>(v) * 4);
  return out;
}

}  // namespace primus
