#pragma once
// Runs the built `primus` binary (PRIMUS_BINARY) as a child process with a controlled environment and
// captures its exit code, stdout, stderr, wall time and CPU time.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace primus::cli_test {

// The Debian fortunes corpus the end-to-end runs train on (package fortunes-min; tests skip without it).
inline constexpr const char* kFortunes = "/usr/share/games/fortunes";

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  double seconds = 0;
  // The child's user + system CPU time. "This did not build or train anything" is asserted on it, not on the
  // wall time: a 20 ms dry run once took 1.27 s of wall time on a loaded 2-core CI machine.
  double cpu_seconds = 0;
};

inline std::string shared_dir() {
  return PRIMUS_SHARED_DIR;
}
inline std::string primus_configs() {
  return shared_dir() + "/primus-configs/primus/configs";
}
inline std::string primus_examples() {
  return shared_dir() + "/primus-configs/examples";
}
inline std::string project_dir() {
  return PRIMUS_SOURCE_DIR;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `env`: variables to set (std::nullopt: unset). PRIMUS_CONFIG_PATH and WORLD_SIZE are cleared unless given,
// so that the caller's environment cannot change a test.
inline CliResult run_primus(const std::vector<std::string>& args,
                            std::map<std::string, std::optional<std::string>> env = {},
                            const std::string& cwd = "") {
  for (const char* k : {"PRIMUS_CONFIG_PATH", "WORLD_SIZE", "PRIMUS_HOME"})
    if (env.find(k) == env.end()) env[k] = std::nullopt;
  std::string dir = (std::filesystem::temp_directory_path() / "primus-cli-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return {};
  const std::string out_path = dir + "/out", err_path = dir + "/err";
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    for (const auto& [k, v] : env) {
      if (v) {
        setenv(k.c_str(), v->c_str(), 1);
      } else {
        unsetenv(k.c_str());
      }
    }
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<char*> argv;
    std::string binary = PRIMUS_BINARY;
    argv.push_back(binary.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  CliResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto secs = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  r.cpu_seconds = secs(usage.ru_utime) + secs(usage.ru_stime);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return r;
}

}  // namespace primus::cli_test
