#include "comm/tcp_communicator.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "comm/job_auth.h"
#include "comm/rank_names.h"
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
  return rank_name(world_ranks_[peer]);
}

// Rank i listens on the address it reaches the store from, publishes ip:port in the store, connects to every
// lower rank and accepts every higher one. Each connection first proves the job token (comm/job_auth.h) with
// the connecting rank bound into the proof; only then is its claimed rank believed, and a rank out of range
// or already connected is refused. Strangers on the port are logged and dropped without disturbing the mesh.
void TcpCommunicator::connect_mesh() {
  if (size() == 1) return;
  const auto deadline = net::deadline_in(timeout_s());
  const RendezvousOptions& opt = store_->options();
  const std::string local = store_->local_address();
  const std::string bind = opt.bind_addr == "0.0.0.0" ? opt.bind_addr : local;
  const std::string label = "primus-mesh/" + prefix_;
  require_token_beyond_loopback(opt, bind, "the tcp data plane listening");  // a ConfigError, not wrapped
  int lfd = -1;
  try {
    int port = 0;
    lfd = net::listen_on(bind, 0, &port);
    net::set_nonblocking(lfd, true);
    store_->set(fmt::format("{}/addr/{}", prefix_, rank()), fmt::format("{}:{}", local, port));
    for (int j = 0; j < rank(); ++j) {
      const std::string peer = store_->get(fmt::format("{}/addr/{}", prefix_, j));
      const auto colon = peer.rfind(':');
      const int peer_port = colon == std::string::npos ? -1 : std::atoi(peer.c_str() + colon + 1);
      if (peer_port <= 0 || peer_port > 65535)
        throw Error(ErrorKind::kRuntime, fmt::format("{} published a bad address '{}'", peer_name(j), peer));
      const int fd = net::connect_to(peer.substr(0, colon), peer_port, deadline);
      fds_[j] = fd;
      client_handshake(fd, opt.token, label, static_cast<uint64_t>(rank()), static_cast<uint64_t>(j),
                       deadline, fmt::format("{} at {}", peer_name(j), peer));
    }
    AuthGate gate(opt.token, label, static_cast<uint64_t>(rank()), opt.auth,
                  fmt::format("tcp data plane of rank {} (group {})", world_rank(), name()));
    int missing = size() - rank() - 1;
    while (missing > 0) {
      if (net::Clock::now() >= deadline) {
        std::string who;
        for (int k = rank() + 1; k < size(); ++k)
          if (fds_[k] < 0) who += (who.empty() ? "" : ", ") + peer_name(k);
        throw Error(ErrorKind::kRuntime,
                    fmt::format("timed out after {:g} s waiting for {} to connect", timeout_s(), who));
      }
      std::vector<pollfd> pfs{{lfd, POLLIN, 0}};
      gate.add_pollfds(pfs);
      if (::poll(pfs.data(), pfs.size(), 250) < 0 && errno != EINTR)
        throw Error(ErrorKind::kRuntime, fmt::format("poll: {}", std::strerror(errno)));
      for (const AuthGate::Admitted& a : gate.service(pfs, 1)) {
        const int64_t who = a.claim > static_cast<uint64_t>(size()) ? -1 : static_cast<int64_t>(a.claim);
        if (who <= rank() || who >= size()) {
          gate.refuse(a.fd, a.peer,
                      fmt::format("claims group rank {}, but only ranks {}..{} connect to this rank", a.claim,
                                  rank() + 1, size() - 1));
        } else if (fds_[who] >= 0) {
          gate.refuse(a.fd, a.peer, fmt::format("claims group rank {}, which is already connected", who));
        } else {
          fds_[who] = a.fd;
          --missing;
        }
      }
      if (pfs[0].revents & POLLIN) gate.accept_all(lfd);
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

std::unique_ptr<Communicator> TcpCommunicator::do_split(int color, int key, const std::string& name,
                                                        bool /*low_latency: synchronous anyway*/) {
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
