#include "parallel/pipeline_projection.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "config/plan.h"
#include "core/error.h"

namespace primus::parallel {
namespace {

using config::CheckedKeys;
using config::Value;

// A projection reads the keys with get(), which is not a use of a key (config/key_use.h); training's read
// (training_use) is one: the keys the pipeline runtime honours are declared implemented.
struct Keys {
  const CheckedKeys& k;
  bool use = false;
  const Value* get(const char* name) const { return use ? &k.value(name) : k.get(name); }
};

const Value* key(const Keys& k, const char* name) {
  const Value* v = k.get(name);
  return v != nullptr && !v->is_null() ? v : nullptr;
}

std::optional<int64_t> opt_int(const Keys& k, const char* name) {
  const Value* v = key(k, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_int())
    throw ConfigError(fmt::format("{}: {} must be an integer, got {}", v->origin().str(), name, v->repr()));
  return v->as_int();
}

bool flag(const Keys& k, const char* name) {
  const Value* v = key(k, name);
  return v != nullptr && v->is_bool() && v->as_bool();
}

std::string text(const Keys& k, const char* name) {
  const Value* v = key(k, name);
  if (v == nullptr) return "";
  return v->is_string() ? v->as_string() : v->repr();
}

// "file:line:col" of a value set somewhere, "" for a default.
std::string origin_of(const Keys& k, const char* name) {
  const Value* v = k.k.get(name);
  if (v == nullptr || v->origin().kind == config::Origin::Kind::kDefault) return "";
  return v->origin().str();
}

// Megatron also takes the layout as a list of chunks, each a list of layer-type names.
std::string layout_from_value(const Value& v) {
  if (v.is_string()) return v.as_string();
  if (!v.is_list())
    throw ConfigError(
        fmt::format("{}: pipeline_model_parallel_layout must be a string like \"Et*3|(tt|)*29,m|L\" "
                    "or a list of chunks, got {}",
                    v.origin().str(), v.repr()));
  std::string out;
  for (size_t i = 0; i < v.items().size(); ++i) {
    const Value& chunk = v.items()[i];
    if (i > 0) out += '|';
    if (!chunk.is_list())
      throw ConfigError(
          fmt::format("{}: pipeline_model_parallel_layout chunk {} must be a list of layer types "
                      "(embedding, decoder, mtp, loss), got {}",
                      v.origin().str(), i, chunk.repr()));
    for (const Value& layer : chunk.items()) {
      std::string name = layer.is_string() ? layer.as_string() : layer.repr();
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      if (name == "embedding")
        out += 'E';
      else if (name == "decoder")
        out += 't';
      else if (name == "mtp")
        out += 'm';
      else if (name == "loss")
        out += 'L';
      else
        throw ConfigError(
            fmt::format("{}: pipeline_model_parallel_layout chunk {}: unknown layer type '{}' "
                        "(expected embedding, decoder, mtp or loss)",
                        v.origin().str(), i, name));
    }
  }
  return out;
}

// Projection-only keys (the schedule simulator's costs): never a use by training.
std::vector<double> cost_list(const CheckedKeys& keys, const char* name) {
  const Value* v = key(Keys{keys}, name);
  if (v == nullptr) return {};
  auto number = [&](const Value& x) {
    if (!x.is_number() || x.as_float() <= 0)
      throw ConfigError(
          fmt::format("{}: {} must be a positive number or a list of them (per pipeline rank), "
                      "got {}",
                      v->origin().str(), name, x.repr()));
    return x.as_float();
  };
  std::vector<double> out;
  if (v->is_list())
    for (const Value& x : v->items()) out.push_back(number(x));
  else
    out.push_back(number(*v));
  return out;
}

// How many chunks per rank the config asks for (1 when it asks for none; 0 when its layout does not parse,
// which the split reports in detail later).
int64_t configured_vpp(const PipelineSplitSpec& s) {
  if (!s.layout.empty()) {
    try {
      return static_cast<int64_t>(expand_layout_string(s.layout).size()) / std::max<int64_t>(1, s.pp);
    } catch (const ConfigError&) {
      return 0;
    }
  }
  if (s.vpp) return *s.vpp;
  if (s.layers_per_virtual_stage && *s.layers_per_virtual_stage > 0)
    return s.num_layers / std::max<int64_t>(1, s.pp) / *s.layers_per_virtual_stage;
  return 1;
}

// The schedule a training run with this config would use: Megatron's choice, or Primus's zero-bubble /
// Primus-pipeline patches (zero_bubble.yaml, primus_pipeline.yaml; Primus's runtime.py picks in this order).
void choose_schedule(const Keys& k, PipelinePlanInput& in) {
  const int64_t v = configured_vpp(in.split);
  const bool virtual_stages = v > 1;
  auto set = [&](std::optional<ScheduleKind> s, std::string from) {
    in.configured = s;
    in.configured_from = std::move(from);
  };
  // Every key is read up front, whichever branch decides.
  const bool patch_zb = flag(k, "patch_zero_bubble"), patch_primus = flag(k, "patch_primus_pipeline");
  const int64_t splits = opt_int(k, "num_seq_splits").value_or(1);
  const bool zb = flag(k, "enable_zero_bubble"), zbv = flag(k, "zero_bubble_v_schedule");
  const bool one_f_one_b_v = flag(k, "enable_1f1b_v");
  const std::string mem = text(k, "zero_bubble_v_schedule_mem_setup");
  const std::string pending = text(k, "zero_bubble_max_pending_backward");
  const std::string algo = text(k, "pp_algorithm");
  const std::string named = text(k, "pipeline_schedule");
  if (!named.empty()) {  // Primus-C++'s own key: any generated schedule, by name
    set(schedule_from_name(named), fmt::format("pipeline_schedule {}", named));
    return;
  }
  if (patch_zb) {
    if (splits > 1) {
      set(std::nullopt, "patch_zero_bubble");
      in.notes.push_back(fmt::format(
          "num_seq_splits {} selects Primus's sequence-split 1F1B, which is not generated", splits));
    } else if (one_f_one_b_v) {
      set(std::nullopt, "patch_zero_bubble");
      in.notes.push_back(
          "enable_1f1b_v selects Primus's 1F1B-V schedule, which is not generated; zb-v is the closest");
    } else if (!zb && !zbv) {
      set(virtual_stages ? ScheduleKind::kInterleaved : ScheduleKind::k1F1B,
          "patch_zero_bubble with enable_zero_bubble and zero_bubble_v_schedule false");
    } else if (zbv) {
      set(ScheduleKind::kZBV, "patch_zero_bubble + zero_bubble_v_schedule");
      if (!mem.empty() && mem != "zb")
        in.notes.push_back(
            fmt::format("zero_bubble_v_schedule_mem_setup '{}' selects Primus's memory-saving V "
                        "variant; the projection shows the full ZB-V",
                        mem));
    } else if (virtual_stages) {
      set(std::nullopt, "patch_zero_bubble + enable_zero_bubble");
      in.notes.push_back(
          "Primus refuses virtual stages with enable_zero_bubble unless zero_bubble_v_schedule is "
          "set (\"got virtual pipeline parallel but v_schedule is disabled\")");
    } else {
      set(ScheduleKind::kZBH1, "patch_zero_bubble + enable_zero_bubble");
      if (!pending.empty() && pending != "auto" && pending != std::to_string(in.split.pp))
        in.notes.push_back(
            fmt::format("zero_bubble_max_pending_backward {} lets Primus hold more backwards than "
                        "ZB-H1's pp = {}; the projection shows ZB-H1",
                        pending, in.split.pp));
    }
    return;
  }
  if (patch_primus) {
    const std::string from = fmt::format("patch_primus_pipeline + pp_algorithm {}", algo);
    if (algo == "1f1b") {
      set(ScheduleKind::k1F1B, from);
    } else if (algo == "1f1b-interleaved") {
      set(virtual_stages ? ScheduleKind::kInterleaved : ScheduleKind::k1F1B, from);
    } else if (algo == "zero-bubble" || algo == "zero-bubble-heuristic") {
      set(ScheduleKind::kZBH1, from);
      if (algo == "zero-bubble-heuristic")
        in.notes.push_back(
            "zero-bubble-heuristic searches a schedule under pp_max_mem; the projection shows ZB-H1");
    } else if (algo == "zbv-formatted") {
      set(ScheduleKind::kZBV, from);
    } else {
      set(std::nullopt, from);
      in.notes.push_back(
          fmt::format("pp_algorithm {} is not generated (gpipe, 1f1b, interleaved, zb-h1, zb-v are)", algo));
    }
    return;
  }
  if (in.split.pp == 1)
    set(ScheduleKind::k1F1B,
        "pipeline_model_parallel_size 1: gradient accumulation, every schedule is the same");
  else if (virtual_stages)
    set(ScheduleKind::kInterleaved, "Megatron: virtual pipeline stages select interleaved 1F1B");
  else
    set(ScheduleKind::k1F1B, "Megatron's default");
}

}  // namespace

PipelinePlanInput pipeline_input_from_config(const config::ResolvedConfig& rc, bool training_use) {
  if (rc.info.framework != "megatron")
    throw ConfigError(
        fmt::format("projection pipeline reads Megatron-dialect configs; {} uses framework {}", rc.info.path,
                    rc.info.framework),
        "TorchTitan's pipeline keys (parallelism.pipeline_parallel_*) are not mapped to the projection yet");
  const Keys k{rc.keys, training_use};
  PipelinePlanInput in;
  PipelineSplitSpec& s = in.split;
  s.num_layers = rc.train.model.num_layers;
  s.mtp_num_layers = opt_int(k, "mtp_num_layers").value_or(0);
  s.pp = rc.train.parallel.pipeline_model_parallel_size;
  s.vpp = opt_int(k, "virtual_pipeline_model_parallel_size");
  if (auto alt = opt_int(k, "num_virtual_stages_per_pipeline_rank")) {
    if (s.vpp && *s.vpp != *alt)
      throw ConfigError(
          fmt::format("num_virtual_stages_per_pipeline_rank={} ({}) contradicts "
                      "virtual_pipeline_model_parallel_size={} ({})",
                      *alt, origin_of(k, "num_virtual_stages_per_pipeline_rank"), *s.vpp,
                      origin_of(k, "virtual_pipeline_model_parallel_size")));
    s.vpp = alt;
    s.origins["virtual_pipeline_model_parallel_size"] = origin_of(k, "num_virtual_stages_per_pipeline_rank");
  }
  s.layers_per_virtual_stage = opt_int(k, "num_layers_per_virtual_pipeline_stage");
  s.first_stage_layers = opt_int(k, "decoder_first_pipeline_num_layers");
  s.last_stage_layers = opt_int(k, "decoder_last_pipeline_num_layers");
  s.account_for_embedding = flag(k, "account_for_embedding_in_pipeline_split");
  s.account_for_loss = flag(k, "account_for_loss_in_pipeline_split");
  if (const Value* v = key(k, "decoder_pipeline_manual_split_list")) {
    for (const Value& x : v->items()) {
      if (!x.is_int())
        throw ConfigError(
            fmt::format("{}: decoder_pipeline_manual_split_list must list layer counts (integers), "
                        "got {}",
                        v->origin().str(), v->repr()));
      s.manual_split.push_back(x.as_int());
    }
  }
  if (const Value* v = key(k, "pipeline_model_parallel_layout")) s.layout = layout_from_value(*v);
  for (const char* name : {"num_layers", "mtp_num_layers", "pipeline_model_parallel_size",
                           "virtual_pipeline_model_parallel_size", "num_layers_per_virtual_pipeline_stage",
                           "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
                           "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
                           "decoder_pipeline_manual_split_list", "pipeline_model_parallel_layout"})
    if (!s.origins.count(name)) s.origins[name] = origin_of(k, name);

  // Micro-batches per step and data-parallel rank: the trainer's rule (config/plan.h).
  const config::BatchLayout b = config::batch_layout(rc.train);
  if (!b.fits) throw ConfigError(b.problem(), "the data-parallel size of a projection is --dp (default 1)");
  in.microbatches = b.micro_batches;
  in.microbatches_from = fmt::format("global_batch_size {} / (micro_batch_size {} x data-parallel {})",
                                     rc.train.global_batch_size, rc.train.micro_batch_size, b.data_parallel);
  in.group_size = static_cast<int>(opt_int(k, "microbatch_group_size_per_vp_stage").value_or(0));
  in.cost_f = cost_list(rc.keys, "pp_cost_f");
  in.cost_b = cost_list(rc.keys, "pp_cost_b");
  in.cost_w = cost_list(rc.keys, "pp_cost_w");
  const Value* overlap = rc.keys.get("overlap_p2p_comm");
  in.overlap_p2p_comm = overlap == nullptr || !overlap->is_bool() || overlap->as_bool();
  choose_schedule(k, in);
  return in;
}

namespace {

// The config's split adapted to a schedule that needs another number of chunks per rank.
PipelineSplitSpec spec_for(ScheduleKind kind, const PipelineSplitSpec& config, std::string* note) {
  PipelineSplitSpec s = config;
  const bool virtual_keys = s.vpp.value_or(1) > 1 || s.layers_per_virtual_stage.has_value();
  if (kind == ScheduleKind::kInterleaved && s.layout.empty() && !virtual_keys) {
    s.vpp = 2;
    *note = "2 chunks per rank assumed (the config sets no virtual stages; --vpp sets them)";
  } else if (kind == ScheduleKind::kZBV) {
    s.v_shape = true;
    if (s.layout.empty() && !virtual_keys) *note = "2 chunks per rank in a V";
  } else if (kind != ScheduleKind::kInterleaved && s.layout.empty() && virtual_keys) {
    s.vpp.reset();
    s.layers_per_virtual_stage.reset();
    *note = "1 chunk per rank (the config's virtual stages are for interleaved)";
  }
  return s;
}

PipelineCosts costs_for(const PipelinePlanInput& in, const PipelineLayout& l, double p2p, double emb,
                        double loss) {
  if (in.cost_f.empty() && in.cost_b.empty() && in.cost_w.empty())
    return layout_costs(l, {.p2p = p2p}, emb, loss);
  // Primus's heuristic costs: per rank (or one for all), 1000 when unset; split over a rank's chunks by
  // their layers.
  auto per_rank = [&](const std::vector<double>& v, const char* name, int r) {
    if (v.empty()) return 1000.0;
    if (v.size() != 1 && static_cast<int>(v.size()) != l.pp())
      throw ConfigError(fmt::format("{} lists {} values; expected one, or one per pipeline rank ({})", name,
                                    v.size(), l.pp()));
    return v.size() == 1 ? v[0] : v[r];
  };
  double mean_f = 0;
  for (int r = 0; r < l.pp(); ++r) mean_f += per_rank(in.cost_f, "pp_cost_f", r) / l.pp();
  PipelineCosts c;
  c.p2p = p2p;
  c.chunk.assign(l.pp(), std::vector<ChunkCosts>(l.vpp()));
  for (int r = 0; r < l.pp(); ++r) {
    std::vector<double> w(l.vpp());
    double total = 0;
    for (int ch = 0; ch < l.vpp(); ++ch) {
      w[ch] = l.layer_count(r, ch) + (l.at(r, ch).embedding ? emb : 0) + (l.at(r, ch).loss ? loss : 0);
      total += w[ch];
    }
    for (int ch = 0; ch < l.vpp(); ++ch) {
      const double share = total > 0 ? w[ch] / total : 1.0 / l.vpp();
      ChunkCosts& cc = c.chunk[r][ch];
      cc.f = per_rank(in.cost_f, "pp_cost_f", r) / mean_f * share;
      cc.bi = per_rank(in.cost_b, "pp_cost_b", r) / mean_f * share;
      cc.bw = per_rank(in.cost_w, "pp_cost_w", r) / mean_f * share;
      cc.b = cc.bi + cc.bw;
    }
  }
  return c;
}

}  // namespace

PipelinePlan plan_schedule(ScheduleKind kind, const PipelinePlanInput& in, int64_t microbatches) {
  std::string note;
  const PipelineSplitSpec spec = spec_for(kind, in.split, &note);
  PipelineLayout layout = make_pipeline_layout(spec);
  // A layout string fixes the chunks per rank; say so rather than blame the virtual-stage keys.
  const int want = kind == ScheduleKind::kZBV ? 2 : 1;
  if (!spec.layout.empty() && kind != ScheduleKind::kInterleaved && layout.vpp() != want)
    throw ConfigError(fmt::format("pipeline_model_parallel_layout gives {} chunks per rank; {} runs {}",
                                  layout.vpp(), schedule_name(kind), want));
  Schedule schedule = make_schedule(kind, {.pp = static_cast<int>(in.split.pp),
                                           .vpp = layout.vpp(),
                                           .microbatches = static_cast<int>(microbatches),
                                           .group_size = in.group_size});
  return PipelinePlan{kind, std::move(layout), std::move(schedule), std::move(note)};
}

PipelinePlan training_plan(const PipelinePlanInput& in) {
  if (!in.configured)
    throw ConfigError(fmt::format("not supported yet: the pipeline schedule that {} selects ({})",
                                  in.configured_from, fmt::join(in.notes, "; ")),
                      "gpipe, 1f1b, interleaved, zb-h1 and zb-v are generated: leave the Primus "
                      "pipeline patches off for Megatron's 1F1B / interleaved, or set "
                      "patch_zero_bubble with enable_zero_bubble (zb-h1) or zero_bubble_v_schedule (zb-v)");
  return plan_schedule(*in.configured, in, in.microbatches);
}

PipelineProjection project_pipeline(const PipelinePlanInput& in, const ProjectionOptions& options) {
  PipelineProjection out;
  out.input = in;
  out.p2p = options.p2p;
  out.microbatches = options.microbatches.value_or(in.microbatches);
  if (out.microbatches < 1)
    throw ConfigError(fmt::format("micro-batches {} must be >= 1 ({})", out.microbatches,
                                  options.microbatches ? "--micro-batches" : in.microbatches_from));
  if (options.p2p < 0) throw ConfigError(fmt::format("--p2p-latency {} must be >= 0", options.p2p));
  out.embedding_layers = options.embedding_layers.value_or(in.split.account_for_embedding ? 1 : 0);
  out.loss_layers = options.loss_layers.value_or(in.split.account_for_loss ? 1 : 0);
  if (out.embedding_layers < 0 || out.loss_layers < 0)
    throw ConfigError(fmt::format("--embedding-cost {} and --loss-cost {} must be >= 0", out.embedding_layers,
                                  out.loss_layers));
  const std::vector<ScheduleKind>& kinds = options.schedules.empty() ? all_schedules() : options.schedules;
  for (ScheduleKind kind : kinds) {
    ScheduleProjection sp;
    sp.kind = kind;
    sp.configured = in.configured == kind;
    try {
      PipelinePlan plan = plan_schedule(kind, in, out.microbatches);
      sp.note = plan.note;
      sp.layout = std::move(plan.layout);
      sp.schedule = std::move(plan.schedule);
      sp.costs = costs_for(in, *sp.layout, options.p2p, out.embedding_layers, out.loss_layers);
      sp.costs.overlap = in.overlap_p2p_comm;
      sp.sim = simulate(sp.schedule, sp.costs);
    } catch (const ConfigError& e) {
      // The configured schedule's problem (or the one schedule asked for) is the user's to fix.
      if (sp.configured || kinds.size() == 1) throw;
      sp.skipped = e.what();
      sp.layout.reset();
    }
    out.schedules.push_back(std::move(sp));
  }
  return out;
}

namespace {

double max_of(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

std::string per_rank_list(const std::vector<double>& v, double scale, const char* suffix) {
  std::string s;
  for (double x : v) s += fmt::format("{}{:.3g}{}", s.empty() ? "" : " ", x * scale, suffix);
  return s;
}

}  // namespace

std::string projection_text(const PipelineProjection& p) {
  const PipelinePlanInput& in = p.input;
  std::string out = fmt::format(
      "pipeline: pp {}, {} micro-batches ({}), {} layers{}\n", in.split.pp, p.microbatches,
      p.microbatches == in.microbatches ? in.microbatches_from : "--micro-batches", in.split.num_layers,
      in.split.mtp_num_layers > 0 ? fmt::format(" + {} MTP", in.split.mtp_num_layers) : "");
  out += fmt::format("configured schedule: {} ({})\n",
                     in.configured ? schedule_name(*in.configured) : "none generated", in.configured_from);
  out += fmt::format(
      "cost model: {}; embedding {:g} and loss {:g} layers; p2p latency {:g} F, {}\n",
      in.cost_f.empty() && in.cost_b.empty() && in.cost_w.empty()
          ? "F = one rank's forward of an even split, chunks weighed by their layers, B = 2F, BI = BW = F"
          : "Primus's pp_cost_f / pp_cost_b / pp_cost_w, normalised to a mean F of 1",
      p.embedding_layers, p.loss_layers, p.p2p,
      in.overlap_p2p_comm ? "overlapped (overlap_p2p_comm)" : "blocking sends (overlap_p2p_comm false)");
  for (const std::string& n : in.notes) out += "note: " + n + "\n";
  out += fmt::format("\n{:<14}{:>7}{:>10}{:>12}{:>22}\n", "schedule", "chunks", "bubble", "step (F)",
                     "peak micro-batches");
  for (const ScheduleProjection& s : p.schedules) {
    const std::string name = fmt::format("{}{}", schedule_name(s.kind), s.configured ? " *" : "");
    if (!s.skipped.empty()) {
      out += fmt::format("{:<14}  skipped: {}\n", name, s.skipped);
      continue;
    }
    out += fmt::format("{:<14}{:>7}{:>9.2f}%{:>12.2f}{:>22.2f}\n", name, s.layout->vpp(),
                       100 * s.sim.bubble_fraction, s.sim.step_time, max_of(s.sim.peak_microbatches));
  }
  out +=
      "(* = configured; peak = activations held at once on the busiest rank, in micro-batches of a whole "
      "rank's layers)\n";
  for (const ScheduleProjection& s : p.schedules) {
    if (!s.skipped.empty()) continue;
    out += fmt::format("\n{}{}\n", schedule_name(s.kind), s.note.empty() ? "" : " — " + s.note);
    out += "  idle per rank:  " + per_rank_list(s.sim.bubble, 100, "%") + "\n";
    out += "  peak per rank:  " + per_rank_list(s.sim.peak_microbatches, 1, "") + "\n";
  }
  // The split of the configured schedule (or the first projected one).
  const ScheduleProjection* shown = nullptr;
  for (const ScheduleProjection& s : p.schedules)
    if (s.skipped.empty() && (shown == nullptr || s.configured)) shown = &s;
  if (shown != nullptr) {
    out += fmt::format("\nsplit ({}):\n", schedule_name(shown->kind));
    std::string table = shown->layout->describe();
    for (size_t pos = 0, nl; pos < table.size(); pos = nl + 1) {
      nl = table.find('\n', pos);
      out += "  " + table.substr(pos, nl - pos) + "\n";
    }
  }
  return out;
}

std::string projection_json(const PipelineProjection& p) {
  nlohmann::json j;
  j["pp"] = p.input.split.pp;
  j["num_layers"] = p.input.split.num_layers;
  j["mtp_num_layers"] = p.input.split.mtp_num_layers;
  j["microbatches"] = p.microbatches;
  j["microbatches_from"] =
      p.microbatches == p.input.microbatches ? p.input.microbatches_from : "--micro-batches";
  j["configured"] = p.input.configured ? schedule_name(*p.input.configured) : nullptr;
  j["configured_from"] = p.input.configured_from;
  j["notes"] = p.input.notes;
  j["p2p_latency"] = p.p2p;
  j["overlap_p2p_comm"] = p.input.overlap_p2p_comm;
  j["embedding_layers"] = p.embedding_layers;
  j["loss_layers"] = p.loss_layers;
  j["schedules"] = nlohmann::json::array();
  for (const ScheduleProjection& s : p.schedules) {
    nlohmann::json o;
    o["name"] = schedule_name(s.kind);
    o["configured"] = s.configured;
    if (!s.note.empty()) o["note"] = s.note;
    if (!s.skipped.empty()) {
      o["skipped"] = s.skipped;
      j["schedules"].push_back(o);
      continue;
    }
    o["chunks_per_rank"] = s.layout->vpp();
    o["bubble_fraction"] = s.sim.bubble_fraction;
    o["step_time"] = s.sim.step_time;
    o["bubble_per_rank"] = s.sim.bubble;
    o["peak_in_flight_per_rank"] = s.sim.peak_in_flight;
    o["peak_microbatches_per_rank"] = s.sim.peak_microbatches;
    nlohmann::json split = nlohmann::json::array();
    for (int r = 0; r < s.layout->pp(); ++r) {
      nlohmann::json chunks = nlohmann::json::array();
      for (int c = 0; c < s.layout->vpp(); ++c) chunks.push_back(s.layout->at(r, c).describe());
      split.push_back(chunks);
    }
    o["split"] = split;
    j["schedules"].push_back(o);
  }
  return j.dump(2);
}

}  // namespace primus::parallel
