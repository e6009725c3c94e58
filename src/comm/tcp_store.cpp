#include "comm/tcp_store.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "comm/socket_util.h"
#include "core/error.h"
#include "core/log.h"

namespace primus::comm {

namespace {
constexpr const char* kLabel = "primus-store";
}  // namespace

// One thread multiplexing every client with poll(); GETs of missing keys wait in `waiting_`. New connections
// go through the AuthGate first; only those that proved the token reach the request parser.
class TcpStore::Server {
 public:
  Server(const std::string& bind_host, int port, const RendezvousOptions& o)
      : limits_(o.store), gate_(o.token, kLabel, 0, o.auth, "tcp store") {
    listen_fd_ = net::listen_on(bind_host, port, &port_);
    net::set_nonblocking(listen_fd_, true);
    if (pipe(wake_) != 0) throw Error(ErrorKind::kRuntime, "tcp store: pipe failed");
    thread_ = std::thread([this] { loop(); });
  }
  ~Server() {
    char c = 0;
    if (write(wake_[1], &c, 1) < 0) {
    }
    thread_.join();
    for (auto& [fd, _] : clients_) net::close_fd(fd);
    net::close_fd(listen_fd_);
    net::close_fd(wake_[0]);
    net::close_fd(wake_[1]);
  }
  int port() const { return port_; }
  uint64_t refused() const { return refused_.load(); }

 private:
  struct Client {
    std::string peer;
    std::string buf;  // bytes of requests not yet complete (at most one request's worth + one read)
    std::optional<net::Clock::time_point> frame_started;  // when the incomplete request began
  };

  void reply(int fd, const std::string& value) {
    const std::string out = encode_store_reply(value);
    try {
      net::send_all(fd, out.data(), out.size(), net::deadline_in(30), "store client");
    } catch (const Error&) {
      // The client went away; its socket is dropped on the next poll.
    }
  }

  void close_client(int fd, const std::string& why) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    if (!why.empty()) {
      log::warn("tcp store: closing the connection from {}: {}", it->second.peer, why);
      ++closed_;
    }
    for (auto w = waiting_.begin(); w != waiting_.end();) w = w->second == fd ? waiting_.erase(w) : ++w;
    clients_.erase(it);
    net::close_fd(fd);
  }

  void execute(int fd, const StoreRequest& r) {
    const std::string key(r.key);
    if (r.cmd == StoreCmd::kSet) {
      data_[key] = std::string(r.value);
      reply(fd, "");
      wake_waiters(key);
    } else if (r.cmd == StoreCmd::kGet) {
      auto it = data_.find(key);
      if (it != data_.end()) {
        reply(fd, it->second);
      } else {
        waiting_.emplace(key, fd);
      }
    } else if (r.cmd == StoreCmd::kAdd) {
      int64_t delta = 0, cur = 0;
      std::memcpy(&delta, r.value.data(), 8);  // the parser guarantees 8 bytes
      auto it = data_.find(key);
      if (it != data_.end() && it->second.size() == 8) std::memcpy(&cur, it->second.data(), 8);
      // Wrap-around instead of signed overflow (undefined behaviour) for a hostile delta.
      cur = static_cast<int64_t>(static_cast<uint64_t>(cur) + static_cast<uint64_t>(delta));
      data_[key] = std::string(reinterpret_cast<const char*>(&cur), 8);
      reply(fd, data_[key]);
      wake_waiters(key);
    } else if (r.cmd == StoreCmd::kCheck) {
      reply(fd, data_.count(key) ? "1" : "0");
    }
  }

  void wake_waiters(const std::string& key) {
    auto range = waiting_.equal_range(key);
    std::vector<int> fds;
    for (auto it = range.first; it != range.second; ++it) fds.push_back(it->second);
    waiting_.erase(key);
    for (int w : fds) reply(w, data_[key]);
  }

  // Parses and serves every complete request in the client's buffer; closes the client on a bad one.
  void serve(int fd, Client& c) {
    size_t off = 0;
    bool progressed = false;
    for (;;) {
      const StoreParse p = parse_store_request(std::string_view(c.buf).substr(off), limits_);
      if (p.status == StoreParse::kBad) {
        close_client(fd, p.error);
        return;
      }
      if (p.status == StoreParse::kNeedMore) break;
      execute(fd, p.request);
      off += p.consumed;
      progressed = true;
    }
    c.buf.erase(0, off);
    if (c.buf.empty()) {
      c.frame_started.reset();
    } else if (progressed || !c.frame_started) {
      c.frame_started = net::Clock::now();
    }
  }

  void read_client(int fd) {
    Client& c = clients_[fd];
    char tmp[65536];
    const ssize_t k = ::recv(fd, tmp, sizeof(tmp), MSG_DONTWAIT);
    if (k == 0) {
      close_client(
          fd, c.buf.empty() ? "" : fmt::format("closed in the middle of a request ({} bytes)", c.buf.size()));
      return;
    }
    if (k < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) close_client(fd, "");
      return;
    }
    c.buf.append(tmp, static_cast<size_t>(k));
    serve(fd, c);
  }

  void expire_slow_requests() {
    const auto now = net::Clock::now();
    std::vector<int> late;
    for (auto& [fd, c] : clients_)
      if (c.frame_started &&
          std::chrono::duration<double>(now - *c.frame_started).count() > limits_.frame_timeout_s)
        late.push_back(fd);
    for (int fd : late)
      close_client(fd, fmt::format("a request stayed incomplete for {:g} s ({} bytes; "
                                   "PRIMUS_STORE_FRAME_TIMEOUT_S)",
                                   limits_.frame_timeout_s, clients_[fd].buf.size()));
  }

  void loop() {
    for (;;) {
      std::vector<pollfd> fds;
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({listen_fd_, POLLIN, 0});
      for (auto& [fd, _] : clients_) fds.push_back({fd, POLLIN, 0});
      const size_t pending_first = fds.size();
      gate_.add_pollfds(fds);
      // A finite timeout: handshake and request deadlines expire even when nobody sends anything.
      if (::poll(fds.data(), fds.size(), 250) < 0 && errno != EINTR) continue;
      if (fds[0].revents) return;
      for (size_t i = 2; i < pending_first; ++i)
        if (fds[i].revents) read_client(fds[i].fd);
      for (const AuthGate::Admitted& a : gate_.service(fds, pending_first)) clients_[a.fd].peer = a.peer;
      if (fds[1].revents & POLLIN) gate_.accept_all(listen_fd_);
      expire_slow_requests();
      refused_ = gate_.refused() + closed_;
    }
  }

  StoreLimits limits_;
  AuthGate gate_;
  int listen_fd_ = -1, port_ = 0;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::map<int, Client> clients_;            // authenticated connections
  std::map<std::string, std::string> data_;  // the store
  std::multimap<std::string, int> waiting_;  // key -> fds with a pending GET
  uint64_t closed_ = 0;                      // authenticated clients closed for a bad request
  std::atomic<uint64_t> refused_{0};
};

TcpStore::TcpStore(const std::string& host, int port, bool serve, double timeout_s, RendezvousOptions options)
    : options_(std::move(options)), host_(host), port_(port), timeout_s_(timeout_s) {
  if (serve) {
    const std::string bind = options_.bind_addr.empty() ? host : options_.bind_addr;
    require_token_beyond_loopback(options_, bind, "the TCP store (rank 0) listening");
    server_ = std::make_unique<Server>(bind, port, options_);
    port_ = server_->port();
  } else {
    require_token_beyond_loopback(options_, host, "reaching the TCP store");
  }
  const auto deadline = net::deadline_in(timeout_s);
  const std::string peer = fmt::format("the TCP store at {}:{}", host, port_);
  try {
    fd_ = net::connect_to(host, port_, deadline);
    client_handshake(fd_, options_.token, kLabel, 0, 0, deadline, peer);
  } catch (const Error& e) {
    net::close_fd(fd_);
    fd_ = -1;
    throw Error(ErrorKind::kRuntime,
                fmt::format("rendezvous: cannot reach the TCP store of rank 0 at {}:{} within {:g} s ({})",
                            host, port_, timeout_s, e.what()),
                {},
                e.hint().empty() ? "is rank 0 running, and do MASTER_ADDR/MASTER_PORT name it?" : e.hint());
  }
}

TcpStore::~TcpStore() {
  net::close_fd(fd_);
  server_.reset();
}

uint64_t TcpStore::refused_connections() const {
  return server_ ? server_->refused() : 0;
}

std::string TcpStore::request(StoreCmd cmd, const std::string& key, const std::string& value,
                              const char* what) {
  // The server would close the connection on these: fail here, naming the key, instead.
  if (key.size() > options_.store.max_key_bytes)
    throw Error(ErrorKind::kRuntime,
                fmt::format("rendezvous: store {}: key of {} bytes exceeds the cap of {} ('{}...')", what,
                            key.size(), options_.store.max_key_bytes, key.substr(0, 64)),
                {}, "PRIMUS_STORE_MAX_KEY_BYTES raises it (on every rank)");
  if (value.size() > options_.store.max_value_bytes)
    throw Error(ErrorKind::kRuntime,
                fmt::format("rendezvous: store {} of '{}': value of {} bytes exceeds the cap of {}", what,
                            key, value.size(), options_.store.max_value_bytes),
                {}, "PRIMUS_STORE_MAX_VALUE_BYTES raises it (on every rank)");
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = net::deadline_in(timeout_s_);
  const std::string peer = fmt::format("the TCP store at {}:{}", host_, port_);
  try {
    const std::string req = encode_store_request(cmd, key, value);
    net::send_all(fd_, req.data(), req.size(), deadline, peer);
    uint8_t len[8];
    net::recv_exact(fd_, len, 8, deadline, peer);
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t{len[i]} << (8 * i);
    if (n > options_.store.max_value_bytes)
      throw Error(ErrorKind::kRuntime, fmt::format("{} announced a reply of {} bytes (cap {})", peer, n,
                                                   options_.store.max_value_bytes));
    std::string out(n, '\0');
    if (n) net::recv_exact(fd_, out.data(), n, deadline, peer);
    return out;
  } catch (const Error& e) {
    throw Error(ErrorKind::kRuntime,
                fmt::format("rendezvous: store {} of '{}' failed after up to {:g} s: {}", what, key,
                            timeout_s_, e.what()),
                {}, "a rank that never arrived, or rank 0 (which serves the store) exited");
  }
}

void TcpStore::set(const std::string& key, const std::string& value) {
  request(StoreCmd::kSet, key, value, "set");
}

std::string TcpStore::get(const std::string& key) {
  return request(StoreCmd::kGet, key, "", "get");
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::string v = request(StoreCmd::kAdd, key, std::string(reinterpret_cast<const char*>(&delta), 8), "add");
  if (v.size() != 8)
    throw Error(
        ErrorKind::kRuntime,
        fmt::format("rendezvous: store add of '{}': the store replied {} bytes, not 8", key, v.size()));
  int64_t out = 0;
  std::memcpy(&out, v.data(), 8);
  return out;
}

bool TcpStore::check(const std::string& key) {
  return request(StoreCmd::kCheck, key, "", "check") == "1";
}

void TcpStore::barrier(const std::string& name, int n) {
  const std::string key = "barrier/" + name;
  if (add(key + "/count", 1) == n) set(key + "/done", "1");
  get(key + "/done");
}

std::string TcpStore::local_address() const {
  return net::local_address(fd_);
}

}  // namespace primus::comm
