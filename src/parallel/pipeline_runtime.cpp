#include "parallel/pipeline_runtime.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <array>
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
    // The loss chunk runs the MTP depths between the head's forward and backward (LlamaModel::chunk_forward);
    // the trainer refuses a layout that puts them elsewhere, naming the key (Trainer::init_pipeline).
    PRIMUS_CHECK(m.num_mtp == 0 || m.loss, "pipeline stage {} chunk {} holds MTP layers without the loss",
                 rank, c);
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
  mtp_losses_.clear();
  if (model_.spec().local_mtp_layers() > 0) mtp_losses_.resize(static_cast<size_t>(M));

  // The tensor waiting under `key` in `m` (an input, an output gradient, a send), taken out of it.
  auto take = [&](std::map<Key, Tensor>& m, const Key& key, const Action& a, const char* what) {
    auto it = m.find(key);
    PRIMUS_CHECK(it != m.end(), "pipeline rank {}: {} has no {}", me, a.str(), what);
    Tensor t = std::move(it->second);
    m.erase(it);
    return t;
  };
  auto run_compute = [&](const Action& a) {
    const LlamaModel::Chunk& c = chunks_.at(static_cast<size_t>(a.chunk));
    const Key key{a.microbatch, a.chunk};
    const MicroBatch& mb = batch(a.microbatch);
    if (a.kind == ActionKind::kF) {
      PRIMUS_TRACE_RANGE("pipeline forward");
      const Tensor in = c.embedding ? Tensor() : take(inputs, key, a, "input");
      LlamaModel::ChunkState& st = states[key];
      held = std::max(held, static_cast<int>(states.size()));
      model_.set_packing(mb.positions, mb.seg_starts);
      Tensor out = model_.chunk_forward(c, st, in, mb.tokens, mb.targets, mb.grad_scale, mb.aux_grad_scale,
                                        mb.origin, mb.mtp.tokens.empty() ? nullptr : &mb.mtp);
      if (c.loss) {
        losses[static_cast<size_t>(a.microbatch)] = st.losses;
        if (!mtp_losses_.empty())
          mtp_losses_[static_cast<size_t>(a.microbatch)] = {std::move(st.mtp_losses),
                                                            std::move(st.mtp_counts)};
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
      Tensor g = c.loss ? Tensor() : take(grads, key, a, "output gradient");
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
  auto recv_target = [&](const Action& a) {
    Tensor t = io_buffer(batch(a.microbatch));
    (a.kind == ActionKind::kRecvF ? inputs : grads)[{a.microbatch, a.chunk}] = t;
    return t;
  };

  const bool measure = measure_;
  measure_ = false;
  std::vector<Marks> marks;
  // Times count from the step's start on each rank (the GPU: an event before the first action), so that a
  // stage that waits for its first input shows that wait as idle.
  std::shared_ptr<StreamEvent> step_start;
  if (measure && stream_.device.is_cuda()) step_start = StreamEvent::record(stream_, /*timed=*/true);
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
      channels_->send(a, take(outbox, {a.microbatch, a.chunk}, a, "tensor to send"));
    } else {
      PRIMUS_TRACE_RANGE("pipeline recv");
      channels_->recv(a, recv_target(a));
    }
  }
  channels_->finish();
  if (measure) summarise(marks, step_start.get());
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

void PipelineRuntime::summarise(std::vector<Marks>& marks, const StreamEvent* step_start) {
  const PipelineTopology& topo = plan_.layout.topology();
  const int P = topo.pp, V = topo.vpp;
  if (stream_.device.is_cuda()) {
    stream_sync(stream_);
    for (Marks& m : marks) {
      m.start_ms = StreamEvent::elapsed_ms(step_start, m.start.get());
      m.end_ms = StreamEvent::elapsed_ms(step_start, m.end.get());
    }
  }
  // Every rank runs each of its chunks' micro-batches once per pass kind, so the lists are equally long;
  // each rank contributes [its step span, busy, then per action: kind, micro-batch, chunk, start, end].
  const int n = static_cast<int>(marks.size());
  const int width = 2 + 5 * n;
  std::vector<double> mine(static_cast<size_t>(width), 0.0);
  for (int i = 0; i < n; ++i) {
    const Marks& m = marks[static_cast<size_t>(i)];
    mine[1] += m.end_ms - m.start_ms;
    mine[0] = std::max(mine[0], m.end_ms);
    double* a = mine.data() + 2 + 5 * i;
    a[0] = static_cast<double>(m.action.kind);
    a[1] = m.action.microbatch;
    a[2] = m.action.chunk;
    a[3] = m.start_ms;
    a[4] = m.end_ms;
  }
  const Stream gs = pp_.device_type() == DeviceType::kCUDA ? stream_ : Stream::cpu();
  Tensor in = Tensor::from_vector(mine, {width});
  if (pp_.device_type() == DeviceType::kCUDA) in = in.to(stream_);
  Tensor all = Tensor::empty({P * width}, DType::kF64, gs);
  pp_.all_gather(in, all, gs, "pipeline timeline");
  const std::vector<double> v = all.to_vector<double>();

  Timeline t;
  t.schedule = schedule_name(plan_.kind);
  t.topo = topo;
  t.microbatches = plan_.schedule.microbatches;
  t.measured.ranks.resize(static_cast<size_t>(P));
  PipelineCosts costs;
  costs.chunk.assign(static_cast<size_t>(P), std::vector<ChunkCosts>(static_cast<size_t>(V)));
  double busy = 0;
  for (int r = 0; r < P; ++r) {
    const double* row = v.data() + static_cast<size_t>(r) * width;
    t.step_ms = std::max(t.step_ms, row[0]);
    t.busy_ms.push_back(row[1]);
    busy += row[1];
    // Mean duration of each pass kind per chunk: the simulator's costs.
    std::vector<std::array<double, 4>> sum(static_cast<size_t>(V), {0, 0, 0, 0}), cnt = sum;
    for (int i = 0; i < n; ++i) {
      const double* a = row + 2 + 5 * i;
      const Action act{static_cast<ActionKind>(static_cast<int>(a[0])), static_cast<int>(a[1]),
                       static_cast<int>(a[2])};
      t.measured.ranks[static_cast<size_t>(r)].push_back({act, a[3], a[4]});
      const size_t k = static_cast<size_t>(a[0]);  // kF, kB, kBI, kBW = 0..3
      sum[static_cast<size_t>(act.chunk)][k] += a[4] - a[3];
      cnt[static_cast<size_t>(act.chunk)][k] += 1;
    }
    for (int c = 0; c < V; ++c) {
      auto mean = [&](size_t k) { return cnt[c][k] > 0 ? sum[c][k] / cnt[c][k] : 0.0; };
      costs.chunk[static_cast<size_t>(r)][static_cast<size_t>(c)] =
          ChunkCosts{mean(0), mean(1), mean(2), mean(3)};
    }
  }
  t.actions = t.measured.ranks[static_cast<size_t>(pp_.rank())];
  t.measured.step_time = t.step_ms;
  t.bubble = t.step_ms > 0 ? 1.0 - busy / (P * t.step_ms) : 0.0;
  t.predicted = simulate(plan_.schedule, costs);
  t.predicted_step_ms = t.predicted.step_time;
  t.predicted_bubble = t.predicted.bubble_fraction;
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

std::string PipelineRuntime::Timeline::json() const {
  auto lists = [](const SimResult& s) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& list : s.ranks) {
      nlohmann::json acts = nlohmann::json::array();
      for (const TimedAction& a : list)
        if (is_compute(a.action.kind))
          acts.push_back(
              {action_kind_name(a.action.kind), a.action.microbatch, a.action.chunk, a.start, a.end});
      ranks.push_back(acts);
    }
    return ranks;
  };
  nlohmann::json j = {{"schedule", schedule},
                      {"pp", topo.pp},
                      {"vpp", topo.vpp},
                      {"v_shape", topo.v_shape},
                      {"microbatches", microbatches},
                      {"step_ms", step_ms},
                      {"busy_ms", busy_ms},
                      {"bubble", bubble},
                      {"predicted_step_ms", predicted_step_ms},
                      {"predicted_bubble", predicted_bubble},
                      {"measured", lists(measured)},
                      {"predicted", lists(predicted)}};
  return j.dump() + "\n";
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
    model_.set_packing(mb.positions, mb.seg_starts);
    x = model_.chunk_forward(chunks_.at(static_cast<size_t>(c)), st, x, mb.tokens, mb.targets, 1.0f, 0.0f,
                             mb.origin);
    if (chunks_[static_cast<size_t>(c)].loss) losses = st.losses;
    if (stage + 1 < t.num_stages() && t.rank_chunk_of(stage + 1).first != me)
      pp_.send(x, t.rank_chunk_of(stage + 1).first, stream_, "pipeline eval send");
  }
  return losses;
}

}  // namespace primus::parallel
