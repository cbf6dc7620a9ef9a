// Core GPU kernels: strided copy, fill, conversion, f32 add (see tensor_kernels.h).
#include "core/tensor_kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "core/launch.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf::detail {
namespace {

constexpr int kMaxRank = 6;

struct ViewDesc {
  uint32_t rank;
  uint32_t shape[kMaxRank];
  int32_t strides[kMaxRank];
};

// Describes a view for the strided kernels, merging nothing: rank <= 6, strides fit in 32 bits.
ViewDesc describe(const Tensor& t) {
  VKF_REQUIRE(t.rank() <= kMaxRank, "tensors of rank {} are not supported (at most {})", t.rank(),
              kMaxRank);
  ViewDesc d{};
  d.rank = static_cast<uint32_t>(std::max(t.rank(), 1));
  if (t.rank() == 0) {
    d.shape[0] = 1;
    d.strides[0] = 0;
    return d;
  }
  for (int i = 0; i < t.rank(); ++i) {
    d.shape[i] = checked_u32(t.shape()[i], "dimension");
    d.strides[i] = static_cast<int32_t>(checked_u32(t.strides()[i], "stride"));
  }
  return d;
}

const char* width_suffix(DType t) {
  switch (dtype_size(t)) {
    case 2:
      return "b16";
    case 4:
      return "b32";
    default:
      return "b64";
  }
}

const char* lower_name(DType t) {
  return dtype_name(t);
}

// A view as rows of contiguous elements: `rows` rows of `cols`, row r at r * rs elements from the
// view's start.
struct RowsView {
  int64_t rows = 1, cols = 1, rs = 0;
};

// t as rows of contiguous elements, where its last dimension is contiguous and its outer
// dimensions merge into one (dimensions of size 1 ignored); else nothing.
std::optional<RowsView> rows_view(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (size, stride), sizes above 1
  for (int i = 0; i < t.rank(); ++i)
    if (t.shape()[i] != 1) dims.emplace_back(t.shape()[i], t.strides()[i]);
  RowsView v;
  if (dims.empty()) return v;
  if (dims.back().second != 1) return std::nullopt;
  v.cols = dims.back().first;
  dims.pop_back();
  if (dims.empty()) return v;
  v.rows = dims.back().first;
  v.rs = dims.back().second;
  for (size_t i = dims.size() - 1; i-- > 0;) {
    if (dims[i].second != dims[i + 1].second * dims[i + 1].first) return std::nullopt;
    v.rows *= dims[i].first;
  }
  return v;
}

// copy_rows.comp for src -> dst of one shape where both are rows of contiguous elements; false
// (nothing done) otherwise.
bool copy_as_rows(const Tensor& src, const Tensor& dst, const vk::DispatchCost& cost) {
  const auto s = rows_view(src), d = rows_view(dst);
  if (!s || !d) return false;
  const int64_t esize = dtype_size(src.dtype());
  // 16-byte units where every row start and length allows them.
  const bool v4 = (s->cols * esize) % 16 == 0 && (s->rs * esize) % 16 == 0 &&
                  (d->rs * esize) % 16 == 0 && src.address() % 16 == 0 && dst.address() % 16 == 0;
  const int64_t unit = v4 ? 16 / esize : 1;
  const int64_t rows = s->rows, cols = s->cols / unit;
  const int64_t src_rs = s->rs / unit, dst_rs = d->rs / unit;
  if (rows * cols > int64_t{0xffffffff} ||
      (rows - 1) * std::max(src_rs, dst_rs) + cols > int64_t{0xffffffff})
    return false;
  struct {
    uint64_t src, dst;
    uint32_t rows, cols, src_rs, dst_rs;
  } push{src.address(),
         dst.address(),
         static_cast<uint32_t>(rows),
         static_cast<uint32_t>(cols),
         static_cast<uint32_t>(src_rs),
         static_cast<uint32_t>(dst_rs)};
  launch(std::string("copy_rows_") + (v4 ? "v4" : width_suffix(src.dtype())), push,
         grid_1d(rows * cols, 256), {&src}, {&dst}, {}, cost);
  return true;
}

}  // namespace

void copy_strided(const Tensor& src, const Tensor& dst) {
  VKF_REQUIRE(src.shape() == dst.shape() && src.dtype() == dst.dtype(),
              "copy: source {} {} and destination {} {} differ", shape_str(src.shape()),
              dtype_name(src.dtype()), shape_str(dst.shape()), dtype_name(dst.dtype()));
  const int64_t n = src.numel();
  if (n == 0) return;
  vk::DispatchCost cost{0.0, 2.0 * static_cast<double>(n * dtype_size(src.dtype()))};
  if (vk::Context::get().stream().profiling_detail())  // which copies a profile's time goes to
    cost.detail = fmt::format("{} strides {} -> {}", shape_str(src.shape()),
                              shape_str(src.strides()), shape_str(dst.strides()));
  if (copy_as_rows(src, dst, cost)) return;
  struct {
    uint64_t src, dst;
    uint32_t n, rank;
    uint32_t shape[6];
    int32_t src_strides[6];
    int32_t dst_strides[6];
  } push{};
  const ViewDesc s = describe(src), d = describe(dst);
  push.src = src.address();
  push.dst = dst.address();
  push.n = checked_u32(n, "element count");
  push.rank = s.rank;
  std::memcpy(push.shape, s.shape, sizeof(push.shape));
  std::memcpy(push.src_strides, s.strides, sizeof(push.src_strides));
  std::memcpy(push.dst_strides, d.strides, sizeof(push.dst_strides));
  launch(std::string("copy_strided_") + width_suffix(src.dtype()), push, grid_1d(n, 256), {&src},
         {&dst}, {}, cost);
}

void fill(const Tensor& dst, float value) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  uint64_t bits = 0;
  switch (dst.dtype()) {
    case DType::F32: {
      uint32_t u;
      std::memcpy(&u, &value, 4);
      bits = u;
      break;
    }
    case DType::F16:
      bits = f32_to_f16_bits(value);
      break;
    case DType::BF16:
      bits = f32_to_bf16_bits(value);
      break;
    case DType::I32:
      bits = static_cast<uint32_t>(static_cast<int32_t>(value));
      break;
    case DType::I64:
      bits = static_cast<uint64_t>(static_cast<int64_t>(value));
      break;
  }
  struct {
    uint64_t dst;
    uint32_t n, rank, lo, hi;
    uint32_t shape[6];
    int32_t strides[6];
  } push{};
  const ViewDesc d = describe(dst);
  push.dst = dst.address();
  push.n = checked_u32(n, "element count");
  push.rank = d.rank;
  push.lo = static_cast<uint32_t>(bits);
  push.hi = static_cast<uint32_t>(bits >> 32);
  std::memcpy(push.shape, d.shape, sizeof(push.shape));
  std::memcpy(push.strides, d.strides, sizeof(push.strides));
  launch(std::string("fill_") + width_suffix(dst.dtype()), push, grid_1d(n, 256), {}, {&dst});
}

Tensor convert(const Tensor& src, DType dtype) {
  VKF_REQUIRE(src.is_contiguous(), "convert needs a contiguous tensor");
  Tensor out = Tensor::empty(src.shape(), dtype);
  const int64_t n = src.numel();
  if (n == 0) return out;
  if (src.dtype() == dtype) {
    copy_strided(src, out);
    return out;
  }
  struct {
    uint64_t src, dst;
    uint32_t n;
  } push{src.address(), out.address(), checked_u32(n, "element count")};
  vk::DispatchCost cost{0.0, static_cast<double>(n) *
                                 static_cast<double>(dtype_size(src.dtype()) + dtype_size(dtype))};
  if (vk::Context::get().stream().profiling_detail()) cost.detail = shape_str(src.shape());
  std::string module = std::string("convert_") + lower_name(src.dtype()) + "_" + lower_name(dtype);
  // f32 -> f16 eight elements at a time where both buffers allow 16-byte accesses.
  if (module == "convert_f32_f16" && push.src % 16 == 0 && push.dst % 16 == 0) {
    launch(module + "_x8", push, grid_1d(div_up(n, 8), 256), {&src}, {&out}, {}, cost);
    return out;
  }
  launch(module, push, grid_1d(n, 256), {&src}, {&out}, {}, cost);
  return out;
}

void axpy(const Tensor& a, const Tensor& b, float alpha, const Tensor& out) {
  VKF_REQUIRE(a.dtype() == DType::F32 && b.dtype() == DType::F32 && out.dtype() == DType::F32,
              "axpy works on f32 tensors");
  VKF_REQUIRE(a.is_contiguous() && b.is_contiguous() && out.is_contiguous(),
              "axpy needs contiguous tensors");
  VKF_REQUIRE(a.numel() == b.numel() && a.numel() == out.numel(),
              "axpy: sizes differ ({} vs {} vs {})", a.numel(), b.numel(), out.numel());
  const int64_t n = a.numel();
  struct {
    uint64_t a, b, out;
    uint32_t n;
    float alpha;
  } push{a.address(), b.address(), out.address(), checked_u32(n, "element count"), alpha};
  launch("axpy", push, grid_1d(n, 256), {&a, &b}, {&out}, {},
         {static_cast<double>(n), static_cast<double>(n) * 12.0});
}

Tensor add(const Tensor& a, const Tensor& b) {
  check_same_shape(a, b, "add");
  Tensor ac = a.is_contiguous() ? a : a.contiguous();
  Tensor bc = b.is_contiguous() ? b : b.contiguous();
  Tensor out = Tensor::empty(a.shape(), DType::F32);
  axpy(ac, bc, 1.0f, out);
  return out;
}

void add_inplace(const Tensor& dst, const Tensor& src) {
  check_same_shape(dst, src, "add_inplace");
  Tensor sc = src.is_contiguous() ? src : src.contiguous();
  axpy(dst, sc, 1.0f, dst);
}

}  // namespace vkf::detail
