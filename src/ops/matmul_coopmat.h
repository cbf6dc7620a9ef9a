// Device support, tile variants and kernel choice for the tensor-core GEMM
// (src/shaders/matmul_coopmat.comp), the F16-precision path of ops::detail::gemm() on devices with
// VK_NV_cooperative_matrix f16 x f16 -> f32 fragments. Dispatch itself is in matmul_kernels.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vkf::ops::detail {

// A tile variant: a workgroup computes bm x bn outputs in bk-deep slices of K; each of its
// (bm/wm)*(bn/wn) subgroups owns a wm x wn block.
struct CoopmatTile {
  uint32_t bm, bn, bk, wm, wn;
  uint32_t subgroups() const { return (bm / wm) * (bn / wn); }
  std::string name() const;  // "128x128x32/64x32"
};

// Every variant the kernel is run with, smallest first.
const std::vector<CoopmatTile>& coopmat_tiles();

// What the current device offers the kernel: a fragment shape, or why it cannot run.
struct CoopmatSupport {
  std::string unsupported;  // empty when supported
  uint32_t mma_m = 0, mma_n = 0, mma_k = 0;
  // The device guarantees round-to-nearest-even and kept subnormals for 16-bit floats, so the
  // hardware f32 -> f16 conversion may replace the exact integer one.
  bool hardware_convert = false;
};
CoopmatSupport coopmat_support();
// Tests: run the kernel's `emulated` build instead (plain code in place of the cooperative-matrix
// operations, 16 x 16 x 16 fragments, any subgroup size), so that its staging, fragment layouts
// and epilogue are checked on devices without tensor cores. Slow; never for real work.
// The tensor-core attention kernels (ops/attention_coopmat.h) follow the same switch.
void set_coopmat_emulation(bool on);
bool coopmat_emulation();
// Why `tile` cannot run with `support` on this device (shared memory, workgroup size, fragment
// shape), or "".
std::string coopmat_tile_unfit(const CoopmatTile& tile, const CoopmatSupport& support);

// Which kernels F16-precision products use: "auto" (cooperative matrices where the device has
// them, tile chosen by shape), "off" (the portable tiled/skinny kernels rounding to f16), or the
// name of one tile variant (benchmarks, tests). An unknown name is an error listing the valid ones.
void set_coopmat_choice(const std::string& choice);
std::string coopmat_choice();

// How staged operands are converted to f16 (both give f32_to_f16_bits's result on a conforming
// device): Exact (integer operations) anywhere; Hardware only where
// CoopmatSupport::hardware_convert (elsewhere it means Exact); Auto = Hardware where possible.
enum class F16Convert { Auto, Exact, Hardware };
void set_f16_convert(F16Convert convert);
F16Convert f16_convert();
// The conversion the kernel uses under the current setting ("exact" or "hw").
std::string f16_convert_name();

// Whether an f32 operand that is a whole contiguous tensor (activations, weights) is converted to
// f16 once per product before the tensor-core kernel runs (on by default), so that the kernel
// reads half the bytes and stages without converting; other operands are converted as each tile
// is staged. Both round to nearest even: the results are the same to the bit either way.
void set_coopmat_f16_operands(bool on);
bool coopmat_f16_operands();

// The tile a product of this output shape (M and N past the skinny kernel's range) runs with on
// the current device, or nullopt when it takes the portable kernels: F32 precision, no device
// support, "off", or a forced tile the device cannot run. (Measured on the H200, one tile serves
// every shape best today; the shape stays in the signature for the devices where it will not.)
std::optional<CoopmatTile> coopmat_plan(int64_t batch, int64_t m, int64_t n);

// The embedded module and specialization constants of one dispatch.
std::string coopmat_module();
// f16_a / f16_b: the operand is stored as f16; vec_a / vec_b: its lines start 16-byte aligned.
std::vector<uint32_t> coopmat_spec(const CoopmatTile& tile, const CoopmatSupport& support,
                                   bool trans_a, bool trans_b, bool vec_a, bool vec_b, bool f16_a,
                                   bool f16_b);

}  // namespace vkf::ops::detail
