// Deterministic sums and norms (see reduce.h). Kernels: reduce_sum.comp (sums over chosen
// dimensions of a strided tensor), reduce_flat.comp (the two levels of a sum over contiguous
// data), multi_tensor_norm.comp (the first level of a norm over a list of tensors in one
// dispatch, optionally with GradScaler's inf/nan check), grad_overflow_norm.comp (its second
// level with the check) and scale_by_scalar.comp (scaling by a factor read from device memory).
#include "ops/reduce.h"

#include <cmath>

#include "core/autograd.h"
#include "core/launch.h"
#include "ops/checks.h"
#include "ops/elementwise.h"
#include "ops/multi_tensor.h"
#include "ops/strided.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

using detail::check_f32;
using detail::kMaxKernelDims;

constexpr uint32_t kLocal = 256;
// Elements per workgroup in the first level of a flat sum: 16 per invocation.
constexpr int64_t kChunk = 4096;
// reduce_sum.comp: reductions up to kSerialMax long run one invocation per output, up to
// kShortMax 32 invocations per output (8 outputs per workgroup), longer ones 256.
constexpr int64_t kSerialMax = 16;
constexpr int64_t kShortMax = 1024;
constexpr int64_t kShortOutputsPerGroup = 256 / 32;
// reduce_sum.comp cols variant: outputs per workgroup.
constexpr int64_t kCols = 16;

Tensor contiguous_input(const Tensor& x) { return x.is_contiguous() ? x : x.contiguous(); }

// out (contiguous, numel = product of x's kept dims) = x summed over the dims flagged in
// `reduced` (one flag per dim of x). Not recorded.
void reduce_dims(const Tensor& x, const std::vector<bool>& reduced, const Tensor& out,
                 const char* op) {
  const Shape& shape = x.shape();
  Shape out_strides(shape.size(), 0);
  int64_t acc = 1;
  for (int d = x.rank() - 1; d >= 0; --d) {
    if (reduced[d]) continue;
    out_strides[d] = acc;
    acc *= shape[d];
  }
  // Merging never fuses a kept with a reduced dim: their output strides (s > 0 and 0) differ.
  const detail::LoopNest nest = detail::merge(shape, {x.strides(), out_strides});
  std::vector<int> kept, summed;
  for (int d = 0; d < nest.rank(); ++d) (nest.strides[1][d] == 0 ? summed : kept).push_back(d);
  VKF_REQUIRE(nest.rank() <= kMaxKernelDims,
              "{}: x of shape {} and strides {} needs {} dimensions after merging; at most {} are "
              "supported",
              op, shape_str(shape), shape_str(x.strides()), nest.rank(), kMaxKernelDims);
  struct {
    uint64_t in, out;
    uint32_t n_out, n_red, nk, nr;
    uint32_t shape[kMaxKernelDims];
    int32_t strides[kMaxKernelDims];
  } push{};
  push.in = x.address();
  push.out = out.address();
  int64_t n_red = 1;
  int slot = 0;
  for (const std::vector<int>* group : {&kept, &summed}) {
    for (int d : *group) {
      push.shape[slot] = checked_u32(nest.shape[d], "dimension");
      push.strides[slot] = static_cast<int32_t>(checked_u32(nest.strides[0][d], "stride"));
      ++slot;
    }
  }
  for (int d : summed) n_red *= nest.shape[d];
  const int64_t n_out = out.numel();
  push.n_out = checked_u32(n_out, "output count");
  push.n_red = checked_u32(n_red, "reduction length");
  push.nk = static_cast<uint32_t>(kept.size());
  push.nr = static_cast<uint32_t>(summed.size());
  const vk::DispatchCost cost{static_cast<double>(x.numel()),
                              4.0 * static_cast<double>(x.numel() + n_out)};
  // A column sum: the innermost kept dim is contiguous in x, so neighbouring outputs are
  // neighbours in memory and the cols variant reads them together.
  const bool columns = !kept.empty() && nest.strides[0][kept.back()] == 1 &&
                       nest.shape[kept.back()] >= kCols && n_out >= 256;
  if (n_red <= kSerialMax) {
    launch("reduce_sum_thread", push, grid_1d(n_out, kLocal), {&x}, {&out}, {}, cost);
  } else if (columns) {
    launch("reduce_sum_cols", push, grid_1d((n_out + kCols - 1) / kCols, 1), {&x}, {&out}, {}, cost);
  } else if (n_red <= kShortMax) {
    launch("reduce_sum_rows_short", push, grid_1d((n_out + kShortOutputsPerGroup - 1) / kShortOutputsPerGroup, 1), {&x}, {&out}, {}, cost);
  } else {
    launch("reduce_sum_rows", push, grid_1d(n_out, 1), {&x}, {&out}, {}, cost);
  }
}

enum class Finish : uint32_t { None = 0, Divide = 1, Sqrt = 2 };

struct FlatPush {
  uint64_t in, out;
  uint32_t n, chunk, out_offset;
  float divisor;
};

// out[out_offset + g] = sum (of squares) of x[g*chunk, (g+1)*chunk) for every chunk g; x contiguous.
void flat_level(const Tensor& x, const Tensor& out, int64_t out_offset, int64_t chunk, bool square,
                Finish finish, float divisor) {
  const int64_t n = x.numel();
  const FlatPush push{x.address(), out.address(), checked_u32(n, "element count"),
                      checked_u32(chunk, "chunk"), checked_u32(out_offset, "offset"), divisor};
  launch("reduce_flat", push, grid_1d((n + chunk - 1) / chunk, 1), {&x}, {&out},
         {square ? 1u : 0u, static_cast<uint32_t>(finish)},
         {static_cast<double>(n) * (square ? 2.0 : 1.0), 4.0 * static_cast<double>(n)});
}

// A rank-0 tensor holding the finished sum of contiguous x: one pass when x fits one chunk,
// else chunk sums then one workgroup over them.
Tensor flat_sum(const Tensor& x, Finish finish, float divisor) {
  Tensor out = Tensor::empty({}, DType::F32);
  const int64_t n = x.numel();
  if (n <= kChunk) {
    flat_level(x, out, 0, n, false, finish, divisor);
    return out;
  }
  const int64_t parts = (n + kChunk - 1) / kChunk;
  Tensor partial = Tensor::empty({parts}, DType::F32);
  flat_level(x, partial, 0, kChunk, false, Finish::None, 1.0f);
  flat_level(partial, out, 0, parts, false, finish, divisor);
  return out;
}

// A list of gradients scaled in place: non-empty, f32, contiguous, each listed once.
void check_gradient_list(const char* op, const std::vector<Tensor>& grads) {
  VKF_REQUIRE(!grads.empty(), "{}: the list of gradients is empty", op);
  for (size_t i = 0; i < grads.size(); ++i) {
    const std::string arg = "grads[" + std::to_string(i) + "]";
    check_f32(grads[i], op, arg.c_str());
    VKF_REQUIRE(grads[i].is_contiguous(),
                "{}: grads[{}] of shape {} is a non-contiguous view; gradients are "
                "scaled in place and must be contiguous",
                op, i, shape_str(grads[i].shape()));
    for (size_t j = 0; j < i; ++j)
      VKF_REQUIRE(!(grads[j].same_storage(grads[i]) && grads[j].offset() == grads[i].offset()),
                  "{}: grads[{}] and grads[{}] are the same tensor; each gradient "
                  "must appear once or it would be scaled twice",
                  op, j, i);
  }
}

// 1 / S must be a positive finite number (S itself may be huge: 2^16 by default).
void check_inv_scale(const char* op, float inv_scale) {
  VKF_REQUIRE(std::isfinite(inv_scale) && inv_scale > 0.0f,
              "{}: inv_scale is {}; expected 1 / loss scale, a positive finite number", op, inv_scale);
}

int normalize_dim(int dim, int rank, const char* op) {
  const int d = dim < 0 ? dim + rank : dim;
  VKF_REQUIRE(rank > 0 && d >= 0 && d < rank,
              "{}: dim {} is out of range for a tensor of rank {} (expected {} <= dim < {})", op,
              dim, rank, -rank, rank);
  return d;
}

// out[i] = in[i] * factor(s0, s1) over contiguous tensors (see scale_by_scalar.comp); mode 2
// unscales by inv_scale first, mode 3 scales by s0 alone.
void scale_by_scalar(uint32_t mode, const Tensor& s0, const Tensor& s1, const Tensor& in,
                     const Tensor& out, float max_norm, float inv_scale = 1.0f) {
  struct {
    uint64_t s0, s1, in, out;
    uint32_t n;
    float max_norm, inv_scale;
  } push{s0.address(), s1.address(), in.address(), out.address(),
         checked_u32(in.numel(), "element count"), max_norm, inv_scale};
  const double n = static_cast<double>(in.numel());
  launch("scale_by_scalar", push, grid_1d(in.numel(), kLocal), {&s0, &s1, &in}, {&out}, {mode},
         {n, 8.0 * n});
}

// The first level of a norm over a list of tensors, in one dispatch (multi_tensor_norm.comp):
// the sums of squares of every kMultiChunk chunk, in list order, and with `overflow` their
// inf/NaN flags after them (grad_overflow_norm.comp's layout). `parts` receives the chunk count.
Tensor multi_tensor_partials(const std::vector<detail::MultiTensorEntry>& list, bool overflow,
                             float inv_scale, const char* op, int64_t& parts) {
  static_assert(detail::kMultiChunk == kChunk, "the list's chunks are the flat sums' chunks");
  const detail::TensorTable table = detail::make_tensor_table(list, op);
  parts = table.chunks;
  Tensor partial = Tensor::empty({(overflow ? 2 : 1) * parts}, DType::F32);
  struct {
    uint64_t table, out;
    uint32_t count, chunks, flag_offset;
    float inv_scale;
  } push{table.records.address(),
         partial.address(),
         table.count,
         table.chunks,
         table.chunks,
         inv_scale};
  const std::vector<const Tensor*> writes{&partial};
  const double elems = static_cast<double>(parts) * static_cast<double>(kChunk);
  launch_lists("multi_tensor_norm", push, grid_1d(parts, 1), table.reads, writes,
               {overflow ? 1u : 0u}, {3.0 * elems, 4.0 * elems});
  return partial;
}

}  // namespace

Tensor sum(const Tensor& x) {
  check_f32(x, "sum", "x");
  const Tensor xc = contiguous_input(x);
  Tensor out = flat_sum(xc, Finish::None, 1.0f);
  autograd::record_op("sum", {xc}, {out}, [shape = x.shape()](autograd::GradContext& ctx) {
    const Tensor& g = ctx.grad_output(0);
    if (g.defined()) ctx.add_grad(0, expand(g, shape));
  });
  return out;
}

Tensor mean(const Tensor& x) {
  check_f32(x, "mean", "x");
  const Tensor xc = contiguous_input(x);
  const int64_t n = x.numel();
  Tensor out = flat_sum(xc, Finish::Divide, static_cast<float>(n));
  autograd::record_op("mean", {xc}, {out}, [shape = x.shape(), n](autograd::GradContext& ctx) {
    const Tensor& g = ctx.grad_output(0);
    if (g.defined())
      ctx.add_grad(0, scale(expand(g, shape), static_cast<float>(1.0 / static_cast<double>(n))));
  });
  return out;
}

Tensor sum(const Tensor& x, int dim, bool keepdim) {
  check_f32(x, "sum", "x");
  const int d = normalize_dim(dim, x.rank(), "sum");
  std::vector<bool> reduced(x.rank(), false);
  reduced[d] = true;
  Shape kept_shape = x.shape();
  kept_shape[d] = 1;
  Shape out_shape = x.shape();
  if (keepdim) {
    out_shape[d] = 1;
  } else {
    out_shape.erase(out_shape.begin() + d);
  }
  Tensor out = Tensor::empty(out_shape, DType::F32);
  reduce_dims(x, reduced, out, "sum");
  autograd::record_op("sum_dim", {x}, {out},
                      [kept_shape, shape = x.shape()](autograd::GradContext& ctx) {
    const Tensor& g = ctx.grad_output(0);
    if (g.defined()) ctx.add_grad(0, expand(g.reshape(kept_shape), shape));
  });
  return out;
}

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  check_f32(x, "sum_to_shape", "x");
  VKF_REQUIRE(shape.size() <= x.shape().size() &&
                  detail::broadcast_shapes(shape, x.shape(), "sum_to_shape") == x.shape(),
              "sum_to_shape: shape {} does not broadcast to x's shape {}", shape_str(shape),
              shape_str(x.shape()));
  if (shape == x.shape()) return x;
  const size_t lead = x.shape().size() - shape.size();
  std::vector<bool> reduced(x.shape().size(), false);
  for (size_t d = 0; d < x.shape().size(); ++d)
    reduced[d] = d < lead || (shape[d - lead] == 1 && x.shape()[d] != 1);
  Tensor out = Tensor::empty(shape, DType::F32);
  reduce_dims(x, reduced, out, "sum_to_shape");
  autograd::record_op("sum_to_shape", {x}, {out}, [sx = x.shape()](autograd::GradContext& ctx) {
    const Tensor& g = ctx.grad_output(0);
    if (g.defined()) ctx.add_grad(0, expand(g, sx));
  });
  return out;
}

Tensor global_l2_norm(const std::vector<Tensor>& tensors) {
  VKF_REQUIRE(!tensors.empty(), "global_l2_norm: the list of tensors is empty");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string arg = "tensors[" + std::to_string(i) + "]";
    check_f32(tensors[i], "global_l2_norm", arg.c_str());
  }
  // The copies of non-contiguous inputs are not the recorded inputs: gradients go to the originals.
  std::vector<detail::MultiTensorEntry> list(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) list[i].grad = contiguous_input(tensors[i]);
  Tensor partial;
  int64_t parts = 0;
  {
    autograd::NoGradScope no_grad;
    partial = multi_tensor_partials(list, false, 1.0f, "global_l2_norm", parts);
  }
  Tensor norm = Tensor::empty({}, DType::F32);
  flat_level(partial, norm, 0, parts, false, Finish::Sqrt, 1.0f);
  autograd::record_op("global_l2_norm", tensors, {norm},
                      [tensors, norm](autograd::GradContext& ctx) {
    const Tensor& g = ctx.grad_output(0);
    if (!g.defined()) return;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!ctx.needs_grad(i)) continue;
      const Tensor tc = contiguous_input(tensors[i]);
      Tensor gi = Tensor::empty(tc.shape(), DType::F32);
      scale_by_scalar(1, g, norm, tc, gi, 0.0f);
      ctx.add_grad(i, gi);
    }
  });
  return norm;
}

Tensor clip_grad_norm_(const std::vector<Tensor>& grads, float max_norm) {
  VKF_REQUIRE(!std::isnan(max_norm) && max_norm >= 0.0f,
              "clip_grad_norm_: max_norm is {}; expected a non-negative number", max_norm);
  check_gradient_list("clip_grad_norm_", grads);
  autograd::NoGradScope no_grad;
  Tensor norm = global_l2_norm(grads);
  for (const Tensor& g : grads) scale_by_scalar(0, norm, norm, g, g, max_norm);
  return norm;
}

void scale_by_device_scalar_(const Tensor& x, const Tensor& s) {
  const char* op = "scale_by_device_scalar_";
  check_f32(x, op, "x");
  VKF_REQUIRE(x.is_contiguous(), "{}: x of shape {} must be contiguous (it is scaled in place)", op,
              shape_str(x.shape()));
  VKF_REQUIRE(s.defined() && s.dtype() == DType::F32 && s.numel() == 1,
              "{}: s must be a one-element f32 tensor", op);
  scale_by_scalar(3, s, s, x, x, 0.0f);
}

Tensor grad_norm_and_overflow(const std::vector<Tensor>& grads, float inv_scale) {
  const char* op = "grad_norm_and_overflow";
  check_gradient_list(op, grads);
  check_inv_scale(op, inv_scale);
  autograd::NoGradScope no_grad;
  std::vector<detail::MultiTensorEntry> list(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) list[i].grad = grads[i];
  int64_t parts = 0;
  // [0, parts): sums of squares per chunk; [parts, 2 parts): the chunks' inf/nan flags.
  const Tensor partial = multi_tensor_partials(list, true, inv_scale, op, parts);
  Tensor out = Tensor::empty({2}, DType::F32);
  struct {
    uint64_t in, out;
    uint32_t parts;
  } push{partial.address(), out.address(), checked_u32(parts, "chunk count")};
  launch("grad_overflow_norm", push, Grid{1, 1, 1}, {&partial}, {&out}, {},
         {2.0 * static_cast<double>(parts), 8.0 * static_cast<double>(parts)});
  return out;
}

void unscale_and_clip_(const std::vector<Tensor>& grads, float inv_scale, const Tensor& norm,
                       float max_norm) {
  const char* op = "unscale_and_clip_";
  VKF_REQUIRE(!std::isnan(max_norm) && max_norm >= 0.0f,
              "{}: max_norm is {}; expected a non-negative number", op, max_norm);
  check_gradient_list(op, grads);
  check_inv_scale(op, inv_scale);
  VKF_REQUIRE(norm.defined() && norm.dtype() == DType::F32 && norm.numel() == 1,
              "{}: norm must be a one-element f32 tensor", op);
  autograd::NoGradScope no_grad;
  for (const Tensor& g : grads) scale_by_scalar(2, norm, norm, g, g, max_norm, inv_scale);
}

}  // namespace vkf::ops
