#include "model/fp8_linear.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "comm/communicator.h"
#include "config/plan.h"
#include "core/cuda_runtime_bridge.h"
#include "core/error.h"
#include "model/fp8_experts.h"
#include "model/model_spec.h"
#include "model/weight_grad.h"
#include "ops/gemm.h"

namespace primus {

using ops::Fp8Format;
using ops::Fp8Granularity;
using ops::Fp8Tensor;

std::optional<Fp8Recipe> Fp8Recipe::from_config(const Fp8Config& c) {
  if (!c.enabled) return std::nullopt;
  Fp8Recipe r;
  if (c.recipe == "delayed")
    r.scaling = Scaling::kDelayed;
  else if (c.recipe == "tensorwise")
    r.scaling = Scaling::kCurrent;
  else if (c.recipe == "rowwise")
    r.scaling = Scaling::kRowwise;
  else if (c.recipe == "blockwise")
    r.scaling = Scaling::kBlockwise;
  else if (c.recipe == "mxfp8")
    throw ConfigError(
        "fp8_recipe: mxfp8 needs the MX (1x32 E8M0-scaled) tensor cores of Blackwell GPUs; Hopper has none",
        "use fp8_recipe: blockwise (1x128 / 128x128 f32 scales, the closest Hopper recipe)");
  else
    throw ConfigError(
        fmt::format("fp8_recipe: '{}' (expected delayed, tensorwise, rowwise or blockwise)", c.recipe));
  if (c.format != "e4m3" && c.format != "hybrid")
    throw ConfigError(fmt::format("fp8: '{}' (expected e4m3 or hybrid)", c.format));
  r.grad = c.format == "hybrid" ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
  r.wgrad_fp8 = c.wgrad;
  r.history_len = c.amax_history_len;
  if (r.history_len < 1)
    throw ConfigError(fmt::format("fp8_amax_history_len: {} (expected >= 1)", c.amax_history_len));
  r.most_recent = c.amax_compute_algo == "most_recent";
  r.margin = c.margin;
  r.bf16_layers_at_start = c.bf16_layers_at_start;
  r.bf16_layers_at_end = c.bf16_layers_at_end;
  r.filter_fqns = c.filter_fqns;
  r.output_layer = c.output_layer;
  return r;
}

std::string Fp8Recipe::describe() const {
  std::string s;
  switch (scaling) {
    case Scaling::kDelayed:
      s = fmt::format("delayed tensorwise (amax history {}, {}, margin {})", history_len,
                      most_recent ? "most recent" : "max", margin);
      break;
    case Scaling::kCurrent:
      s = "current tensorwise";
      break;
    case Scaling::kRowwise:
      s = "rowwise";
      break;
    case Scaling::kBlockwise:
      s = "blockwise (1x128 activations, 128x128 weights)";
      break;
  }
  s += fmt::format(", {} forward / {} gradients", ops::fp8_format_name(fwd), ops::fp8_format_name(grad));
  if (!wgrad_fp8) s += ", BF16 weight gradients";
  if (bf16_layers_at_start + bf16_layers_at_end > 0)
    s += fmt::format(", BF16 layers: first {} and last {}", bf16_layers_at_start, bf16_layers_at_end);
  if (!filter_fqns.empty())
    s += fmt::format(", BF16 where the name contains {}", fmt::join(filter_fqns, "|"));
  if (output_layer && covers(0, 1, "output")) s += ", output layer in FP8";
  return s;
}

std::string Fp8Recipe::id() const {
  static const char* names[] = {"delayed", "tensorwise", "rowwise", "blockwise"};
  return fmt::format("{}-{}{}", names[static_cast<int>(scaling)],
                     grad == Fp8Format::kE5M2 ? "hybrid" : "e4m3", wgrad_fp8 ? "" : "-bf16wgrad");
}

// Tensorwise recipes cast every tensor whole; rowwise by rows; blockwise activations and gradients by 1x128
// tiles and weights by 128x128 blocks (DeepSeek-V3's).
static Fp8Granularity granularity(Fp8Recipe::Scaling s, bool weight) {
  switch (s) {
    case Fp8Recipe::Scaling::kRowwise:
      return Fp8Granularity::kRowwise;
    case Fp8Recipe::Scaling::kBlockwise:
      return weight ? Fp8Granularity::kBlock128x128 : Fp8Granularity::kBlock1x128;
    default:
      return Fp8Granularity::kTensorwise;
  }
}

Fp8Granularity Fp8Recipe::activation_granularity() const {
  return granularity(scaling, false);
}
Fp8Granularity Fp8Recipe::weight_granularity() const {
  return granularity(scaling, true);
}

bool Fp8Recipe::covers(int64_t layer, int64_t layers, const std::string& name) const {
  if (layer < bf16_layers_at_start || layer >= layers - bf16_layers_at_end) return false;
  for (const std::string& f : filter_fqns)
    if (!f.empty() && name.find(f) != std::string::npos) return false;
  return true;
}

std::vector<Fp8Projection> fp8_projections(const ModelSpec& s, int64_t layer) {
  std::vector<Fp8Projection> p;
  if (!s.mla.enabled && !s.qkv_bias) p.push_back({"self_attn.qkv_proj", s.qkv_dim(), s.hidden});
  if (!s.mla.enabled) p.push_back({"self_attn.o_proj", s.hidden, s.q_dim()});
  if (!s.is_moe_layer(layer)) {
    p.push_back({"mlp.gate_up_proj", 2 * s.ffn, s.hidden});
    p.push_back({"mlp.down_proj", s.hidden, s.ffn});
    return p;
  }
  const int64_t F = s.moe.ffn_hidden_size, Fs = s.moe.shared_ffn_hidden_size, k = s.moe.topk;
  p.push_back({"mlp.experts.gate_up_proj", 2 * F, s.hidden, k, /*routed=*/true});
  p.push_back({"mlp.experts.down_proj", s.hidden, F, k, /*routed=*/true});
  if (Fs > 0) {
    p.push_back({"mlp.shared_expert.gate_up_proj", 2 * Fs, s.hidden});
    p.push_back({"mlp.shared_expert.down_proj", s.hidden, Fs});
  }
  return p;
}

void check_fp8_runnable(const Fp8Recipe& r, const TrainConfig& cfg, const Stream& s) {
  const int64_t tp = cfg.parallel.tensor_model_parallel_size;
  const int64_t tokens =
      cfg.micro_batch_size * cfg.data.seq_length / std::max<int64_t>(1, cfg.parallel.context_parallel_size);
  if (s.device.is_cuda()) {
    const int cc = cuda_bridge::compute_capability(s.device.index);
    if (cc < 89)
      throw ConfigError(
          fmt::format("fp8: this GPU (compute capability {}.{}) has no FP8 tensor cores", cc / 10, cc % 10),
          "FP8 training needs Hopper (9.0) or newer; drop fp8 (or run on the CPU, which "
          "emulates it)");
    if (cc < 90 && r.scaling != Fp8Recipe::Scaling::kDelayed && r.scaling != Fp8Recipe::Scaling::kCurrent)
      throw ConfigError(fmt::format("fp8_recipe: {} needs Hopper (compute capability 9.0); this GPU is {}.{}",
                                    r.scaling == Fp8Recipe::Scaling::kRowwise ? "rowwise" : "blockwise",
                                    cc / 10, cc % 10));
  }
  ModelSpec spec = ModelSpec::from_config(cfg.model);
  if (tp > 1) spec = spec.with_tensor_shard(static_cast<int>(tp), 0, false);
  const int64_t k_mult = r.dim_multiple();
  auto need = [&](int64_t v, int64_t mult, const std::string& what, const char* key) {
    if (v % mult != 0)
      throw ConfigError(
          fmt::format("fp8 ({}): {} = {} is not a multiple of {}, which the FP8 GEMM needs ({})", r.id(),
                      what, v, mult, key),
          "pick sizes that divide, keep those layers in BF16 (first_last_layers_bf16 / "
          "filter_fqns), or drop fp8");
  };
  // Every GEMM's K is a multiple of k_mult and its M and N of 16; the token count is M of the forward and
  // dgrad and K of the weight gradient.
  need(tokens, k_mult, "tokens per micro-batch (micro_batch_size x seq_length / cp)",
       "micro_batch_size, seq_length");
  if (r.output_layer && r.covers(0, 1, "output")) {
    need(spec.hidden, k_mult, "output layer input features (hidden_size)", "hidden_size");
    need(spec.vocab, k_mult, "output layer rows (the padded vocabulary per tp rank)",
         "make_vocab_size_divisible_by");
  }
  for (int64_t l = 0; l < spec.layers; ++l) {
    for (const Fp8Projection& p : fp8_projections(spec, l)) {
      const std::string name = fmt::format("layers.{}.{}", l, p.name);
      if (!r.covers(l, spec.layers, name)) continue;
      need(p.in, k_mult, name + " input features", "hidden_size / ffn_hidden_size / heads x kv_channels");
      need(p.out, k_mult, name + " output features", "hidden_size / ffn_hidden_size / heads x kv_channels");
    }
  }
}

double fp8_gemm_flop_share(const Fp8Recipe& r, const TrainConfig& cfg) {
  const ModelConfig& m = cfg.model;
  const int64_t tokens =
      cfg.micro_batch_size * cfg.data.seq_length / std::max<int64_t>(1, cfg.parallel.context_parallel_size);
  // Every GEMM runs 6 FLOPs per token per weight (forward, dgrad, wgrad): the share is one of weights, those
  // a token passes through (config::count_parameters: routed experts it is not sent to excluded), plus a tied
  // output layer, which N' leaves out but which is a GEMM all the same.
  const config::ParamCounts c = config::count_parameters(m);
  const double all = static_cast<double>(c.active_non_embedding + (c.lm_head == 0 ? c.embedding : 0));
  const ModelSpec spec = ModelSpec::from_config(m);
  // The weight gradient's third is BF16 when wgrad_fp8 is off, and for the routed experts.
  auto part = [&](bool routed) { return r.wgrad_fp8 && !routed ? 1.0 : 2.0 / 3.0; };
  double fp8 = 0;
  for (int64_t l = 0; l < spec.layers; ++l)
    for (const Fp8Projection& p : fp8_projections(spec, l))
      if (r.covers(l, spec.layers, fmt::format("layers.{}.{}", l, p.name)) &&
          (!p.routed || fp8_experts_worthwhile(tokens * spec.moe.topk, spec.moe.num_experts)))
        fp8 += part(p.routed) * static_cast<double>(p.out * p.in * p.per_token);
  if (r.output_layer && r.covers(0, 1, "output"))
    fp8 += part(false) * static_cast<double>(spec.hidden * spec.vocab);
  return all > 0 ? fp8 / all : 0.0;
}

// ---- Fp8State -------------------------------------------------------------------------------------------

Fp8State::Fp8State(const Fp8Recipe& recipe, const Stream& s) : recipe_(recipe), stream_(s) {}

int Fp8State::add(const std::string& name) {
  PRIMUS_CHECK(!allocated_, "Fp8State::add({}) after the first use", name);
  names_.push_back(name);
  return static_cast<int>(names_.size()) - 1;
}

void Fp8State::allocate() {
  if (allocated_) return;
  allocated_ = true;
  if (recipe_.scaling != Fp8Recipe::Scaling::kDelayed || names_.empty()) return;
  const int64_t n = static_cast<int64_t>(names_.size()) * kRoles;
  amax_ = Tensor::zeros({n}, DType::kF32, stream_);
  scale_host_.assign(static_cast<size_t>(n), 1.0f);
  scale_ = Tensor::from_vector(scale_host_, {n}).to(stream_);
  history_.assign(static_cast<size_t>(n * recipe_.history_len), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    scale_views_.push_back(scale_.slice(i, i + 1));
    amax_views_.push_back(amax_.slice(i, i + 1));
  }
}

const Tensor* Fp8State::scale(int slot, Role role) {
  allocate();
  if (recipe_.scaling != Fp8Recipe::Scaling::kDelayed || steps_ == 0) return nullptr;
  return &scale_views_[static_cast<size_t>(slot * kRoles + role)];
}

Tensor* Fp8State::amax_out(int slot, Role role) {
  allocate();
  if (recipe_.scaling != Fp8Recipe::Scaling::kDelayed) return nullptr;
  return &amax_views_[static_cast<size_t>(slot * kRoles + role)];
}

void Fp8State::end_step(const std::vector<comm::Communicator*>& groups) {
  allocate();
  if (recipe_.scaling != Fp8Recipe::Scaling::kDelayed || names_.empty()) return;
  // Replicas and shards of a projection agree on one scale: the max over the groups that hold them.
  for (comm::Communicator* g : groups)
    if (g != nullptr && g->size() > 1) g->all_reduce(amax_, comm::ReduceOp::kMax, stream_, "fp8 amax");
  const std::vector<float> now = amax_.to_vector<float>();
  amax_.zero_(stream_);
  const int64_t len = recipe_.history_len, n = static_cast<int64_t>(now.size());
  const int64_t at = steps_ % len;
  ++steps_;
  const int64_t filled = std::min(steps_, len);
  const float fmax[kRoles] = {ops::fp8_max(recipe_.fwd), ops::fp8_max(recipe_.fwd),
                              ops::fp8_max(recipe_.grad)};
  for (int64_t i = 0; i < n; ++i) {
    float* h = history_.data() + i * len;
    h[at] = now[static_cast<size_t>(i)];
    float a = h[at];
    if (!recipe_.most_recent)
      for (int64_t j = 0; j < filled; ++j) a = std::isnan(h[j]) || std::isnan(a) ? NAN : std::max(a, h[j]);
    // A zero or non-finite amax (an unused tensor, or a step the guards will skip) leaves the scale alone.
    if (std::isfinite(a) && a > 0.0f)
      scale_host_[static_cast<size_t>(i)] =
          fmax[i % kRoles] / a / std::ldexp(1.0f, static_cast<int>(recipe_.margin));
  }
  Tensor host = Tensor::from_vector(scale_host_, {n});
  scale_.copy_from(host, stream_);
}

Fp8State::Saved Fp8State::save() const {
  Saved s;
  s.recipe = recipe_.id();
  s.history_len = recipe_.history_len;
  s.steps = steps_;
  s.names = names_;
  s.history = history_;
  s.scale = scale_host_;
  return s;
}

void Fp8State::load(const Saved& s, const std::string& what) {
  allocate();
  if (s.recipe != recipe_.id())
    throw Error(ErrorKind::kConfig,
                fmt::format("{}: the checkpoint was trained with FP8 recipe {}, this run uses {}", what,
                            s.recipe, recipe_.id()),
                {}, "resume with the same fp8 / fp8_recipe settings (or load with finetune: true)");
  if (recipe_.scaling != Fp8Recipe::Scaling::kDelayed) return;
  const size_t roles = kRoles, len = static_cast<size_t>(recipe_.history_len);
  const bool shaped = s.history.size() == s.names.size() * roles * static_cast<size_t>(s.history_len) &&
                      s.scale.size() == s.names.size() * roles;
  std::vector<size_t> at;  // per own slot: its index in s
  std::string missing;
  if (shaped && s.history_len == recipe_.history_len)
    for (const std::string& n : names_) {
      const auto it = std::find(s.names.begin(), s.names.end(), n);
      if (it == s.names.end()) {
        missing = n;
        break;
      }
      at.push_back(static_cast<size_t>(it - s.names.begin()));
    }
  if (at.size() != names_.size())
    throw Error(
        ErrorKind::kConfig,
        fmt::format("{}: FP8 scaling state for {} projections (history {}) does not match this model's "
                    "{} (history {}){}",
                    what, s.names.size(), s.history_len, names_.size(), recipe_.history_len,
                    missing.empty() ? "" : fmt::format(": it has no {}", missing)));
  steps_ = s.steps;
  for (size_t i = 0; i < at.size(); ++i) {
    std::copy_n(s.history.begin() + static_cast<std::ptrdiff_t>(at[i] * roles * len), roles * len,
                history_.begin() + static_cast<std::ptrdiff_t>(i * roles * len));
    std::copy_n(s.scale.begin() + static_cast<std::ptrdiff_t>(at[i] * roles), roles,
                scale_host_.begin() + static_cast<std::ptrdiff_t>(i * roles));
  }
  scale_.copy_from(Tensor::from_vector(scale_host_, {static_cast<int64_t>(scale_host_.size())}), stream_);
}

Fp8State::Saved merge_fp8_saved(const std::vector<Fp8State::Saved>& stages) {
  PRIMUS_CHECK(!stages.empty(), "merge_fp8_saved: no stages");
  Fp8State::Saved out = stages.front();
  for (size_t i = 1; i < stages.size(); ++i) {
    const Fp8State::Saved& st = stages[i];
    if (st.recipe != out.recipe || st.history_len != out.history_len || st.steps != out.steps)
      throw Error(
          ErrorKind::kRuntime,
          fmt::format("FP8 scaling state: pipeline stage {} has recipe {}, history {}, {} steps; stage 0 "
                      "has {}, {}, {}",
                      i, st.recipe, st.history_len, st.steps, out.recipe, out.history_len, out.steps));
    for (const std::string& n : st.names)
      PRIMUS_CHECK(std::find(out.names.begin(), out.names.end(), n) == out.names.end(),
                   "FP8 scaling state: projection {} is on two pipeline stages", n);
    out.names.insert(out.names.end(), st.names.begin(), st.names.end());
    out.history.insert(out.history.end(), st.history.begin(), st.history.end());
    out.scale.insert(out.scale.end(), st.scale.begin(), st.scale.end());
  }
  return out;
}

namespace {

// A Saved as 32-bit words for a collective: recipe, names (length-prefixed bytes), history_len, steps, then
// the floats' bits.
void put_text(std::vector<int32_t>& w, const std::string& t) {
  w.push_back(static_cast<int32_t>(t.size()));
  const size_t at = w.size();
  w.resize(at + (t.size() + 3) / 4, 0);
  if (!t.empty()) std::memcpy(w.data() + at, t.data(), t.size());
}
std::string get_text(const std::vector<int32_t>& w, size_t& i) {
  const size_t n = static_cast<size_t>(w.at(i++));
  std::string t(n, '\0');
  if (n > 0) std::memcpy(t.data(), w.data() + i, n);
  i += (n + 3) / 4;
  return t;
}
void put_floats(std::vector<int32_t>& w, const std::vector<float>& f) {
  w.push_back(static_cast<int32_t>(f.size()));
  const size_t at = w.size();
  w.resize(at + f.size());
  if (!f.empty()) std::memcpy(w.data() + at, f.data(), f.size() * 4);
}
std::vector<float> get_floats(const std::vector<int32_t>& w, size_t& i) {
  const size_t n = static_cast<size_t>(w.at(i++));
  std::vector<float> f(n);
  if (n > 0) std::memcpy(f.data(), w.data() + i, n * 4);
  i += n;
  return f;
}

std::vector<int32_t> pack(const Fp8State::Saved& s) {
  std::vector<int32_t> w;
  put_text(w, s.recipe);
  w.push_back(static_cast<int32_t>(s.history_len));
  w.push_back(static_cast<int32_t>(s.steps & 0xffffffff));
  w.push_back(static_cast<int32_t>(s.steps >> 32));
  w.push_back(static_cast<int32_t>(s.names.size()));
  for (const std::string& n : s.names) put_text(w, n);
  put_floats(w, s.history);
  put_floats(w, s.scale);
  return w;
}

Fp8State::Saved unpack(const std::vector<int32_t>& w) {
  Fp8State::Saved s;
  size_t i = 0;
  s.recipe = get_text(w, i);
  s.history_len = w.at(i++);
  const uint32_t lo = static_cast<uint32_t>(w.at(i++));
  s.steps = static_cast<int64_t>((static_cast<uint64_t>(static_cast<uint32_t>(w.at(i++))) << 32) | lo);
  const size_t names = static_cast<size_t>(w.at(i++));
  for (size_t k = 0; k < names; ++k) s.names.push_back(get_text(w, i));
  s.history = get_floats(w, i);
  s.scale = get_floats(w, i);
  return s;
}

}  // namespace

Fp8State::Saved gather_fp8_saved(const Fp8State::Saved& mine, comm::Communicator& pp, const Stream& s) {
  const int n = pp.size();
  if (n <= 1) return mine;
  const bool gpu = pp.device_type() == DeviceType::kCUDA;
  const Stream gs = gpu ? s : Stream::cpu();
  auto on_group = [&](Tensor t) { return gpu ? t.to(s) : t; };
  std::vector<int32_t> words = pack(mine);
  Tensor len = on_group(Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(words.size())}, {1}));
  Tensor lens = Tensor::zeros({n}, DType::kI64, gs);
  pp.all_gather(len, lens, gs, "fp8 scaling state: sizes");
  const std::vector<int64_t> sizes = lens.to_vector<int64_t>();
  const int64_t width = *std::max_element(sizes.begin(), sizes.end());
  words.resize(static_cast<size_t>(width), 0);
  Tensor all = Tensor::zeros({n * width}, DType::kI32, gs);
  pp.all_gather(on_group(Tensor::from_vector(words, {width})), all, gs, "fp8 scaling state");
  const std::vector<int32_t> got = all.to_vector<int32_t>();
  std::vector<Fp8State::Saved> stages;
  for (int r = 0; r < n; ++r) {
    const auto b = got.begin() + static_cast<std::ptrdiff_t>(r) * width;
    stages.push_back(unpack(std::vector<int32_t>(b, b + sizes[static_cast<size_t>(r)])));
  }
  return merge_fp8_saved(stages);
}

// ---- the projections ------------------------------------------------------------------------------------

Fp8Tensor fp8_cast(const Tensor& x, Fp8Format f, Fp8Granularity g, bool transposed, const Tensor* scale,
                   Tensor* amax, const Stream& s, const char* what) {
  const int64_t r = x.size(0), c = x.size(1);
  Fp8Tensor out = transposed ? Fp8Tensor::empty(c, r, f, g, s) : Fp8Tensor::empty(r, c, f, g, s);
  ops::QuantizeArgs args;
  args.scale = scale;
  args.amax_out = amax;
  ops::quantize(x, transposed ? nullptr : &out, transposed ? &out : nullptr, args, s, what);
  return out;
}

void project(const StepContext& ctx, int slot, const Tensor& x, const Tensor& w, const Tensor* bias,
             Tensor& y, const Tensor* residual) {
  if (ctx.fp8 == nullptr || slot < 0) {
    ops::linear_forward(x, w, bias, y, ctx.stream, residual);
    return;
  }
  PRIMUS_CHECK(bias == nullptr, "FP8 projection {} with a bias (biased projections stay BF16)",
               ctx.fp8->names()[static_cast<size_t>(slot)]);
  Fp8State& st = *ctx.fp8;
  const Fp8Recipe& r = st.recipe();
  const Stream& s = ctx.stream;
  const Fp8Tensor xq = fp8_cast(x, r.fwd, r.activation_granularity(), false, st.scale(slot, Fp8State::kX),
                                st.amax_out(slot, Fp8State::kX), s, "fp8 projection input");
  const Fp8Tensor wq = fp8_cast(w, r.fwd, r.weight_granularity(), false, st.scale(slot, Fp8State::kW),
                                st.amax_out(slot, Fp8State::kW), s, "fp8 projection weight");
  // Transformer Engine's choice: Hopper's fast FP8 accumulation in the forward, the exact one for gradients.
  ops::fp8_gemm(xq, wq, y, 1.0f, residual ? 1.0f : 0.0f, /*fast_accum=*/true, s, residual);
}

void project_backward(const StepContext& ctx, int slot, const Tensor& dy, const Tensor& x, const Tensor& w,
                      Tensor& dx, bool accumulate_dx, Tensor g, Tensor g_bias, bool accumulate_w,
                      const Tensor& residual_grad) {
  const Stream& s = ctx.stream;
  if (ctx.fp8 == nullptr || slot < 0) {
    ops::linear_backward_input(dy, w, dx, accumulate_dx, s);
    weight_grad(ctx, dy, x, std::move(g), std::move(g_bias), accumulate_w, residual_grad);
    return;
  }
  Fp8State& st = *ctx.fp8;
  const Fp8Recipe& r = st.recipe();
  const int64_t n = dy.size(0), out = dy.size(1);
  // dy once, for both GEMMs: grouped along its features (dgrad's K) and, transposed, along the tokens
  // (wgrad's K).
  // A frozen weight (LoRA's base model: g undefined) takes no weight gradient, so dy is not cast for one.
  const bool wgrad = g.defined();
  Fp8Tensor dyq = Fp8Tensor::empty(n, out, r.grad, r.activation_granularity(), s);
  Fp8Tensor dyt;
  if (r.wgrad_fp8 && wgrad) dyt = Fp8Tensor::empty(out, n, r.grad, r.activation_granularity(), s);
  ops::QuantizeArgs args;
  args.scale = st.scale(slot, Fp8State::kDy);
  args.amax_out = st.amax_out(slot, Fp8State::kDy);
  ops::quantize(dy, &dyq, r.wgrad_fp8 && wgrad ? &dyt : nullptr, args, s, "fp8 projection output gradient");
  // The forward recorded the amaxes of x and W; their scales do not change within a step.
  const Fp8Tensor wt = fp8_cast(w, r.fwd, r.weight_granularity(), true, st.scale(slot, Fp8State::kW), nullptr,
                                s, "fp8 projection weight (transposed)");
  ops::fp8_gemm(dyq, wt, dx, 1.0f, accumulate_dx ? 1.0f : 0.0f, /*fast_accum=*/false, s);
  if (!wgrad) return;
  if (!r.wgrad_fp8) {
    weight_grad(ctx, dy, x, std::move(g), std::move(g_bias), accumulate_w, residual_grad);
    return;
  }
  Fp8Tensor xt = fp8_cast(x, r.fwd, r.activation_granularity(), true, st.scale(slot, Fp8State::kX), nullptr,
                          s, "fp8 projection input (transposed)");
  auto run = [s, accumulate_w, dyt = std::move(dyt), xt = std::move(xt), g = std::move(g)]() mutable {
    ops::fp8_gemm(dyt, xt, g, 1.0f, accumulate_w ? 1.0f : 0.0f, /*fast_accum=*/false, s);
  };
  if (ctx.deferred_wgrad)
    ctx.deferred_wgrad->push_back(std::move(run));  // the FP8 casts are copies: nothing to protect
  else
    run();
}

}  // namespace primus
