#include "parallel/pipeline_runtime.h"

#include <fmt/format.h>

#include <chrono>

#include "core/error.h"
#include "core/log.h"
#include "parallel/pipeline_sim.h"
#include "profile/trace.h"

namespace primus::parallel {

std::vector<LlamaModel::Chunk> rank_chunks(const PipelineLayout& layout, int rank) {
  std::vector<LlamaModel::Chunk> out;
  for (int c = 0; c < layout.vpp(); ++c) {
    const StageModules& m = layout.at(rank, c);
    PRIMUS_CHECK(m.num_mtp == 0, "pipeline stage {} chunk {} holds MTP layers (not supported yet)", rank, c);
    out.push_back(LlamaModel::Chunk{m.embedding, m.first_layer, m.num_layers, m.loss});
  }
  return out;
}

ModelSpec stage_spec(const ModelSpec& whole, const PipelineLayout& layout, int rank) {
  bool embedding = false, head = false;
  std::vector<char> layers(static_cast<size_t>(whole.layers), 0);
  for (const LlamaModel::Chunk& c : rank_chunks(layout, rank)) {
    embedding = embedding || c.embedding;
    head = head || c.loss;
    for (int l = c.first_layer; l < c.first_layer + c.num_layers; ++l) layers[static_cast<size_t>(l)] = 1;
  }
  return whole.with_pipeline_share(embedding, std::move(layers), head);
}

PipelineRuntime::PipelineRuntime(PipelinePlan plan, comm::Communicator& pp, LlamaModel& model,
                                 const Stream& stream)
    : plan_(std::move(plan)), pp_(pp), model_(model), stream_(stream) {
  PRIMUS_CHECK(pp.size() == plan_.layout.pp(), "pipeline group of {} ranks for a split over {}", pp.size(),
               plan_.layout.pp());
  chunks_ = rank_chunks(plan_.layout, pp.rank());
  for (int r = 0; r < plan_.layout.pp(); ++r)
    for (int c = 0; c < plan_.layout.vpp(); ++c)
      if (plan_.layout.at(r, c).loss) loss_rank_ = r;
  channels_ = std::make_unique<PipelineChannels>(pp, plan_.schedule, stream);
}

PipelineRuntime::~PipelineRuntime() = default;

std::pair<int, int> PipelineRuntime::neighbour(int chunk, int step) const {
  const PipelineTopology& t = plan_.layout.topology();
  const int stage = t.stage_of(pp_.rank(), chunk) + step;
  if (stage < 0 || stage >= t.num_stages()) return {-1, -1};
  return t.rank_chunk_of(stage);
}

Tensor PipelineRuntime::io_buffer(const MicroBatch& mb) const {
  return Tensor::empty(model_.chunk_io_shape(mb.tokens), model_.act_dtype(), stream_);
}

std::vector<Tensor> PipelineRuntime::run_step(const std::function<MicroBatch(int)>& fetch) {
  const int me = pp_.rank();
  const std::vector<Action>& list = plan_.schedule.ranks.at(me);
  const int M = plan_.schedule.microbatches;
  std::vector<MicroBatch> micro;
  auto batch = [&](int m) -> const MicroBatch& {
    while (static_cast<int>(micro.size()) <= m) micro.push_back(fetch(static_cast<int>(micro.size())));
    return micro[static_cast<size_t>(m)];
  };
  std::map<Key, LlamaModel::ChunkState> states;
  int held = 0;  // the most (micro-batch, chunk) activations held at once (forward until backward / BW)
  std::map<Key, Tensor> inputs, grads;  // a chunk's input activation / output gradient, received or local
  std::map<Key, Tensor> outbox;         // outputs / input gradients waiting for their send
  std::vector<Tensor> losses(static_cast<size_t>(M));
  executed_.clear();

  auto run_compute = [&](const Action& a) {
    const LlamaModel::Chunk& c = chunks_.at(static_cast<size_t>(a.chunk));
    const Key key{a.microbatch, a.chunk};
    const MicroBatch& mb = batch(a.microbatch);
    if (a.kind == ActionKind::kF) {
      PRIMUS_TRACE_RANGE("pipeline forward");
      Tensor in;
      if (!c.embedding) {
        auto it = inputs.find(key);
        PRIMUS_CHECK(it != inputs.end(), "pipeline rank {}: {} has no input", me, a.str());
        in = std::move(it->second);
        inputs.erase(it);
      }
      LlamaModel::ChunkState& st = states[key];
      held = std::max(held, static_cast<int>(states.size()));
      Tensor out =
          model_.chunk_forward(c, st, in, mb.tokens, mb.targets, mb.grad_scale, mb.aux_grad_scale, mb.origin);
      if (c.loss) {
        losses[static_cast<size_t>(a.microbatch)] = st.losses;
      } else {
        const auto [r, next] = neighbour(a.chunk, +1);
        if (r == me)
          inputs[{a.microbatch, next}] = out;  // the V's turn: the next stage is this rank's other chunk
        else
          outbox[key] = out;
      }
    } else if (a.kind == ActionKind::kBW) {
      // Zero-bubble: the weight gradients the input-gradient pass (BI) queued.
      PRIMUS_TRACE_RANGE("pipeline weight gradient");
      auto st = states.find(key);
      PRIMUS_CHECK(st != states.end(), "pipeline rank {}: {} before its input-gradient pass", me, a.str());
      model_.chunk_weight_grad(st->second);
      states.erase(st);
    } else {
      PRIMUS_TRACE_RANGE("pipeline backward");
      Tensor g;
      if (!c.loss) {
        auto it = grads.find(key);
        PRIMUS_CHECK(it != grads.end(), "pipeline rank {}: {} has no output gradient", me, a.str());
        g = std::move(it->second);
        grads.erase(it);
      }
      auto st = states.find(key);
      PRIMUS_CHECK(st != states.end(), "pipeline rank {}: {} before its forward", me, a.str());
      const bool split = a.kind == ActionKind::kBI;
      Tensor dx = model_.chunk_backward(c, st->second, std::move(g), split);
      if (!split) states.erase(st);  // BI: the state keeps the queued weight gradients until BW
      if (!c.embedding) {
        const auto [r, prev] = neighbour(a.chunk, -1);
        if (r == me)
          grads[{a.microbatch, prev}] = dx;
        else
          outbox[key] = dx;
      }
    }
    executed_.push_back(a);
  };
  auto take_outbox = [&](const Action& a) {
    auto it = outbox.find({a.microbatch, a.chunk});
    PRIMUS_CHECK(it != outbox.end(), "pipeline rank {}: {} has nothing to send", me, a.str());
    Tensor t = std::move(it->second);
    outbox.erase(it);
    return t;
  };
  auto recv_target = [&](const Action& a) {
    Tensor t = io_buffer(batch(a.microbatch));
    (a.kind == ActionKind::kRecvF ? inputs : grads)[{a.microbatch, a.chunk}] = t;
    return t;
  };

  const bool measure = measure_;
  measure_ = false;
  std::vector<Marks> marks;
  const auto t0 = std::chrono::steady_clock::now();
  auto host_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  for (const Action& a : list) {
    if (is_compute(a.kind)) {
      if (measure) {
        marks.push_back({a, nullptr, nullptr, host_ms(), 0});
        if (stream_.device.is_cuda()) marks.back().start = StreamEvent::record(stream_, /*timed=*/true);
      }
      run_compute(a);
      if (measure) {
        marks.back().end_ms = host_ms();
        if (stream_.device.is_cuda()) marks.back().end = StreamEvent::record(stream_, /*timed=*/true);
      }
    } else if (a.kind == ActionKind::kSendF || a.kind == ActionKind::kSendB) {
      channels_->send(a, take_outbox(a));
    } else {
      PRIMUS_TRACE_RANGE("pipeline recv");
      channels_->recv(a, recv_target(a));
    }
  }
  channels_->finish();
  if (measure) summarise(marks);
  if (!order_checked_) {
    // The simulator (parallel/pipeline_sim.h) plays the same list: its order is what projections and the
    // report's predicted timeline show, so the runtime must have run exactly that, once per step.
    const SimResult sim = simulate(plan_.schedule, layout_costs(plan_.layout));
    std::vector<Action> predicted;
    for (const TimedAction& t : sim.ranks.at(static_cast<size_t>(me)))
      if (is_compute(t.action.kind)) predicted.push_back(t.action);
    PRIMUS_CHECK(predicted == executed_,
                 "pipeline rank {}: the runtime ran {} compute actions, not the {} of the "
                 "simulator's order",
                 me, executed_.size(), predicted.size());
    // Memory: the activations held at once are the schedule's (1F1B: at most pp - rank micro-batches).
    PRIMUS_CHECK(held == sim.peak_in_flight.at(static_cast<size_t>(me)),
                 "pipeline rank {}: {} chunk activations were held at once, the simulator says {}", me, held,
                 sim.peak_in_flight.at(static_cast<size_t>(me)));
    log::info(
        "pipeline rank {}: the step ran the simulator's order ({} compute actions, at most {} chunk "
        "activations held, as simulated)",
        me, executed_.size(), held);
    order_checked_ = true;
  }
  PRIMUS_CHECK(states.empty() && inputs.empty() && grads.empty() && outbox.empty(),
               "pipeline rank {}: the step ended with work left ({} forwards without backward, {} inputs, {} "
               "gradients, {} sends)",
               me, states.size(), inputs.size(), grads.size(), outbox.size());
  return losses;
}

void PipelineRuntime::summarise(std::vector<Marks>& marks) {
  const PipelineTopology& topo = plan_.layout.topology();
  const int P = topo.pp, V = topo.vpp;
  if (stream_.device.is_cuda()) {
    stream_sync(stream_);
    for (Marks& m : marks) {
      m.start_ms = StreamEvent::elapsed_ms(marks.front().start.get(), m.start.get());
      m.end_ms = StreamEvent::elapsed_ms(marks.front().start.get(), m.end.get());
    }
  }
  // Per rank: [span, busy, then per chunk the mean F, B, BI, BW (ms)], all-gathered over the group.
  const int width = 2 + 4 * V;
  std::vector<double> mine(static_cast<size_t>(width), 0.0), count(static_cast<size_t>(4 * V), 0.0);
  Timeline t;
  for (const Marks& m : marks) {
    const double d = m.end_ms - m.start_ms;
    mine[1] += d;
    const int k = m.action.kind == ActionKind::kF    ? 0
                  : m.action.kind == ActionKind::kB  ? 1
                  : m.action.kind == ActionKind::kBI ? 2
                                                     : 3;
    mine[static_cast<size_t>(2 + 4 * m.action.chunk + k)] += d;
    count[static_cast<size_t>(4 * m.action.chunk + k)] += 1;
    t.actions.push_back({m.action, m.start_ms, m.end_ms});
  }
  mine[0] = marks.empty() ? 0 : marks.back().end_ms - marks.front().start_ms;
  for (int i = 0; i < 4 * V; ++i)
    if (count[static_cast<size_t>(i)] > 0) mine[static_cast<size_t>(2 + i)] /= count[static_cast<size_t>(i)];
  Tensor in = Tensor::from_vector(mine, {width});
  Tensor all = Tensor::empty({P * width}, DType::kF64,
                             pp_.device_type() == DeviceType::kCUDA ? stream_ : Stream::cpu());
  if (pp_.device_type() == DeviceType::kCUDA) in = in.to(stream_);
  pp_.all_gather(in, all, pp_.device_type() == DeviceType::kCUDA ? stream_ : Stream::cpu(),
                 "pipeline timeline");
  const std::vector<double> v = all.to_vector<double>();
  PipelineCosts costs;
  costs.chunk.assign(static_cast<size_t>(P), std::vector<ChunkCosts>(static_cast<size_t>(V)));
  double busy = 0;
  for (int r = 0; r < P; ++r) {
    const double* row = v.data() + static_cast<size_t>(r * width);
    t.step_ms = std::max(t.step_ms, row[0]);
    t.busy_ms.push_back(row[1]);
    busy += row[1];
    for (int c = 0; c < V; ++c) {
      ChunkCosts& cc = costs.chunk[static_cast<size_t>(r)][static_cast<size_t>(c)];
      cc.f = row[2 + 4 * c];
      cc.b = row[3 + 4 * c];
      cc.bi = row[4 + 4 * c];
      cc.bw = row[5 + 4 * c];
    }
  }
  t.bubble = t.step_ms > 0 ? 1.0 - busy / (P * t.step_ms) : 0.0;
  const SimResult sim = simulate(plan_.schedule, costs);
  t.predicted_step_ms = sim.step_time;
  t.predicted_bubble = sim.bubble_fraction;
  timeline_ = std::move(t);
}

std::string PipelineRuntime::Timeline::describe() const {
  std::string per_rank;
  for (size_t r = 0; r < busy_ms.size(); ++r)
    per_rank += fmt::format("{}{:.1f}", r == 0 ? "" : " / ", busy_ms[r]);
  return fmt::format(
      "pipeline timeline: step {:.1f} ms, busy per rank {} ms, measured bubble {:.1f}%; the simulator with "
      "the "
      "measured F/B times predicts {:.1f} ms, bubble {:.1f}%",
      step_ms, per_rank, 100 * bubble, predicted_step_ms, 100 * predicted_bubble);
}

Tensor PipelineRuntime::evaluate(const MicroBatch& mb) {
  const PipelineTopology& t = plan_.layout.topology();
  const int me = pp_.rank();
  Tensor x, losses;
  // Stage after stage in model order; a rank's consecutive chunks pass the activation locally.
  for (int stage = 0; stage < t.num_stages(); ++stage) {
    const auto [r, c] = t.rank_chunk_of(stage);
    if (r != me) continue;
    if (stage > 0 && t.rank_chunk_of(stage - 1).first != me) {
      x = io_buffer(mb);
      pp_.recv(x, t.rank_chunk_of(stage - 1).first, stream_, "pipeline eval recv");
    }
    LlamaModel::ChunkState st;
    st.train = false;
    x = model_.chunk_forward(chunks_.at(static_cast<size_t>(c)), st, x, mb.tokens, mb.targets, 1.0f, 0.0f,
                             mb.origin);
    if (chunks_[static_cast<size_t>(c)].loss) losses = st.losses;
    if (stage + 1 < t.num_stages() && t.rank_chunk_of(stage + 1).first != me)
      pp_.send(x, t.rank_chunk_of(stage + 1).first, stream_, "pipeline eval send");
  }
  return losses;
}

}  // namespace primus::parallel
