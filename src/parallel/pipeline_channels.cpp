#include "parallel/pipeline_channels.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "comm/mpi_communicator.h"
#include "core/env.h"
#include "core/error.h"

namespace primus::parallel {

namespace {

bool is_send(ActionKind k) {
  return k == ActionKind::kSendF || k == ActionKind::kSendB;
}
bool is_recv(ActionKind k) {
  return k == ActionKind::kRecvF || k == ActionKind::kRecvB;
}
ActionKind send_kind(ActionKind k) {
  return k == ActionKind::kRecvF || k == ActionKind::kSendF ? ActionKind::kSendF : ActionKind::kSendB;
}
// The model stage whose data a message carries, as the receiver names it: a forward message carries stage
// S's output to stage S + 1, a backward one stage S's input gradient to stage S - 1.
int message_stage(const PipelineTopology& t, int rank, const Action& a) {
  const int s = t.stage_of(rank, a.chunk);
  if (a.kind == ActionKind::kSendF) return s + 1;
  if (a.kind == ActionKind::kSendB) return s - 1;
  return s;
}
ChannelKey key_of(int rank, const Action& a) {
  return is_send(a.kind) ? ChannelKey{rank, a.peer, a.kind} : ChannelKey{a.peer, rank, send_kind(a.kind)};
}
std::string channel_name(const ChannelKey& k) {
  return fmt::format("pp_{}{}to{}", k.kind == ActionKind::kSendF ? "f" : "b", k.from, k.to);
}

}  // namespace

std::vector<ChannelKey> schedule_channels(const Schedule& s) {
  std::set<ChannelKey> keys;
  for (int r = 0; r < s.topo.pp; ++r)
    for (const Action& a : s.ranks[r])
      if (is_send(a.kind)) keys.insert(key_of(r, a));
  return {keys.begin(), keys.end()};
}

std::vector<std::string> check_channels(const Schedule& s) {
  const int P = s.topo.pp;
  std::map<ChannelKey, std::deque<std::pair<int, Action>>> fifo;  // (sender, action) in flight
  std::vector<size_t> pc(P, 0);
  std::vector<std::string> problems;
  for (bool progress = true; progress && problems.empty();) {
    progress = false;
    for (int r = 0; r < P; ++r) {
      while (pc[r] < s.ranks[r].size()) {
        const Action& a = s.ranks[r][pc[r]];
        if (is_send(a.kind)) {
          fifo[key_of(r, a)].emplace_back(r, a);
        } else if (is_recv(a.kind)) {
          auto& q = fifo[key_of(r, a)];
          if (q.empty()) break;  // blocks until the message is sent
          const auto [from, m] = q.front();
          q.pop_front();
          if (m.microbatch != a.microbatch || message_stage(s.topo, from, m) != message_stage(s.topo, r, a))
            problems.push_back(fmt::format("rank {} receives {} but the channel delivers rank {}'s {}", r,
                                           a.str(), from, m.str()));
        }
        ++pc[r];
        progress = true;
      }
    }
  }
  if (!problems.empty()) return problems;
  for (int r = 0; r < P; ++r)
    if (pc[r] < s.ranks[r].size())
      problems.push_back(fmt::format("rank {} waits forever at {}", r, s.ranks[r][pc[r]].str()));
  return problems;
}

PipelineChannels::PipelineChannels(comm::Communicator& pp, const Schedule& s, const Stream& compute)
    : me_(pp.rank()), compute_(compute) {
  device_sends_ = pp.device_type() == DeviceType::kCUDA;
  if (std::string(pp.backend()) == "mpi" && !comm::mpi_thread_multiple())
    throw Error(
        ErrorKind::kRuntime,
        "pipeline parallelism over MPI needs MPI_THREAD_MULTIPLE (its sends run on threads), which this "
        "MPI library did not provide; use the tcp backend (PRIMUS_COMM_BACKEND=tcp)");
  // One split per channel, in the same order on every rank; the sender is rank 0 of the pair.
  for (const ChannelKey& k : schedule_channels(s)) {
    const bool in = k.from == me_ || k.to == me_;
    std::unique_ptr<comm::Communicator> c =
        pp.split(in ? 0 : -1, k.from == me_ ? 0 : 1, channel_name(k), /*low_latency=*/true);
    if (k.from == me_) {
      auto o = std::make_unique<Outgoing>();
      o->comm = c.get();
      o->stream = device_sends_ ? make_comm_stream(compute) : compute;
      out_.emplace_back(k, std::move(o));
    } else if (k.to == me_) {
      in_.emplace_back(k, c.get());
    }
    if (c) comms_.push_back(std::move(c));
  }
  if (device_sends_ && preconnect_enabled()) preconnect();
  for (auto& [k, o] : out_) o->worker = std::thread([this, p = o.get()] { work(p); });
}

bool PipelineChannels::preconnect_enabled() {
  // PRIMUS_PP_PRECONNECT=0 leaves NCCL to connect each channel at its first message (a diagnostic: the
  // interleaved schedule then hangs in its first step on two GPUs, docs/performance.md).
  return env_int("PRIMUS_PP_PRECONNECT", 1, 0, 1) != 0;
}

void PipelineChannels::preconnect() {
  // NCCL connects a pair of ranks at their first send/receive, and that connection set-up waits for the
  // peer and makes CUDA calls that can wait behind kernels already running. In a schedule's first step a
  // receive kernel may already spin on the compute stream while another channel is still connecting, and
  // with interleaved lists the two ranks can end up waiting on each other that way. So every channel
  // exchanges one element here, in schedule_channels order on every rank (so that each pair meets: the first
  // unfinished channel of that order always has both its ranks at it), each finished before the next.
  Tensor probe = Tensor::zeros({1}, DType::kF32, compute_);
  for (size_t i = 0, j = 0; i < out_.size() || j < in_.size();) {
    // out_ and in_ are both in schedule_channels order: take whichever comes first in it.
    const bool take_out = j == in_.size() || (i < out_.size() && out_[i].first < in_[j].first);
    if (take_out) {
      out_[i++].second->comm->send(probe, 1, compute_, "pipeline connect");
    } else {
      in_[j++].second->recv(probe, 0, compute_, "pipeline connect");
    }
    stream_sync(compute_);
  }
}

PipelineChannels::~PipelineChannels() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& [k, o] : out_)
    if (o->worker.joinable()) o->worker.join();
  for (auto& c : comms_) c.reset();  // in channel order, the same on every rank
}

void PipelineChannels::work(Outgoing* o) {
  // CUDA calls made here (events, NCCL's enqueue) belong to the compute stream's GPU, not to GPU 0.
  try {
    use_device_on_this_thread(compute_.device);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_) failure_ = std::current_exception();
  }
  for (;;) {
    std::tuple<Tensor, std::shared_ptr<StreamEvent>> item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !o->queue.empty(); });
      if (o->queue.empty()) return;  // stopping
      item = std::move(o->queue.front());
      o->queue.pop_front();
      ++busy_;
    }
    std::shared_ptr<StreamEvent> done;
    try {
      const auto& [t, ready] = item;
      stream_wait(o->stream, ready);
      o->comm->send(t, 1, o->stream, "pipeline send");
      done = StreamEvent::record(o->stream);
    } catch (const std::exception& e) {
      // The peer waits for this message: end the channel so that its receive fails now, not at the
      // watchdog's timeout; this rank's next channel call rethrows.
      o->comm->abort(std::string("pipeline send failed: ") + e.what());
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_) failure_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      o->sent.emplace_back(std::get<0>(item), std::move(done));
      --busy_;
    }
    cv_.notify_all();
  }
}

PipelineChannels::Outgoing& PipelineChannels::outgoing(const ChannelKey& k) {
  for (auto& [key, o] : out_)
    if (key == k) return *o;
  PRIMUS_FAIL("pipeline rank {}: no channel {}", me_, channel_name(k));
}

comm::Communicator& PipelineChannels::incoming(const ChannelKey& k) {
  for (auto& [key, c] : in_)
    if (key == k) return *c;
  PRIMUS_FAIL("pipeline rank {}: no channel {}", me_, channel_name(k));
}

void PipelineChannels::check_failure() {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_) std::rethrow_exception(failure_);
}

void PipelineChannels::send(const Action& a, const Tensor& t) {
  check_failure();
  Outgoing& o = outgoing(key_of(me_, a));
  std::tuple<Tensor, std::shared_ptr<StreamEvent>> item;
  if (device_sends_) {
    item = {t, StreamEvent::record(compute_)};
  } else {
    // A host backend: the values leave the GPU (if there) here, in stream order.
    item = {t.device().is_cpu() ? t : t.to(Stream::cpu()), nullptr};
  }
  std::vector<Tensor> finished;  // dropped outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    o.queue.push_back(std::move(item));
    // Tensors whose sends have finished go back to the allocator now rather than at the step's end (a
    // schedule sends two per micro-batch and chunk: 64 MiB each at T 8192, d 4096). Their memory is safe to
    // reuse on the compute stream: the GPU is past the send.
    for (auto& [key, out] : out_) {
      auto& sent = out->sent;
      size_t kept = 0;
      for (size_t i = 0; i < sent.size(); ++i) {
        if (!sent[i].second || sent[i].second->done()) {
          finished.push_back(std::move(sent[i].first));
        } else {
          if (kept != i) sent[kept] = std::move(sent[i]);
          ++kept;
        }
      }
      sent.erase(sent.begin() + static_cast<std::ptrdiff_t>(kept), sent.end());
    }
  }
  cv_.notify_all();
}

size_t PipelineChannels::held_sends() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto& [key, out] : out_) n += out->sent.size();
  return n;
}

void PipelineChannels::recv(const Action& a, const Tensor& t) {
  check_failure();
  incoming(key_of(me_, a)).recv(t, 0, compute_, "pipeline recv");
}

void PipelineChannels::finish() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] {
      if (failure_ || busy_ > 0) return failure_ != nullptr;
      for (auto& [k, o] : out_)
        if (!o->queue.empty()) return false;
      return true;
    });
  }
  check_failure();
  for (auto& [k, o] : out_) {
    // The compute stream (and the memory the sent tensors give back) orders after the sends.
    if (device_sends_) stream_wait(compute_, StreamEvent::record(o->stream));
    o->sent.clear();
  }
}

}  // namespace primus::parallel
