#pragma once
// The pipeline's point-to-point messages (parallel/pipeline_runtime.h). A schedule's lists assume sends that
// never block (the validator and the simulator do): interleaved and zero-bubble V lists send to a stage that
// is itself still sending, and pairs of ranks exchange activations and gradients in an order that only the
// kinds of message keep apart. So every (sender, receiver, kind) gets a channel of its own: a two-rank
// communicator split from the pipeline group once, a sender thread per outgoing channel that sends its queue
// in order (blocking on that channel only), and receives that block the caller until the message is there.
// Messages of one channel arrive in the order they were sent (check_channels() proves that every generated
// schedule's receives expect exactly that order).
//
// GPU tensors: over NCCL the sender thread sends on the channel's own stream after an event of the compute
// stream (the tensor is complete); over a host backend the caller's thread copies the tensor to the host
// first (several ranks sharing one GPU). A sent tensor stays alive until its send has finished on the GPU
// (noticed at the next send, or at finish()).
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "core/stream_events.h"
#include "parallel/pipeline_schedule.h"

namespace primus::parallel {

// A channel's identity: messages of `kind` (kSendF: activations, kSendB: gradients) from pipeline rank
// `from` to rank `to`.
struct ChannelKey {
  int from = 0, to = 0;
  ActionKind kind = ActionKind::kSendF;
  auto operator<=>(const ChannelKey&) const = default;
};
// Every channel a schedule's lists use, in a fixed order (the same on every rank).
std::vector<ChannelKey> schedule_channels(const Schedule& s);
// The lists run with non-blocking sends and one FIFO per channel: the problems (empty = every receive gets
// the message it expects and no rank waits forever).
std::vector<std::string> check_channels(const Schedule& s);

class PipelineChannels {
 public:
  // Collective over `pp` (every rank of it, the same schedule): splits one two-rank communicator per
  // channel. `compute`: the stream the tensors are produced and consumed on.
  PipelineChannels(comm::Communicator& pp, const Schedule& s, const Stream& compute);
  ~PipelineChannels();

  // Queues `t` (complete on the compute stream as far as enqueued work goes) for the channel of send action
  // `a`; returns at once.
  void send(const Action& a, const Tensor& t);
  // Receives the message of receive action `a` into `t`, blocking until it is there (over NCCL: the compute
  // stream waits for it).
  void recv(const Action& a, const Tensor& t);
  // Waits until every queued send is delivered; rethrows a sender's failure.
  void finish();
  // Sent tensors still held (their sends not known to be finished): for tests.
  size_t held_sends();

 private:
  struct Outgoing {
    comm::Communicator* comm = nullptr;  // owned by comms_
    Stream stream;                       // NCCL: the sends' stream
    std::deque<std::tuple<Tensor, std::shared_ptr<StreamEvent>>> queue;
    // Sent tensors with the event that ends their send (null: the send was synchronous), kept alive until
    // that event has passed: the next send() drops those, finish() the rest.
    std::vector<std::pair<Tensor, std::shared_ptr<StreamEvent>>> sent;
    std::thread worker;
  };
  Outgoing& outgoing(const ChannelKey& k);
  comm::Communicator& incoming(const ChannelKey& k);
  void work(Outgoing* o);
  // Over NCCL: connects every channel before the first step (see the .cpp for why).
  void preconnect();
  static bool preconnect_enabled();
  void check_failure();

  int me_;
  Stream compute_;
  bool device_sends_ = false;  // NCCL: tensors stay on the GPU
  // Every channel this rank is part of, in schedule_channels order: torn down in that order on every rank
  // (an NCCL communicator's finalize waits for its peer's).
  std::vector<std::unique_ptr<comm::Communicator>> comms_;
  std::vector<std::pair<ChannelKey, std::unique_ptr<Outgoing>>> out_;
  std::vector<std::pair<ChannelKey, comm::Communicator*>> in_;
  std::mutex mu_;
  std::condition_variable cv_;
  int busy_ = 0;  // sends taken by a worker and not finished
  bool stop_ = false;
  std::exception_ptr failure_;
};

}  // namespace primus::parallel
