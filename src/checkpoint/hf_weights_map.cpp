// Hugging Face tensors <-> Primus parameters through the name map (checkpoint/hf_name_map.h): validation of a
// directory against it, assembling parameters (FP8 dequantisation, RoPE row order) and the way back.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>

#include "checkpoint/fp8_dequant.h"
#include "checkpoint/hf_weights.h"
#include "core/error.h"

namespace primus::ckpt {

namespace {

[[noreturn]] void fail(const HfCheckpoint& hf, const std::string& msg, const std::string& hint = {}) {
  throw Error(ErrorKind::kRuntime, fmt::format("{}: {}", hf.dir(), msg), {}, hint);
}

std::string scale_name(const std::string& weight) {
  return weight + "_scale_inv";
}

// A few names of a long list, for error messages.
std::string some(const std::vector<std::string>& v, size_t n = 12) {
  std::vector<std::string> head(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(n, v.size())));
  return fmt::format("{}{}", fmt::join(head, ", "),
                     v.size() > n ? fmt::format(" (and {} more)", v.size() - n) : "");
}

// The dtype a part lands in before any conversion: FP8 dequantises to bf16.
DType part_dtype(const HfCheckpoint& hf, const HfPart& p) {
  const std::string st = hf.st_dtype(p.name);
  if (st == "F8_E4M3") return DType::kBF16;
  if (st == "BF16") return DType::kBF16;
  if (st == "F16") return DType::kF16;
  if (st == "F32" || st == "F64") return DType::kF32;
  fail(hf,
       fmt::format("tensor {} has dtype {}; expected a floating weight (BF16, F16, F32, F64 or F8_E4M3 with "
                   "weight_scale_inv)",
                   p.name, st));
}

// One part in `out`, in our row order.
Tensor read_part(const HfCheckpoint& hf, const HfPart& p, DType out) {
  Tensor t = hf.read(p.name);
  if (t.dtype() == DType::kFP8E4M3) {
    const HfQuantization& q = hf.info().quant;
    t = dequantize_fp8_blocks(t, hf.read(scale_name(p.name)), q.block_rows, q.block_cols,
                              hf.dir() + ": " + p.name);
  }
  if (t.dtype() != out) t = from_f32(to_f32(t), out);
  if (p.rope_rows == 0) return t;
  const std::vector<int64_t> src = rope_deinterleave_rows(p);
  Tensor o = Tensor::empty(t.shape(), out);
  const size_t row = t.nbytes() / static_cast<size_t>(t.size(0));
  for (size_t r = 0; r < src.size(); ++r)
    std::memcpy(static_cast<char*>(o.data_ptr()) + r * row,
                static_cast<const char*>(t.data_ptr()) + static_cast<size_t>(src[r]) * row, row);
  return o;
}

}  // namespace

void check_hf_names(const HfCheckpoint& hf) {
  const HfNameMap& map = hf.name_map();
  std::set<std::string> known;
  std::vector<std::string> missing, wrong;
  for (const HfMapEntry& e : map.entries()) {
    for (const HfPart& p : e.parts) {
      known.insert(p.name);
      if (!hf.has(p.name)) {
        if (e.kind == HfMapKind::kParam) missing.push_back(p.name);
        continue;
      }
      const StEntry& st = hf.entry(p.name);
      if (st.shape != p.shape)
        wrong.push_back(fmt::format("{} has shape {}, config.json implies {}", p.name, shape_str(st.shape),
                                    shape_str(p.shape)));
      part_dtype(hf, p);  // throws on a non-floating dtype
      if (st.dtype == "F8_E4M3") {
        if (!hf.info().quant.fp8)
          fail(
              hf, fmt::format("tensor {} is F8_E4M3 but config.json has no FP8 quantization_config", p.name),
              "block-quantised FP8 needs quantization_config {quant_method: fp8, weight_block_size: [r, c]}");
        if (!hf.has(scale_name(p.name)))
          fail(hf, fmt::format("tensor {} is F8_E4M3 but {} is missing", p.name, scale_name(p.name)));
        known.insert(scale_name(p.name));
      }
    }
  }
  if (!missing.empty())
    fail(hf,
         fmt::format("{} tensor(s) a {} model of this config.json needs are missing: {}", missing.size(),
                     hf.info().model_type, some(missing)),
         "the weights do not match config.json (model_type, layer counts, attention_bias, "
         "tie_word_embeddings)");
  if (!wrong.empty()) fail(hf, fmt::format("tensor shapes do not match config.json: {}", some(wrong, 6)));
  std::vector<std::string> unexpected;
  for (const std::string& n : hf.names())
    if (!known.count(n) && !n.ends_with(".rotary_emb.inv_freq")) unexpected.push_back(n);
  if (!unexpected.empty())
    fail(hf, fmt::format("{} tensor(s) do not belong to a {} model of this configuration: {}",
                         unexpected.size(), hf.info().model_type, some(unexpected)));
}

DType hf_param_dtype(const HfCheckpoint& hf, const HfMapEntry& e) {
  DType dt = part_dtype(hf, e.parts.at(0));
  for (const HfPart& p : e.parts)
    if (part_dtype(hf, p) != dt) return DType::kF32;  // exact for every part
  return dt;
}

Tensor hf_param(const HfCheckpoint& hf, const HfMapEntry& e, DType out) {
  PRIMUS_CHECK(e.kind == HfMapKind::kParam, "hf_param: {} is not a parameter entry", e.param);
  PRIMUS_CHECK(out == DType::kBF16 || out == DType::kF16 || out == DType::kF32, "hf_param: dtype {}",
               dtype_name(out));
  Tensor dst = Tensor::empty(e.param_shape, out);
  size_t at = 0;
  for (const HfPart& p : e.parts) {
    Tensor t = read_part(hf, p, out);
    PRIMUS_CHECK(t.shape() == p.shape, "{}: tensor {} has shape {}, expected {}", hf.dir(), p.name,
                 shape_str(t.shape()), shape_str(p.shape));
    PRIMUS_CHECK(at + t.nbytes() <= dst.nbytes(), "{}: the parts of {} overflow its shape {}", hf.dir(),
                 e.param, shape_str(e.param_shape));
    std::memcpy(static_cast<char*>(dst.data_ptr()) + at, t.data_ptr(), t.nbytes());
    at += t.nbytes();
  }
  PRIMUS_CHECK(at == dst.nbytes(), "{}: the parts of {} fill {} of its {} bytes", hf.dir(), e.param, at,
               dst.nbytes());
  return dst;
}

void check_hf_extras(const HfCheckpoint& hf) {
  for (const HfMapEntry& e : hf.name_map().entries()) {
    if (e.kind == HfMapKind::kParam) continue;
    Tensor ref;
    for (const HfPart& p : e.parts) {
      if (!hf.has(p.name)) continue;
      const Tensor t = read_part(hf, p, DType::kF32);
      if (e.kind == HfMapKind::kZero) {
        const float* v = t.data<float>();
        for (int64_t i = 0; i < t.numel(); ++i)
          if (v[i] != 0.0f)
            fail(hf,
                 fmt::format("{} is not zero (element {} = {}); the model has no such tensor (it would be "
                             "dropped)",
                             p.name, i, v[i]));
        continue;
      }
      if (!ref.defined()) ref = hf_param(hf, *hf.name_map().find(e.param), DType::kF32);
      if (t.shape() != ref.shape() || std::memcmp(t.data_ptr(), ref.data_ptr(), t.nbytes()) != 0)
        fail(hf, fmt::format("{} should be a copy of {} (tied or shared) but differs", p.name,
                             hf.name_map().find(e.param)->parts.at(0).name));
    }
  }
}

void load_hf_into_params(const HfCheckpoint& hf, ParamStore& params, const Stream& s) {
  check_hf_names(hf);
  check_hf_extras(hf);
  const HfNameMap& map = hf.name_map();
  std::set<std::string> loaded;
  for (int i = 0; i < static_cast<int>(params.entries().size()); ++i) {
    const ParamEntry& pe = params.entry(i);
    const HfMapEntry* e = map.find(pe.name);
    PRIMUS_CHECK(e, "{}: the model has parameter {}, which a {} checkpoint does not describe", hf.dir(),
                 pe.name, hf.info().model_type);
    Tensor t = hf_param(hf, *e, DType::kF32);
    loaded.insert(pe.name);
    if (t.shape() != pe.shape) {
      const bool pad = t.ndim() == 2 && t.size(1) == pe.shape[1] && t.size(0) < pe.shape[0];
      PRIMUS_CHECK(pad, "{}: {} has shape {}, the model expects {}", hf.dir(), pe.name, shape_str(t.shape()),
                   shape_str(pe.shape));
      Tensor padded = Tensor::zeros(pe.shape, DType::kF32);  // vocabulary padding rows start at zero
      std::memcpy(padded.data_ptr(), t.data_ptr(), t.nbytes());
      t = padded;
    }
    params.set_master(i, t, s);  // with its compute copy (f32 master or remainders)
  }
  for (const std::string& p : map.params())
    PRIMUS_CHECK(loaded.count(p), "{}: the checkpoint's {} has no place in the model's parameters", hf.dir(),
                 p);
  if (!params.frozen()) {  // (a frozen store has no optimizer state)
    params.adam_m_flat().zero_(s);
    params.adam_v_flat().zero_(s);
  }
  stream_sync(s);
}

std::vector<HfOutTensor> hf_export_plan(const HfNameMap& map,
                                        const std::function<Tensor(const std::string&)>& param_f32,
                                        DType dtype) {
  // The parameter whose parts are being written, kept while they are (parts of one entry come in a row).
  struct Current {
    const HfMapEntry* entry = nullptr;
    Tensor t;
  };
  auto cur = std::make_shared<Current>();
  const std::string type = map.model_type();
  auto get = [cur, param_f32, type](const HfMapEntry& e) -> const Tensor& {
    if (cur->entry == &e) return cur->t;
    cur->t = Tensor();  // drop the previous parameter first
    Tensor t = param_f32(e.param);
    PRIMUS_CHECK(t.dtype() == DType::kF32, "{} must be f32", e.param);
    // Vocabulary padding rows are dropped.
    const bool padded = t.ndim() == 2 && e.param_shape.size() == 2 && t.size(1) == e.param_shape[1] &&
                        t.size(0) > e.param_shape[0];
    PRIMUS_CHECK(padded || t.shape() == e.param_shape, "parameter {} has shape {}, a {} model needs {}",
                 e.param, shape_str(t.shape()), type, shape_str(e.param_shape));
    cur->entry = &e;
    cur->t = std::move(t);
    return cur->t;
  };
  std::vector<HfOutTensor> out;
  for (const HfMapEntry& e : map.entries()) {
    if (e.kind == HfMapKind::kAlias && !e.write) continue;
    size_t at = 0;
    for (const HfPart& p : e.parts) {
      const DType dt = p.keep_f32 ? DType::kF32 : dtype;
      if (e.kind == HfMapKind::kZero) {
        out.push_back(
            {p.name, dt, p.shape, [p, dt] { return from_f32(Tensor::zeros(p.shape, DType::kF32), dt); }});
        continue;
      }
      // kAlias: every part is a whole copy; kParam: consecutive slices.
      const size_t offset = e.kind == HfMapKind::kAlias ? 0 : at;
      at += static_cast<size_t>(shape_numel(p.shape)) * sizeof(float);
      out.push_back({p.name, dt, p.shape, [get, &e, p, dt, offset] {
                       const char* base = static_cast<const char*>(get(e).data_ptr()) + offset;
                       Tensor ours = Tensor::empty(p.shape, DType::kF32);
                       const std::vector<int64_t> src = rope_deinterleave_rows(p);
                       const size_t row = ours.nbytes() / static_cast<size_t>(p.shape.at(0));
                       // Our row j came from HF row src[j]: write it back there.
                       for (size_t j = 0; j < src.size(); ++j)
                         std::memcpy(static_cast<char*>(ours.data_ptr()) + static_cast<size_t>(src[j]) * row,
                                     base + j * row, row);
                       return from_f32(ours, dt);
                     }});
    }
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> hf_tensors_from_params(
    const std::map<std::string, Tensor>& params, const HfNameMap& map, DType dtype) {
  auto lookup = [&](const std::string& name) {
    auto it = params.find(name);
    PRIMUS_CHECK(it != params.end(), "the checkpoint has no parameter {} (a {} model needs it)", name,
                 map.model_type());
    return it->second;
  };
  std::vector<std::pair<std::string, Tensor>> out;
  for (const HfOutTensor& t : hf_export_plan(map, lookup, dtype)) out.emplace_back(t.name, t.produce());
  return out;
}

}  // namespace primus::ckpt
