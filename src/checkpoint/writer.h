#pragma once
// Saves checkpoints, synchronously or in the background. A save first waits for the previous background
// write (one in flight at a time: its staging buffers are reused), then stages the parameters and optimizer
// state into host memory (pinned on the GPU) — the only time training is blocked — and then either publishes
// at once or hands the snapshot to a writer thread. The snapshot is a copy, so training may update the
// parameters while it is written: the files hold the state of the iteration that was staged.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "checkpoint/publish.h"
#include "checkpoint/snapshot.h"

namespace primus::ckpt {

struct SaveReport {
  int64_t iteration = 0;
  double blocked_seconds = 0;  // waiting for the previous write + staging
  double stage_seconds = 0;
  uint64_t staged_bytes = 0;
};

class CheckpointWriter {
 public:
  CheckpointWriter(std::string root, int64_t keep_latest_k, bool async);
  ~CheckpointWriter();  // finishes the in-flight write (its error is logged)
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Saves the state of `params` as iteration state.iteration. Throws the error of a failed earlier
  // background write, or of this write when synchronous.
  SaveReport save(const ParamStore& params, const Stream& s, const TrainingState& state,
                  const std::string& config_yaml, bool save_optim);
  // Blocks until no write is in flight; rethrows a background write's error.
  void wait();
  const std::string& root() const { return root_; }
  // The most recent publication (for tests and logs).
  std::optional<PublishStats> last_published() const;

 private:
  void worker();
  void publish_and_log(const Snapshot& snap);

  std::string root_;
  int64_t keep_;
  bool async_;
  Stager stager_;
  Snapshot pending_;
  bool has_pending_ = false;
  bool busy_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::optional<PublishStats> last_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace primus::ckpt
