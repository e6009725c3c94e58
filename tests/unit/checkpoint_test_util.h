#pragma once
// Helpers for the checkpoint unit tests: a small synthetic snapshot (three tensor groups in three files,
// random contents so that no two files are alike) and scratch directories.
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/publish.h"
#include "checkpoint/snapshot.h"
#include "core/dtype.h"

namespace primus::ckpt_test {

inline std::string scratch_dir(const std::string& tag) {
  std::string dir = (std::filesystem::temp_directory_path() / ("primus-" + tag + "-XXXXXX")).string();
  if (mkdtemp(dir.data()) == nullptr) return {};
  return dir;
}

// Owns the bytes a Snapshot borrows.
struct SyntheticState {
  std::vector<std::vector<float>> buffers;
  ckpt::Snapshot snap;

  explicit SyntheticState(int64_t iteration, uint32_t seed = 1) {
    std::mt19937 rng(seed + static_cast<uint32_t>(iteration) * 7919u);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto add = [&](std::vector<ckpt::SnapshotTensor>& group, const std::string& name, Shape shape) {
      std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
      for (float& x : v) x = nd(rng);
      buffers.push_back(std::move(v));
      group.push_back({name, DType::kF32, shape, buffers.back().data()});
    };
    buffers.reserve(16);  // pointers into the vectors must stay valid
    for (const char* n : {"embed_tokens.weight", "layers.0.mlp.down_proj.weight", "norm.weight"}) {
      const Shape shape = std::string(n) == "norm.weight" ? Shape{64} : Shape{48, 64};
      add(snap.model, n, shape);
      add(snap.master, n, shape);
      add(snap.optim, std::string(n) + ".exp_avg", shape);
      add(snap.optim, std::string(n) + ".exp_avg_sq", shape);
    }
    snap.state.iteration = iteration;
    snap.state.consumed_samples = iteration * 16;
    snap.state.optimizer_steps = iteration;
    snap.state.global_batch_size = 16;
    snap.state.has_optimizer = true;
    snap.state.compute_dtype = "f32";
    snap.state.model.name = "synthetic";
    snap.config_yaml = "seed: 1234\ntrain_iters: 100\n";
  }
};

}  // namespace primus::ckpt_test
