#include "parallel/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "comm/job_auth.h"
#include "comm/socket_util.h"
#include "core/error.h"

namespace primus::parallel {

namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const int saved = errno;
  unsigned char c = static_cast<unsigned char>(sig);
  if (write(g_signal_pipe[1], &c, 1) < 0) {
  }
  errno = saved;
}

struct OutputPipe {  // one of a child rank's output pipes (stdout, stderr)
  int fd = -1;
  std::string pending;  // bytes after the last newline
  FILE* out = nullptr;
};

struct Rank {
  int global = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  OutputPipe streams[2];
};

void write_all(int fd, const std::string& s) {
  const char* p = s.data();
  size_t n = s.size();
  while (n > 0) {
    ssize_t k = ::write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

// Emits every complete line with the rank prefix; one write per line so lines from ranks never mix.
void emit_lines(Rank& r, OutputPipe& s, bool flush_partial) {
  size_t start = 0;
  for (;;) {
    size_t nl = s.pending.find('\n', start);
    if (nl == std::string::npos) break;
    write_all(fileno(s.out), fmt::format("[rank {}] {}\n", r.global, s.pending.substr(start, nl - start)));
    start = nl + 1;
  }
  s.pending.erase(0, start);
  if (flush_partial && !s.pending.empty()) {
    write_all(fileno(s.out), fmt::format("[rank {}] {}\n", r.global, s.pending));
    s.pending.clear();
  }
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return fmt::format("was killed by SIG{}", name ? name : std::to_string(WTERMSIG(status)).c_str());
  }
  return "stopped";
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    throw Error(ErrorKind::kRuntime, "primus launch: cannot find its own executable (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

int run_launcher(const LaunchOptions& o) {
  if (o.nproc_per_node < 1)
    throw ConfigError(fmt::format("--nproc-per-node {} must be >= 1", o.nproc_per_node));
  if (o.nnodes < 1) throw ConfigError(fmt::format("--nnodes {} must be >= 1", o.nnodes));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw ConfigError(fmt::format("--node-rank {} must be in [0, --nnodes {})", o.node_rank, o.nnodes));
  if (o.command.empty())
    throw ConfigError("primus launch: no command to run",
                      "primus launch --nproc-per-node 2 -- train pretrain ...");
  if (o.master_port < 0 || o.master_port > 65535)
    throw ConfigError(fmt::format("--master-port {} is not a TCP port", o.master_port));
  if (o.master_port == 0 && o.nnodes > 1)
    throw ConfigError("--master-port 0 (pick a free port) works only with --nnodes 1: every node must agree");
  // The job's secret (comm/job_auth.h): the user's PRIMUS_JOB_TOKEN (the children inherit it), else a fresh
  // random one for a single-node job. Nodes of a multi-node job cannot agree on a generated one.
  const comm::RendezvousOptions rdzv = comm::RendezvousOptions::from_env();  // validates the variables now
  std::string new_token;
  if (rdzv.token.empty()) {
    if (o.nnodes == 1) {
      new_token = comm::generate_job_token();
    } else if (!comm::is_loopback_host(o.master_addr)) {
      throw ConfigError(
          fmt::format("--nnodes {}: PRIMUS_JOB_TOKEN is not set; every node's ranks must prove the same "
                      "secret to the rendezvous at {}",
                      o.nnodes, o.master_addr),
          "export the same random value on every node before `primus launch`, e.g. "
          "PRIMUS_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')");
    }
  }
  const int port = o.master_port == 0 ? comm::net::pick_free_port() : o.master_port;
  const int world = o.nnodes * o.nproc_per_node;

  std::vector<std::string> argv_strings;
  std::string program;
  if (o.command[0].find('/') != std::string::npos) {
    program = o.command[0];
    argv_strings = o.command;
  } else {
    program = self_exe();
    argv_strings.push_back(program);
    argv_strings.insert(argv_strings.end(), o.command.begin(), o.command.end());
  }

  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) throw Error(ErrorKind::kRuntime, "pipe failed");
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGCHLD}) sigaction(sig, &sa, nullptr);

  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string omp_threads =
      std::to_string(std::max(1u, cores / static_cast<unsigned>(o.nproc_per_node)));

  std::vector<Rank> ranks(o.nproc_per_node);
  for (int local = 0; local < o.nproc_per_node; ++local) {
    Rank& r = ranks[local];
    r.global = o.node_rank * o.nproc_per_node + local;
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)
      throw Error(ErrorKind::kRuntime, "primus launch: pipe failed");
    pid_t pid = fork();
    if (pid < 0)
      throw Error(ErrorKind::kRuntime, fmt::format("primus launch: fork failed: {}", std::strerror(errno)));
    if (pid == 0) {
      // Own process group: a terminal's Ctrl-C reaches only the launcher, which forwards it once. Die with
      // the launcher if it is killed outright.
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(out_pipe[1], 1);
      dup2(err_pipe[1], 2);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig : {SIGINT, SIGTERM, SIGCHLD}) sigaction(sig, &dfl, nullptr);
      auto set = [](const char* k, const std::string& v) { setenv(k, v.c_str(), 1); };
      set("RANK", std::to_string(r.global));
      set("WORLD_SIZE", std::to_string(world));
      set("LOCAL_RANK", std::to_string(local));
      set("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node));
      set("GROUP_RANK", std::to_string(o.node_rank));
      set("ROLE_RANK", std::to_string(r.global));
      set("ROLE_WORLD_SIZE", std::to_string(world));
      set("MASTER_ADDR", o.master_addr);
      set("MASTER_PORT", std::to_string(port));
      if (!new_token.empty()) set("PRIMUS_JOB_TOKEN", new_token);  // never printed
      set("PRIMUS_LAUNCHER", "1");  // the ranks leave the [rank N] prefix to the launcher
      setenv("OMP_NUM_THREADS", omp_threads.c_str(), 0);  // only when unset, as torchrun (which sets 1)
      std::vector<char*> argv;
      for (std::string& a : argv_strings) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(program.c_str(), argv.data());
      std::fprintf(stderr, "primus launch: cannot run %s: %s\n", program.c_str(), std::strerror(errno));
      _exit(127);
    }
    setpgid(pid, pid);  // also here: whichever of parent and child runs first makes the group
    close(out_pipe[1]);
    close(err_pipe[1]);
    r.pid = pid;
    r.running = true;
    r.streams[0] = {out_pipe[0], "", stdout};
    r.streams[1] = {err_pipe[0], "", stderr};
  }
  std::fflush(stdout);

  using Clock = std::chrono::steady_clock;
  // Ranks that failed on their own, in the order they were reaped. When one rank dies, its peers usually fail
  // a moment later on the broken connection; under load one sweep can reap them together, the peers first.
  // So the launcher waits kSettle after the first failure, then names the root cause: a rank killed by a
  // signal (nobody here sent one yet) before ranks that exited with an error, else the first reaped.
  struct Failure {
    int index;
    int status;
  };
  std::vector<Failure> failures;
  constexpr auto kSettle = std::chrono::milliseconds(500);
  std::optional<Clock::time_point> stop_at;
  int culprit = -1;  // index into failures, once named
  auto name_culprit = [&] {
    culprit = 0;
    for (size_t f = 0; f < failures.size(); ++f)
      if (WIFSIGNALED(failures[f].status)) {
        culprit = static_cast<int>(f);
        break;
      }
  };
  int forwarded_signal = 0;
  std::optional<Clock::time_point> kill_at;
  std::optional<Clock::time_point> drain_until;

  // Each rank leads its own process group: signal the group, so that its helpers (a shell's children, ...)
  // go too.
  auto signal_running = [&](int sig) {
    for (Rank& r : ranks)
      if (r.running && kill(-r.pid, sig) != 0) kill(r.pid, sig);
  };
  auto any_running = [&] {
    for (Rank& r : ranks)
      if (r.running) return true;
    return false;
  };
  auto any_open = [&] {
    for (Rank& r : ranks)
      for (OutputPipe& s : r.streams)
        if (s.fd >= 0) return true;
    return false;
  };

  while (any_running() || (any_open() && (!drain_until || Clock::now() < *drain_until))) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, int>> which;  // (rank, stream)
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    which.push_back({-1, -1});
    for (int i = 0; i < static_cast<int>(ranks.size()); ++i)
      for (int k = 0; k < 2; ++k)
        if (ranks[i].streams[k].fd >= 0) {
          fds.push_back({ranks[i].streams[k].fd, POLLIN, 0});
          which.push_back({i, k});
        }
    ::poll(fds.data(), fds.size(), 100);
    if (fds[0].revents & POLLIN) {
      unsigned char sig = 0;
      while (read(g_signal_pipe[0], &sig, 1) == 1) {
        if (sig == SIGINT || sig == SIGTERM) {
          std::fprintf(stderr, "primus launch: got SIG%s, forwarding it to the ranks\n", sigabbrev_np(sig));
          forwarded_signal = sig;
          signal_running(sig);
          if (!kill_at)
            kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.grace_s * 1000));
        }
      }
    }
    for (size_t f = 1; f < fds.size(); ++f) {
      if (!(fds[f].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Rank& r = ranks[which[f].first];
      OutputPipe& s = r.streams[which[f].second];
      char buf[65536];
      ssize_t n = read(s.fd, buf, sizeof(buf));
      if (n > 0) {
        s.pending.append(buf, static_cast<size_t>(n));
        emit_lines(r, s, false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        emit_lines(r, s, true);
        close(s.fd);
        s.fd = -1;
      }
    }
    for (int i = 0; i < static_cast<int>(ranks.size()); ++i) {
      Rank& r = ranks[i];
      if (!r.running) continue;
      int status = 0;
      pid_t p = waitpid(r.pid, &status, WNOHANG);
      if (p != r.pid) continue;
      r.running = false;
      r.status = status;
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && culprit < 0 && forwarded_signal == 0) {
        failures.push_back({i, status});
        if (!stop_at) stop_at = Clock::now() + kSettle;
      }
    }
    if (stop_at && culprit < 0 && (Clock::now() >= *stop_at || !any_running())) {
      name_culprit();
      const Failure& c = failures[static_cast<size_t>(culprit)];
      std::fprintf(stderr, "primus launch: rank %d %s; stopping the other ranks\n", ranks[c.index].global,
                   describe_status(c.status).c_str());
      for (const Failure& f : failures)
        if (&f != &c)
          std::fprintf(stderr, "primus launch: rank %d %s too\n", ranks[f.index].global,
                       describe_status(f.status).c_str());
      signal_running(SIGTERM);
      kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.grace_s * 1000));
    }
    if (kill_at && Clock::now() >= *kill_at && any_running()) {
      std::fprintf(stderr, "primus launch: ranks still running %g s after SIGTERM: sending SIGKILL\n",
                   o.grace_s);
      signal_running(SIGKILL);
      kill_at.reset();
    }
    // Children are gone but a grandchild may hold a pipe open: drain for at most a second more.
    if (!any_running() && !drain_until) drain_until = Clock::now() + std::chrono::seconds(1);
  }
  for (Rank& r : ranks)
    for (OutputPipe& s : r.streams) {
      if (s.fd >= 0) {
        emit_lines(r, s, true);
        close(s.fd);
      }
    }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGCHLD}) sigaction(sig, &dfl, nullptr);
  close(g_signal_pipe[0]);
  close(g_signal_pipe[1]);

  if (culprit >= 0) {
    const Failure& c = failures[static_cast<size_t>(culprit)];
    std::fprintf(stderr, "primus launch: failed: rank %d %s\n", ranks[c.index].global,
                 describe_status(c.status).c_str());
    int code = exit_code_of(c.status);
    return code == 0 ? 1 : code;
  }
  if (forwarded_signal != 0) {
    std::fprintf(stderr, "primus launch: stopped by SIG%s\n", sigabbrev_np(forwarded_signal));
    return 128 + forwarded_signal;
  }
  return 0;
}

}  // namespace primus::parallel
