#pragma once
// The "tcp" backend: CPU tensors over a full mesh of TCP connections among the ranks of a group, set up
// through the TCP store. It exists so that ranks started by `primus launch` (torchrun-style environment, no
// mpirun) can train on the CPU backend; it shares every collective algorithm with the MPI backend
// (host_communicator.h), so both give bitwise the same results. A peer that dies closes its sockets, so a
// blocked rank learns within milliseconds which rank is gone.
#include <memory>
#include <string>
#include <vector>

#include "comm/host_communicator.h"
#include "comm/tcp_store.h"

namespace primus::comm {

class TcpCommunicator : public HostCommunicator {
 public:
  // Collective over the `size` ranks that call it with the same store and `prefix`: connects the mesh.
  static std::unique_ptr<TcpCommunicator> create(std::shared_ptr<TcpStore> store, int rank, int size,
                                                 std::vector<int> world_ranks, const std::string& name,
                                                 const std::string& prefix, double timeout_s);
  ~TcpCommunicator() override;
  const char* backend() const override { return "tcp"; }

 protected:
  void exchange(int send_peer, const void* send_buf, size_t send_bytes, int recv_peer, void* recv_buf,
                size_t recv_bytes) override;
  std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name,
                                         bool low_latency) override;
  void do_abort(const std::string& reason) override;

 private:
  TcpCommunicator(std::shared_ptr<TcpStore> store, int rank, int size, std::vector<int> world_ranks,
                  const std::string& name, const std::string& prefix, double timeout_s);
  void connect_mesh();
  std::string peer_name(int peer) const;

  std::shared_ptr<TcpStore> store_;
  std::vector<int> world_ranks_;  // group rank -> world rank
  std::vector<int> fds_;          // group rank -> socket (-1 for self)
  std::string prefix_;
  int splits_ = 0;
  std::vector<char> mid_send_;  // per peer: a message is partly sent (no abort notice may be inserted)
};

}  // namespace primus::comm
