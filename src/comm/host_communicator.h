#pragma once
// The collectives of the host backends (mpi, tcp), written once on top of one point-to-point primitive,
// exchange(): send a buffer to one peer while receiving one from another. Each backend supplies only the
// transport, so both produce bitwise the same results.
//
// Algorithms (n ranks, r = this rank, round s = 1 .. n-1 pairs r with r+s to send and r-s to receive):
//   reduce_scatter: chunk j of every rank travels to rank j; rank j reduces the n chunks in rank order
//                   0, 1, ..., n-1 (the fixed order of communicator.h).
//   all_gather:     every rank sends its chunk to every other rank.
//   all_reduce:     reduce_scatter over n near-equal chunks (the first count % n are one longer), then
//                   all_gather: each element is reduced by exactly one rank, in rank order.
//   all_to_all_v:   round s sends the chunk for r+s and receives the chunk of r-s.
//   broadcast:      binomial tree from the root; barrier: dissemination (log2 n rounds of empty messages).
// Every message moves (n-1)/n of the data per rank per phase, the volume of a ring, with n-1 latencies.
#include <cstddef>
#include <vector>

#include "comm/communicator.h"

namespace primus::comm {

class HostCommunicator : public Communicator {
 public:
  DeviceType device_type() const override { return DeviceType::kCPU; }

 protected:
  using Communicator::Communicator;

  // Sends `send_bytes` from `send_buf` to `send_peer` and receives exactly `recv_bytes` into `recv_buf`
  // from `recv_peer`, progressing both at once (no deadlock when two ranks exchange). A peer of -1 skips
  // that direction. Throws (through fail()) when a peer is gone or the transport breaks.
  virtual void exchange(int send_peer, const void* send_buf, size_t send_bytes, int recv_peer, void* recv_buf,
                        size_t recv_bytes) = 0;

  void do_all_reduce(const Tensor& t, ReduceOp op, const Stream& s) override;
  void do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, const Stream& s) override;
  void do_all_gather(const Tensor& in, const Tensor& out, const Stream& s) override;
  void do_all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                       const std::vector<int64_t>& recv_counts, const Stream& s) override;
  void do_broadcast(const Tensor& t, int root, const Stream& s) override;
  void do_send(const Tensor& t, int peer, const Stream& s) override;
  void do_recv(const Tensor& t, int peer, const Stream& s) override;
  void do_barrier() override;

  // All-gathers one int pair per rank (used by split implementations).
  std::vector<std::pair<int, int>> gather_pairs(int a, int b);

 private:
  // Reduce-scatter with per-rank chunk counts (elements); `out` receives this rank's chunk.
  void reduce_scatter_v(const char* in, const std::vector<int64_t>& counts, char* out, DType dt, ReduceOp op);
  void all_gather_v(const char* mine, const std::vector<int64_t>& counts, char* out, DType dt);
};

// dst[i] = op over srcs[0][i], srcs[1][i], ... in that order (see communicator.h for the arithmetic);
// `divisor` divides the result for kAvg. dst may alias srcs[k].
void reduce_in_order(DType dt, ReduceOp op, const std::vector<const void*>& srcs, void* dst, int64_t count,
                     int divisor);

}  // namespace primus::comm
