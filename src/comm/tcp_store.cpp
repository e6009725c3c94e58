#include "comm/tcp_store.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <vector>

#include "comm/socket_util.h"
#include "core/error.h"

namespace primus::comm {

// Wire format. Request: u8 cmd, u32 key length, key, u64 value length, value. Reply: u64 length, bytes.
namespace {
constexpr uint8_t kSet = 1, kGet = 2, kAdd = 3, kCheck = 4;

std::string encode_request(uint8_t cmd, const std::string& key, const std::string& value) {
  std::string out;
  out.push_back(static_cast<char>(cmd));
  uint32_t kl = static_cast<uint32_t>(key.size());
  uint64_t vl = value.size();
  out.append(reinterpret_cast<const char*>(&kl), 4);
  out += key;
  out.append(reinterpret_cast<const char*>(&vl), 8);
  out += value;
  return out;
}

std::string encode_reply(const std::string& value) {
  uint64_t n = value.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + value;
}
}  // namespace

// One thread multiplexing every client with poll(); GETs of missing keys wait in `waiting_`.
class TcpStore::Server {
 public:
  explicit Server(int port) {
    listen_fd_ = net::listen_on(port, &port_);
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

 private:
  void reply(int fd, const std::string& value) {
    try {
      net::send_all(fd, encode_reply(value).data(), encode_reply(value).size(), net::deadline_in(30),
                    "store client");
    } catch (const Error&) {
      // The client went away; its socket is dropped on the next poll.
    }
  }

  // Parses and serves every complete request in the client's buffer.
  void serve(int fd, std::string& buf) {
    for (;;) {
      if (buf.size() < 5) return;
      uint32_t kl;
      std::memcpy(&kl, buf.data() + 1, 4);
      if (buf.size() < 5 + kl + 8) return;
      uint64_t vl;
      std::memcpy(&vl, buf.data() + 5 + kl, 8);
      if (buf.size() < 13 + kl + vl) return;
      const uint8_t cmd = static_cast<uint8_t>(buf[0]);
      std::string key = buf.substr(5, kl);
      std::string value = buf.substr(13 + kl, vl);
      buf.erase(0, 13 + kl + vl);
      if (cmd == kSet) {
        data_[key] = value;
        reply(fd, "");
        auto range = waiting_.equal_range(key);
        for (auto it = range.first; it != range.second; ++it) reply(it->second, value);
        waiting_.erase(key);
      } else if (cmd == kGet) {
        auto it = data_.find(key);
        if (it != data_.end()) {
          reply(fd, it->second);
        } else {
          waiting_.emplace(key, fd);
        }
      } else if (cmd == kAdd) {
        int64_t delta = 0, cur = 0;
        std::memcpy(&delta, value.data(), std::min<size_t>(8, value.size()));
        auto it = data_.find(key);
        if (it != data_.end() && it->second.size() == 8) std::memcpy(&cur, it->second.data(), 8);
        cur += delta;
        std::string v(reinterpret_cast<const char*>(&cur), 8);
        data_[key] = v;
        reply(fd, v);
        auto range = waiting_.equal_range(key);
        for (auto w = range.first; w != range.second; ++w) reply(w->second, v);
        waiting_.erase(key);
      } else if (cmd == kCheck) {
        reply(fd, data_.count(key) ? "1" : "0");
      }
    }
  }

  void loop() {
    for (;;) {
      std::vector<pollfd> fds;
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({listen_fd_, POLLIN, 0});
      for (auto& [fd, _] : clients_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) clients_[fd] = "";
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        const int fd = fds[i].fd;
        char tmp[65536];
        ssize_t k = ::recv(fd, tmp, sizeof(tmp), MSG_DONTWAIT);
        if (k <= 0) {
          if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
          for (auto it = waiting_.begin(); it != waiting_.end();)
            it = it->second == fd ? waiting_.erase(it) : ++it;
          clients_.erase(fd);
          net::close_fd(fd);
          continue;
        }
        std::string& buf = clients_[fd];
        buf.append(tmp, static_cast<size_t>(k));
        serve(fd, buf);
      }
    }
  }

  int listen_fd_ = -1, port_ = 0;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::map<int, std::string> clients_;       // fd -> unparsed bytes
  std::map<std::string, std::string> data_;  // the store
  std::multimap<std::string, int> waiting_;  // key -> fds with a pending GET
};

TcpStore::TcpStore(const std::string& host, int port, bool serve, double timeout_s)
    : host_(host), port_(port), timeout_s_(timeout_s) {
  if (serve) {
    server_ = std::make_unique<Server>(port);
    port_ = server_->port();
  }
  try {
    fd_ = net::connect_to(host, port_, net::deadline_in(timeout_s));
  } catch (const Error& e) {
    throw Error(ErrorKind::kRuntime,
                fmt::format("rendezvous: cannot reach the TCP store of rank 0 at {}:{} within {:g} s ({})",
                            host, port_, timeout_s, e.what()),
                {}, "is rank 0 running, and do MASTER_ADDR/MASTER_PORT name it?");
  }
}

TcpStore::~TcpStore() {
  net::close_fd(fd_);
  server_.reset();
}

std::string TcpStore::request(uint8_t cmd, const std::string& key, const std::string& value,
                              const char* what) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = net::deadline_in(timeout_s_);
  const std::string peer = fmt::format("the TCP store at {}:{}", host_, port_);
  try {
    std::string req = encode_request(cmd, key, value);
    net::send_all(fd_, req.data(), req.size(), deadline, peer);
    uint64_t n = 0;
    net::recv_exact(fd_, &n, 8, deadline, peer);
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
  request(kSet, key, value, "set");
}

std::string TcpStore::get(const std::string& key) {
  return request(kGet, key, "", "get");
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::string v = request(kAdd, key, std::string(reinterpret_cast<const char*>(&delta), 8), "add");
  int64_t out = 0;
  std::memcpy(&out, v.data(), std::min<size_t>(8, v.size()));
  return out;
}

bool TcpStore::check(const std::string& key) {
  return request(kCheck, key, "", "check") == "1";
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
