// Tensor: a typed, shaped, strided view of device memory. Row-major; views (reshape, slice,
// transpose) share storage and record themselves on the autodiff tape when they carry gradients.
// Shaders reach a tensor through its buffer device address; hazard tracking uses the whole
// storage range, so views of one storage are ordered conservatively.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "vk/memory.h"
#include "vk/stream.h"

namespace vkf {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);

// Owns one device allocation; freed through the stream once no queued command can still use it.
struct Storage {
  vk::Allocation alloc;
  uint64_t bytes = 0;
  explicit Storage(uint64_t nbytes, vk::MemoryKind kind = vk::MemoryKind::Device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  DType dtype = DType::F32;
  Shape shape;
  Shape strides;  // in elements
  std::string name;
  uint64_t id = 0;
  // Autodiff state.
  bool requires_grad = false;
  bool is_leaf = true;
  std::shared_ptr<TensorImpl> grad;  // leaves only
  bool grad_exclusive = false;       // grad may be updated in place (not shared with another tensor)
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Creation. `empty` leaves memory unset (NaN-poisoned when VKF_POISON=1, to catch unwritten
  // outputs in tests).
  static Tensor empty(const Shape& shape, DType dtype = DType::F32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32);
  static Tensor full(const Shape& shape, float value);
  static Tensor from_host(std::span<const float> data, const Shape& shape);
  static Tensor from_host(std::span<const double> data, const Shape& shape);  // rounded to f32
  static Tensor from_host_i32(std::span<const int32_t> data, const Shape& shape);
  static Tensor from_host_i64(std::span<const int64_t> data, const Shape& shape);
  // Raw bytes of `dtype`, row-major, numel(shape) elements.
  static Tensor from_bytes(const void* data, DType dtype, const Shape& shape);
  // Unset memory that the host sees through host_data() and kernels read and write over the bus
  // (host-visible, coherent): for a few values exchanged with the host at every replayed step
  // (infer/decode_step.h), with no copy command between kernel and host. Not for bulk data.
  static Tensor empty_host_visible(const Shape& shape, DType dtype);
  // The first element of a host-visible tensor's view in host memory, else nullptr. Reads see
  // what finished GPU work wrote; the host must not write while queued work may use it.
  void* host_data() const;

  // Reads back (waits for the GPU). Floating dtypes convert to float/double; integers to int64.
  std::vector<float> to_float() const;
  std::vector<double> to_double() const;
  std::vector<int64_t> to_int() const;
  std::vector<uint8_t> to_bytes() const;  // contiguous copy in this tensor's dtype
  float item() const;                     // a one-element tensor

  bool defined() const { return impl_ != nullptr; }
  DType dtype() const { return impl_->dtype; }
  const Shape& shape() const { return impl_->shape; }
  const Shape& strides() const { return impl_->strides; }
  int rank() const { return static_cast<int>(impl_->shape.size()); }
  int64_t dim(int i) const;  // negative counts from the end
  int64_t numel() const { return shape_numel(impl_->shape); }
  int64_t offset() const { return impl_->offset; }
  bool is_contiguous() const;
  uint64_t nbytes() const { return static_cast<uint64_t>(numel()) * dtype_size(dtype()); }

  // Views (no copy). reshape needs a contiguous tensor; one dimension may be -1.
  Tensor reshape(const Shape& shape) const;
  Tensor slice(int dim, int64_t start, int64_t end) const;
  Tensor transpose(int d0, int d1) const;
  Tensor unsqueeze(int dim) const;
  // Copies (recorded on the GPU, differentiable).
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;  // dtype conversion; not differentiable
  // In-place, not differentiable: fill with a value; copy `src` (same shape/dtype) into this view.
  void fill_(float value) const;
  void copy_(const Tensor& src) const;

  // Device access for kernels.
  uint64_t address() const;  // of element 0 of this view
  vk::BufferRange range() const;
  const vk::Allocation& allocation() const { return impl_->storage->alloc; }
  bool same_storage(const Tensor& o) const { return impl_->storage == o.impl_->storage; }

  // Autodiff.
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  Tensor& set_requires_grad(bool on);
  bool is_leaf() const { return impl_->is_leaf; }
  Tensor grad() const { return Tensor(impl_->grad); }
  void set_grad(const Tensor& g) const;
  // A new leaf view of the same storage, without gradient history or requires_grad.
  Tensor detach() const;
  void zero_grad() const;  // drops the gradient (as torch's set_to_none)

  const std::string& name() const { return impl_->name; }
  const Tensor& set_name(std::string name) const;
  uint64_t id() const { return impl_->id; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Fails with a clear vkf::Error unless t is defined, of the dtype and (if given) the rank.
void check_tensor(const Tensor& t, const char* what, DType dtype, int rank = -1);
void check_same_shape(const Tensor& a, const Tensor& b, const char* op);

}  // namespace vkf
