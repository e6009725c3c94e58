#pragma once
// The training loop: micro-batches accumulated to the global batch, gradient-norm clipping, AdamW, the LR
// schedule, periodic evaluation, one log line and one metrics record per step; checkpoints (save every
// save_interval, resume from the newest valid one), guards (non-finite loss/gradients, loss spikes) and stop
// conditions (SIGTERM/SIGINT, exit_interval, exit_duration_in_mins).
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/load.h"
#include "checkpoint/state.h"
#include "checkpoint/writer.h"
#include "config/train_config.h"
#include "core/timer.h"
#include "data/data_loader.h"
#include "model/llama_model.h"
#include "model/param_store.h"
#include "train/guards.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/optimizer.h"
#include "train/overlapped_update.h"
#include "train/step_marks.h"

namespace primus::comm {
struct World;
}
namespace primus::ckpt {
class HfCheckpoint;
}
namespace primus::parallel {
class ProcessGroups;
class TensorParallel;
class ContextParallel;
class PipelineRuntime;
struct PipelinePlan;
struct ParallelLayout;
}  // namespace primus::parallel

namespace primus {

namespace safe {
class RunMonitor;  // safe/run_monitor.h: trace, hang watchdog, stragglers, guard events
}

class DataParallel;
struct DpConfig;

// Deletes, except while an exception unwinds: then the object is left alive. The world communicator must
// outlive a failing trainer, because tearing it down (MPI_Abort under mpirun) would kill the process before
// the error is printed; the process exits right after, and its peers see it go.
struct KeepOnUnwind {
  template <typename T>
  void operator()(T* p) const {
    if (std::uncaught_exceptions() == 0) delete p;
  }
};

// Picks the device from the `device` key: auto = GPU `gpu_index` when one is usable, else the CPU.
Stream select_stream(const std::string& device_key, int gpu_index = 0);

struct TrainResult {
  int64_t steps = 0;  // iterations run by this process
  int64_t last_iteration = 0;
  double first_loss = 0, last_loss = 0;
  double last_val_loss = -1;
  double tokens_per_s = 0;  // median over the steps after warm-up
  double peak_mem_gb = 0;
  // Who held the device memory at that peak (core/memory_owner.h), largest first; sums to the peak's bytes.
  std::vector<std::pair<std::string, size_t>> memory_at_peak;
  std::vector<double> losses;  // per step
  int64_t skipped = 0;         // updates not applied (guards)
  int exit_code = 0;           // kExitGuardHalt when a guard halted the run
  std::string stop_reason;     // why the loop ended before train_iters ("" when it ran to the end)
};

class Trainer {
 public:
  // `resolved_yaml` is stored in every checkpoint (config.yaml) and hashed into its state.
  Trainer(const TrainConfig& cfg, const std::string& run_dir, const std::string& resolved_yaml = "");
  ~Trainer();
  TrainResult train();

  ParamStore& params() { return *params_; }  // the trainable parameters (LoRA: the adapters)
  ParamStore& model_params() { return base_ ? *base_ : *params_; }  // the model's (LoRA: the frozen base)
  LlamaModel& model() { return *model_; }
  const Stream& stream() const { return stream_; }
  int64_t start_iteration() const { return start_iter_; }
  // World rank 0 writes the run directory's files (metrics, summary, checkpoints).
  bool is_rank0() const { return world_rank_ == 0; }

 private:
  // What one step did.
  struct StepOutcome {
    double loss = 0, grad_norm = 0, lr = 0;
    std::vector<double> mtp_losses;  // multi-token prediction: each depth's loss (this rank's micro-batches)
    bool applied = true;             // the optimizer update ran
    bool halt = false;               // a guard stops the run
    int stop_request = 0;  // stop_request() of this process; with several ranks the largest over ranks
  };
  double evaluate();
  StepOutcome train_step(int64_t iter);
  // Multi-token prediction: keeps the latest micro-batch's per-depth losses (note_mtp) and averages them over
  // the step's micro-batches (take_mtp_losses, which reads the device and starts the next step's list).
  void note_mtp();
  // FP8 delayed scaling: reduce the step's amaxes over the groups holding copies or shards of each projection
  // (dp, cp, tp) and update the scales (model/fp8_linear.h). Nothing without FP8.
  void end_fp8_step();
  std::vector<double> take_mtp_losses();
  // Guards after the gradients are complete: decide apply / skip / halt.
  void run_guards(int64_t iter, StepOutcome& o, const std::vector<double>& micro_losses);

  // trainer_checkpoint.cpp
  void resume_or_start();  // loads a checkpoint / HF weights when configured
  void save_checkpoint(int64_t iter);
  ckpt::TrainingState current_state(int64_t iter) const;

  // trainer_dist.cpp: data parallelism (DDP, ZeRO-1, FSDP, HSDP; docs/distributed.md)
  void init_distributed();  // launch env, world, groups, DP config (before anything is allocated)
  void init_data_parallel();
  void init_pipeline(
      const parallel::ParallelLayout& layout);  // the plan; refuses what PP does not compose with
  int64_t consumed_samples() const;
  // Stop code agreed by all ranks (the maximum), so that every rank leaves the loop at the same iteration.
  // A stop this process was asked for: 5 SIGTERM, 4 SIGINT, 3 another signal, 2 exit_duration_in_mins
  // reached, else 0. Ranks agree on it through the step's loss exchange (not a collective of its own, which
  // would make every step end with a wait for the GPU).
  int stop_request() const;
  // Checkpoint parameters: whole-model loads and saves in every mode (sharded state is gathered to rank 0).
  ckpt::LoadReport load_checkpoint_params(const ckpt::Verification& v, const ckpt::LoadOptions& opt);
  void load_hf_params(const ckpt::HfCheckpoint& hf);
  const ParamStore* params_for_save();
  // This rank's model spec (experts, heads, ffn and vocabulary split by the layout) and an unallocated store
  // laid out as params_.
  ModelSpec local_spec() const;
  std::unique_ptr<ParamStore> local_store_layout() const;
  bool model_split() const;                 // some tensor is split over ranks (expert / tensor parallel)
  comm::Communicator& split_group() const;  // the group it is split over (ep or tp)
  // Sums (maxes) the MoE layers' routing statistics over the data-parallel ranks (every rank calls it each
  // step), so that the logged losses and loads are the global batch's, as one process would log them.
  void reduce_moe_stats(std::vector<MoeLayerStats>& layers);
  // Pipeline parallelism: every stage's MoE layers' statistics on every rank (collective over pp).
  void gather_stage_moe_stats(std::vector<MoeLayerStats>& layers);
  void load_from_whole_model(ParamStore& whole);
  // The whole (unsplit) model's spec of the trainable store: with LoRA the adapters' (ModelSpec::adapters).
  ModelSpec whole_spec() const;
  // LoRA: loads the frozen base model from `load` (an HF directory or a full checkpoint) and records its
  // identity (trainer_checkpoint.cpp); fill_base writes a whole-model store's weights into base_, whatever
  // this rank holds of it (trainer_dist.cpp).
  void load_lora_base();
  void fill_base(const std::function<void(ParamStore& whole, const Stream& s)>& fill);
  // LoRA: the adapters in PEFT format under <run dir>/peft_adapter (world rank 0 writes; collective).
  void export_peft_adapter();
  TrainConfig cfg_;
  std::string run_dir_;
  std::string resolved_yaml_;
  Stream stream_;
  std::unique_ptr<comm::World, KeepOnUnwind> world_;
  std::unique_ptr<parallel::ProcessGroups, KeepOnUnwind> groups_;
  std::unique_ptr<parallel::TensorParallel> tp_;   // tensor parallelism's collectives (null: tp 1)
  std::unique_ptr<parallel::ContextParallel> cp_;  // context parallelism's (null: cp 1)
  // Pipeline parallelism (null: pp 1): the split and schedule (from the config, before the store is laid
  // out) and the runtime that runs this rank's list each step.
  std::unique_ptr<parallel::PipelinePlan> pp_plan_;
  std::optional<Fp8State::Saved> fp8_stages_;  // the pipeline's FP8 scaling state at the save being written
  std::unique_ptr<parallel::PipelineRuntime> pipeline_;
  std::unique_ptr<DpConfig> dp_cfg_;
  int world_rank_ = 0, world_size_ = 1, dp_rank_ = 0, shard_rank_ = 0, gpu_index_ = 0;
  std::unique_ptr<ParamStore> ckpt_full_;   // whole-model staging for sharded checkpoints
  std::unique_ptr<ParamStore> ckpt_local_;  // expert parallelism + ZeRO-1: this rank's gathered whole state
  std::unique_ptr<ParamStore> ckpt_stage_;  // pipeline parallelism: this stage's modules, whole over tp
  int64_t consumed_ = 0;                    // samples the steps consumed (all ranks together)
  DataSources data_;
  std::unique_ptr<ParamStore> params_;
  // LoRA (model/lora_adapter.h): the frozen base model the LlamaModel runs on; params_ then holds the
  // adapters, the trainable store every optimizer, data-parallel and checkpoint path works on. Null
  // without LoRA.
  std::unique_ptr<ParamStore> base_;
  std::string base_identity_;  // LoRA: which base model the adapters train on (checked on resume)
  // The model's hooks: data parallelism and the overlapped update add theirs (one chain, one model pointer).
  ParamHookChain hooks_;
  std::unique_ptr<LlamaModel> model_;
  std::optional<Fp8Recipe> fp8_recipe_;  // FP8 training (model/fp8_linear.h); nullopt: BF16
  double fp8_share_ = 0;                 // its share of the step's GEMM FLOPs (fixed for the run)
  std::unique_ptr<DataParallel> dp_;
  Stopwatch run_clock_;  // since train() began: exit_duration_in_mins
  std::unique_ptr<AdamW> optim_;
  // One CUDA process: the gradient norm in fixed chunks (train/grad_norm.h) and the update under the next
  // forward (train/overlapped_update.h); null otherwise.
  std::unique_ptr<ChunkedGradNorm> norm_;
  std::unique_ptr<OverlappedUpdate> overlap_;
  double step_grad_norm(int64_t iter);
  MoeStepMetrics moe_metrics();  // the routing statistics since the last call (empty for dense models)
  // Waits until the GPU finished every queued step, the overlapped update included (evaluation, checkpoints).
  void settle();
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<DataLoader> loader_;
  std::vector<std::unique_ptr<MetricsSink>> sinks_;
  std::unique_ptr<ckpt::CheckpointWriter> writer_;
  SpikeDetector spikes_;
  FaultInjection inject_;
  int64_t micro_batches_ = 1;
  double flops_per_token_ = 0;
  std::vector<std::pair<std::vector<Tensor>, std::vector<int64_t>>> mtp_micro_;  // per micro-batch
  int64_t start_iter_ = 0;      // iterations completed before this run (resume)
  int64_t start_consumed_ = 0;  // samples consumed before this run
  int64_t skipped_total_ = 0;   // skipped updates, including those before a resume
  int64_t last_saved_iter_ = -1;
  bool resumed_ = false;   // continuing a run (not a fresh start or a weights-only load)
  std::string hf_config_;  // carried into checkpoints for `convert primus-to-hf`
  // CUDA: device times for the straggler measure (declared first: it outlives the monitor that calls it).
  std::unique_ptr<CudaStepMarks> step_marks_;
  std::unique_ptr<safe::RunMonitor> monitor_;
};

}  // namespace primus
