// Where the components of a 16 x 16 f32 cooperative-matrix accumulator lie: VK_NV_cooperative_
// matrix leaves the element each invocation's component holds to the implementation. Kernels that
// need rows of an accumulator on registers (the flash attention forward's row maxima with subgroup
// shuffles) run their fast build only where a probe (src/shaders/coopmat_layout.comp), run once
// per process, finds the layout they are written for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vkf::ops::detail {

struct AccumulatorLayout {
  uint32_t components = 0;         // per invocation; 0 where the device has no such matrices
  std::vector<uint16_t> elements;  // [lane * components + t] = 16 row + column of component t
};

// The probed layout of the current device (cached; empty without NV cooperative matrices, and
// while the stream captures a graph before any probe ran).
const AccumulatorLayout& accumulator_layout();

// Whether `layout` is the one of the tensor cores' 16 x 8 accumulator tiles (the one NVIDIA's
// driver has, H200, driver 580): invocation l holds rows l / 4 and l / 4 + 8, component t
// being row l / 4 + 8 (t / 4), column 2 (l % 4) + t % 2 + 8 ((t / 2) % 2). Then the four
// invocations sharing a row are those whose lane indices differ in their two low bits, so a row
// reduces with two shuffles.
bool is_quad_layout(const AccumulatorLayout& layout);

// The layout in words, for `vkformer devices`: "quad" or the first components of lane 0.
std::string describe(const AccumulatorLayout& layout);

}  // namespace vkf::ops::detail
