#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_runtime_bridge.h"

namespace primus::detail {
void throw_cuda_error(cudaError_t e, const char* expr, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  throw Error(ErrorKind::kRuntime,
              fmt::format("CUDA error {} ({}) in {}", cudaGetErrorName(e), cudaGetErrorString(e), expr),
              fmt::format("{}:{}", base ? base + 1 : file, line));
}
}  // namespace primus::detail

namespace primus::cuda_bridge {

int device_count() {
  static int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no driver / no device" error
      return 0;
    }
    return n;
  }();
  return count;
}

namespace {
std::mutex g_mu;
std::vector<cudaStream_t> g_streams;
std::vector<bool> g_pool_ready;

void prepare_pool(int index) {
  if (index >= static_cast<int>(g_pool_ready.size())) g_pool_ready.resize(index + 1, false);
  if (g_pool_ready[index]) return;
  // Keep freed blocks cached in the pool: the default threshold (0) returns memory to the driver at every
  // synchronisation, which turns each training step's allocations into driver calls.
  cudaMemPool_t pool;
  PRIMUS_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, index));
  uint64_t threshold = UINT64_MAX;
  PRIMUS_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  g_pool_ready[index] = true;
}
}  // namespace

Stream compute_stream(int index) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (index >= device_count()) {
    throw Error(ErrorKind::kRuntime,
                fmt::format("GPU {} requested but {} GPU(s) are visible", index, device_count()));
  }
  if (index >= static_cast<int>(g_streams.size())) g_streams.resize(index + 1, nullptr);
  if (!g_streams[index]) {
    PRIMUS_CUDA_CHECK(cudaSetDevice(index));
    prepare_pool(index);
    // One step above the lowest priority, so that a background stream (the overlapped optimizer update,
    // train/overlapped_update.h) only takes SMs this stream's kernels leave free.
    int least = 0, greatest = 0;
    PRIMUS_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    const int priority = greatest < least ? least - 1 : least;
    PRIMUS_CUDA_CHECK(cudaStreamCreateWithPriority(&g_streams[index], cudaStreamNonBlocking, priority));
  }
  return Stream{Device::cuda(index), g_streams[index]};
}

void* alloc_async(size_t bytes, const Stream& s) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    prepare_pool(s.device.index);
  }
  void* p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, bytes, cuda_stream(s));
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw Error(
        ErrorKind::kRuntime,
        fmt::format("out of GPU memory on cuda:{}: asked for {:.2f} GiB, {:.2f} of {:.2f} GiB free",
                    s.device.index, bytes / 1073741824.0, free_b / 1073741824.0, total_b / 1073741824.0),
        {}, "lower micro_batch_size or seq_length, or enable recompute_granularity: full");
  }
  PRIMUS_CUDA_CHECK(e);
  return p;
}

void free_async(void* p, const Stream& s) {
  PRIMUS_CUDA_CHECK(cudaFreeAsync(p, cuda_stream(s)));
}

void copy_async(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes, const Stream& s) {
  cudaMemcpyKind kind = cudaMemcpyDefault;
  PRIMUS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, cuda_stream(s)));
  // Host tensors are pageable. An upload from pageable memory is staged before cudaMemcpyAsync returns, so
  // the host side may be freed at once and the stream need not drain (no bubble per micro-batch). A download
  // must complete before the caller reads the host side.
  if (dst_dev.is_cpu()) PRIMUS_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(s)));
}

void memset_async(void* p, int value, size_t bytes, const Stream& s) {
  PRIMUS_CUDA_CHECK(cudaMemsetAsync(p, value, bytes, cuda_stream(s)));
}

void stream_sync(const Stream& s) {
  PRIMUS_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(s)));
}

void set_device(int index) {
  PRIMUS_CUDA_CHECK(cudaSetDevice(index));
}

int compute_capability(int index) {
  int major = 0, minor = 0;
  PRIMUS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index));
  PRIMUS_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index));
  return major * 10 + minor;
}

void memory_info(int index, size_t* used, size_t* total) {
  size_t free_b = 0, total_b = 0;
  int prev = 0;
  PRIMUS_CUDA_CHECK(cudaGetDevice(&prev));
  PRIMUS_CUDA_CHECK(cudaSetDevice(index));
  PRIMUS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  PRIMUS_CUDA_CHECK(cudaSetDevice(prev));
  *used = total_b - free_b;
  *total = total_b;
}

void* host_alloc_pinned(size_t bytes) {
  void* p = nullptr;
  PRIMUS_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  return p;
}

void host_free_pinned(void* p) {
  if (p != nullptr) PRIMUS_CUDA_CHECK(cudaFreeHost(p));
}

}  // namespace primus::cuda_bridge
