// apply_rope: validation, dispatch (rope_apply.comp) and backward (see rope.h).
#include "ops/rope.h"

#include "core/autograd.h"
#include "core/launch.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

constexpr uint32_t kInterleaved = 1, kAccumulate = 2;

struct RopeGeometry {
  int64_t batch, seq, heads, dim, half, positions;
  bool shared_ids;  // position_ids [1, T] serves every batch row
};

// Rotates x (contiguous) into out, or adds the rotation to out when accumulating.
void rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& ids,
            const Tensor& out, const RopeGeometry& g, RopeLayout layout, float sin_sign,
            bool accumulate) {
  const int64_t rows = g.batch * g.seq * g.heads;
  const int64_t items = rows * (g.half + g.dim - 2 * g.half);
  struct {
    uint64_t x, cos, sin, pos, out;
    uint32_t items, seq, heads, dim, half, positions, pos_batch_stride, flags;
    float sin_sign;
  } push{};
  push.x = x.address();
  push.cos = cos.address();
  push.sin = sin.address();
  push.pos = ids.address();
  push.out = out.address();
  push.items = checked_u32(items, "rope work items");
  push.seq = static_cast<uint32_t>(g.seq);
  push.heads = static_cast<uint32_t>(g.heads);
  push.dim = static_cast<uint32_t>(g.dim);
  push.half = static_cast<uint32_t>(g.half);
  push.positions = static_cast<uint32_t>(g.positions);
  push.pos_batch_stride = g.shared_ids ? 0u : static_cast<uint32_t>(g.seq);
  push.flags =
      (layout == RopeLayout::Interleaved ? kInterleaved : 0) | (accumulate ? kAccumulate : 0);
  push.sin_sign = sin_sign;
  const double n = static_cast<double>(x.numel());
  launch("rope_apply", push, grid_1d(items, 256), {&x, &cos, &sin, &ids}, {&out}, {},
         {3.0 * n, 8.0 * n + 4.0 * static_cast<double>(rows * g.half)});
}

}  // namespace

Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& position_ids,
                  int64_t rotary_dim, RopeLayout layout) {
  VKF_REQUIRE(x.defined(), "apply_rope: x is undefined");
  VKF_REQUIRE(x.dtype() == DType::F32, "apply_rope: x must be f32, got {}", dtype_name(x.dtype()));
  VKF_REQUIRE(x.rank() == 4 && x.numel() > 0,
              "apply_rope: x must be a non-empty [B, T, heads, head_dim] tensor, got shape {}",
              shape_str(x.shape()));
  const int64_t dim = x.dim(3);
  VKF_REQUIRE(rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= dim,
              "apply_rope: rotary_dim must be even and in [2, head_dim = {}], got {}", dim,
              rotary_dim);
  const int64_t half = rotary_dim / 2;
  for (const auto* t : {&cos, &sin}) {
    const char* what = t == &cos ? "cos" : "sin";
    VKF_REQUIRE(t->defined(), "apply_rope: {} is undefined", what);
    VKF_REQUIRE(t->dtype() == DType::F32, "apply_rope: {} must be f32, got {}", what,
                dtype_name(t->dtype()));
    VKF_REQUIRE(t->rank() == 2 && t->dim(0) > 0 && t->dim(1) == half,
                "apply_rope: {} must be [positions, rotary_dim / 2 = {}], got {}", what, half,
                shape_str(t->shape()));
  }
  VKF_REQUIRE(cos.shape() == sin.shape(), "apply_rope: cos {} and sin {} differ in shape",
              shape_str(cos.shape()), shape_str(sin.shape()));
  VKF_REQUIRE(cos.dim(0) <= (int64_t{1} << 31) / half,
              "apply_rope: the cos/sin tables ({} positions) exceed vkformer's 2^31-element limit",
              cos.dim(0));
  VKF_REQUIRE(position_ids.defined(), "apply_rope: position_ids is undefined");
  VKF_REQUIRE(position_ids.dtype() == DType::I32 || position_ids.dtype() == DType::I64,
              "apply_rope: position_ids must be i32 or i64, got {}",
              dtype_name(position_ids.dtype()));
  const int64_t batch = x.dim(0), seq = x.dim(1);
  VKF_REQUIRE(position_ids.rank() == 2 && position_ids.dim(1) == seq &&
                  (position_ids.dim(0) == batch || position_ids.dim(0) == 1),
              "apply_rope: position_ids must be [B, T] = [{}, {}] or [1, {}] for x {}, got {}",
              batch, seq, seq, shape_str(x.shape()), shape_str(position_ids.shape()));
  checked_u32(x.numel(), "apply_rope x element count");

  const RopeGeometry g{
      batch, seq, x.dim(2), dim, half, cos.dim(0), position_ids.dim(0) == 1 && batch != 1};
  const Tensor xc = x.is_contiguous() ? x : x.contiguous();
  const Tensor cc = cos.is_contiguous() ? cos : cos.contiguous();
  const Tensor sc = sin.is_contiguous() ? sin : sin.contiguous();
  Tensor ids = position_ids.dtype() == DType::I32 ? position_ids : position_ids.to(DType::I32);
  if (!ids.is_contiguous()) ids = ids.contiguous();

  Tensor out = Tensor::empty(x.shape(), DType::F32);
  rotate(xc, cc, sc, ids, out, g, layout, 1.0f, false);
  autograd::record_op("apply_rope", {xc}, {out},
                      [cc, sc, ids, g, layout](autograd::GradContext& ctx) {
                        const Tensor& gy = ctx.grad_output(0);
                        if (!gy.defined() || !ctx.needs_grad(0)) return;
                        const Tensor gc = gy.is_contiguous() ? gy : gy.contiguous();
                        // The rotation is orthogonal: its transpose, the rotation by -angle, maps
                        // dy to dx.
                        autograd::GradTarget dx = ctx.grad_target(0);
                        rotate(gc, cc, sc, ids, dx.tensor, g, layout, -1.0f, dx.accumulate);
                      });
  return out;
}

Tensor rope_position_ids(std::span<const int64_t> ids, const Shape& shape,
                         int64_t table_positions) {
  VKF_REQUIRE(shape.size() == 2 && shape_numel(shape) == static_cast<int64_t>(ids.size()),
              "rope_position_ids: {} ids do not fill a [B, T] shape {}", ids.size(),
              shape_str(shape));
  std::vector<int32_t> v(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    VKF_REQUIRE(ids[i] >= 0 && ids[i] < table_positions,
                "rope_position_ids: position id {} at index {} is outside the cos/sin table "
                "[0, {}); build the table for more positions",
                ids[i], i, table_positions);
    v[i] = static_cast<int32_t>(ids[i]);
  }
  return Tensor::from_host_i32(v, shape);
}

}  // namespace vkf::ops
