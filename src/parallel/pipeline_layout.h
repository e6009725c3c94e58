#pragma once
// The pipeline split: which modules each pipeline rank holds in each of its virtual chunks: the embedding,
// a run of decoder layers, MTP layers, and the final norm + output layer + loss ("the loss"). Megatron's
// rules (docs/pipeline.md has the worked examples):
//
//   even split      (num_layers [+1 embedding] [+1 loss]) / pp per rank, / vpp per chunk; the embedding and
//                   loss "layers" are then taken back from the first and last model chunk
//   uneven          decoder_first/last_pipeline_num_layers on the first/last rank, the rest evenly
//   Primus manual   decoder_pipeline_manual_split_list: layers per rank (or per rank and chunk)
//   explicit layout pipeline_model_parallel_layout "Et*3|(tt|)*29,m|L" (E embedding, t decoder layer, m MTP
//                   layer, L loss, | next model chunk, x*N and (...)*N repeat, ',' is cosmetic)
//
// Model chunks run in model order: chunk c of rank r is model stage c * pp + r, except in the V shape of the
// ZB-V schedule, where chunk 0 runs ranks 0..pp-1 and chunk 1 comes back from rank pp-1 to 0 (model stage
// 2 * pp - 1 - r), so the loss sits on rank 0.
//
//   PipelineSplitSpec s{.num_layers = 32, .pp = 4, .vpp = 2};
//   PipelineLayout l = make_pipeline_layout(s);   // l.at(1, 0): layers 4..7; l.at(1, 1): layers 20..23
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace primus::parallel {

// Where a model chunk sits: pp ranks x vpp chunks, in model order (see above).
struct PipelineTopology {
  int pp = 1;
  int vpp = 1;
  bool v_shape = false;  // ZB-V: chunk 1 runs from rank pp-1 back to rank 0 (vpp = 2)

  int num_stages() const { return pp * vpp; }
  int stage_of(int rank, int chunk) const;
  std::pair<int, int> rank_chunk_of(int stage) const;  // (rank, chunk)
};

// The modules of one (rank, chunk), in model order: [embedding] decoder layers [MTP layers] [loss].
struct StageModules {
  bool embedding = false;
  int first_layer = 0;  // decoder layers [first_layer, first_layer + num_layers)
  int num_layers = 0;
  int first_mtp = 0;  // MTP layers [first_mtp, first_mtp + num_mtp)
  int num_mtp = 0;
  bool loss = false;  // final norm + output layer + loss

  std::string describe() const;  // "embedding + layers 0-3", "MTP 0 + loss", "(empty)"
};

// The keys that decide the split (Megatron names; null keys are unset optionals), already read from the
// config. Errors cite `origins[key]` ("file:line:col") when present.
struct PipelineSplitSpec {
  int64_t num_layers = 0;      // num_layers
  int64_t mtp_num_layers = 0;  // mtp_num_layers (null = 0)
  int64_t pp = 1;              // pipeline_model_parallel_size
  // virtual_pipeline_model_parallel_size (or num_virtual_stages_per_pipeline_rank): chunks per rank
  std::optional<int64_t> vpp;
  std::optional<int64_t> layers_per_virtual_stage;  // num_layers_per_virtual_pipeline_stage
  std::optional<int64_t> first_stage_layers;        // decoder_first_pipeline_num_layers
  std::optional<int64_t> last_stage_layers;         // decoder_last_pipeline_num_layers
  bool account_for_embedding = false;               // account_for_embedding_in_pipeline_split
  bool account_for_loss = false;                    // account_for_loss_in_pipeline_split
  std::vector<int64_t> manual_split;                // decoder_pipeline_manual_split_list (Primus)
  std::string layout;                               // pipeline_model_parallel_layout ("" = none)
  bool v_shape = false;  // lay chunks out for the V-shape schedule (ZB-V): 2 chunks per rank
  std::map<std::string, std::string> origins;
};

class PipelineLayout {
 public:
  PipelineLayout(PipelineTopology topology, std::vector<std::vector<StageModules>> stages);

  const PipelineTopology& topology() const { return topo_; }
  int pp() const { return topo_.pp; }
  int vpp() const { return topo_.vpp; }
  const StageModules& at(int rank, int chunk) const { return stages_.at(rank).at(chunk); }
  // Decoder + MTP layers of a chunk: what the simulator's default cost model weighs a chunk by.
  int layer_count(int rank, int chunk) const;
  // A table, one line per rank: "rank 0 | chunk 0: embedding + layers 0-3 | chunk 1: layers 16-19", each
  // line starting with `prefix`.
  std::string describe(const std::string& prefix = "") const;

 private:
  PipelineTopology topo_;
  std::vector<std::vector<StageModules>> stages_;  // [rank][chunk]
};

// Computes the split. Throws ConfigError naming the key, its value and what was expected: layers that do
// not divide (without an explicit layout), conflicting keys, a layout string that does not parse or does not
// cover all layers.
PipelineLayout make_pipeline_layout(const PipelineSplitSpec& spec);

// Megatron's layout grammar (pipeline_parallel_layer_layout.py): the expanded model chunks, each a string of
// E / t / m / L in model order. Throws ConfigError naming the position of the problem.
//   "Et*3|(tt|)*2,L"  ->  {"Ettt", "tt", "tt", "L"}
std::vector<std::string> expand_layout_string(const std::string& layout);

}  // namespace primus::parallel
