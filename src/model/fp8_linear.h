#pragma once
// FP8 projections (docs/fp8.md). A projection y = x W^T runs its three GEMMs -- forward, input gradient
// (dgrad) and weight gradient (wgrad) -- on FP8 casts of x, W and dy under the run's recipe:
//
//   forward  y  = x W^T          a = x   [n, in]  grouped along in     b = W    [out, in]
//   dgrad    dx = dy W           a = dy  [n, out] grouped along out    b = W^T  [in, out]
//   wgrad    dW = dy^T x         a = dy^T [out, n] grouped along n     b = x^T  [in, n]
//
// Every operand is stored [outer, K] with K contiguous (Hopper's FP8 GEMM layout), so the transposed operands
// come from quantize()'s transposed output. The master weights, their gradients and the optimizer stay f32
// and the activations BF16: FP8 exists only inside a projection, for the duration of its GEMMs.
//
// Recipes (Fp8Recipe::Scaling):
//   kDelayed    tensorwise; the scale of each tensor comes from the amax history of earlier steps
//   (Transformer
//               Engine's DelayedScaling), so one pass casts; the step's amaxes are recorded as it runs and
//               reduced over the data- / context- / tensor-parallel groups at the step's end. While a tensor
//               has no history (the first step) it is cast with current scaling instead of scale 1, so the
//               first step's small gradients do not underflow.
//   kCurrent    tensorwise with the tensor's own amax (one more pass over it).
//   kRowwise    a scale per row of each operand (torchao's rowwise recipe).
//   kBlockwise  DeepSeek-V3's: 1x128 tiles for activations and gradients, 128x128 blocks for weights.
// The projections of layers named BF16 (first_last_layers_bf16, TorchTitan's filter_fqns) and projections
// with a bias stay BF16; MLA's projections and the MoE router are BF16, the output layer unless the recipe
// names it, and the routed experts' weight gradients (docs/fp8.md lists what is covered).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "model/model_spec.h"
#include "model/step_context.h"
#include "ops/fp8.h"

namespace primus {

namespace comm {
class Communicator;
}

struct Fp8Recipe {
  enum class Scaling : uint8_t { kDelayed, kCurrent, kRowwise, kBlockwise };
  Scaling scaling = Scaling::kDelayed;
  ops::Fp8Format fwd = ops::Fp8Format::kE4M3;   // x and W
  ops::Fp8Format grad = ops::Fp8Format::kE5M2;  // dy
  bool wgrad_fp8 = true;                        // false: the weight-gradient GEMM runs in BF16
  int64_t history_len = 1024;
  bool most_recent = false;  // amax over the history: its newest entry instead of its max
  int64_t margin = 0;
  int64_t bf16_layers_at_start = 0, bf16_layers_at_end = 0;
  std::vector<std::string> filter_fqns;
  bool output_layer = false;  // the output layer too (its slot is named "output", which filter_fqns may name)

  // nullopt when FP8 is off. Throws ConfigError naming the key for a recipe that cannot run.
  static std::optional<Fp8Recipe> from_config(const Fp8Config& c);
  // "delayed tensorwise, e4m3 forward / e5m2 gradients, amax history 1024 (max), margin 0"
  std::string describe() const;
  // Stable short name recorded in checkpoints: "delayed-hybrid", "blockwise-e4m3", ...
  std::string id() const;
  ops::Fp8Granularity activation_granularity() const;  // x, dy and their transposes
  ops::Fp8Granularity weight_granularity() const;      // W and W^T
  // The smallest multiple a GEMM dimension must have: 16, or 128 for blockwise (K of every GEMM).
  int64_t dim_multiple() const { return scaling == Scaling::kBlockwise ? 128 : 16; }
  // Whether the projection `name` of decoder layer `layer` (of `layers`) runs in FP8.
  bool covers(int64_t layer, int64_t layers, const std::string& name) const;
};

// The projections of decoder layer `layer` that may run in FP8, named as their parameters are
// ("self_attn.qkv_proj", "mlp.experts.gate_up_proj", ...), with their out and in features under `spec`'s
// tensor shard. MLA's projections, the MoE router and a biased QKV stay BF16; the recipe's covers() then
// decides per name. The one list the decoder, the MoE layer, the size check and the FLOP share read.
struct Fp8Projection {
  const char* name;
  int64_t out, in;
  // Weight matrices of out x in a token passes through: the router's top-k for the routed experts (their
  // FLOP share), 1 for the rest.
  int64_t per_token = 1;
  // The routed experts (model/fp8_experts.h): their weight gradient stays BF16, and they run FP8 only with
  // enough rows per expert.
  bool routed = false;
};
std::vector<Fp8Projection> fp8_projections(const ModelSpec& spec, int64_t layer);

// Throws ConfigError before any GPU memory is touched when FP8 cannot run on this device for this run: no
// FP8 tensor cores (compute capability below 8.9; the CPU emulates, so it passes), or a projection or token
// dimension (micro_batch_size x seq_length / cp) that is not a multiple of the recipe's dim_multiple (naming
// the layer and the key).
void check_fp8_runnable(const Fp8Recipe& r, const TrainConfig& cfg, const Stream& s);

// The scaling state of every FP8 projection of a model on this rank. Delayed scaling keeps, per projection
// and tensor role (x, W, dy): the amax recorded this step, the amax history and the scale in use, all in
// flat device buffers so that the step's reduction is one collective per group.
class Fp8State {
 public:
  enum Role : int { kX = 0, kW = 1, kDy = 2 };
  static constexpr int kRoles = 3;

  Fp8State(const Fp8Recipe& recipe, const Stream& s);
  const Fp8Recipe& recipe() const { return recipe_; }

  // Registers a projection by its parameter-style name (e.g. "layers.3.self_attn.qkv_proj"); returns its
  // slot. All registrations come before the first use.
  int add(const std::string& name);
  int slots() const { return static_cast<int>(names_.size()); }
  const std::vector<std::string>& names() const { return names_; }

  // Delayed scaling: the scale to cast (slot, role) with ([1] f32 view), or nullptr while it has no history
  // (current scaling then); and the amax accumulator of this step. Other recipes: nullptr for both.
  const Tensor* scale(int slot, Role role);
  Tensor* amax_out(int slot, Role role);

  // The step's end (delayed scaling): the recorded amaxes are reduced (max) over `groups`, pushed into the
  // histories, and the scales recomputed: scale = fp8_max / amax_h / 2^margin with amax_h the history's max
  // (or its newest entry), kept unchanged where amax_h is 0 or not finite. Nothing for other recipes.
  void end_step(const std::vector<comm::Communicator*>& groups);

  // Checkpoint form: per slot name, the history [roles, len] and scale [roles] (delayed scaling), as
  // host vectors in slot order. import checks the names and sizes and throws naming the difference.
  struct Saved {
    std::string recipe;
    int64_t history_len = 0;
    int64_t steps = 0;  // steps recorded (the history's fill)
    std::vector<std::string> names;
    std::vector<float> history;  // [slots, roles, len]
    std::vector<float> scale;    // [slots, roles]
  };
  Saved save() const;
  // Takes this state's projections from `s` by name: `s` may hold more (a checkpoint of a pipeline holds
  // every stage's, merge_fp8_saved), never fewer. Throws naming what differs.
  void load(const Saved& s, const std::string& what);

 private:
  void allocate();
  Fp8Recipe recipe_;
  Stream stream_;
  std::vector<std::string> names_;
  bool allocated_ = false;
  int64_t steps_ = 0;           // steps recorded into the history
  Tensor amax_;                 // [slots, roles] this step's, on the device (the cast kernels record into it)
  Tensor scale_;                // [slots, roles] on the device (the cast kernels read it)
  std::vector<float> history_;  // host [slots, roles, len]: entry steps_ % len is the next to write
  std::vector<float> scale_host_;
  std::vector<Tensor> scale_views_, amax_views_;
};

// One Saved from the stages of a pipeline, each holding its own projections (disjoint names), in stage order:
// what a checkpoint records, so that any layout that loads it finds every projection's history. Throws when
// the stages disagree on the recipe, the history length or the steps recorded, or a name repeats.
Fp8State::Saved merge_fp8_saved(const std::vector<Fp8State::Saved>& stages);
// Every rank of `pp` gets merge_fp8_saved of all the stages' save() (a collective; the tensors it exchanges
// live on the group's device type, staged through `s` for a GPU group).
Fp8State::Saved gather_fp8_saved(const Fp8State::Saved& mine, comm::Communicator& pp, const Stream& s);

// The share of a training step's GEMM FLOPs (projections, experts, output layer; not attention's
// score/value products) that run in FP8 under the recipe: the log line and the report show it.
// The routed experts count as FP8 when `cfg`'s tokens per micro-batch give them enough rows
// (model/fp8_experts.h: fp8_experts_worthwhile; one rank's routing, the estimate for every layout).
double fp8_gemm_flop_share(const Fp8Recipe& r, const TrainConfig& cfg);

// x [R, C] cast to FP8 (transposed: its [C, R] transpose) with format f and granularity g; `scale`: delayed
// scaling's multiplier (nullptr: current scaling), `amax`: where the cast records max |x| (may be nullptr).
ops::Fp8Tensor fp8_cast(const Tensor& x, ops::Fp8Format f, ops::Fp8Granularity g, bool transposed,
                        const Tensor* scale, Tensor* amax, const Stream& s, const char* what);

// The projections' entry points: `slot` < 0 (or no FP8 in ctx) runs the BF16 path of ops/gemm.h.
//
// y = x W^T (+ residual): x [n, in], W [out, in], y [n, out].
void project(const StepContext& ctx, int slot, const Tensor& x, const Tensor& w, const Tensor* bias,
             Tensor& y, const Tensor* residual = nullptr);
// The backward of project(): dx = dy W (dx += when accumulate_dx) and the weight gradient dW (+ db) = dy^T x
// written or accumulated per `accumulate_w`, run at once or queued in ctx.deferred_wgrad
// (model/weight_grad.h). residual_grad: see weight_grad().
void project_backward(const StepContext& ctx, int slot, const Tensor& dy, const Tensor& x, const Tensor& w,
                      Tensor& dx, bool accumulate_dx, Tensor g, Tensor g_bias, bool accumulate_w,
                      const Tensor& residual_grad = Tensor());

}  // namespace primus
