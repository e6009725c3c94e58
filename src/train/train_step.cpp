// One training step for every layout (issue #19 item 8): one process, data / expert parallel ranks, and one
// process emulating a data-parallel layout. The micro-batch loop, loss scaling, guards, clipping and the
// update are written once; the layout enters through DataParallel (the gradient reduction, the norm over
// shards, the sharded update) and through the loss exchange, which gives every rank the global batch's
// micro-batch losses and the ranks' stop requests.
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/log.h"
#include "core/memory_owner.h"
#include "parallel/context_parallel.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_runtime.h"
#include "parallel/process_groups.h"
#include "parallel/tensor_parallel.h"
#include "profile/trace.h"
#include "train/trainer.h"

namespace primus {

namespace {

// PRIMUS_INJECT_KILL / PRIMUS_INJECT_SIGTERM=<iteration>:<rank>: that rank SIGKILLs itself in the middle of
// the iteration (after its first micro-batch's backward, before the gradient reduction), or sends itself
// SIGTERM as the iteration starts (only that rank sees the signal; the stop agreement must carry it to the
// others) -- the fault tests of the distributed trainer.
struct RankInjection {
  int64_t iter = -1;
  int rank = -1;
  static RankInjection from_env(const char* var) {
    RankInjection k;
    const char* v = std::getenv(var);
    if (v && *v) {
      const std::string s(v);
      const auto colon = s.find(':');
      if (colon == std::string::npos)
        throw ConfigError(fmt::format("{}='{}' (expected <iteration>:<rank>)", var, s));
      k.iter = std::stoll(s.substr(0, colon));
      k.rank = std::stoi(s.substr(colon + 1));
    }
    return k;
  }
};

}  // namespace

Trainer::StepOutcome Trainer::train_step(int64_t iter) {
  static const RankInjection kill = RankInjection::from_env("PRIMUS_INJECT_KILL");
  static const RankInjection term = RankInjection::from_env("PRIMUS_INJECT_SIGTERM");
  if (iter == term.iter && world_rank_ == term.rank) {
    log::warn("PRIMUS_INJECT_SIGTERM: rank {} sends itself SIGTERM in iteration {}", world_rank_, iter);
    ::raise(SIGTERM);
  }
  const bool emulate = dp_ && dp_->config().emulate;
  const bool ranks = dp_ && !emulate;  // several processes: reduction and loss exchange over dp
  const int D = dp_ ? dp_->config().dp : 1;
  const int64_t A = micro_batches_;  // per rank
  const int64_t mbs = cfg_.micro_batch_size;
  const int64_t base = consumed_;
  // Micro-batch a of DP rank d holds samples base + (a*D + d)*mbs ...: global micro-batch k = a*D + d, the
  // order in which a single process with the same global batch reads them.
  std::vector<Tensor> loss_t(static_cast<size_t>(A * D));
  std::vector<int64_t> valid(static_cast<size_t>(A * D), 0);
  // Micro-batch a of rank d: its batch (checked against the global order), on the device, with its gradient
  // scale.
  struct Prepared {
    Batch b;
    Tensor tokens, targets;
    Tensor positions, seg_starts;  // packed SFT rows with isolated samples (undefined otherwise)
    MtpBatch mtp;                  // multi-token prediction on this rank: the depths' ids and targets
    float scale = 1.0f;
  };
  auto prepare = [&](int64_t a, int d) {
    PRIMUS_MEMORY_OWNER("data");
    const int64_t k = a * D + d;
    // A process reads its own micro-batches from its (strided under DP, prefetching) loader; the emulation
    // every virtual rank's directly.
    Prepared p;
    p.b = [&] {
      PRIMUS_TRACE_RANGE("data");
      return loader_ ? loader_->next()
                     : make_batch(*data_.train, base + k * mbs, mbs, data_.eod_id, cfg_.data.eod_mask_loss);
    }();
    Batch& b = p.b;
    PRIMUS_CHECK(b.first_sample == base + k * mbs,
                 "data-parallel rank {}: micro-batch {} starts at sample {}, expected {}", d, a,
                 b.first_sample, base + k * mbs);
    PRIMUS_CHECK(b.valid_tokens > 0, "micro-batch at sample {} has no tokens that count toward the loss",
                 b.first_sample);
    // Megatron's default: each micro-batch's loss is its mean over counted tokens; the step averages the
    // micro-batches of the global batch (the gradient scale folds both divisions in).
    // Context parallelism: this rank trains its chunks of every sequence; the scale keeps the whole
    // micro-batch's token count, and the cp ranks' gradients add up to the micro-batch's.
    p.scale = 1.0f / (static_cast<float>(b.valid_tokens) * static_cast<float>(A * D));
    // Multi-token prediction: the depths' shifted ids and targets come from the whole sequences, before
    // context parallelism chunks them like the tokens (model/mtp.h).
    const bool packed = cfg_.sft.isolated_rows() && b.positions.defined();
    if (model_->spec().local_mtp_layers() > 0)
      p.mtp = mtp_batch(b.tokens, b.targets, cfg_.model.mtp_num_layers, packed ? &b.seg_starts : nullptr);
    if (cp_) {
      b.tokens = cp_->local_tokens(b.tokens);
      b.targets = cp_->local_tokens(b.targets);
      for (Tensor& t : p.mtp.tokens) t = cp_->local_tokens(t);
      for (Tensor& t : p.mtp.targets) t = cp_->local_tokens(t);
    }
    p.tokens = stream_.device.is_cpu() ? b.tokens : b.tokens.to(stream_);
    p.targets = stream_.device.is_cpu() ? b.targets : b.targets.to(stream_);
    if (packed) {
      p.positions = stream_.device.is_cpu() ? b.positions : b.positions.to(stream_);
      p.seg_starts = stream_.device.is_cpu() ? b.seg_starts : b.seg_starts.to(stream_);
    }
    valid[k] = b.valid_tokens;
    return p;
  };
  auto origin = [&](const Batch& b) {
    return BatchOrigin{static_cast<uint64_t>(cfg_.seed), false, b.first_sample};
  };
  auto run_micro = [&](int64_t a, int d, Prepared* ready = nullptr) {
    const int64_t k = a * D + d;
    Prepared p = ready ? std::move(*ready) : prepare(a, d);
    PRIMUS_TRACE_RANGE("forward_backward");
    // The model's layers and output layer name their own allocations; this holds the rest (the embedding,
    // the hooks' buffers).
    PRIMUS_MEMORY_OWNER("forward + backward");
    // One process: the overlapped update's background sums the last micro-batch's gradient squares.
    if (overlap_ && !dp_ && a == A - 1) overlap_->arm_norm();
    model_->set_packing(p.positions, p.seg_starts);
    loss_t[k] = model_->forward_backward(p.tokens, p.targets, p.scale, 1.0f / static_cast<float>(A * D),
                                         p.mtp.tokens.empty() ? nullptr : &p.mtp, origin(p.b));
    note_mtp();
    if (iter == kill.iter && world_rank_ == kill.rank && a == 0) {
      log::warn("PRIMUS_INJECT_KILL: rank {} kills itself in iteration {}", world_rank_, iter);
      ::raise(SIGKILL);
    }
  };
  // Pipeline parallelism: the schedule runs every micro-batch of this rank's stage; the loss stage returns
  // their losses (undefined tensors elsewhere: the exchange below sums them over the stages).
  auto run_pipeline = [&] {
    PRIMUS_TRACE_RANGE("pipeline step");
    PRIMUS_MEMORY_OWNER("forward + backward");
    std::vector<Tensor> l = pipeline_->run_step([&](int a) {
      Prepared p = prepare(a, dp_rank_);
      return parallel::PipelineRuntime::MicroBatch{
          p.tokens,    p.targets,        p.scale,     1.0f / static_cast<float>(A * D),
          origin(p.b), std::move(p.mtp), p.positions, p.seg_starts};
    });
    for (int64_t a = 0; a < A; ++a) loss_t[a * D + dp_rank_] = l[static_cast<size_t>(a)];
    // Multi-token prediction: the loss stage's depth losses of each micro-batch, noted as run_micro notes
    // them (empty on the other stages).
    for (const auto& m : pipeline_->mtp_losses()) mtp_micro_.push_back(m);
  };
  auto micro_loss = [&](int64_t k) {
    PRIMUS_MEMORY_OWNER("loss");
    if (!loss_t[k].defined()) return 0.0;  // a pipeline stage without the loss
    std::vector<double> l = loss_t[k].to_vector<double>();
    double sum = 0;
    for (double x : l) sum += x;
    return sum / static_cast<double>(valid[k]);
  };

  std::vector<double> micro(static_cast<size_t>(A * D), 0.0);
  int stop_any = 0;
  const bool grads_prepared = overlap_ && overlap_->take_grads_prepared();  // the last update zeroed them
  if (emulate) {
    dp_->emulate_grads(A, run_micro);
    model_->end_step();
    end_fp8_step();
  } else {
    if (dp_) {
      PRIMUS_MEMORY_OWNER("data parallel buffers");
      dp_->begin_step(grads_prepared);
    } else if (!grads_prepared) {
      params_->begin_grad_step(stream_);
    }
    if (pipeline_) {
      // A region's last backward of the step is the schedule's to place: the reductions wait for
      // finish_grads.
      dp_->begin_micro(false);
      // The logged iterations also measure the pipeline's timeline (one wait for the GPU at the step's end).
      const bool measure = iter % cfg_.logging.log_interval == 0;
      if (measure) pipeline_->measure_next_step();
      run_pipeline();
      if (measure && world_rank_ == 0) {
        const auto& t = *pipeline_->last_timeline();
        log::info("{}", t.describe());
        // The post-flight report draws the latest one (report/run_report.h); replaced atomically.
        const std::string path = run_dir_ + "/pipeline_timeline.json";
        {
          std::ofstream f(path + ".tmp");
          f << t.json();
        }
        std::filesystem::rename(path + ".tmp", path);
      }
    } else {
      // DDP with the row-sparse embedding gradient: the step's micro-batches are read first, so that the dp
      // ranks can reserve the union of their rows before the first backward (DataParallel::
      // reserve_sparse_rows; the multi-token-prediction depths look up the same rows, shifted).
      std::vector<Prepared> ahead;
      if (dp_ && params_->sparse_entry() >= 0) {
        std::vector<int32_t> rows;
        for (int64_t a = 0; a < A; ++a) {
          ahead.push_back(prepare(a, dp_rank_));
          const Tensor& t = ahead.back().b.tokens;
          rows.insert(rows.end(), t.data<int32_t>(), t.data<int32_t>() + t.numel());
        }
        dp_->reserve_sparse_rows(rows);  // (repeats are fine: it marks a presence vector)
      }
      for (int64_t a = 0; a < A; ++a) {
        if (dp_) dp_->begin_micro(a == A - 1);
        run_micro(a, dp_ ? dp_rank_ : 0, ahead.empty() ? nullptr : &ahead[static_cast<size_t>(a)]);
      }
    }
    if (dp_) {
      PRIMUS_TRACE_RANGE("finish_grads");
      PRIMUS_MEMORY_OWNER("data parallel buffers");
      dp_->finish_grads();
    }
    model_->end_step();
    end_fp8_step();
    if (!dp_) params_->end_grad_step(stream_);
  }
  stop_any = stop_request();  // a signal or the time limit, as the micro-batches are done
  if (ranks) {
    PRIMUS_TRACE_RANGE("loss exchange");
    PRIMUS_MEMORY_OWNER("loss");
    // Every rank's micro-batch losses, in global order, and after them its stop request (signals and
    // time can differ between ranks; all must stop at the same step).
    std::vector<double> mine(static_cast<size_t>(A + 1));
    for (int64_t a = 0; a < A; ++a) mine[a] = micro_loss(a * D + dp_rank_);
    mine[A] = stop_any;
    // Each cp rank summed the losses of its chunks, and only the pipeline's loss stage has any: the
    // micro-batch's loss is their sum; stop on any rank's request.
    auto sum_over = [&](comm::Communicator& g, const char* what) {
      Tensor part = Tensor::from_vector(std::vector<double>(mine.begin(), mine.begin() + A), {A});
      Tensor stop = Tensor::from_vector(std::vector<double>{mine[A]}, {1});
      if (stream_.device.is_cuda()) {
        part = part.to(stream_);
        stop = stop.to(stream_);
      }
      g.all_reduce(part, comm::ReduceOp::kSum, stream_, fmt::format("{} micro-batch losses", what));
      g.all_reduce(stop, comm::ReduceOp::kMax, stream_, fmt::format("{} stop request", what));
      const std::vector<double> p = part.to_vector<double>();
      std::copy(p.begin(), p.end(), mine.begin());
      mine[A] = stop.to_vector<double>()[0];
    };
    if (cp_) sum_over(cp_->group(), "cp");
    if (pipeline_) sum_over(groups_->get("pp"), "pp");
    Tensor in = Tensor::from_vector(mine, {A + 1});
    Tensor out = Tensor::empty({(A + 1) * D}, DType::kF64, stream_);
    if (stream_.device.is_cuda()) in = in.to(stream_);
    groups_->get("dp").all_gather(in, out, stream_, "micro-batch losses");
    const std::vector<double> all = out.to_vector<double>();  // [d][a], then d's stop request
    for (int d = 0; d < D; ++d) {
      for (int64_t a = 0; a < A; ++a) micro[a * D + d] = all[d * (A + 1) + a];
      stop_any = std::max(stop_any, static_cast<int>(all[d * (A + 1) + A]));
    }
  } else {
    for (int64_t k = 0; k < A * D; ++k) micro[k] = micro_loss(k);
  }
  if (tp_) {
    // Tensor-parallel peers read the same batches (same losses) but may see different signals: agree too.
    stop_any = static_cast<int>(
        tp_->group().all_reduce_value(stop_any, comm::ReduceOp::kMax, stream_, "stop request"));
  }
  if (params_->shard_mode() != ShardMode::kFull) inject_.maybe_poison_grad(iter, *params_, stream_);
  StepOutcome o;
  o.stop_request = stop_any;
  {
    PRIMUS_TRACE_RANGE("grad_norm");
    PRIMUS_MEMORY_OWNER("gradient norm");
    o.grad_norm = dp_ ? dp_->grad_norm() : step_grad_norm(iter);
  }
  o.lr = schedule_->at(iter);
  for (double m : micro) o.loss += m;
  o.loss /= static_cast<double>(micro.size());
  o.mtp_losses = take_mtp_losses();
  if (pipeline_ && cfg_.model.mtp_num_layers > 0) {
    // Only the loss stage ran the depths: the others add zeros, so that every stage (world rank 0, which
    // logs, is the first) has them, as the micro-batch losses above.
    PRIMUS_MEMORY_OWNER("loss");
    if (o.mtp_losses.empty()) o.mtp_losses.assign(static_cast<size_t>(cfg_.model.mtp_num_layers), 0.0);
    Tensor t = Tensor::from_vector(o.mtp_losses, {static_cast<int64_t>(o.mtp_losses.size())});
    if (stream_.device.is_cuda()) t = t.to(stream_);
    groups_->get("pp").all_reduce(t, comm::ReduceOp::kSum, stream_, "mtp losses (pp)");
    o.mtp_losses = t.to_vector<double>();
  }
  if (cp_ && !o.mtp_losses.empty()) {
    // Context parallelism: each cp rank's depth losses are its chunks' sums over the whole micro-batches'
    // counts, so their sum is the micro-batches' mean.
    PRIMUS_MEMORY_OWNER("loss");
    Tensor t = Tensor::from_vector(o.mtp_losses, {static_cast<int64_t>(o.mtp_losses.size())});
    if (stream_.device.is_cuda()) t = t.to(stream_);
    cp_->group().all_reduce(t, comm::ReduceOp::kSum, stream_, "mtp losses (cp)");
    o.mtp_losses = t.to_vector<double>();
  }
  if (ranks && !o.mtp_losses.empty()) {
    // Each rank averaged its own micro-batches (as many on every rank): the global batch's is their mean.
    Tensor t = Tensor::from_vector(o.mtp_losses, {static_cast<int64_t>(o.mtp_losses.size())});
    if (stream_.device.is_cuda()) t = t.to(stream_);
    groups_->get("dp").all_reduce(t, comm::ReduceOp::kSum, stream_, "mtp losses");
    o.mtp_losses = t.to_vector<double>();
    for (double& x : o.mtp_losses) x /= static_cast<double>(D);
  }
  if (inject_.spike_iter && *inject_.spike_iter == iter) o.loss *= inject_.spike_factor;
  run_guards(iter, o, micro);
  if (o.applied) {
    PRIMUS_TRACE_RANGE("optimizer");
    PRIMUS_MEMORY_OWNER("optimizer update");
    const float clip = clip_coefficient(o.grad_norm, cfg_.optim.clip_grad);
    if (overlap_)  // whole gradients (one GPU, DDP): updated under the next forward
      overlap_->launch(o.lr, clip);
    else if (dp_)
      dp_->step(*optim_, o.lr, clip);
    else
      optim_->step(o.lr, clip, stream_);
  }
  consumed_ += cfg_.global_batch_size;
  return o;
}

}  // namespace primus
