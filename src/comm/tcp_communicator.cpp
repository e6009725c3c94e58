#include "comm/tcp_communicator.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comm/socket_util.h"

namespace primus::comm {

namespace {
// Every message carries a small header so that a size mismatch between two ranks (a bug: different
// collectives or shapes) is reported instead of silently corrupting the byte stream.
struct Header {
  uint32_t magic = 0x5052434d;  // "PRCM"
  uint32_t reserved = 0;
  uint64_t bytes = 0;
};
// An aborting rank sends this header followed by its failure message to every peer it is not in the middle
// of a message with, so that ranks blocked on it report the original failure (which names the dead rank)
// instead of "rank X closed its connection".
constexpr uint32_t kAbortMagic = 0x5052414d;  // "PRAM"
}  // namespace

std::unique_ptr<TcpCommunicator> TcpCommunicator::create(std::shared_ptr<TcpStore> store, int rank, int size,
                                                         std::vector<int> world_ranks,
                                                         const std::string& name, const std::string& prefix,
                                                         double timeout_s) {
  std::unique_ptr<TcpCommunicator> c(
      new TcpCommunicator(std::move(store), rank, size, std::move(world_ranks), name, prefix, timeout_s));
  c->connect_mesh();
  return c;
}

TcpCommunicator::TcpCommunicator(std::shared_ptr<TcpStore> store, int rank, int size,
                                 std::vector<int> world_ranks, const std::string& name,
                                 const std::string& prefix, double timeout_s)
    : HostCommunicator(rank, size, name, world_ranks.at(rank), timeout_s),
      store_(std::move(store)),
      world_ranks_(std::move(world_ranks)),
      fds_(size, -1),
      prefix_(prefix),
      mid_send_(size, 0) {}

TcpCommunicator::~TcpCommunicator() {
  for (int fd : fds_) net::close_fd(fd);
}

std::string TcpCommunicator::peer_name(int peer) const {
  return fmt::format("rank {}", world_ranks_[peer]);
}

// Rank i listens, publishes ip:port in the store, connects to every lower rank and accepts every higher one;
// a 4-byte hello names the connecting rank.
void TcpCommunicator::connect_mesh() {
  if (size() == 1) return;
  const auto deadline = net::deadline_in(timeout_s());
  int port = 0;
  int lfd = net::listen_on(0, &port);
  try {
    const std::string addr = fmt::format("{}:{}", store_->local_address(), port);
    store_->set(fmt::format("{}/addr/{}", prefix_, rank()), addr);
    for (int j = 0; j < rank(); ++j) {
      std::string peer = store_->get(fmt::format("{}/addr/{}", prefix_, j));
      auto colon = peer.rfind(':');
      int fd = net::connect_to(peer.substr(0, colon), std::stoi(peer.substr(colon + 1)), deadline);
      int32_t me = rank();
      net::send_all(fd, &me, 4, deadline, peer_name(j));
      fds_[j] = fd;
    }
    for (int k = rank() + 1; k < size(); ++k) {
      int fd = net::accept_one(lfd, deadline);
      int32_t who = -1;
      net::recv_exact(fd, &who, 4, deadline, "a connecting rank");
      if (who <= rank() || who >= size() || fds_[who] != -1) {
        net::close_fd(fd);
        throw Error(ErrorKind::kRuntime, fmt::format("unexpected hello from group rank {}", who));
      }
      fds_[who] = fd;
    }
  } catch (const Error& e) {
    net::close_fd(lfd);
    throw CommError(fmt::format("rank {}, group {}: connecting the tcp mesh of {} ranks failed: {}",
                                world_rank(), name(), size(), e.what()),
                    e.hint());
  }
  net::close_fd(lfd);
  for (int fd : fds_)
    if (fd >= 0) net::set_nonblocking(fd, true);
}

void TcpCommunicator::exchange(int send_peer, const void* send_buf, size_t send_bytes, int recv_peer,
                               void* recv_buf, size_t recv_bytes) {
  Header out_h;
  out_h.bytes = send_bytes;
  Header in_h;
  size_t sent = 0, got = 0;  // bytes of header + payload moved so far
  const size_t send_total = send_peer >= 0 ? sizeof(Header) + send_bytes : 0;
  const size_t recv_total = recv_peer >= 0 ? sizeof(Header) + recv_bytes : 0;
  const char* sb = static_cast<const char*>(send_buf);
  char* rb = static_cast<char*>(recv_buf);
  struct MidSend {  // marks the peer while a message to it is incomplete
    std::vector<char>& flags;
    int peer;
    ~MidSend() {
      if (peer >= 0) flags[peer] = 0;
    }
  } mid{mid_send_, send_peer};
  if (send_peer >= 0) mid_send_[send_peer] = 1;
  // A receive-side failure first completes the message being sent (for at most 2 s), so that the stream to
  // that peer ends at a message boundary and the abort notice can follow: the peer then reports this
  // failure (naming the rank that died) rather than "closed its connection".
  auto fail_after_send = [&](const std::string& msg) {
    if (send_peer >= 0 && sent < send_total) {
      try {
        const auto deadline = net::deadline_in(2);
        if (sent < sizeof(Header))
          net::send_all(fds_[send_peer], reinterpret_cast<const char*>(&out_h) + sent, sizeof(Header) - sent,
                        deadline, peer_name(send_peer));
        const size_t off = sent < sizeof(Header) ? 0 : sent - sizeof(Header);
        net::send_all(fds_[send_peer], sb + off, send_bytes - off, deadline, peer_name(send_peer));
        mid_send_[send_peer] = 0;
      } catch (const Error&) {
        // The peer is not reading: it will see the connection close instead.
      }
    }
    fail(msg);
  };
  while (sent < send_total || got < recv_total) {
    if (aborted()) fail("the communicator was aborted (another group failed)");
    pollfd pf[2];
    int n = 0;
    if (sent < send_total) pf[n++] = {fds_[send_peer], POLLOUT, 0};
    if (got < recv_total) pf[n++] = {fds_[recv_peer], POLLIN, 0};
    int rc = ::poll(pf, n, 1000);
    if (rc < 0 && errno != EINTR) fail(fmt::format("poll: {}", std::strerror(errno)));
    if (sent < send_total) {
      ssize_t k;
      if (sent < sizeof(Header)) {
        k = ::send(fds_[send_peer], reinterpret_cast<const char*>(&out_h) + sent, sizeof(Header) - sent,
                   MSG_NOSIGNAL | MSG_DONTWAIT);
      } else {
        size_t off = sent - sizeof(Header);
        k = ::send(fds_[send_peer], sb + off, send_bytes - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      if (k > 0) {
        sent += static_cast<size_t>(k);
      } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        fail(fmt::format("sending to {} failed ({}): that rank exited or was killed", peer_name(send_peer),
                         std::strerror(errno)));
      }
    }
    if (got < recv_total) {
      ssize_t k;
      if (got < sizeof(Header)) {
        k = ::recv(fds_[recv_peer], reinterpret_cast<char*>(&in_h) + got, sizeof(Header) - got, MSG_DONTWAIT);
      } else {
        size_t off = got - sizeof(Header);
        k = ::recv(fds_[recv_peer], rb + off, recv_bytes - off, MSG_DONTWAIT);
      }
      if (k == 0)
        fail_after_send(fmt::format(
            "{} closed its connection: that rank exited or was killed (or aborted after a failure)",
            peer_name(recv_peer)));
      if (k > 0) {
        const bool header_done_before = got >= sizeof(Header);
        got += static_cast<size_t>(k);
        if (!header_done_before && got >= sizeof(Header)) {
          if (in_h.magic == kAbortMagic) {
            std::string why(std::min<uint64_t>(in_h.bytes, 4096), '\0');
            try {
              net::recv_exact(fds_[recv_peer], why.data(), why.size(), net::deadline_in(2),
                              peer_name(recv_peer));
            } catch (const Error&) {
              why = "(its message was cut off)";
            }
            fail_after_send(fmt::format("{} aborted after a failure: {}", peer_name(recv_peer), why));
          }
          if (in_h.magic != out_h.magic)
            fail_after_send(fmt::format("corrupt message header from {}", peer_name(recv_peer)));
          if (in_h.bytes != recv_bytes)
            fail(
                fmt::format("{} sent {} bytes where this rank expects {}: the ranks are running different "
                            "operations or shapes",
                            peer_name(recv_peer), in_h.bytes, recv_bytes));
        }
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        fail_after_send(fmt::format("receiving from {} failed ({}): that rank exited or was killed",
                                    peer_name(recv_peer), std::strerror(errno)));
      }
    }
  }
}

std::unique_ptr<Communicator> TcpCommunicator::do_split(int color, int key, const std::string& name) {
  auto all = gather_pairs(color, key);
  const int split_id = splits_++;
  if (color < 0) return nullptr;
  std::vector<std::pair<int, int>> members;  // (key, parent rank)
  for (int r = 0; r < size(); ++r)
    if (all[r].first == color) members.push_back({all[r].second, r});
  std::sort(members.begin(), members.end());
  std::vector<int> world;
  int new_rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    world.push_back(world_ranks_[members[i].second]);
    if (members[i].second == rank()) new_rank = static_cast<int>(i);
  }
  return create(store_, new_rank, static_cast<int>(members.size()), world, name,
                fmt::format("{}/split{}/{}", prefix_, split_id, color), timeout_s());
}

void TcpCommunicator::do_abort(const std::string& reason) {
  // Tell every peer why (best effort, never blocking), then shut the sockets down: that wakes this rank's
  // blocked poll and every peer's at once.
  Header h;
  h.magic = kAbortMagic;
  const std::string why = reason.substr(0, 4096);
  h.bytes = why.size();
  std::string notice(reinterpret_cast<const char*>(&h), sizeof(h));
  notice += why;
  for (size_t p = 0; p < fds_.size(); ++p) {
    if (fds_[p] < 0 || mid_send_[p]) continue;
    if (::send(fds_[p], notice.data(), notice.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) continue;
  }
  for (int fd : fds_)
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
}

}  // namespace primus::comm
