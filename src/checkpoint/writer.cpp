#include "checkpoint/writer.h"

#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"

namespace primus::ckpt {

CheckpointWriter::CheckpointWriter(std::string root, int64_t keep_latest_k, bool async)
    : root_(std::move(root)), keep_(keep_latest_k), async_(async) {
  std::error_code ec;
  std::filesystem::create_directories(root_, ec);
  if (!ec) clean_stale_entries(root_);
  if (async_) thread_ = std::thread([this] { worker(); });
}

CheckpointWriter::~CheckpointWriter() {
  if (!async_) return;
  try {
    wait();
  } catch (const std::exception& e) {
    log::error("checkpoint: background write failed: {}", e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CheckpointWriter::publish_and_log(const Snapshot& snap) {
  PublishStats st = publish_checkpoint(snap, root_, keep_);
  const double mb = static_cast<double>(st.bytes) / 1e6;
  log::info("checkpoint: saved {} ({:.1f} MB written in {:.2f} s, {:.0f} MB/s; published in {:.2f} s{})",
            st.dir, mb, st.write_seconds, st.write_seconds > 0 ? mb / st.write_seconds : 0.0,
            st.total_seconds,
            st.deleted.empty() ? std::string() : fmt::format("; removed {} older", st.deleted.size()));
  std::lock_guard<std::mutex> lock(mu_);
  last_ = st;
}

void CheckpointWriter::worker() {
  while (true) {
    Snapshot snap;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || has_pending_; });
      if (stop_ && !has_pending_) return;
      snap = std::move(pending_);
      has_pending_ = false;
    }
    try {
      publish_and_log(snap);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

void CheckpointWriter::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

std::optional<PublishStats> CheckpointWriter::last_published() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

SaveReport CheckpointWriter::save(const ParamStore& params, const Stream& s, const TrainingState& state,
                                  const std::string& config_yaml, bool save_optim) {
  const Stopwatch t0;
  SaveReport r;
  r.iteration = state.iteration;
  wait();  // the staging buffers are reused: the previous write must be done
  const Stopwatch t1;
  Snapshot snap = stager_.stage(params, s, state, config_yaml, save_optim);
  r.stage_seconds = t1.seconds();
  r.staged_bytes = stager_.staged_bytes();
  if (!async_) {
    publish_and_log(snap);
    r.blocked_seconds = t0.seconds();
    return r;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = std::move(snap);
    has_pending_ = true;
    busy_ = true;
  }
  cv_.notify_all();
  r.blocked_seconds = t0.seconds();
  const double mb = static_cast<double>(r.staged_bytes) / 1e6;
  log::info(
      "checkpoint: iteration {} staged ({:.1f} MB in {:.1f} ms, {:.2f} GB/s); training blocked {:.1f} ms, "
      "writing "
      "in the background",
      state.iteration, mb, r.stage_seconds * 1e3, r.stage_seconds > 0 ? mb / 1e3 / r.stage_seconds : 0.0,
      r.blocked_seconds * 1e3);
  return r;
}

}  // namespace primus::ckpt
