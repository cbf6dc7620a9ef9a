// Tensor creation, transfer, views and their gradients (see tensor.h).
#include "core/tensor.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/autograd.h"
#include "core/tensor_kernels.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf {
namespace {

std::atomic<uint64_t> g_next_id{1};

bool poison_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("VKF_POISON");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

std::shared_ptr<TensorImpl> make_impl(const Shape& shape, DType dtype,
                                      vk::MemoryKind kind = vk::MemoryKind::Device) {
  for (auto d : shape)
    VKF_REQUIRE(d >= 0, "negative dimension in shape {}", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->dtype = dtype;
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->id = g_next_id++;
  const uint64_t bytes = static_cast<uint64_t>(shape_numel(shape)) * dtype_size(dtype);
  impl->storage = std::make_shared<Storage>(bytes, kind);
  return impl;
}

int normalize_dim(int d, int rank, const char* op) {
  const int r = d < 0 ? d + rank : d;
  VKF_REQUIRE(r >= 0 && r < rank, "{}: dimension {} out of range for rank {}", op, d, rank);
  return r;
}

}  // namespace

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

Storage::Storage(uint64_t nbytes, vk::MemoryKind kind) : bytes(nbytes) {
  auto& ctx = vk::Context::get();
  try {
    alloc = ctx.allocator().allocate(nbytes, kind);
  } catch (const OutOfMemory&) {
    // The allocator has already returned its kept blocks to the driver; what can still come back
    // is memory waiting for queued work (staging blocks, graphs destroyed while in flight): wait
    // for it and try once more.
    ctx.stream().synchronize();
    alloc = ctx.allocator().allocate(nbytes, kind);
  }
}

Storage::~Storage() {
  if (!vk::Context::exists()) return;
  vk::Context::get().stream().release(alloc);
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  Tensor t(make_impl(shape, dtype));
  if (poison_enabled() && t.nbytes() > 0) {
    // Quiet-NaN patterns (and a large sentinel for integers) expose elements no kernel wrote.
    const uint32_t pattern = is_floating(dtype) ? 0x7fc07fc0u : 0x5a5a5a5au;
    const uint64_t bytes = (t.nbytes() + 3) / 4 * 4;
    vk::Context::get().stream().fill(t.allocation(), 0, bytes, pattern);
  }
  return t;
}

Tensor Tensor::empty_host_visible(const Shape& shape, DType dtype) {
  Tensor t(make_impl(shape, dtype, vk::MemoryKind::Staging));
  VKF_REQUIRE(t.host_data() != nullptr || t.nbytes() == 0,
              "empty_host_visible: the device's host-visible memory could not be mapped");
  return t;
}

void* Tensor::host_data() const {
  void* base = impl_->storage->alloc.mapped();
  return base ? static_cast<char*>(base) + impl_->offset * dtype_size(impl_->dtype) : nullptr;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t(make_impl(shape, dtype));
  const uint64_t bytes = (t.nbytes() + 3) / 4 * 4;
  vk::Context::get().stream().fill(t.allocation(), 0, bytes, 0u);
  return t;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t(make_impl(shape, DType::F32));
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  vk::Context::get().stream().fill(t.allocation(), 0, t.nbytes(), bits);
  return t;
}

Tensor Tensor::from_bytes(const void* data, DType dtype, const Shape& shape) {
  Tensor t(make_impl(shape, dtype));
  vk::Context::get().stream().upload(data, t.allocation(), 0, t.nbytes());
  return t;
}

Tensor Tensor::from_host(std::span<const float> data, const Shape& shape) {
  VKF_REQUIRE(static_cast<int64_t>(data.size()) == shape_numel(shape),
              "from_host: {} values for shape {}", data.size(), shape_str(shape));
  return from_bytes(data.data(), DType::F32, shape);
}

Tensor Tensor::from_host(std::span<const double> data, const Shape& shape) {
  std::vector<float> f(data.begin(), data.end());
  return from_host(std::span<const float>(f), shape);
}

Tensor Tensor::from_host_i32(std::span<const int32_t> data, const Shape& shape) {
  VKF_REQUIRE(static_cast<int64_t>(data.size()) == shape_numel(shape),
              "from_host_i32: {} values for shape {}", data.size(), shape_str(shape));
  return from_bytes(data.data(), DType::I32, shape);
}

Tensor Tensor::from_host_i64(std::span<const int64_t> data, const Shape& shape) {
  VKF_REQUIRE(static_cast<int64_t>(data.size()) == shape_numel(shape),
              "from_host_i64: {} values for shape {}", data.size(), shape_str(shape));
  return from_bytes(data.data(), DType::I64, shape);
}

std::vector<uint8_t> Tensor::to_bytes() const {
  Tensor c = is_contiguous() ? *this : contiguous();
  std::vector<uint8_t> out(c.nbytes());
  vk::Context::get().stream().download(c.allocation(), c.offset() * dtype_size(c.dtype()),
                                       out.data(), out.size());
  return out;
}

std::vector<double> Tensor::to_double() const {
  const auto bytes = to_bytes();
  const size_t n = static_cast<size_t>(numel());
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    switch (dtype()) {
      case DType::F32: {
        float f;
        std::memcpy(&f, bytes.data() + 4 * i, 4);
        out[i] = f;
        break;
      }
      case DType::F16: {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        out[i] = f16_bits_to_f32(h);
        break;
      }
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        out[i] = bf16_bits_to_f32(h);
        break;
      }
      case DType::I32: {
        int32_t v;
        std::memcpy(&v, bytes.data() + 4 * i, 4);
        out[i] = v;
        break;
      }
      case DType::I64: {
        int64_t v;
        std::memcpy(&v, bytes.data() + 8 * i, 8);
        out[i] = static_cast<double>(v);
        break;
      }
    }
  }
  return out;
}

std::vector<float> Tensor::to_float() const {
  const auto d = to_double();
  return std::vector<float>(d.begin(), d.end());
}

std::vector<int64_t> Tensor::to_int() const {
  if (dtype() == DType::I64) {
    const auto bytes = to_bytes();
    std::vector<int64_t> out(static_cast<size_t>(numel()));
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  const auto d = to_double();
  std::vector<int64_t> out(d.size());
  for (size_t i = 0; i < d.size(); ++i) out[i] = static_cast<int64_t>(d[i]);
  return out;
}

float Tensor::item() const {
  VKF_REQUIRE(numel() == 1, "item() needs a one-element tensor, got shape {}", shape_str(shape()));
  return to_float()[0];
}

int64_t Tensor::dim(int i) const { return shape()[normalize_dim(i, rank(), "dim")]; }

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape()[i] != 1 && strides()[i] != expect) return false;
    expect *= shape()[i];
  }
  return true;
}

uint64_t Tensor::address() const {
  return allocation().address() + static_cast<uint64_t>(offset()) * dtype_size(dtype());
}

vk::BufferRange Tensor::range() const { return vk::range_of(allocation()); }

const Tensor& Tensor::set_name(std::string n) const {
  impl_->name = std::move(n);
  return *this;
}

Tensor& Tensor::set_requires_grad(bool on) {
  VKF_REQUIRE(!on || dtype() == DType::F32, "only f32 tensors can require gradients (got {})",
              dtype_name(dtype()));
  impl_->requires_grad = on;
  return *this;
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined()) check_same_shape(*this, g, "set_grad");
  impl_->grad = g.impl_ptr();
  impl_->grad_exclusive = false;
}

void Tensor::zero_grad() const {
  impl_->grad.reset();
  impl_->grad_exclusive = false;
}

// A view shares storage; the result starts as a leaf and becomes an op output if recorded.
static Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->dtype = base.dtype();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->id = g_next_id++;
  return Tensor(impl);
}

Tensor Tensor::detach() const { return make_view(*this, shape(), strides(), offset()); }

Tensor Tensor::reshape(const Shape& new_shape) const {
  Shape s = new_shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      VKF_REQUIRE(infer < 0, "reshape {}: only one dimension may be -1", shape_str(new_shape));
      infer = static_cast<int>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    VKF_REQUIRE(known > 0 && numel() % known == 0, "reshape {} -> {}: cannot infer -1",
                shape_str(shape()), shape_str(new_shape));
    s[infer] = numel() / known;
  }
  VKF_REQUIRE(shape_numel(s) == numel(), "reshape {} -> {}: element counts differ ({} vs {})",
              shape_str(shape()), shape_str(new_shape), numel(), shape_numel(s));
  if (!is_contiguous()) return contiguous().reshape(s);
  Tensor out = make_view(*this, s, contiguous_strides(s), offset());
  const Shape original = shape();
  autograd::record_op("reshape", {*this}, {out}, [original](autograd::GradContext& ctx) {
    ctx.add_grad(0, ctx.grad_output(0).reshape(original));
  });
  return out;
}

Tensor Tensor::slice(int d, int64_t start, int64_t end) const {
  d = normalize_dim(d, rank(), "slice");
  VKF_REQUIRE(0 <= start && start <= end && end <= shape()[d],
              "slice [{}, {}) out of range for dimension {} of size {}", start, end, d,
              shape()[d]);
  Shape s = shape();
  s[d] = end - start;
  Tensor out = make_view(*this, s, strides(), offset() + start * strides()[d]);
  const Shape original = shape();
  autograd::record_op("slice", {*this}, {out}, [original, d, start, end](autograd::GradContext& ctx) {
    Tensor g = Tensor::zeros(original, DType::F32);
    detail::copy_strided(ctx.grad_output(0), g.slice(d, start, end));
    ctx.add_grad(0, g);
  });
  return out;
}

Tensor Tensor::transpose(int d0, int d1) const {
  d0 = normalize_dim(d0, rank(), "transpose");
  d1 = normalize_dim(d1, rank(), "transpose");
  Shape s = shape(), st = strides();
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  Tensor out = make_view(*this, s, st, offset());
  autograd::record_op("transpose", {*this}, {out}, [d0, d1](autograd::GradContext& ctx) {
    ctx.add_grad(0, ctx.grad_output(0).transpose(d0, d1).contiguous());
  });
  return out;
}

Tensor Tensor::unsqueeze(int d) const {
  VKF_REQUIRE(d >= 0 && d <= rank(), "unsqueeze: dimension {} out of range for rank {}", d, rank());
  Shape s = shape();
  s.insert(s.begin() + d, 1);
  return reshape(s);
}

Tensor Tensor::contiguous() const {
  Tensor out = Tensor::empty(shape(), dtype());
  detail::copy_strided(*this, out);
  autograd::record_op("contiguous", {*this}, {out},
                      [](autograd::GradContext& ctx) { ctx.add_grad(0, ctx.grad_output(0)); });
  return out;
}

Tensor Tensor::clone() const { return contiguous(); }

Tensor Tensor::to(DType t) const {
  Tensor src = is_contiguous() ? *this : contiguous();
  return detail::convert(src, t);
}

void Tensor::fill_(float value) const { detail::fill(*this, value); }

void Tensor::copy_(const Tensor& src) const { detail::copy_strided(src, *this); }

void check_tensor(const Tensor& t, const char* what, DType dtype, int rank) {
  VKF_REQUIRE(t.defined(), "{}: tensor is undefined", what);
  VKF_REQUIRE(t.dtype() == dtype, "{}: expected dtype {}, got {}", what, dtype_name(dtype),
              dtype_name(t.dtype()));
  VKF_REQUIRE(rank < 0 || t.rank() == rank, "{}: expected rank {}, got shape {}", what, rank,
              shape_str(t.shape()));
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  VKF_REQUIRE(a.defined() && b.defined(), "{}: undefined tensor", op);
  VKF_REQUIRE(a.shape() == b.shape(), "{}: shapes differ, {} vs {}", op, shape_str(a.shape()),
              shape_str(b.shape()));
}

}  // namespace vkf
