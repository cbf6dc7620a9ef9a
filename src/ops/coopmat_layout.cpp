// The accumulator layout probe (see coopmat_layout.h).
#include "ops/coopmat_layout.h"

#include <fmt/format.h>

#include <optional>

#include "core/launch.h"
#include "core/tensor.h"
#include "ops/matmul_coopmat.h"
#include "vk/context.h"
#include "vk/pipeline.h"

namespace vkf::ops::detail {
namespace {

constexpr uint32_t kLanes = 32, kMaxComponents = 32;

AccumulatorLayout probe() {
  AccumulatorLayout layout;
  // The emulation (tests) has layouts of its own; the probe needs the real extension.
  if (coopmat_emulation() || !coopmat_support().unsupported.empty() ||
      !vk::Pipelines::has_module("coopmat_layout"))
    return layout;
  Tensor out = Tensor::zeros({1 + kLanes * kMaxComponents}, DType::I32);
  struct Push {
    uint64_t out;
  } push{out.address()};
  launch("coopmat_layout", push, Grid{1, 1, 1}, {}, {&out});
  const std::vector<int64_t> words = out.to_int();
  const int64_t len = words[0];
  if (len <= 0 || len > kMaxComponents) return layout;
  layout.components = static_cast<uint32_t>(len);
  for (uint32_t i = 0; i < kLanes * layout.components; ++i)
    layout.elements.push_back(static_cast<uint16_t>(words[1 + i]));
  return layout;
}

}  // namespace

const AccumulatorLayout& accumulator_layout() {
  static std::optional<AccumulatorLayout> probed;
  static const AccumulatorLayout none;
  if (probed) return *probed;
  // The probe reads its result back, which a capture refuses: until a call outside one probes,
  // callers see no layout (the kernels that ask give the same bits either way).
  if (vk::Context::get().stream().capturing()) return none;
  probed = probe();
  return *probed;
}

bool is_quad_layout(const AccumulatorLayout& layout) {
  if (layout.components != 8 || layout.elements.size() != kLanes * 8) return false;
  for (uint32_t l = 0; l < kLanes; ++l) {
    for (uint32_t t = 0; t < 8; ++t) {
      const uint32_t row = l / 4 + 8 * (t / 4), col = 2 * (l % 4) + t % 2 + 8 * ((t / 2) % 2);
      if (layout.elements[l * 8 + t] != 16 * row + col) return false;
    }
  }
  return true;
}

std::string describe(const AccumulatorLayout& layout) {
  if (layout.components == 0) return "not probed (no NV cooperative matrices)";
  if (is_quad_layout(layout)) return "quad (16 x 8 tensor-core tiles; row reductions by shuffles)";
  std::string s = fmt::format("{} components per invocation; lane 0 holds", layout.components);
  for (uint32_t t = 0; t < layout.components && t < 8; ++t)
    s += fmt::format(" ({}, {})", layout.elements[t] / 16, layout.elements[t] % 16);
  return s;
}

}  // namespace vkf::ops::detail
