#include "checkpoint/convert.h"

#include <chrono>
#include <filesystem>

#include "checkpoint/hf_weights.h"
#include "checkpoint/publish.h"
#include "checkpoint/snapshot.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "model/model_spec.h"

namespace fs = std::filesystem;

namespace primus::ckpt {

ConvertReport convert_hf_to_primus(const std::string& hf_dir, const std::string& out_root) {
  const Stopwatch t0;
  HfCheckpoint hf(hf_dir);
  const ModelConfig& m = hf.info().model;
  std::error_code ec;
  if (fs::exists(out_root, ec) && !fs::is_empty(out_root, ec))
    throw ConfigError(fmt::format("convert: output {} exists and is not empty", out_root),
                      "choose a new directory (conversions never overwrite)");
  check_hf_names(hf);  // every name, shape and dtype before any tensor byte is read
  check_hf_extras(hf);
  const ModelSpec spec = ModelSpec::from_config(m);
  ParamStore layout(spec);  // names and shapes only; nothing is allocated
  const HfNameMap& map = hf.name_map();
  for (const std::string& p : map.params())
    PRIMUS_CHECK(layout.find(p) >= 0, "convert: {} maps to parameter {}, which the model does not have",
                 hf_dir, p);

  // Each parameter keeps the dtype of its HF source (q/k/v, gate/up and the experts share theirs; FP8 weights
  // become bf16), so the checkpoint is exact and no larger than the HF files; loading casts to the f32 master
  // weights. Parameters are assembled one at a time while the file is written: memory holds one parameter
  // (a layer's stacked experts at most), not the model.
  Snapshot snap;
  std::string dtype;
  for (const ParamEntry& e : layout.entries()) {
    const HfMapEntry* me = map.find(e.name);
    PRIMUS_CHECK(me, "convert: the model's parameter {} has no {} tensors", e.name, hf.info().model_type);
    PRIMUS_CHECK(me->param_shape == e.shape, "convert: {} is {} in the model but {} from {}", e.name,
                 shape_str(e.shape), shape_str(me->param_shape), hf_dir);
    const DType dt = hf_param_dtype(hf, *me);
    if (dtype.empty()) dtype = dtype_name(dt);
    SnapshotTensor t{e.name, dt, e.shape, nullptr, {}};
    t.produce = [&hf, me, dt] { return hf_param(hf, *me, dt); };
    snap.model.push_back(std::move(t));
  }
  snap.state.iteration = 0;
  snap.state.model = m;
  snap.state.compute_dtype = dtype;
  snap.state.has_optimizer = false;
  snap.state.hf_config = hf.config().dump();
  snap.config_yaml = model_preset_yaml(m, hf_dir);
  snap.state.config_xxh3 = hex64(xxh3_bytes(snap.config_yaml.data(), snap.config_yaml.size()));
  PublishStats ps = publish_checkpoint(snap, out_root, 0);
  const std::string preset = out_root + "/primus_model.yaml";
  write_file_durable(preset, snap.config_yaml);

  ConvertReport r;
  r.output = ps.dir;
  r.preset = preset;
  r.model_type = hf.info().model_type;
  r.dtype = dtype;
  r.tensors = static_cast<int64_t>(snap.model.size());
  r.bytes = ps.bytes;
  r.seconds = t0.seconds();
  return r;
}

std::map<std::string, Tensor> read_checkpoint_params(const Verification& v) {
  CheckpointReader reader(v);
  const bool master = !reader.names("master").empty();
  std::map<std::string, Tensor> out;
  for (const std::string& n : reader.names("model"))
    out[n] = to_f32(reader.read(master ? "master" : "model", n));
  return out;
}

ConvertReport convert_primus_to_hf(const std::string& checkpoint, const std::string& out_dir,
                                   const PrimusToHfOptions& o) {
  const Stopwatch t0;
  const PathKind kind = classify_path(checkpoint);
  if (kind != PathKind::kCheckpoint && kind != PathKind::kSaveRoot)
    throw ConfigError(fmt::format(
        "convert: {} is not a Primus checkpoint (no manifest.json, latest or iter_*)", checkpoint));
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !fs::is_empty(out_dir, ec))
    throw ConfigError(fmt::format("convert: output {} exists and is not empty", out_dir),
                      "choose a new directory (conversions never overwrite)");
  Selection sel = select_explicit(checkpoint);  // verified; throws naming a bad file
  const TrainingState& st = sel.verification.state;
  if (st.lora)
    throw ConfigError(
        fmt::format("{} holds LoRA adapters (rank {}) of a frozen base model, not a whole model",
                    sel.verification.dir, st.lora->rank),
        "the run's PEFT adapter (<run dir>/peft_adapter) merges into the base's HF directory with `primus "
        "convert merge-lora`");
  nlohmann::json base;
  if (!st.hf_config.empty()) base = nlohmann::json::parse(st.hf_config);
  std::string type = o.model_type;
  if (type.empty()) type = base.is_object() ? base.value("model_type", "") : "";
  if (type.empty()) type = default_model_type(st.model);
  std::string dtype = o.dtype;
  if (dtype.empty() && base.is_object()) dtype = base.value("torch_dtype", base.value("dtype", ""));
  if (dtype.empty()) dtype = "bfloat16";
  const DType dt = torch_dtype_to_dtype(dtype);
  // The config first: a model the family cannot express is refused before any tensor is read.
  const nlohmann::ordered_json config = hf_config_from_model(st.model, type, dtype_to_torch(dt), base);
  HfMapOptions mo;
  mo.experts = o.fused_experts ? HfExpertLayout::kFused : HfExpertLayout::kPerExpert;
  mo.qkv_bias_tensors = hf_has_qkv_bias_tensors(st.model, type, nlohmann::json::parse(config.dump()));
  const HfNameMap map(st.model, type, mo);
  // One parameter in memory at a time: each is read (master weights when saved) as its HF tensors are
  // written.
  CheckpointReader reader(sel.verification);
  const bool master = !reader.names("master").empty();
  auto param_f32 = [&](const std::string& name) {
    PRIMUS_CHECK(reader.has("model", name), "{}: the checkpoint has no parameter {} (a {} model needs it)",
                 sel.verification.dir, name, type);
    return to_f32(reader.read(master ? "master" : "model", name));
  };
  for (const std::string& p : map.params())  // before the first file is written
    PRIMUS_CHECK(reader.has("model", p), "{}: the checkpoint has no parameter {} (a {} model needs it)",
                 sel.verification.dir, p, type);
  const std::vector<HfOutTensor> tensors = hf_export_plan(map, param_f32, dt);
  const HfWriteStats ws = write_hf_dir(out_dir, tensors, config, o.max_shard_bytes);
  ConvertReport r;
  r.output = out_dir;
  r.model_type = type;
  r.dtype = dtype_to_torch(dt);
  r.tensors = static_cast<int64_t>(tensors.size());
  r.bytes = ws.bytes;
  r.seconds = t0.seconds();
  return r;
}

}  // namespace primus::ckpt
