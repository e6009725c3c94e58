#include "core/tensor.h"

#include <cstring>
#include <numeric>

namespace primus {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

static Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= shape[i];
  }
  return st;
}

Storage::Storage(size_t bytes, const Stream& s) : bytes_(bytes), stream_(s), owned_(true) {
  ptr_ = device_alloc(bytes, s);
}
Storage::Storage(void* borrowed, size_t bytes, Device d)
    : ptr_(borrowed), bytes_(bytes), stream_{d, nullptr}, owned_(false) {}
Storage::~Storage() {
  if (!owned_ || !ptr_) return;
  try {
    device_free(ptr_, stream_);
  } catch (...) {
    // A destructor must not throw; a failed free during shutdown is not worth a crash.
  }
}

Tensor Tensor::empty(const Shape& shape, DType dtype, const Stream& s) {
  for (int64_t d : shape) PRIMUS_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), s);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, const Stream& s) {
  Tensor t = empty(shape, dtype, s);
  t.zero_(s);
  return t;
}

Tensor Tensor::from_blob(void* ptr, const Shape& shape, DType dtype, Device d) {
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(ptr, static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), d);
  return t;
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  PRIMUS_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
               "from_vector: {} values for shape {}", values.size(), shape_str(shape));
  Tensor t = empty(shape, DTypeOf<T>::value);
  if (!values.empty()) std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(T));
  return t;
}
template Tensor Tensor::from_vector(const std::vector<float>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<double>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<bf16_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<int32_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<int64_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<uint8_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<uint16_t>&, const Shape&);

int64_t Tensor::size(int dim) const {
  int d = dim < 0 ? dim + ndim() : dim;
  PRIMUS_CHECK(d >= 0 && d < ndim(), "dimension {} out of range for {}", dim, describe());
  return shape_[d];
}

bool Tensor::is_contiguous() const {
  return strides_ == contiguous_strides(shape_);
}

void* Tensor::data_ptr() const {
  PRIMUS_CHECK(storage_ != nullptr, "access to an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

Tensor Tensor::view(const Shape& shape) const {
  PRIMUS_CHECK(is_contiguous(), "view() of a non-contiguous tensor {}", describe());
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      PRIMUS_CHECK(infer < 0, "view(): more than one -1 in {}", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    PRIMUS_CHECK(known > 0 && numel() % known == 0, "view(): cannot infer {} from {}", shape_str(shape),
                 describe());
    s[infer] = numel() / known;
  }
  PRIMUS_CHECK(shape_numel(s) == numel(), "view(): {} does not match {}", shape_str(s), describe());
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  return narrow(0, begin, end - begin);
}

Tensor Tensor::narrow(int dim, int64_t start, int64_t length) const {
  int d = dim < 0 ? dim + ndim() : dim;
  PRIMUS_CHECK(d >= 0 && d < ndim(), "narrow(): dimension {} out of range for {}", dim, describe());
  PRIMUS_CHECK(start >= 0 && length >= 0 && start + length <= shape_[d],
               "narrow(): [{}, {}) outside dim {} of {}", start, start + length, d, describe());
  Tensor t = *this;
  t.shape_[d] = length;
  t.offset_ += start * strides_[d];
  return t;
}

Tensor Tensor::to(const Stream& s) const {
  PRIMUS_CHECK(is_contiguous(), "to(): non-contiguous tensor {}", describe());
  Tensor t = empty(shape_, dtype_, s);
  Stream copy_stream = s;
  if (s.device.is_cpu() && device().is_cuda()) {
    // Our compute streams are non-blocking: a copy on the legacy default stream would not wait for the
    // kernels that write this tensor. Copy on the stream that owns it.
    copy_stream = storage_->stream().handle ? storage_->stream() : cuda_compute_stream(device().index);
  }
  device_copy(t.data_ptr(), s.device, data_ptr(), device(), nbytes(), copy_stream);
  return t;
}

void Tensor::copy_from(const Tensor& src, const Stream& s) {
  PRIMUS_CHECK(shape_ == src.shape_ && dtype_ == src.dtype_, "copy_from(): {} <- {}", describe(),
               src.describe());
  PRIMUS_CHECK(is_contiguous() && src.is_contiguous(), "copy_from(): non-contiguous {} <- {}", describe(),
               src.describe());
  Stream cs = s;
  if (cs.device.is_cpu() && (device().is_cuda() || src.device().is_cuda()))
    cs = cuda_compute_stream(device().is_cuda() ? device().index : src.device().index);
  device_copy(data_ptr(), device(), src.data_ptr(), src.device(), nbytes(), cs);
}

void Tensor::zero_(const Stream& s) {
  PRIMUS_CHECK(is_contiguous(), "zero_(): non-contiguous tensor {}", describe());
  Stream cs =
      s.device == device() ? s : (device().is_cpu() ? Stream::cpu() : cuda_compute_stream(device().index));
  device_memset(data_ptr(), 0, nbytes(), cs);
}

namespace {
template <typename T>
T from_float_bits(double v);
template <>
float from_float_bits<float>(double v) {
  return static_cast<float>(v);
}
template <>
double from_float_bits<double>(double v) {
  return v;
}
template <>
bf16_t from_float_bits<bf16_t>(double v) {
  return float_to_bf16(static_cast<float>(v));
}
template <>
int32_t from_float_bits<int32_t>(double v) {
  return static_cast<int32_t>(v);
}
template <>
int64_t from_float_bits<int64_t>(double v) {
  return static_cast<int64_t>(v);
}

double element_as_double(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kF64:
      return static_cast<const double*>(base)[i];
    case DType::kBF16:
      return bf16_to_float(static_cast<const bf16_t*>(base)[i]);
    case DType::kI32:
      return static_cast<const int32_t*>(base)[i];
    case DType::kI64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::kU8:
      return static_cast<const uint8_t*>(base)[i];
    case DType::kU16:
      return static_cast<const uint16_t*>(base)[i];
    case DType::kI16:
      return static_cast<const int16_t*>(base)[i];
    default:
      PRIMUS_FAIL("element conversion from {} is not supported", dtype_name(t));
  }
}
}  // namespace

template <typename T>
std::vector<T> Tensor::to_vector() const {
  PRIMUS_CHECK(is_contiguous(), "to_vector(): non-contiguous tensor {}", describe());
  Tensor host = device().is_cpu() ? *this : to(Stream::cpu());
  std::vector<T> out(static_cast<size_t>(numel()));
  if (dtype_ == DTypeOf<T>::value) {
    if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), nbytes());
    return out;
  }
  const void* base = host.data_ptr();
  for (int64_t i = 0; i < numel(); ++i) out[i] = from_float_bits<T>(element_as_double(base, dtype_, i));
  return out;
}
template std::vector<float> Tensor::to_vector() const;
template std::vector<double> Tensor::to_vector() const;
template std::vector<bf16_t> Tensor::to_vector() const;
template std::vector<int32_t> Tensor::to_vector() const;
template std::vector<int64_t> Tensor::to_vector() const;

std::string Tensor::describe() const {
  return fmt::format("{}{} on {}", dtype_name(dtype_), shape_str(shape_), device().str());
}

Tensor cpu_cast(const Tensor& src, DType to) {
  PRIMUS_CHECK(src.device().is_cpu() && src.is_contiguous(),
               "cpu_cast(): needs a contiguous CPU tensor, got {}", src.describe());
  Tensor out = Tensor::empty(src.shape(), to);
  const int64_t n = src.numel();
  const void* in = src.data_ptr();
  switch (to) {
    case DType::kF32: {
      float* o = out.data<float>();
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(element_as_double(in, src.dtype(), i));
      break;
    }
    case DType::kF64: {
      double* o = out.data<double>();
      for (int64_t i = 0; i < n; ++i) o[i] = element_as_double(in, src.dtype(), i);
      break;
    }
    case DType::kBF16: {
      bf16_t* o = out.data<bf16_t>();
      for (int64_t i = 0; i < n; ++i)
        o[i] = float_to_bf16(static_cast<float>(element_as_double(in, src.dtype(), i)));
      break;
    }
    default:
      PRIMUS_FAIL("cpu_cast() to {} is not supported", dtype_name(to));
  }
  return out;
}

}  // namespace primus
