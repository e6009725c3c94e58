// ParamStore with its f32 master weights held as the bf16 compute copy + an i16 remainder
// (MasterStorage::kRemainders, core/master_split.h), exercised on the CPU: the API in both layouts and its
// errors, initialisation, set_master / master_f32, AdamW over the store, and checkpoints that save the same
// f32 master files from either layout and load into either, bitwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>

#include "checkpoint/load.h"
#include "checkpoint/publish.h"
#include "checkpoint/snapshot.h"
#include "core/device.h"
#include "core/log.h"
#include "core/master_split.h"
#include "model/param_store.h"
#include "train/optimizer.h"

using namespace primus;

namespace {

ModelSpec small_spec() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 32;
  m.ffn_hidden_size = 48;
  m.num_attention_heads = 4;
  m.num_query_groups = 2;
  m.kv_channels = 8;
  m.vocab_size = m.padded_vocab_size = 40;
  m.untie_embeddings_and_output_weights = true;
  return ModelSpec::from_config(m);
}

// A CPU store: f32 (compute aliases the master), bf16 compute + f32 master, or bf16 compute + remainders.
enum class Layout { kF32, kBf16F32Master, kBf16Remainders };

std::unique_ptr<ParamStore> make_store(Layout l, uint64_t seed = 7) {
  auto p = std::make_unique<ParamStore>(small_spec());
  if (l == Layout::kF32) {
    p->allocate(DType::kF32, Stream::cpu());
  } else {
    p->allocate(DType::kBF16, Stream::cpu(), DType::kF32,
                l == Layout::kBf16Remainders ? MasterStorage::kRemainders : MasterStorage::kF32);
  }
  p->initialize(seed, Stream::cpu());
  return p;
}

// The whole f32 master of a store of any layout, entry by entry (padding is not a parameter).
std::vector<uint32_t> master_bits(const ParamStore& p) {
  std::vector<uint32_t> out;
  for (int i = 0; i < static_cast<int>(p.entries().size()); ++i) {
    const Tensor t = p.master_f32(i, Stream::cpu());
    const auto* b = static_cast<const uint32_t*>(t.data_ptr());
    out.insert(out.end(), b, b + t.numel());
  }
  return out;
}
// The bytes of every entry's slice of a flat buffer (padding is not saved in checkpoints, so it is left out).
std::vector<char> entry_bytes(const ParamStore& p, const Tensor& flat) {
  std::vector<char> out;
  const size_t es = dtype_size(flat.dtype());
  const char* base = static_cast<const char*>(flat.data_ptr());
  for (const ParamEntry& e : p.entries())
    out.insert(out.end(), base + e.offset * es, base + (e.offset + e.numel) * es);
  return out;
}
std::vector<char> compute_bits_of(const ParamStore& p) {
  return entry_bytes(p, const_cast<ParamStore&>(p).compute_flat());
}

bool contains(const std::function<void()>& fn, const std::string& what) {
  try {
    fn();
  } catch (const Error& e) {
    return std::string(e.what()).find(what) != std::string::npos;
  }
  return false;
}

}  // namespace

// The memory report's holders (core/memory_owner.h): a store names its buffers' owners as it allocates them,
// in every layout -- the compute copy (and a master the forward reads itself) as parameters, the gradients,
// and Adam's moments with any master or remainder beside the compute copy as optimizer state.
TEST(ParamStoreRemainders, BuffersAreCountedUnderTheirOwners) {
  for (Layout l : {Layout::kF32, Layout::kBf16F32Master, Layout::kBf16Remainders}) {
    reset_peak_allocated_bytes(Device::cpu());
    const size_t before = allocated_bytes(Device::cpu());
    std::map<std::string, size_t> base;
    for (const auto& [owner, bytes] : memory_holders_at_peak(Device::cpu())) base[owner] += bytes;
    auto p = make_store(l);
    std::map<std::string, size_t> m;
    for (const auto& [owner, bytes] : memory_holders_at_peak(Device::cpu())) m[owner] += bytes;
    auto grown = [&](const char* owner) { return m[owner] - base[owner]; };
    const size_t n = static_cast<size_t>(p->grad_flat().numel());
    const size_t compute = n * dtype_size(p->compute_flat().dtype());
    const size_t master = l == Layout::kBf16F32Master ? n * 4 : l == Layout::kBf16Remainders ? n * 2 : 0;
    EXPECT_EQ(grown("parameters"), compute) << static_cast<int>(l);
    EXPECT_EQ(grown("gradients"), n * 4) << static_cast<int>(l);
    EXPECT_EQ(grown("optimizer state"), 2 * n * 4 + master) << static_cast<int>(l);
    EXPECT_GE(peak_allocated_bytes(Device::cpu()), before + compute + n * 4 + 2 * n * 4 + master);
  }
}

TEST(ParamStoreRemainders, LayoutAndClearErrors) {
  auto rem = make_store(Layout::kBf16Remainders);
  EXPECT_TRUE(rem->master_in_remainders());
  EXPECT_FALSE(rem->compute_aliases_master());
  EXPECT_EQ(rem->master_dtype(), DType::kF32);
  EXPECT_EQ(rem->remainder_flat().dtype(), DType::kI16);
  EXPECT_EQ(rem->remainder_flat().numel(), rem->total_numel());
  EXPECT_EQ(rem->compute_flat().dtype(), DType::kBF16);
  // No f32 master buffer: reading it must fail loudly, naming the way out.
  EXPECT_TRUE(contains([&] { rem->master(0); }, "master_f32(i)"));
  EXPECT_TRUE(contains([&] { rem->master_flat(); }, "i16 remainder"));
  auto f32 = make_store(Layout::kBf16F32Master);
  EXPECT_FALSE(f32->master_in_remainders());
  EXPECT_TRUE(contains([&] { f32->remainder_flat(); }, "remainders exist only"));
  // Remainders need a bf16 compute copy of f32 masters.
  ParamStore bad(small_spec());
  EXPECT_TRUE(
      contains([&] { bad.allocate(DType::kF32, Stream::cpu(), DType::kF32, MasterStorage::kRemainders); },
               "need a bf16 compute copy"));
  // The default rule: never on the CPU, on CUDA only for whole bf16-compute buffers of f32 masters.
  ParamStore cpu(small_spec());
  cpu.allocate(DType::kBF16, Stream::cpu());
  EXPECT_FALSE(cpu.master_in_remainders());
  EXPECT_FALSE(use_master_remainders(false, DType::kBF16, DType::kF32, false));
  EXPECT_FALSE(use_master_remainders(true, DType::kF32, DType::kF32, false));
  EXPECT_FALSE(use_master_remainders(true, DType::kBF16, DType::kF32, true));
  EXPECT_TRUE(use_master_remainders(true, DType::kBF16, DType::kF32, false));
}

// Initialisation gives bitwise the f32 master of a plain f32 store, and the compute copy is its compute
// rounding -- the same bits as a bf16 store with an f32 master buffer holds.
TEST(ParamStoreRemainders, InitialiseLikeAnF32Master) {
  auto plain = make_store(Layout::kF32), f32 = make_store(Layout::kBf16F32Master);
  auto rem = make_store(Layout::kBf16Remainders);
  const std::vector<uint32_t> want = master_bits(*plain);
  EXPECT_EQ(master_bits(*rem), want);
  EXPECT_EQ(master_bits(*f32), want);
  EXPECT_EQ(compute_bits_of(*rem), compute_bits_of(*f32));
  for (int i = 0; i < static_cast<int>(rem->entries().size()); ++i) {
    const Tensor m = plain->master(i), c = rem->param(i);
    const auto* mb = static_cast<const uint32_t*>(m.data_ptr());
    const auto* cb = static_cast<const uint16_t*>(c.data_ptr());
    for (int64_t j = 0; j < m.numel(); ++j) ASSERT_EQ(cb[j], compute_bits(mb[j])) << rem->entry(i).name;
  }
  // Nothing to sync: the compute copy is the master's upper half.
  const std::vector<char> before = compute_bits_of(*rem);
  rem->sync_compute_copy(Stream::cpu());
  EXPECT_EQ(compute_bits_of(*rem), before);
}

// set_master takes any float dtype and writes master + compute copy in both layouts; master_f32 reads back
// the exact f32 (ties, subnormals, values that round into the next binade included).
TEST(ParamStoreRemainders, SetMasterAndMasterF32RoundTrip) {
  std::mt19937 rng(11);
  for (Layout l : {Layout::kBf16Remainders, Layout::kBf16F32Master}) {
    auto p = make_store(l);
    for (int i = 0; i < static_cast<int>(p->entries().size()); ++i) {
      const ParamEntry& e = p->entry(i);
      Tensor v = Tensor::empty(e.shape, DType::kF32);
      auto* b = static_cast<uint32_t*>(v.data_ptr());
      for (int64_t j = 0; j < e.numel; ++j) {
        uint32_t x = rng();
        if ((x & 0x7f800000u) == 0x7f800000u) x &= 0xbfffffffu;  // finite values only (no inf / NaN)
        if (j % 5 == 0) x = (x & 0xffff0000u) | 0x8000u;         // ties
        if (j % 11 == 0) x &= 0x807fffffu;                       // subnormals
        if (j % 13 == 0) x |= 0x0000ffffu;                       // round into the next bf16
        b[j] = x;
      }
      p->set_master(i, v, Stream::cpu());
      const Tensor back = p->master_f32(i, Stream::cpu());
      ASSERT_EQ(std::memcmp(back.data_ptr(), v.data_ptr(), v.nbytes()), 0) << e.name;
      const auto* c = static_cast<const uint16_t*>(p->param(i).data_ptr());
      for (int64_t j = 0; j < e.numel; ++j) ASSERT_EQ(c[j], compute_bits(b[j])) << e.name << " " << j;
    }
    // An f64 value is cast to f32 first.
    const int n = p->find("norm.weight");
    Tensor d = Tensor::from_vector(std::vector<double>(32, 0.1), {32});
    p->set_master(n, d, Stream::cpu());
    EXPECT_EQ(p->master_f32(n, Stream::cpu()).to_vector<float>(), std::vector<float>(32, 0.1f));
    EXPECT_TRUE(contains([&] { p->set_master(n, Tensor::zeros({31}, DType::kF32), Stream::cpu()); },
                         "expected a contiguous float tensor of 32 elements"));
  }
}

// AdamW over the store (train/optimizer.h): masters in remainders give bitwise the masters, moments and bf16
// weights of the f32-master store.
TEST(ParamStoreRemainders, AdamWMatchesTheF32MasterStore) {
  auto f32 = make_store(Layout::kBf16F32Master), rem = make_store(Layout::kBf16Remainders);
  OptimConfig oc;
  oc.weight_decay = 0.1;
  oc.adam_beta2 = 0.95;
  AdamW a(oc, *f32), b(oc, *rem);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  const std::vector<uint32_t> initial = master_bits(*rem);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> g(static_cast<size_t>(f32->total_numel()));
    for (float& x : g) x = nd(rng);
    std::memcpy(f32->grad_flat().data_ptr(), g.data(), g.size() * 4);
    std::memcpy(rem->grad_flat().data_ptr(), g.data(), g.size() * 4);
    a.step(1e-2, 0.9f, Stream::cpu());
    b.step(1e-2, 0.9f, Stream::cpu());
    ASSERT_EQ(master_bits(*rem), master_bits(*f32)) << "step " << step;
    ASSERT_EQ(compute_bits_of(*rem), compute_bits_of(*f32)) << "step " << step;
    ASSERT_EQ(f32->adam_m_flat().to_vector<float>(), rem->adam_m_flat().to_vector<float>());
    ASSERT_EQ(f32->adam_v_flat().to_vector<float>(), rem->adam_v_flat().to_vector<float>());
  }
  EXPECT_NE(master_bits(*rem), initial);  // the steps moved the weights
}

namespace {

class ParamStoreRemainderCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = log::level();
    log::set_level(log::Level::kError);
    root_ =
        (std::filesystem::temp_directory_path() / ("primus-rem-ckpt-" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(root_);
  }
  void TearDown() override {
    std::filesystem::remove_all(root_);
    log::set_level(saved_);
  }
  // Trains `p` one step (so the remainders and moments are not trivial), saves it, returns the directory.
  std::string save(ParamStore& p, int64_t iteration) {
    OptimConfig oc;
    AdamW opt(oc, p);
    std::mt19937 rng(static_cast<uint32_t>(iteration));
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<float> g(static_cast<size_t>(p.total_numel()));
    for (float& x : g) x = nd(rng);
    std::memcpy(p.grad_flat().data_ptr(), g.data(), g.size() * 4);
    opt.step(1e-2, 1.0f, Stream::cpu());
    ckpt::TrainingState st;
    st.iteration = iteration;
    st.optimizer_steps = 1;
    st.global_batch_size = 1;
    st.model.name = "remainder-test";
    ckpt::Snapshot snap = stager_.stage(p, Stream::cpu(), st, "seed: 1\n", /*save_optim=*/true);
    return ckpt::publish_checkpoint(snap, root_, 0).dir;
  }
  std::unique_ptr<ParamStore> load(const std::string& dir, Layout l) {
    auto p = make_store(l, /*seed=*/99);  // a different initialisation, all overwritten by the load
    const ckpt::Verification v = ckpt::verify_checkpoint(dir);
    EXPECT_TRUE(v.ok) << (v.problems.empty() ? "" : v.problems[0].str());
    ckpt::load_into_params(v, *p, Stream::cpu(), ckpt::LoadOptions{});
    return p;
  }
  std::string root_;
  ckpt::Stager stager_;
  log::Level saved_ = log::Level::kInfo;
};

}  // namespace

// Saved with masters in remainders: the master file holds the f32 masters (joined) and the model file the
// compute copy, exactly as a save from an f32 master would; it loads into either layout bitwise.
TEST_F(ParamStoreRemainderCheckpoint, SavedFromRemaindersLoadsIntoEveryLayout) {
  auto src = make_store(Layout::kBf16Remainders);
  const std::string dir = save(*src, 5);
  const std::vector<uint32_t> master = master_bits(*src);
  // The files: f32 masters and bf16 compute weights.
  {
    const ckpt::Verification v = ckpt::verify_checkpoint(dir);
    ASSERT_TRUE(v.ok);
    ckpt::CheckpointReader r(v);
    for (int i = 0; i < static_cast<int>(src->entries().size()); ++i) {
      const std::string& name = src->entry(i).name;
      const Tensor m = r.read("master", name), want = src->master_f32(i, Stream::cpu());
      ASSERT_EQ(m.dtype(), DType::kF32) << name;
      ASSERT_EQ(std::memcmp(m.data_ptr(), want.data_ptr(), want.nbytes()), 0) << name;
      const Tensor c = r.read("model", name);
      ASSERT_EQ(c.dtype(), DType::kBF16) << name;
      ASSERT_EQ(std::memcmp(c.data_ptr(), src->param(i).data_ptr(), c.nbytes()), 0) << name;
    }
  }
  auto rem = load(dir, Layout::kBf16Remainders);
  EXPECT_EQ(master_bits(*rem), master);
  EXPECT_EQ(compute_bits_of(*rem), compute_bits_of(*src));
  EXPECT_EQ(entry_bytes(*rem, rem->remainder_flat()), entry_bytes(*src, src->remainder_flat()));
  EXPECT_EQ(entry_bytes(*rem, rem->adam_v_flat()), entry_bytes(*src, src->adam_v_flat()));
  auto f32 = load(dir, Layout::kBf16F32Master);
  EXPECT_EQ(master_bits(*f32), master);
  EXPECT_EQ(compute_bits_of(*f32), compute_bits_of(*src));
  auto plain = load(dir, Layout::kF32);
  EXPECT_EQ(master_bits(*plain), master);
}

// And the other way: saved from an f32 master buffer, loaded into remainders.
TEST_F(ParamStoreRemainderCheckpoint, SavedFromF32MasterLoadsIntoRemainders) {
  auto src = make_store(Layout::kBf16F32Master);
  const std::string dir = save(*src, 6);
  auto rem = load(dir, Layout::kBf16Remainders);
  EXPECT_EQ(master_bits(*rem), master_bits(*src));
  EXPECT_EQ(compute_bits_of(*rem), compute_bits_of(*src));
  EXPECT_EQ(entry_bytes(*rem, rem->adam_m_flat()), entry_bytes(*src, src->adam_m_flat()));
}
