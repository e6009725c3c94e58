#include "core/device.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/cuda_runtime_bridge.h"
#include "core/error.h"

namespace primus {

namespace {
// Byte accounting per device kind, for peak-memory reporting. CUDA sizes are tracked per pointer.
struct Accounting {
  std::mutex mu;
  std::unordered_map<void*, size_t> sizes;
  size_t current = 0, peak = 0;
};
Accounting& accounting(Device d) {
  static Accounting cpu_acc, cuda_acc;
  return d.is_cpu() ? cpu_acc : cuda_acc;
}
void account_alloc(Device d, void* p, size_t bytes) {
  auto& a = accounting(d);
  std::lock_guard<std::mutex> lock(a.mu);
  a.sizes[p] = bytes;
  a.current += bytes;
  if (a.current > a.peak) a.peak = a.current;
}
void account_free(Device d, void* p) {
  auto& a = accounting(d);
  std::lock_guard<std::mutex> lock(a.mu);
  auto it = a.sizes.find(p);
  if (it == a.sizes.end()) return;
  a.current -= it->second;
  a.sizes.erase(it);
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
  a.peak = a.current;
}

}  // namespace primus
