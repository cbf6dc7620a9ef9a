// What the GEMM dispatchers share (ops/matmul_kernels.cpp, the portable kernels and the choice of
// path; ops/matmul_tensor_cores.cpp, the tensor-core kernels): the push-constant block of
// matmul_push.glsl, the layout and strides of a matrix description as the kernels take them, and
// the cut of a tile grid into dispatches of at most max_groups_per_dimension() workgroups per grid
// dimension. Internal to the ops.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/launch.h"
#include "ops/matmul_kernels.h"

namespace vkf::ops::detail {

// Mirrors matmul_push.glsl.
struct GemmPush {
  uint64_t a, b, c, bias;
  uint32_t m, n, k;
  uint32_t lda, ldb;
  uint32_t c_rs, c_cs;
  uint32_t sa, sb, sc;
  uint32_t bias_rs, bias_cs;
  float alpha, beta;
};

uint64_t byte_address(const Tensor& t, int64_t element_offset);

// Which of a matrix's dimensions is contiguous, as the kernels' TRANS flags say it: false when
// element (r, c) is at r*ld + c, true when it is at c*ld + r.
struct KernelLayout {
  bool trans;
  uint32_t ld;
};
KernelLayout kernel_layout(const MatDesc& d);

// The push constants for the sub-problem of batch entries from z0, rows from m0 (mc of them) and
// columns from n0 (nc of them); the bias is indexed bias[m*bias_rs + n*bias_cs].
GemmPush make_push(const MatDesc& a, const MatDesc& b, const MatDesc& c, int64_t z0, int64_t m0,
                   int64_t n0, int64_t mc, int64_t nc, float alpha, float beta, const Tensor& bias,
                   int64_t bias_rs, int64_t bias_cs);

// Workgroups per grid dimension in one dispatch (65535, or less where tests lower it with
// set_grid_limit).
int64_t max_groups_per_dimension();

// One dispatch of a tile grid over a batch x m x n output: at most max_groups_per_dimension()
// workgroups per grid dimension, so a larger grid is cut into parts, each covering entries
// [z0, z0 + zc), rows [m0, m0 + mc) and columns [n0, n0 + nc). `first` marks the part that carries
// the product's cost.
struct GridPart {
  int64_t z0, m0, n0, zc, mc, nc;
  Grid grid;
  bool first;
};
template <typename Fn>
void for_each_grid_part(int64_t batch, int64_t m, int64_t n, int64_t bm, int64_t bn, Fn&& fn) {
  const int64_t groups = max_groups_per_dimension();
  const int64_t zstep = groups, mstep = groups * bm, nstep = groups * bn;
  bool first = true;
  for (int64_t z0 = 0; z0 < batch; z0 += zstep) {
    for (int64_t m0 = 0; m0 < m; m0 += mstep) {
      for (int64_t n0 = 0; n0 < n; n0 += nstep) {
        GridPart g{z0,
                   m0,
                   n0,
                   std::min(zstep, batch - z0),
                   std::min(mstep, m - m0),
                   std::min(nstep, n - n0),
                   {},
                   first};
        g.grid = Grid{div_up(g.nc, bn), div_up(g.mc, bm), static_cast<uint32_t>(g.zc)};
        fn(g);
        first = false;
      }
    }
  }
}

// A product with M and N past the skinny range on tensor cores, where F16 precision's plan puts it
// there (coopmat_plan): its f32 operands converted to f16 copies (kept for reuse inside an
// F16OperandReuse), then the workgroup-scope kernel where it takes the product, else the
// subgroup-scope one. False, having done nothing, where the plan keeps the product off them.
bool dispatch_tensor_cores(const MatDesc& a, const MatDesc& b, const MatDesc& c, float alpha,
                           float beta, const Tensor& bias, int64_t bias_stride,
                           const vk::DispatchCost& cost);

}  // namespace vkf::ops::detail
