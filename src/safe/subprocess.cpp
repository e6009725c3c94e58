#include "safe/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace primus::safe {

std::string self_executable() {
  char buf[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw Error(ErrorKind::kRuntime, "cannot read /proc/self/exe");
  return std::string(buf, static_cast<size_t>(n));
}

std::vector<ChildResult> run_children(const std::vector<ChildSpec>& children, double timeout_s) {
  struct Running {
    pid_t pid = -1;
    int fd = -1;
    bool done = false;
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::vector<Running> run(children.size());
  std::vector<ChildResult> res(children.size());
  for (size_t i = 0; i < children.size(); ++i) {
    int fds[2];
    if (pipe(fds) != 0) throw Error(ErrorKind::kRuntime, std::string("pipe: ") + std::strerror(errno));
    const pid_t pid = fork();
    if (pid < 0) throw Error(ErrorKind::kRuntime, std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      setpgid(0, 0);
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      for (const auto& [k, v] : children[i].env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv;
      for (const std::string& a : children[i].argv) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
      std::_Exit(127);
    }
    setpgid(pid, pid);
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    run[i] = {pid, fds[0], false};
  }
  size_t left = children.size();
  char buf[4096];
  while (left > 0) {
    std::vector<pollfd> pf;
    for (const Running& r : run)
      if (r.fd >= 0) pf.push_back({r.fd, POLLIN, 0});
    if (!pf.empty()) poll(pf.data(), pf.size(), 100);
    for (size_t i = 0; i < run.size(); ++i) {
      Running& r = run[i];
      if (r.fd >= 0) {
        for (;;) {
          const ssize_t n = read(r.fd, buf, sizeof(buf));
          if (n > 0) {
            res[i].output.append(buf, static_cast<size_t>(n));
            continue;
          }
          if (n == 0) {
            close(r.fd);
            r.fd = -1;
          }
          break;
        }
      }
      if (r.done) continue;
      int status = 0;
      const pid_t w = waitpid(r.pid, &status, WNOHANG);
      if (w == r.pid) {
        r.done = true;
        --left;
        res[i].seconds = elapsed();
        if (WIFEXITED(status)) res[i].exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) res[i].signal = WTERMSIG(status);
      } else if (elapsed() > timeout_s) {
        kill(-r.pid, SIGKILL);
        waitpid(r.pid, &status, 0);
        r.done = true;
        --left;
        res[i].timed_out = true;
        res[i].seconds = elapsed();
        if (r.fd >= 0) {
          close(r.fd);
          r.fd = -1;
        }
      }
    }
    if (pf.empty() && left > 0) usleep(20000);
  }
  for (Running& r : run)
    if (r.fd >= 0) close(r.fd);
  return res;
}

}  // namespace primus::safe
