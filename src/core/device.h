#pragma once
// Where a tensor lives and on which queue work for it runs. A Stream on the CPU is a no-op handle: CPU ops
// run synchronously on the calling thread (with OpenMP inside).
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace primus {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::kCUDA, i}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
};

struct Stream {
  Device device;
  void* handle = nullptr;  // cudaStream_t for CUDA devices; nullptr = the legacy default stream
  static Stream cpu() { return Stream{Device::cpu(), nullptr}; }
};

// Memory and synchronisation primitives for any device. CUDA memory is stream-ordered (cudaMallocAsync).
void* device_alloc(size_t bytes, const Stream& s);
void device_free(void* p, const Stream& s);
void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes, const Stream& s);
void device_memset(void* p, int value, size_t bytes, const Stream& s);
void stream_sync(const Stream& s);

// True when this build has CUDA and a usable GPU is present (never throws).
bool cuda_available();
int cuda_device_count();
// The default compute stream of GPU `index` (created on first use).
Stream cuda_compute_stream(int index = 0);
// Makes `d` the calling thread's current GPU (a new thread starts on GPU 0); nothing for the CPU.
void use_device_on_this_thread(Device d);
// Device memory in use / total in bytes, (0, 0) on the CPU.
void device_memory_info(Device d, size_t* used, size_t* total);
// Peak bytes allocated through device_alloc on `d` since the last reset.
size_t peak_allocated_bytes(Device d);
size_t allocated_bytes(Device d);
// Also restarts memory_holders_at_peak from what is held now.
void reset_peak_allocated_bytes(Device d);
// Who held the bytes allocated on `d` when its peak was reached: each allocation counts under the memory
// owner that was innermost when it was made (core/memory_owner.h). Largest first; the bytes sum to
// peak_allocated_bytes(d).
std::vector<std::pair<std::string, size_t>> memory_holders_at_peak(Device d);
// The memory timeline's source: after each allocation and free on the observed device kind (CUDA unless set;
// the trainer names its device), the observer is told the bytes allocated now and whether that allocation
// set a new peak. Called on the allocating thread, outside the accounting's lock. The profiler sets one while
// it records (profile/trace.h: the trace's "device memory" counter), so core depends on nothing above it.
using MemoryObserver = void (*)(size_t allocated_bytes, bool new_peak);
void set_memory_observer(MemoryObserver f);  // nullptr: none
void set_memory_timeline_device(Device d);

}  // namespace primus
