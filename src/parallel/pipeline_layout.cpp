#include "parallel/pipeline_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace primus::parallel {

int PipelineTopology::stage_of(int rank, int chunk) const {
  PRIMUS_CHECK(rank >= 0 && rank < pp && chunk >= 0 && chunk < vpp, "rank {} chunk {} outside pp {} x vpp {}",
               rank, chunk, pp, vpp);
  if (v_shape) return chunk == 0 ? rank : 2 * pp - 1 - rank;
  return chunk * pp + rank;
}

std::pair<int, int> PipelineTopology::rank_chunk_of(int stage) const {
  PRIMUS_CHECK(stage >= 0 && stage < num_stages(), "model stage {} outside 0..{}", stage, num_stages() - 1);
  if (v_shape) return stage < pp ? std::pair{stage, 0} : std::pair{2 * pp - 1 - stage, 1};
  return {stage % pp, stage / pp};
}

namespace {

std::string range_text(const char* what, int first, int n) {
  return n == 1 ? fmt::format("{} {}", what, first) : fmt::format("{}s {}-{}", what, first, first + n - 1);
}

}  // namespace

std::string StageModules::describe() const {
  std::vector<std::string> parts;
  if (embedding) parts.push_back("embedding");
  if (num_layers > 0) parts.push_back(range_text("layer", first_layer, num_layers));
  if (num_mtp > 0) parts.push_back(range_text("MTP layer", first_mtp, num_mtp));
  if (loss) parts.push_back("loss");
  if (parts.empty()) return "(empty)";
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) out += " + " + parts[i];
  return out;
}

PipelineLayout::PipelineLayout(PipelineTopology topology, std::vector<std::vector<StageModules>> stages)
    : topo_(topology), stages_(std::move(stages)) {
  PRIMUS_CHECK(static_cast<int>(stages_.size()) == topo_.pp, "layout has {} ranks, topology {}",
               stages_.size(), topo_.pp);
  for (const auto& r : stages_)
    PRIMUS_CHECK(static_cast<int>(r.size()) == topo_.vpp, "layout rank has {} chunks, topology {}", r.size(),
                 topo_.vpp);
}

int PipelineLayout::layer_count(int rank, int chunk) const {
  const StageModules& s = at(rank, chunk);
  return s.num_layers + s.num_mtp;
}

std::string PipelineLayout::describe(const std::string& prefix) const {
  std::string out;
  for (int r = 0; r < pp(); ++r) {
    out += fmt::format("{}rank {}", prefix, r);
    for (int c = 0; c < vpp(); ++c) {
      if (vpp() > 1) out += fmt::format(" | chunk {}", c);
      out += ": " + at(r, c).describe();
    }
    out += "\n";
  }
  return out;
}

namespace {

constexpr const char* kLayoutKey = "pipeline_model_parallel_layout";
constexpr const char* kLayoutGrammar =
    "expected E (embedding), t (decoder layer), m (MTP layer), L (loss), | (next model chunk), x*N or "
    "(...)*N (repeat N times), ',' (cosmetic)";

// "key=value (file:line:col)".
template <typename T>
std::string cite(const PipelineSplitSpec& s, const std::string& key, const T& value) {
  auto it = s.origins.find(key);
  if (it == s.origins.end() || it->second.empty()) return fmt::format("{}={}", key, value);
  return fmt::format("{}={} ({})", key, value, it->second);
}

[[noreturn]] void layout_error(const std::string& layout, const std::string& origin, size_t pos,
                               const std::string& what) {
  throw ConfigError(fmt::format("{} \"{}\"{}: {} at position {}; {}", kLayoutKey, layout,
                                origin.empty() ? "" : " (" + origin + ")", what, pos, kLayoutGrammar));
}

// Reads "*N" at `i` if present (N >= 0); returns 1 when there is no '*'.
int64_t read_repeat(const std::string& s, size_t& i, const std::string& origin) {
  if (i >= s.size() || s[i] != '*') return 1;
  const size_t star = i++;
  const size_t digits = i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  if (i == digits) layout_error(s, origin, star, "'*' is not followed by a repeat count");
  if (i - digits > 6) layout_error(s, origin, digits, "repeat count too large");
  return std::stoll(s.substr(digits, i - digits));
}

bool is_layout_char(char c) {
  return c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|';
}

std::vector<std::string> expand_layout(const std::string& layout, const std::string& origin) {
  // Megatron drops every ',' first, then expands "(...)*N" (one level: its regex matches no nested
  // parentheses, and we refuse them so that a layout that works here works in Megatron too), then "x*N".
  std::string s;
  for (char c : layout)
    if (c != ',') s += c;
  if (s.empty()) layout_error(layout, origin, 0, "empty layout");
  std::string flat;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '(') {
      const size_t open = i++;
      std::string group;
      while (i < s.size() && s[i] != ')') {
        if (s[i] == '(') layout_error(s, origin, i, "nested parentheses (Megatron expands one level)");
        if (!is_layout_char(s[i])) layout_error(s, origin, i, fmt::format("unknown layer '{}'", s[i]));
        const char x = s[i++];
        const int64_t n = read_repeat(s, i, origin);
        group.append(static_cast<size_t>(n), x);
      }
      if (i >= s.size()) layout_error(s, origin, open, "'(' is not closed");
      ++i;  // ')'
      if (group.empty()) layout_error(s, origin, open, "empty group '()'");
      if (i >= s.size() || s[i] != '*') layout_error(s, origin, open, "a group (...) must be followed by *N");
      const int64_t n = read_repeat(s, i, origin);
      for (int64_t k = 0; k < n; ++k) flat += group;
    } else if (c == ')') {
      layout_error(s, origin, i, "')' without '('");
    } else if (c == '*') {
      layout_error(s, origin, i, "'*' repeats nothing");
    } else {
      if (!is_layout_char(c)) layout_error(s, origin, i, fmt::format("unknown layer '{}'", c));
      ++i;
      const int64_t n = read_repeat(s, i, origin);
      flat.append(static_cast<size_t>(n), c);
    }
    if (flat.size() > 100000) layout_error(s, origin, i, "layout expands to more than 100000 entries");
  }
  std::vector<std::string> stages(1);
  for (char c : flat) {
    if (c == '|')
      stages.emplace_back();
    else
      stages.back() += c;
  }
  return stages;
}

// The layout path: the string places every module itself.
std::vector<std::vector<StageModules>> split_from_layout(const PipelineSplitSpec& s, PipelineTopology& topo) {
  const std::string origin = s.origins.count(kLayoutKey) ? s.origins.at(kLayoutKey) : "";
  const std::string what = cite(s, kLayoutKey, fmt::format("\"{}\"", s.layout));
  struct Conflict {
    const char* key;
    bool set;
  };
  for (Conflict k :
       {Conflict{"num_layers_per_virtual_pipeline_stage", s.layers_per_virtual_stage.has_value()},
        Conflict{"decoder_first_pipeline_num_layers", s.first_stage_layers.has_value()},
        Conflict{"decoder_last_pipeline_num_layers", s.last_stage_layers.has_value()},
        Conflict{"account_for_embedding_in_pipeline_split", s.account_for_embedding},
        Conflict{"account_for_loss_in_pipeline_split", s.account_for_loss},
        Conflict{"decoder_pipeline_manual_split_list", !s.manual_split.empty()}})
    if (k.set)
      throw ConfigError(
          fmt::format("{} cannot be combined with {}: the layout places every layer itself", k.key, what),
          "leave the other split keys null when a layout is given");
  const std::vector<std::string> stages = expand_layout(s.layout, origin);
  const int64_t n = static_cast<int64_t>(stages.size());
  if (n % s.pp != 0)
    throw ConfigError(fmt::format(
        "{} has {} model chunks ('|'-separated), which is not a multiple of {} (expected pp x vpp chunks)",
        what, n, cite(s, "pipeline_model_parallel_size", s.pp)));
  const int64_t v = n / s.pp;
  if (s.vpp && *s.vpp != v)
    throw ConfigError(fmt::format("{} gives {} chunks per rank ({} chunks / pp {}), but {}", what, v, n, s.pp,
                                  cite(s, "virtual_pipeline_model_parallel_size", *s.vpp)));
  if (s.v_shape && v != 2)
    throw ConfigError(fmt::format(
        "{} gives {} chunks per rank; the V-shape schedule (ZB-V) needs exactly 2 ({} chunks for pp {})",
        what, v, 2 * s.pp, s.pp));
  topo.vpp = static_cast<int>(v);

  std::string flat;
  for (const auto& st : stages) flat += st;
  const auto count = [&](char c) { return std::count(flat.begin(), flat.end(), c); };
  if (count('E') != 1 || flat.front() != 'E')
    throw ConfigError(
        fmt::format("{}: the embedding E must appear exactly once, as the first entry of the "
                    "first chunk (found {} E)",
                    what, count('E')));
  if (count('L') != 1 || flat.back() != 'L')
    throw ConfigError(fmt::format(
        "{}: the loss L must appear exactly once, as the last entry of the last chunk (found {} L)", what,
        count('L')));
  if (count('t') != s.num_layers)
    throw ConfigError(fmt::format("{} places {} decoder layers (t) but {}: the layout must cover every layer",
                                  what, count('t'), cite(s, "num_layers", s.num_layers)));
  if (count('m') != s.mtp_num_layers)
    throw ConfigError(fmt::format("{} places {} MTP layers (m) but {} (rule: the layout's m count == "
                                  "mtp_num_layers, as Megatron's validate_layer_layout asserts)",
                                  what, count('m'), cite(s, "mtp_num_layers", s.mtp_num_layers)),
                      "add the MTP depths to the last stage of the layout (\"...|t*2,m,L\"), or set "
                      "mtp_num_layers to the layout's count");
  if (const size_t first_m = flat.find('m');
      first_m != std::string::npos && flat.find('t', first_m) != flat.npos)
    throw ConfigError(
        fmt::format("{}: a decoder layer (t) follows an MTP layer (m); MTP layers come last", what));

  std::vector<std::vector<StageModules>> out(s.pp, std::vector<StageModules>(v));
  int layer = 0, mtp = 0, mtp_stages = 0;
  for (int st = 0; st < static_cast<int>(n); ++st) {
    auto [r, c] = topo.rank_chunk_of(st);
    StageModules& m = out[r][c];
    m.first_layer = layer;
    m.first_mtp = mtp;
    for (char x : stages[st]) {
      if (x == 'E') m.embedding = true;
      if (x == 't') ++m.num_layers;
      if (x == 'm') ++m.num_mtp;
      if (x == 'L') m.loss = true;
    }
    layer += m.num_layers;
    mtp += m.num_mtp;
    if (m.num_mtp > 0) {
      ++mtp_stages;
      // Megatron builds MTP layers with the rank's last model chunk.
      if (c != v - 1)
        throw ConfigError(
            fmt::format("{}: MTP layers sit in chunk {} of rank {}; they must be in the rank's "
                        "last chunk ({})",
                        what, c, r, v - 1));
    }
  }
  if (mtp_stages > 1)
    throw ConfigError(
        fmt::format("{}: MTP layers are spread over {} chunks; they must all be in one", what, mtp_stages));
  return out;
}

// Decoder layers per (rank, chunk) from the even, uneven or manual rules.
std::vector<std::vector<int64_t>> layer_counts(const PipelineSplitSpec& s, int64_t v) {
  const int64_t pp = s.pp;
  std::vector<std::vector<int64_t>> counts(pp, std::vector<int64_t>(v, 0));
  const PipelineTopology topo{static_cast<int>(pp), static_cast<int>(v), s.v_shape};
  const char* kManual = "decoder_pipeline_manual_split_list";
  if (!s.manual_split.empty()) {
    const std::string list = fmt::format("[{}]", fmt::join(s.manual_split, ", "));
    // Primus's validate_manual_split: the list replaces every other split rule.
    if (s.layers_per_virtual_stage || s.first_stage_layers || s.last_stage_layers ||
        s.account_for_embedding || s.account_for_loss)
      throw ConfigError(
          fmt::format("{} cannot be combined with num_layers_per_virtual_pipeline_stage, "
                      "decoder_first/last_pipeline_num_layers or account_for_*_in_pipeline_split",
                      cite(s, kManual, list)));
    if (pp <= 1)
      throw ConfigError(fmt::format("{} needs {} > 1", cite(s, kManual, list),
                                    cite(s, "pipeline_model_parallel_size", pp)));
    const int64_t want = v > 1 ? pp * v : pp;
    if (static_cast<int64_t>(s.manual_split.size()) != want)
      throw ConfigError(fmt::format("{} has {} entries; expected {} (one per {})", cite(s, kManual, list),
                                    s.manual_split.size(), want, v > 1 ? "rank and chunk" : "rank"));
    for (int64_t x : s.manual_split)
      if (x <= 0)
        throw ConfigError(fmt::format("{}: every entry must be > 0, got {}", cite(s, kManual, list), x));
    const int64_t sum = std::accumulate(s.manual_split.begin(), s.manual_split.end(), int64_t{0});
    if (sum != s.num_layers)
      throw ConfigError(fmt::format("{} sums to {} but {}", cite(s, kManual, list), sum,
                                    cite(s, "num_layers", s.num_layers)));
    // Primus: entry r * vpp + c for rank r, chunk c; with the V shape the list is in model order.
    for (int r = 0; r < pp; ++r)
      for (int c = 0; c < v; ++c) counts[r][c] = s.manual_split[s.v_shape ? topo.stage_of(r, c) : r * v + c];
    return counts;
  }

  std::vector<int64_t> per_rank(pp, 0);
  const int64_t extra = (s.account_for_embedding ? 1 : 0) + (s.account_for_loss ? 1 : 0);
  if (s.first_stage_layers || s.last_stage_layers) {
    if (pp <= 1)
      throw ConfigError(fmt::format("decoder_first/last_pipeline_num_layers need {} > 1",
                                    cite(s, "pipeline_model_parallel_size", pp)));
    int64_t rest = s.num_layers, stages_left = pp;
    if (s.first_stage_layers) {
      rest -= *s.first_stage_layers;
      --stages_left;
    }
    if (s.last_stage_layers) {
      rest -= *s.last_stage_layers;
      --stages_left;
    }
    const std::string given = fmt::format(
        "{}{}{}",
        s.first_stage_layers ? cite(s, "decoder_first_pipeline_num_layers", *s.first_stage_layers) : "",
        s.first_stage_layers && s.last_stage_layers ? ", " : "",
        s.last_stage_layers ? cite(s, "decoder_last_pipeline_num_layers", *s.last_stage_layers) : "");
    if (rest < 0 || (stages_left == 0 && rest != 0))
      throw ConfigError(fmt::format("{} leave {} of {} for the other {} ranks", given, rest,
                                    cite(s, "num_layers", s.num_layers), stages_left));
    if (stages_left > 0 && rest % stages_left != 0)
      throw ConfigError(
          fmt::format("{} leave {} layers of {} for {} middle ranks, which does not divide "
                      "evenly (rule: the remaining layers split evenly over the remaining ranks)",
                      given, rest, cite(s, "num_layers", s.num_layers), stages_left));
    for (int r = 0; r < pp; ++r) per_rank[r] = stages_left > 0 ? rest / stages_left : 0;
    if (s.first_stage_layers) per_rank[0] = *s.first_stage_layers;
    if (s.last_stage_layers) per_rank[pp - 1] = *s.last_stage_layers;
  } else {
    const int64_t total = s.num_layers + extra;
    if (total % pp != 0)
      throw ConfigError(
          fmt::format(
              "{}{} is not divisible by {} (rule: layers % pp == 0 without an explicit split)",
              cite(s, "num_layers", s.num_layers),
              extra > 0 ? fmt::format(" + {} for the embedding/loss (account_for_*_in_pipeline_split)", extra)
                        : "",
              cite(s, "pipeline_model_parallel_size", pp)),
          "set decoder_first_pipeline_num_layers / decoder_last_pipeline_num_layers, "
          "pipeline_model_parallel_layout or decoder_pipeline_manual_split_list");
    for (int r = 0; r < pp; ++r) per_rank[r] = total / pp;
  }
  for (int r = 0; r < pp; ++r) {
    if (per_rank[r] % v != 0)
      throw ConfigError(fmt::format(
          "rank {} holds {} layers, which is not divisible by {} chunks per rank (rule: every rank's layers "
          "split evenly over its virtual chunks; use pipeline_model_parallel_layout for uneven chunks)",
          r, per_rank[r], v));
    for (int c = 0; c < v; ++c) counts[r][c] = per_rank[r] / v;
  }
  // The embedding and the loss count as one layer each in the split; the chunk holding them builds one
  // decoder layer less (Megatron's get_num_layers_to_build).
  auto take_back = [&](int stage, const char* key) {
    auto [r, c] = topo.rank_chunk_of(stage);
    if (--counts[r][c] < 0)
      throw ConfigError(fmt::format("{} takes a layer from rank {} chunk {}, which has none", key, r, c));
  };
  if (s.account_for_embedding) take_back(0, "account_for_embedding_in_pipeline_split");
  if (s.account_for_loss) take_back(topo.num_stages() - 1, "account_for_loss_in_pipeline_split");
  return counts;
}

}  // namespace

std::vector<std::string> expand_layout_string(const std::string& layout) {
  return expand_layout(layout, "");
}

PipelineLayout make_pipeline_layout(const PipelineSplitSpec& s) {
  if (s.num_layers < 1)
    throw ConfigError(fmt::format("{} must be >= 1", cite(s, "num_layers", s.num_layers)));
  if (s.pp < 1)
    throw ConfigError(fmt::format("{} must be >= 1", cite(s, "pipeline_model_parallel_size", s.pp)));
  if (s.mtp_num_layers < 0)
    throw ConfigError(fmt::format("{} must be >= 0", cite(s, "mtp_num_layers", s.mtp_num_layers)));
  if (s.vpp && *s.vpp < 1)
    throw ConfigError(
        fmt::format("{} must be >= 1", cite(s, "virtual_pipeline_model_parallel_size", *s.vpp)));
  struct Bound {
    const char* key;
    std::optional<int64_t> value;
    int64_t min;
  };
  for (const Bound& b : {Bound{"num_layers_per_virtual_pipeline_stage", s.layers_per_virtual_stage, 1},
                         Bound{"decoder_first_pipeline_num_layers", s.first_stage_layers, 0},
                         Bound{"decoder_last_pipeline_num_layers", s.last_stage_layers, 0}})
    if (b.value && *b.value < b.min)
      throw ConfigError(fmt::format("{} must be >= {}", cite(s, b.key, *b.value), b.min));

  PipelineTopology topo{static_cast<int>(s.pp), 1, s.v_shape};
  std::vector<std::vector<StageModules>> stages;
  if (!s.layout.empty()) {
    stages = split_from_layout(s, topo);
    return PipelineLayout(topo, std::move(stages));
  }

  // Chunks per rank: given, or derived from num_layers_per_virtual_pipeline_stage (Megatron arguments.py).
  int64_t v = s.vpp.value_or(1);
  if (s.layers_per_virtual_stage) {
    const std::string lpvs = cite(s, "num_layers_per_virtual_pipeline_stage", *s.layers_per_virtual_stage);
    if (s.first_stage_layers || s.last_stage_layers)
      throw ConfigError(fmt::format("{} cannot be combined with decoder_first/last_pipeline_num_layers "
                                    "(Megatron: no virtual stages with an uneven split)",
                                    lpvs),
                        "use pipeline_model_parallel_layout for an uneven split with virtual stages");
    const int64_t total = s.num_layers + (s.account_for_embedding ? 1 : 0) + (s.account_for_loss ? 1 : 0);
    if (total % s.pp != 0 || (total / s.pp) % *s.layers_per_virtual_stage != 0)
      throw ConfigError(fmt::format(
          "{}: {} layers over {} give {} per rank, which is not a multiple of {} (rule: layers per rank % "
          "layers per virtual stage == 0)",
          lpvs, total, cite(s, "pipeline_model_parallel_size", s.pp),
          total % s.pp == 0 ? fmt::format("{}", total / s.pp) : fmt::format("{:.2f}", double(total) / s.pp),
          *s.layers_per_virtual_stage));
    const int64_t derived = total / s.pp / *s.layers_per_virtual_stage;
    if (s.vpp && *s.vpp != derived)
      throw ConfigError(fmt::format("{} gives {} chunks per rank but {}", lpvs, derived,
                                    cite(s, "virtual_pipeline_model_parallel_size", *s.vpp)));
    v = derived;
  }
  if (s.v_shape) {
    if ((s.vpp || s.layers_per_virtual_stage) && v != 2)
      throw ConfigError(
          fmt::format("the V-shape schedule (ZB-V) runs exactly 2 chunks per rank, but the "
                      "config gives {} (virtual_pipeline_model_parallel_size / "
                      "num_layers_per_virtual_pipeline_stage)",
                      v));
    v = 2;
  }
  topo.vpp = static_cast<int>(v);
  const std::vector<std::vector<int64_t>> counts = layer_counts(s, v);
  stages.assign(s.pp, std::vector<StageModules>(v));
  int layer = 0;
  for (int st = 0; st < topo.num_stages(); ++st) {
    auto [r, c] = topo.rank_chunk_of(st);
    stages[r][c].first_layer = layer;
    stages[r][c].num_layers = static_cast<int>(counts[r][c]);
    layer += stages[r][c].num_layers;
  }
  PRIMUS_CHECK(layer == s.num_layers, "split placed {} of {} layers", layer, s.num_layers);
  auto [r0, c0] = topo.rank_chunk_of(0);
  stages[r0][c0].embedding = true;
  auto [rl, cl] = topo.rank_chunk_of(topo.num_stages() - 1);
  // Without a layout, Megatron builds the MTP block with the output layer on the last model chunk.
  stages[rl][cl].loss = true;
  stages[rl][cl].num_mtp = static_cast<int>(s.mtp_num_layers);
  return PipelineLayout(topo, std::move(stages));
}

}  // namespace primus::parallel
