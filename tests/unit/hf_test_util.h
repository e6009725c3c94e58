#pragma once
// Helpers of the Hugging Face conversion tests: synthetic HF directories written tensor by tensor under
// their HF names (the tests spell every name themselves, never through the converter's name map), and
// byte-level comparisons of two directories.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/hf_weights.h"
#include "checkpoint/safetensors.h"
#include "core/tensor.h"

namespace primus::hf_test {

// Collects HF tensors with random values: norms around 1, everything else N(0, 0.2^2), stored in `dtype`.
struct HfTensors {
  std::vector<std::pair<std::string, Tensor>> list;
  std::mt19937 rng;
  DType dtype;
  explicit HfTensors(DType dt, uint32_t seed = 7) : rng(seed), dtype(dt) {}

  Tensor random(const Shape& shape, bool norm) {
    std::normal_distribution<float> nd(0.0f, 0.2f);
    Tensor t = Tensor::empty(shape, DType::kF32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = (norm ? 1.0f : 0.0f) + nd(rng);
    return t;
  }
  // Adds `name` in this set's dtype (or `as`), returning the tensor.
  const Tensor& add(const std::string& name, const Shape& shape, DType as = DType::kF64) {
    const bool norm = name.find("norm") != std::string::npos;
    list.emplace_back(name, ckpt::from_f32(random(shape, norm), as == DType::kF64 ? dtype : as));
    return list.back().second;
  }
  const Tensor& get(const std::string& name) const {
    for (const auto& [n, t] : list)
      if (n == name) return t;
    throw std::runtime_error("no test tensor " + name);
  }
  void write(const std::string& dir, const nlohmann::json& config, uint64_t shard_bytes = 0) const {
    ckpt::write_hf_dir(dir, list, nlohmann::ordered_json::parse(config.dump()), shard_bytes);
  }
};

// Every tensor of a directory: its header entry and its bytes.
inline std::map<std::string, std::pair<ckpt::StEntry, std::vector<char>>> read_all(const std::string& dir) {
  std::map<std::string, std::pair<ckpt::StEntry, std::vector<char>>> out;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().extension() != ".safetensors") continue;
    ckpt::FileReader r(f.path().string());
    ckpt::StHeader h = ckpt::read_safetensors_header(r);
    for (const ckpt::StEntry& e : h.entries) {
      std::vector<char> bytes(e.bytes());
      if (!bytes.empty()) r.read_at(h.data_start() + e.begin, bytes.data(), bytes.size());
      out[e.name] = {e, std::move(bytes)};
    }
  }
  return out;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

inline std::vector<char> bytes_of(const Tensor& t) {
  const char* p = static_cast<const char*>(t.data_ptr());
  return std::vector<char>(p, p + t.nbytes());
}

// Every tensor of `a` is in `b` with the same dtype, shape and bytes, and `b` has nothing else.
inline void expect_same_tensors(const std::string& a, const std::string& b) {
  const auto before = read_all(a), after = read_all(b);
  EXPECT_EQ(before.size(), after.size());
  for (const auto& [name, v] : before) {
    auto it = after.find(name);
    ASSERT_NE(it, after.end()) << name << " missing after the round trip";
    EXPECT_EQ(it->second.first.dtype, v.first.dtype) << name;
    EXPECT_EQ(it->second.first.shape, v.first.shape) << name;
    EXPECT_TRUE(it->second.second == v.second) << name << " differs";
  }
  for (const auto& kv : after) EXPECT_TRUE(before.count(kv.first)) << kv.first << " is new";
}

// Every key of config `a` is in `b` with the same value.
inline void expect_config_kept(const nlohmann::json& a, const nlohmann::json& b,
                               const std::vector<std::string>& except = {}) {
  for (auto it = a.begin(); it != a.end(); ++it) {
    if (std::find(except.begin(), except.end(), it.key()) != except.end()) continue;
    ASSERT_TRUE(b.contains(it.key())) << it.key();
    EXPECT_EQ(b[it.key()], it.value()) << it.key();
  }
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace primus::hf_test
