// CPU-only build: the CUDA bridge refuses politely.
#ifndef PRIMUS_WITH_CUDA
#include "core/cuda_runtime_bridge.h"
#include "core/error.h"

namespace primus::cuda_bridge {

[[noreturn]] static void no_cuda() {
  throw Error(ErrorKind::kRuntime,
              "this primus was built without CUDA (PRIMUS_CUDA=OFF or no nvcc at build time)");
}
int device_count() {
  return 0;
}
void* alloc_async(size_t, const Stream&) {
  no_cuda();
}
void free_async(void*, const Stream&) {
  no_cuda();
}
void copy_async(void*, Device, const void*, Device, size_t, const Stream&) {
  no_cuda();
}
void memset_async(void*, int, size_t, const Stream&) {
  no_cuda();
}
void stream_sync(const Stream&) {
  no_cuda();
}
Stream compute_stream(int) {
  no_cuda();
}
void set_device(int) {
  no_cuda();
}
int compute_capability(int) {
  no_cuda();
}
void memory_info(int, size_t*, size_t*) {
  no_cuda();
}
void* host_alloc_pinned(size_t) {
  no_cuda();
}
void host_free_pinned(void*) {
  no_cuda();
}

}  // namespace primus::cuda_bridge
#endif
