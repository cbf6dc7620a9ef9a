// The workgroup-scope tensor-core GEMM: F16-precision products on devices with
// VK_NV_cooperative_matrix2's workgroup-scope matrices (NVIDIA). A workgroup of 256 (or 128)
// invocations holds its whole BM x BN f32 accumulator as one cooperative matrix and multiplies BM x
// BK and BK x BN f16 matrices loaded straight from memory; the driver's compiler decides how they
// are staged through shared memory and split among subgroups, which the subgroup-scope kernel
// (matmul_coopmat.h) has to spell out. Debian 12's glslc cannot compile such matrices, so the
// kernel is written as SPIR-V at run time (vk/spirv_builder.h), one module per tile and layout.
//
// Auto's choice for F16 products on devices with tensor-addressed loads (SPV_NV_tensor_addressing),
// where they divide into its tiles (workgroup_plan): on the H200 it runs 1.35x the subgroup-scope
// kernel's TFLOP/s on large products, in every operand layout within about 10%
// (bench/RESULTS.md). Tiles can also be named (`--coopmat-tile wgt128x256x32u4`, `wg...` for the
// strided loads, which the H200's compiler spills); naming a subgroup-scope tile turns it off.
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
  // K-steps issued per loop iteration (the loop body repeated), so that the loads of later steps
  // can be issued before earlier multiply-adds retire.
  uint32_t unroll = 1;
  // Invocations per workgroup: 256, or 128 (half the registers per workgroup, so two can share a
  // multiprocessor where one 256-invocation workgroup fills it).
  uint32_t invocations = 256;
  // "wg128x128x32", "wgt..." with tensor_loads, "...u4" unrolled, "...i128" at 128 invocations
  std::string name() const;
};

// Every tile the kernel can be built with (auto uses some of them, see workgroup_plan).
const std::vector<WorkgroupTile>& workgroup_tiles();
const WorkgroupTile* find_workgroup_tile(const std::string& name);
std::string workgroup_tile_names();

// Why the current device cannot run the kernel (with tensor-addressed loads: `tensor_loads`), or
// "".
std::string workgroup_unsupported(bool tensor_loads = false, uint32_t invocations = 256);

// One generated module: the tile, how A and B are stored (TRANS: element (r, c) at c*ld + r), how
// C is stored (column-major: c_rs == 1), and whether C's old value is added (beta == 1).
struct WorkgroupGemmKey {
  WorkgroupTile tile;
  bool trans_a = false, trans_b = false, c_column_major = false, accumulate = false;
  // Measurement only (bench/mma_peak): the tiles of the first K-step are loaded once,
  // before the loop, and every step multiplies those, so the kernel runs its multiply-adds with
  // no loads in the loop: the rate its instructions allow at this tile. Wrong products.
  bool loads_hoisted = false;
};

// The tile for an m x n x k product (each batch entry) under the current choice (coopmat_choice()):
// a named workgroup tile that the device runs and that divides the product, or auto's pick by
// shape on a device with tensor-addressed loads; else nullopt (the other kernels).
std::optional<WorkgroupTile> workgroup_plan(int64_t m, int64_t n, int64_t k);

// Whether the f16 copies of an m x n x k product's operands are written in the "tn" layout
// (matmul_relayout.h) when this kernel takes it. It reads "tn" fastest too (H200, 1B training
// products: 237-290 TFLOP/s "tn" against 214-247 "nt"), but a transposing copy costs more than
// a plain one, so auto does it for large products only (m*n*k >= 2^34); VKF_WG_RELAYOUT=1 for
// every product, 0 for none.
bool workgroup_relayout_pays(int64_t m, int64_t n, int64_t k);

// The SPIR-V of one kernel, and the name of its registered module (generated on first use).
std::vector<uint32_t> workgroup_gemm_spirv(const WorkgroupGemmKey& key);
std::string workgroup_gemm_module(const WorkgroupGemmKey& key);

}  // namespace vkf::ops::detail
