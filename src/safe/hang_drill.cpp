#include "safe/hang_drill.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "comm/world.h"
#include "core/log.h"
#include "safe/hang_watchdog.h"
#include "safe/straggler.h"

namespace primus::safe {

int run_hang_drill(const HangDrillOptions& o) {
  comm::LaunchEnv env = comm::resolve_launch_env(comm::process_env_lookup());
  comm::World w = comm::init_world(env, {.backend = o.backend, .timeout_s = 600});
  comm::Communicator& world = *w.comm;
  int64_t stall_rank = -1, stall_step = -1, slow_rank = -1;
  double slow_factor = 1;
  if (const char* s = std::getenv("PRIMUS_INJECT_SLOW"); s && *s)
    if (std::sscanf(s, "%ld:%lf", &slow_rank, &slow_factor) != 2)
      throw ConfigError(fmt::format("environment: PRIMUS_INJECT_SLOW='{}' (expected <rank>:<factor>)", s));
  if (const char* s = std::getenv("PRIMUS_INJECT_STALL"); s && *s)
    if (std::sscanf(s, "%ld:%ld", &stall_rank, &stall_step) != 2)
      throw ConfigError(fmt::format("environment: PRIMUS_INJECT_STALL='{}' (expected <rank>:<step>)", s));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  WatchdogOptions wo;
  wo.dir = o.dir;
  wo.rank = world.rank();
  wo.world = world.size();
  wo.host = host;
  wo.hang_timeout_s = o.hang_timeout_s;
  HangWatchdog dog(wo);
  dog.start();
  world.barrier("hang drill start");
  const Stream cpu = Stream::cpu();
  for (int step = 1; step <= o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    dog.set_phase(fmt::format("step {}", step));
    const double work = o.step_ms * (slow_rank == world.rank() ? slow_factor : 1.0);
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(work));
    if (stall_rank == world.rank() && stall_step == step) {
      log::error("PRIMUS_INJECT_STALL: rank {} stops at step {} (test hook)", world.rank(), step);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    Tensor t = Tensor::from_vector<float>({1.0f}, {1});
    if (world.device_type() == DeviceType::kCPU) {
      world.all_reduce(t, comm::ReduceOp::kSum, cpu, fmt::format("drill step {}", step));
    } else {
      const Stream s = cuda_compute_stream(env.local_rank);
      Tensor d = t.to(s);
      world.all_reduce(d, comm::ReduceOp::kSum, s, fmt::format("drill step {}", step));
      stream_sync(s);
    }
    dog.progress(step,
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    // Straggler check as the trainer does it (rank 0, from the heartbeats), every 5 steps.
    if (world.rank() == 0 && step % 5 == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the peers' next heartbeat write
      std::vector<double> per_rank;
      for (const Heartbeat& b : dog.read_all()) per_rank.push_back(b.missing ? 0 : b.window_ms);
      for (const StragglerFinding& f : find_stragglers(per_rank, o.straggler_factor))
        log::warn(
            "straggler at step {}: rank {}: {:.1f} ms of own work per step vs median {:.1f} ms (score "
            "{:.2f})",
            step, f.rank, f.step_ms, f.median_ms, f.score);
    }
  }
  world.barrier("hang drill end");
  dog.stop();
  log::info("hang drill: {} steps on {} ranks, no hang (timeout {:.1f} s)", o.steps, world.size(),
            dog.timeout_s());
  return 0;
}

}  // namespace primus::safe
