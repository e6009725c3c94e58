#pragma once
// Tensor: a shape, strides, an element type and a view into shared storage on one device. No autograd: layers
// call forward/backward ops explicitly. Most ops want contiguous inputs and check for it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace primus {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

// Owns (or borrows) one allocation. Freed on the stream it was allocated on.
class Storage {
 public:
  Storage(size_t bytes, const Stream& s);           // allocates
  Storage(void* borrowed, size_t bytes, Device d);  // wraps memory owned elsewhere
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return stream_.device; }
  // The stream the memory was allocated on: by convention the stream whose work produces the contents.
  const Stream& stream() const { return stream_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  Stream stream_;
  bool owned_ = true;
};

class Tensor {
 public:
  Tensor() = default;

  // New uninitialised tensor on the stream's device (CPU by default).
  static Tensor empty(const Shape& shape, DType dtype, const Stream& s = Stream::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, const Stream& s = Stream::cpu());
  // A tensor over memory owned by someone else (lifetime is the caller's business).
  static Tensor from_blob(void* ptr, const Shape& shape, DType dtype, Device d);
  // A CPU tensor holding a copy of `values` (numel must match the shape).
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int dim) const;  // negative dims count from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  bool is_contiguous() const;

  void* data_ptr() const;
  template <typename T>
  T* data() const {
    PRIMUS_CHECK(DTypeOf<T>::value == dtype_, "tensor holds {}, accessed as {}", dtype_name(dtype_),
                 dtype_name(DTypeOf<T>::value));
    return static_cast<T*>(data_ptr());
  }

  // Views (share storage). view() needs a contiguous tensor; one dim may be -1.
  Tensor view(const Shape& shape) const;
  Tensor flatten() const { return view({numel()}); }
  // Rows [begin, end) of dim 0; stays contiguous if the tensor is.
  Tensor slice(int64_t begin, int64_t end) const;
  // Elements [start, start + length) along `dim` (strided view).
  Tensor narrow(int dim, int64_t start, int64_t length) const;

  // Copies into a new tensor on `s`'s device (same dtype). Blocking when either side is the host. A copy from
  // the GPU to the host is ordered after the work on the stream that owns the source (see Storage::stream()).
  Tensor to(const Stream& s) const;
  // Copies src into this tensor (same shape and dtype, both contiguous; any pair of devices).
  void copy_from(const Tensor& src, const Stream& s);
  void zero_(const Stream& s);

  // Host copy of the elements, converted to T (f32, bf16, f64, ints are converted; other types rejected).
  template <typename T>
  std::vector<T> to_vector() const;

  std::string describe() const;  // "bf16[8, 2048] on cuda:0"
  const std::shared_ptr<Storage>& storage() const { return storage_; }

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;  // in elements
  DType dtype_ = DType::kF32;
};

// Elementwise conversions on the host between any of f32, f64, bf16 (used by tests and I/O).
Tensor cpu_cast(const Tensor& src, DType to);

}  // namespace primus
