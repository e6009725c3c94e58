#include "core/device.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/cuda_runtime_bridge.h"
#include "core/error.h"
#include "core/memory_owner.h"

namespace primus {

namespace {

// Byte accounting per device kind, for peak-memory reporting: sizes and owners per pointer, bytes per owner
// now and at the peak.
struct Accounting {
  struct Allocation {
    size_t bytes = 0;
    uint32_t owner = 0;
  };
  std::mutex mu;
  std::unordered_map<void*, Allocation> live;
  size_t current = 0, peak = 0;
  // Owners by first appearance, one index per distinct name (equal names at different addresses share it).
  std::vector<const char*> owner_names;
  std::unordered_map<const char*, uint32_t> owner_index;
  std::vector<size_t> held, held_at_peak;  // bytes per owner index

  uint32_t owner_of(const char* name) {
    if (auto it = owner_index.find(name); it != owner_index.end()) return it->second;
    uint32_t i = 0;
    while (i < owner_names.size() && std::strcmp(owner_names[i], name) != 0) ++i;
    if (i == owner_names.size()) {
      owner_names.push_back(name);
      held.push_back(0);
    }
    owner_index.emplace(name, i);
    return i;
  }
  void take_peak() {
    peak = current;
    held_at_peak = held;
  }
};
Accounting& accounting(Device d) {
  static Accounting cpu_acc, cuda_acc;
  return d.is_cpu() ? cpu_acc : cuda_acc;
}
std::atomic<DeviceType> observed_device{DeviceType::kCUDA};
std::atomic<MemoryObserver> observer{nullptr};

// Told outside the accounting lock: the observer (the profiler) takes its own.
void notify(Device d, size_t allocated, bool new_peak) {
  if (d.type != observed_device.load(std::memory_order_relaxed)) return;
  if (MemoryObserver f = observer.load(std::memory_order_acquire)) f(allocated, new_peak);
}

void account_alloc(Device d, void* p, size_t bytes) {
  const char* owner = current_memory_owner();
  size_t now = 0;
  bool new_peak = false;
  {
    auto& a = accounting(d);
    std::lock_guard<std::mutex> lock(a.mu);
    const uint32_t o = a.owner_of(owner);
    a.live[p] = {bytes, o};
    a.current += bytes;
    a.held[o] += bytes;
    new_peak = a.current > a.peak;
    if (new_peak) a.take_peak();
    now = a.current;
  }
  notify(d, now, new_peak);
}
void account_free(Device d, void* p) {
  size_t now = 0;
  {
    auto& a = accounting(d);
    std::lock_guard<std::mutex> lock(a.mu);
    auto it = a.live.find(p);
    if (it == a.live.end()) return;
    a.current -= it->second.bytes;
    a.held[it->second.owner] -= it->second.bytes;
    a.live.erase(it);
    now = a.current;
  }
  notify(d, now, false);
}
}  // namespace

std::string Device::str() const {
  return is_cpu() ? "cpu" : "cuda:" + std::to_string(index);
}

void* device_alloc(size_t bytes, const Stream& s) {
  if (bytes == 0) bytes = 1;
  void* p = nullptr;
  if (s.device.is_cpu()) {
    size_t rounded = (bytes + 63) / 64 * 64;  // 64-byte aligned for vector loads
    p = std::aligned_alloc(64, rounded);
    if (!p) throw Error(ErrorKind::kRuntime, fmt::format("out of host memory allocating {} bytes", bytes));
  } else {
    p = cuda_bridge::alloc_async(bytes, s);
  }
  account_alloc(s.device, p, bytes);
  return p;
}

void device_free(void* p, const Stream& s) {
  if (!p) return;
  account_free(s.device, p);
  if (s.device.is_cpu()) {
    std::free(p);
  } else {
    cuda_bridge::free_async(p, s);
  }
}

void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes, const Stream& s) {
  if (bytes == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  cuda_bridge::copy_async(dst, dst_dev, src, src_dev, bytes, s);
}

void device_memset(void* p, int value, size_t bytes, const Stream& s) {
  if (bytes == 0) return;
  if (s.device.is_cpu()) {
    std::memset(p, value, bytes);
    return;
  }
  cuda_bridge::memset_async(p, value, bytes, s);
}

void stream_sync(const Stream& s) {
  if (s.device.is_cuda()) cuda_bridge::stream_sync(s);
}

bool cuda_available() {
  return cuda_bridge::device_count() > 0;
}
int cuda_device_count() {
  return cuda_bridge::device_count();
}
Stream cuda_compute_stream(int index) {
  return cuda_bridge::compute_stream(index);
}
void use_device_on_this_thread(Device d) {
  if (d.is_cuda()) cuda_bridge::set_device(d.index);
}

void device_memory_info(Device d, size_t* used, size_t* total) {
  *used = *total = 0;
  if (d.is_cuda()) cuda_bridge::memory_info(d.index, used, total);
}

size_t peak_allocated_bytes(Device d) {
  auto& a = accounting(d);
  std::lock_guard<std::mutex> lock(a.mu);
  return a.peak;
}
size_t allocated_bytes(Device d) {
  auto& a = accounting(d);
  std::lock_guard<std::mutex> lock(a.mu);
  return a.current;
}
void reset_peak_allocated_bytes(Device d) {
  auto& a = accounting(d);
  std::lock_guard<std::mutex> lock(a.mu);
  a.take_peak();
}

std::vector<std::pair<std::string, size_t>> memory_holders_at_peak(Device d) {
  std::vector<std::pair<std::string, size_t>> out;
  {
    auto& a = accounting(d);
    std::lock_guard<std::mutex> lock(a.mu);
    for (size_t i = 0; i < a.held_at_peak.size(); ++i)
      if (a.held_at_peak[i] > 0) out.emplace_back(a.owner_names[i], a.held_at_peak[i]);
  }
  std::sort(out.begin(), out.end(),
            [](const auto& x, const auto& y) { return x.second != y.second ? x.second > y.second : x < y; });
  return out;
}

void set_memory_timeline_device(Device d) {
  observed_device.store(d.type, std::memory_order_relaxed);
}

void set_memory_observer(MemoryObserver f) {
  observer.store(f, std::memory_order_release);
}

}  // namespace primus
