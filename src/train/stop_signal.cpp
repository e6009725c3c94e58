#include "train/stop_signal.h"

#include <signal.h>

namespace primus {

namespace {
std::atomic<int> g_signal{0};
struct sigaction g_old_term, g_old_int;

void on_signal(int sig) {
  // Only async-signal-safe work here: record the signal; SA_RESETHAND already restored the default action.
  g_signal.store(sig);
}
}  // namespace

StopSignal::StopSignal() {
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  // One-shot: a second signal takes the default action (terminate). SA_RESTART: interrupted I/O resumes.
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
}

StopSignal::~StopSignal() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
}

int StopSignal::requested() {
  return g_signal.load();
}

}  // namespace primus
