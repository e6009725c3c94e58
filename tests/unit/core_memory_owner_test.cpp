// Memory owners (core/memory_owner.h) and the device accounting's holders at the peak and memory timeline
// (core/device.h), on the CPU allocator. Other tests of this binary may leave allocations alive, so every
// check is relative to what was held when the test reset the peak.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "core/device.h"
#include "core/memory_owner.h"
#include "profile/trace.h"

namespace primus {
namespace {

std::map<std::string, size_t> holders_at_peak() {
  std::map<std::string, size_t> m;
  for (const auto& [owner, bytes] : memory_holders_at_peak(Device::cpu())) m[owner] += bytes;
  return m;
}

size_t sum_of(const std::map<std::string, size_t>& m) {
  size_t s = 0;
  for (const auto& [owner, bytes] : m) s += bytes;
  return s;
}

size_t held(const std::map<std::string, size_t>& m, const std::string& owner) {
  auto it = m.find(owner);
  return it == m.end() ? 0 : it->second;
}

struct Block {
  void* p;
  explicit Block(size_t bytes) : p(device_alloc(bytes, Stream::cpu())) {}
  ~Block() { device_free(p, Stream::cpu()); }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
};

TEST(MemoryOwner, InnermostScopeNamesTheOwner) {
  EXPECT_STREQ(current_memory_owner(), "other");
  {
    PRIMUS_MEMORY_OWNER("outer");
    EXPECT_STREQ(current_memory_owner(), "outer");
    {
      PRIMUS_MEMORY_OWNER(std::string("layer ") + "3 forward");
      EXPECT_STREQ(current_memory_owner(), "layer 3 forward");
    }
    EXPECT_STREQ(current_memory_owner(), "outer");
    // Owners are per thread: another thread opened none.
    std::string seen;
    std::thread([&] { seen = current_memory_owner(); }).join();
    EXPECT_EQ(seen, "other");
  }
  EXPECT_STREQ(current_memory_owner(), "other");
}

TEST(MemoryOwner, InternedNamesAreOneCopy) {
  const char* a = intern_memory_owner("layer 7 backward");
  const char* b = intern_memory_owner(std::string("layer 7 ") + "backward");
  EXPECT_EQ(a, b);
  EXPECT_STREQ(a, "layer 7 backward");
  EXPECT_NE(intern_memory_owner("layer 8 backward"), a);
}

TEST(MemoryOwner, HoldersAtThePeakSumToIt) {
  reset_peak_allocated_bytes(Device::cpu());
  const size_t base = allocated_bytes(Device::cpu());
  const std::map<std::string, size_t> before = holders_at_peak();
  EXPECT_EQ(sum_of(before), base);
  {
    PRIMUS_MEMORY_OWNER("mo-test outer");
    Block a(1000);
    {
      PRIMUS_MEMORY_OWNER("mo-test inner");
      Block b(3000);
      Block c(200);
    }              // the peak: outer 1000, inner 3200
    Block d(500);  // below the peak: not among its holders
    {
      PRIMUS_MEMORY_OWNER(std::string("mo-test layer ") + "2 forward");
      Block e(100);
    }
  }
  const std::map<std::string, size_t> at_peak = holders_at_peak();
  EXPECT_EQ(peak_allocated_bytes(Device::cpu()), base + 4200);
  EXPECT_EQ(sum_of(at_peak), peak_allocated_bytes(Device::cpu()));
  EXPECT_EQ(held(at_peak, "mo-test outer"), 1000u);
  EXPECT_EQ(held(at_peak, "mo-test inner"), 3200u);
  EXPECT_EQ(held(at_peak, "mo-test layer 2 forward"), 0u);
  EXPECT_EQ(held(at_peak, "other"), held(before, "other"));
  // Largest first.
  const auto list = memory_holders_at_peak(Device::cpu());
  for (size_t i = 1; i < list.size(); ++i) EXPECT_GE(list[i - 1].second, list[i].second);
  EXPECT_EQ(allocated_bytes(Device::cpu()), base);
}

TEST(MemoryOwner, AllocationsOutsideEveryScopeAreOther) {
  reset_peak_allocated_bytes(Device::cpu());
  const size_t other_before = held(holders_at_peak(), "other");
  Block a(4096);
  EXPECT_EQ(held(holders_at_peak(), "other"), other_before + 4096);
}

TEST(MemoryOwner, ResetStartsFromWhatIsHeldNow) {
  reset_peak_allocated_bytes(Device::cpu());
  const size_t base = allocated_bytes(Device::cpu());
  {
    PRIMUS_MEMORY_OWNER("mo-test gone");
    Block a(1 << 20);
  }
  PRIMUS_MEMORY_OWNER("mo-test kept");
  Block b(256);
  EXPECT_EQ(held(holders_at_peak(), "mo-test gone"), size_t{1} << 20);
  reset_peak_allocated_bytes(Device::cpu());
  const std::map<std::string, size_t> now = holders_at_peak();
  EXPECT_EQ(peak_allocated_bytes(Device::cpu()), base + 256);
  EXPECT_EQ(sum_of(now), base + 256);
  EXPECT_EQ(held(now, "mo-test gone"), 0u);
  EXPECT_EQ(held(now, "mo-test kept"), 256u);
}

TEST(MemoryOwner, TimelineSamplesWhileTheProfilerRecords) {
  profile::Tracer& t = profile::Tracer::get();
  t.clear();
  set_memory_timeline_device(Device::cpu());
  { Block before_recording(1000); }
  reset_peak_allocated_bytes(Device::cpu());
  t.start();
  Block first(1 << 16);
  const auto begin = std::chrono::steady_clock::now();
  constexpr int kRounds = 2000;
  for (int i = 0; i < kRounds; ++i) Block churn(64);
  const double loop_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin).count();
  t.stop();
  { Block after_recording(1000); }
  set_memory_timeline_device(Device::cuda());
  int samples = 0;
  double top = 0;
  const nlohmann::json trace = t.to_json();
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("name", "") != "device memory") continue;
    ASSERT_EQ(e["ph"], "C");
    ++samples;
    top = std::max(top, e["args"]["allocated_gb"].get<double>());
  }
  t.clear();
  EXPECT_GE(samples, 1);
  // At most two samples per 20 us interval, and the churn's first allocations may be new peaks (the first
  // block's allocation is one): far fewer than the 4000 allocations and frees.
  EXPECT_LE(samples, 2 * (static_cast<int>(loop_us / 20) + 2) + 4) << loop_us << " us";
  EXPECT_LT(samples, 2 * kRounds);
  EXPECT_GE(top * 1e9, static_cast<double>(1 << 16));
}

}  // namespace
}  // namespace primus
