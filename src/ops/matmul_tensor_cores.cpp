// The tensor-core path of the GEMM family (see matmul_dispatch.h): f32 operands converted to f16
// copies once (transposed into the kernels' faster layout where matmul_relayout.h says so, and
// kept for reuse inside an F16OperandReuse), then the workgroup-scope kernel (matmul_workgroup.h)
// where it takes the product, else the subgroup-scope one (matmul_coopmat.h), over the grid parts
// the portable kernels use too.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "ops/matmul_coopmat.h"
#include "ops/matmul_dispatch.h"
#include "ops/matmul_relayout.h"
#include "ops/matmul_workgroup.h"

namespace vkf::ops::detail {
namespace {

// The subgroup-scope kernel over the same grid parts as the tiled one.
void dispatch_coopmat(const MatDesc& a, const MatDesc& b, const MatDesc& c, float alpha, float beta,
                      const Tensor& bias, int64_t bias_stride, const CoopmatTile& tile,
                      const vk::DispatchCost& cost) {
  const int64_t m = c.rows, n = c.cols;
  const CoopmatSupport support = coopmat_support();
  const std::string module = coopmat_module();
  const KernelLayout la = kernel_layout(a), lb = kernel_layout(b);
  const bool f16_a = a.t.dtype() == DType::F16, f16_b = b.t.dtype() == DType::F16;
  for_each_grid_part(c.batch, m, n, tile.bm, tile.bn, [&](const GridPart& g) {
    const GemmPush push =
        make_push(a, b, c, g.z0, g.m0, g.n0, g.mc, g.nc, alpha, beta, bias, 0, bias_stride);
    // 16-byte reads (4 floats or 8 halves) need every line of every batch entry to start 16-byte
    // aligned.
    const uint32_t per_a = f16_a ? 8 : 4, per_b = f16_b ? 8 : 4;
    const bool vec_a = push.a % 16 == 0 && push.lda % per_a == 0 && push.sa % per_a == 0;
    const bool vec_b = push.b % 16 == 0 && push.ldb % per_b == 0 && push.sb % per_b == 0;
    launch(module, push, g.grid, {&a.t, &b.t, &bias, &c.t}, {&c.t},
           coopmat_spec(tile, support, la.trans, lb.trans, vec_a, vec_b, f16_a, f16_b),
           g.first ? cost : vk::DispatchCost{});
  });
}

thread_local F16OperandReuse* g_reuse = nullptr;  // the innermost F16OperandReuse::Use's

// An f32 operand of a tensor-core product as f16, converted once (see set_coopmat_f16_operands):
// with `relayout` (relayout_for), transposed into the kernel's faster layout where
// matmul_relayout.h says so, else, when it is a whole contiguous tensor, the same view of an f16
// copy; otherwise itself. `is_a`: the A operand.
MatDesc f16_operand_converted(const MatDesc& d, bool is_a, bool relayout) {
  // In the kernel's faster layout where the operand is not (matmul_relayout.h).
  if (relayout)
    if (const auto relaid = f16_operand_relaid(d, is_a)) return *relaid;
  if (d.t.dtype() != DType::F32 || !d.t.is_contiguous() || d.batch * d.rows * d.cols != d.t.numel())
    return d;
  autograd::NoGradScope no_grad;
  MatDesc h = d;
  h.t = d.t.to(DType::F16);
  return h;
}

MatDesc f16_operand(const MatDesc& d, bool is_a, bool relayout) {
  if (!coopmat_f16_operands()) return d;
  if (!g_reuse || d.t.dtype() != DType::F32) return f16_operand_converted(d, is_a, relayout);
  // A kept copy may be in either layout: both kernels read both.
  if (const MatDesc* kept = g_reuse->find(d, is_a)) return *kept;
  const MatDesc h = f16_operand_converted(d, is_a, relayout);
  if (h.t.dtype() == DType::F16) g_reuse->keep(d, is_a, h);
  return h;
}

// The workgroup-scope kernel's tile for a product into c of depth k, judged before the operands
// are converted (its rule decides their layout, see f16_relayout_wanted): nullopt where it does
// not take it (bias, alpha != 1, beta other than 0 or 1, C contiguous along neither dimension,
// or no tile for the shape).
std::optional<WorkgroupTile> workgroup_takes(const MatDesc& c, float alpha, float beta,
                                             const Tensor& bias, int64_t k) {
  if (bias.defined() || alpha != 1.0f || (beta != 0.0f && beta != 1.0f) ||
      c.t.dtype() != DType::F32)
    return std::nullopt;
  if (c.cs != 1 && c.cols != 1 && c.rs != 1 && c.rows != 1) return std::nullopt;
  return workgroup_plan(c.rows, c.cols, k);
}

// Whether the operands' f16 copies go in the "tn" layout (matmul_relayout.h) for a product into
// c of depth k that the workgroup-scope kernel takes with `tile` (nullopt: it does not): the
// subgroup-scope kernel always gains from it, the workgroup-scope one only on large products.
bool relayout_for(const std::optional<WorkgroupTile>& tile, const MatDesc& c, int64_t k) {
  return !tile || workgroup_relayout_pays(c.rows, c.cols, k);
}

// The workgroup-scope kernel with the tile workgroup_takes() gave: false leaves the product to
// the other kernels (an operand not f16, or not aligned). a and b are already converted to f16
// where they could be.
bool dispatch_workgroup(const MatDesc& a, const MatDesc& b, const MatDesc& c, float beta,
                        const WorkgroupTile& tile, const vk::DispatchCost& cost) {
  if (a.t.dtype() != DType::F16 || b.t.dtype() != DType::F16) return false;
  const KernelLayout la = kernel_layout(a), lb = kernel_layout(b);
  // C is contiguous along one dimension (workgroup_takes): rows, else columns.
  const bool c_column_major = !(c.cs == 1 || c.cols == 1);
  const WorkgroupGemmKey key{tile, la.trans, lb.trans, c_column_major, beta == 1.0f};
  // Every load and store declares 16-byte alignment: each tile's first element, in every batch
  // entry and grid part, must be 16-byte aligned (tile corners are multiples of 8 elements). The
  // parts are all checked before any is launched.
  std::vector<std::pair<GemmPush, GridPart>> parts;
  bool aligned = true;
  for_each_grid_part(c.batch, c.rows, c.cols, tile.bm, tile.bn, [&](const GridPart& g) {
    const GemmPush push = make_push(a, b, c, g.z0, g.m0, g.n0, g.mc, g.nc, 1.0f, beta, {}, 0, 0);
    const uint32_t c_ld = key.c_column_major ? push.c_cs : push.c_rs;
    aligned = aligned && push.a % 16 == 0 && push.lda % 8 == 0 && push.sa % 8 == 0 &&
              push.b % 16 == 0 && push.ldb % 8 == 0 && push.sb % 8 == 0 && push.c % 16 == 0 &&
              c_ld % 4 == 0 && push.sc % 4 == 0;
    parts.emplace_back(push, g);
  });
  if (!aligned) return false;
  const std::string module = workgroup_gemm_module(key);
  for (const auto& [push, g] : parts)
    launch(module, push, g.grid, {&a.t, &b.t, &c.t}, {&c.t}, {},
           g.first ? cost : vk::DispatchCost{});
  return true;
}

}  // namespace

bool dispatch_tensor_cores(const MatDesc& a, const MatDesc& b, const MatDesc& c, float alpha,
                           float beta, const Tensor& bias, int64_t bias_stride,
                           const vk::DispatchCost& cost) {
  const auto tile = coopmat_plan(c.batch, c.rows, c.cols);
  if (!tile) return false;
  const auto workgroup = workgroup_takes(c, alpha, beta, bias, a.cols);
  const bool relayout = relayout_for(workgroup, c, a.cols);
  const MatDesc ha = f16_operand(a, true, relayout), hb = f16_operand(b, false, relayout);
  if (!workgroup || !dispatch_workgroup(ha, hb, c, beta, *workgroup, cost))
    dispatch_coopmat(ha, hb, c, alpha, beta, bias, bias_stride, *tile, cost);
  return true;
}

bool f16_relayout_wanted(const MatDesc& c, float alpha, float beta, const Tensor& bias, int64_t k) {
  return relayout_for(workgroup_takes(c, alpha, beta, bias, k), c, k);
}

F16OperandReuse::Use::Use(F16OperandReuse& reuse) : previous_(g_reuse) {
  g_reuse = &reuse;
}
F16OperandReuse::Use::~Use() {
  g_reuse = previous_;
}

const MatDesc* F16OperandReuse::find(const MatDesc& d, bool is_a) const {
  for (const Copy& c : copies_) {
    const MatDesc& s = c.source;
    if (s.t.address() == d.t.address() && s.batch == d.batch && s.rows == d.rows &&
        s.cols == d.cols && s.bs == d.bs && s.rs == d.rs && s.cs == d.cs && c.is_a == is_a)
      return &c.copy;
  }
  return nullptr;
}

void F16OperandReuse::keep(const MatDesc& d, bool is_a, const MatDesc& copy) {
  copies_.push_back({d, is_a, copy});
}

bool f16_operands_active() {
  return coopmat_f16_operands() && matmul_precision() == MatmulPrecision::F16 &&
         coopmat_choice() != "off" && coopmat_support().unsupported.empty();
}

}  // namespace vkf::ops::detail
