// The workgroup-scope tensor-core GEMM: F16-precision products on devices with
// VK_NV_cooperative_matrix2's workgroup-scope matrices (NVIDIA). A workgroup of 256 invocations
// holds its whole BM x BN f32 accumulator as one cooperative matrix and multiplies BM x BK and
// BK x BN f16 matrices loaded straight from memory; the driver's compiler decides how they are
// staged through shared memory and split among subgroups, which the subgroup-scope kernel
// (matmul_coopmat.h) has to spell out. Debian 12's glslc cannot compile such matrices, so the
// kernel is written as SPIR-V at run time (vk/spirv_builder.h), one module per tile and layout.
//
// Opt-in (`--coopmat-tile wg128x256x32`, or `wgt...` for tensor-addressed loads): on the H200
// both load forms are slower than the subgroup-scope kernel today (bench/RESULTS.md), so auto
// never picks them. They are kept as the measured starting point for drivers that stage these
// matrices better, and as the user of the run-time SPIR-V path.
// It takes the common products of training and leaves the rest to the subgroup-scope kernel:
// f16 operands (f32 ones are converted once per product, as for that kernel) whose lines start
// 16-byte aligned, M, N and K multiples of the tile, alpha 1, beta 0 or 1, no bias, and C
// contiguous along one dimension. Dispatch is in matmul_kernels.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vkf::ops::detail {

struct WorkgroupTile {
  uint32_t bm, bn, bk;
  // Operands loaded through tensor layouts (SPV_NV_tensor_addressing: the layout knows the whole
  // operand's extent and strides, and a transposed operand is read through a transposing view)
  // rather than as strided matrices at the tile's corner.
  bool tensor_loads = false;
  std::string name() const;  // "wg128x128x32", or "wgt..." with tensor_loads
};

// Every tile the kernel can be built with; the choice must name one (auto does not use them).
const std::vector<WorkgroupTile>& workgroup_tiles();
const WorkgroupTile* find_workgroup_tile(const std::string& name);
std::string workgroup_tile_names();

// Why the current device cannot run the kernel (with tensor-addressed loads: `tensor_loads`), or
// "".
std::string workgroup_unsupported(bool tensor_loads = false);

// One generated module: the tile, how A and B are stored (TRANS: element (r, c) at c*ld + r), how
// C is stored (column-major: c_rs == 1), and whether C's old value is added (beta == 1).
struct WorkgroupGemmKey {
  WorkgroupTile tile;
  bool trans_a = false, trans_b = false, c_column_major = false, accumulate = false;
};

// The tile for an m x n x k product (each batch entry) when the current choice (coopmat_choice())
// names a workgroup tile that the device runs and that divides the product; else nullopt.
std::optional<WorkgroupTile> workgroup_plan(int64_t m, int64_t n, int64_t k);

// The SPIR-V of one kernel, and the name of its registered module (generated on first use).
std::vector<uint32_t> workgroup_gemm_spirv(const WorkgroupGemmKey& key);
std::string workgroup_gemm_module(const WorkgroupGemmKey& key);

}  // namespace vkf::ops::detail
