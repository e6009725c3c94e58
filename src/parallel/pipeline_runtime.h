#pragma once
// The pipeline runtime: runs one rank's action list of a schedule (parallel/pipeline_schedule.h) on its model
// chunks (LlamaModel::Chunk) for one training step, passing activations and their gradients to the
// neighbouring stages. Any generated schedule runs unchanged: the list is the program.
//
// Point-to-point messages go through PipelineChannels (parallel/pipeline_channels.h): sends never block the
// schedule (a sender thread per channel), receives wait for their message.
//
// Gradients accumulate over the step's micro-batches in the parameter store as in one process; the caller
// reduces them over data parallelism afterwards (DataParallel::finish_grads).
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "model/llama_model.h"
#include "parallel/pipeline_channels.h"
#include "parallel/pipeline_projection.h"
#include "parallel/pipeline_sim.h"

namespace primus::parallel {

// The model chunks of one pipeline rank, from the split.
std::vector<LlamaModel::Chunk> rank_chunks(const PipelineLayout& layout, int rank);
// What the rank's parameter store holds: the union of its chunks (ModelSpec::with_pipeline_share).
ModelSpec stage_spec(const ModelSpec& whole, const PipelineLayout& layout, int rank);

class PipelineRuntime {
 public:
  // `pp` is the pipeline group (rank r of it runs the list of pipeline rank r); model and group outlive this.
  // Collective over `pp` (the channels' communicators are split from it).
  PipelineRuntime(PipelinePlan plan, comm::Communicator& pp, LlamaModel& model, const Stream& stream);
  ~PipelineRuntime();

  struct MicroBatch {
    Tensor tokens, targets;  // i32 [B, T] on the model's device
    float grad_scale = 1.0f, aux_grad_scale = 0.0f;
    BatchOrigin origin;
    // Multi-token prediction (optional; model/mtp.h): the depths' ids, targets and counts built on the host
    // from the whole micro-batch, which the loss stage reads instead of waiting for the device (required
    // under context parallelism; LlamaModel::forward_backward). No depths: the loss stage builds them.
    MtpBatch mtp;
    // Packed rows with isolated samples (optional): positions and sample starts, i32 [B, T] on the model's
    // device (LlamaModel::set_packing before each of the micro-batch's chunk forwards).
    Tensor positions, seg_starts;
  };
  // One training step: runs this rank's list; fetch(m) gives micro-batch m (called once per micro-batch, in
  // increasing m). Returns each micro-batch's per-token losses on the rank holding the loss, undefined
  // tensors elsewhere.
  std::vector<Tensor> run_step(const std::function<MicroBatch(int)>& fetch);
  // Forward only (evaluation), stage after stage: the per-token losses on the loss rank, undefined
  // elsewhere.
  Tensor evaluate(const MicroBatch& mb);
  // Multi-token prediction: after run_step, on the loss rank, each micro-batch's per-depth per-token losses
  // and counted tokens (LlamaModel::mtp_losses / mtp_counts), in micro-batch order; empty elsewhere.
  using MtpLosses = std::pair<std::vector<Tensor>, std::vector<int64_t>>;
  const std::vector<MtpLosses>& mtp_losses() const { return mtp_losses_; }

  int loss_rank() const { return loss_rank_; }
  bool holds_loss() const { return pp_.rank() == loss_rank_; }
  const PipelinePlan& plan() const { return plan_; }
  // The compute actions of the last step in the order they ran (the schedule's list, checked by the tests
  // against the simulator's order).
  const std::vector<Action>& executed() const { return executed_; }

  // The measured timeline of one step (measure_next_step before it): every compute action's start and end on
  // this rank (ms from the step's first action; CUDA events on the GPU, the clock on the CPU), and the whole
  // pipeline's summary, the same on every rank: the step, each rank's busy time, the measured bubble, and
  // what the simulator predicts from the measured per-chunk F / B / BI / BW times (docs/pipeline.md §6).
  struct Timeline {
    std::string schedule;  // schedule_name
    PipelineTopology topo;
    int microbatches = 0;
    std::vector<TimedAction> actions;  // this rank's compute actions
    double step_ms = 0;                // the longest rank's span
    std::vector<double> busy_ms;       // per rank
    double bubble = 0;                 // 1 - sum(busy) / (pp x step)
    double predicted_step_ms = 0, predicted_bubble = 0;
    // Every rank's compute actions as measured (times from each rank's step start; only ranks and
    // step_time filled) and as simulated from the measured per-chunk times: what the report draws.
    SimResult measured, predicted;
    std::string describe() const;  // one line for the log
    std::string json() const;      // pipeline_timeline.json in the run directory (report/run_report.h)
  };
  void measure_next_step() { measure_ = true; }
  // The last measured step's timeline (collective over the pipeline group when it was measured; call on every
  // rank after run_step).
  const Timeline* last_timeline() const { return timeline_ ? &*timeline_ : nullptr; }

 private:
  using Key = std::pair<int, int>;  // (micro-batch, chunk)
  Tensor io_buffer(const MicroBatch& mb) const;
  // The stage before / after chunk c of this rank in model order: (rank, chunk), or (-1, -1) at the ends.
  std::pair<int, int> neighbour(int chunk, int step) const;

  PipelinePlan plan_;
  comm::Communicator& pp_;
  LlamaModel& model_;
  Stream stream_;
  std::vector<LlamaModel::Chunk> chunks_;
  int loss_rank_ = 0;
  std::vector<Action> executed_;
  std::vector<MtpLosses> mtp_losses_;
  bool order_checked_ = false;
  std::unique_ptr<PipelineChannels> channels_;
  bool measure_ = false;
  std::optional<Timeline> timeline_;
  // Measuring: each compute action's start and end marks, then the summary over the group.
  struct Marks {
    Action action;
    std::shared_ptr<StreamEvent> start, end;  // GPU
    double start_ms = 0, end_ms = 0;          // CPU (or read from the events)
  };
  std::vector<Marks> marks_;
  void summarise(std::vector<Marks>& marks, const StreamEvent* step_start);
};

}  // namespace primus::parallel
