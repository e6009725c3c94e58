#pragma once
// The few CUDA runtime calls the core needs, behind plain C++ signatures so that core code compiles in a
// CPU-only build. In such a build every function here throws "built without CUDA" except device_count(),
// which returns 0.
#include <cstddef>

#include "core/device.h"

namespace primus::cuda_bridge {

int device_count();
void* alloc_async(size_t bytes, const Stream& s);
void free_async(void* p, const Stream& s);
void copy_async(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes, const Stream& s);
void memset_async(void* p, int value, size_t bytes, const Stream& s);
void stream_sync(const Stream& s);
Stream compute_stream(int index);
void set_device(int index);  // the calling thread's current device
void memory_info(int index, size_t* used, size_t* total);
// The GPU's compute capability as major * 10 + minor (90 for Hopper).
int compute_capability(int index);
// Page-locked host memory (cudaHostAlloc): device-to-host copies into it run at full PCIe/NVLink speed
// (checkpoint staging).
void* host_alloc_pinned(size_t bytes);
void host_free_pinned(void* p);

}  // namespace primus::cuda_bridge
