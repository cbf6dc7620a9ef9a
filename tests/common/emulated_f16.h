// Mixed precision (MatmulPrecision::F16) on the emulated tensor-core kernel for one scope, so that
// lavapipe runs the products the H200 runs on its tensor cores (f16 operand copies included);
// everything back to the defaults after, also when a check fails. And the f16-activation
// switches (ops::gated_projection, ops::gated_mlp) as a scope found them, for tests that set them.
#pragma once

#include "core/launch.h"
#include "ops/gated_projection.h"
#include "ops/matmul_coopmat.h"

namespace vkf::test {

struct EmulatedF16 {
  EmulatedF16() {
    set_matmul_precision(MatmulPrecision::F16);
    ops::detail::set_coopmat_emulation(true);
  }
  ~EmulatedF16() {
    set_matmul_precision(MatmulPrecision::F32);
    ops::detail::set_coopmat_emulation(false);
    ops::detail::set_coopmat_f16_operands(true);
  }
  EmulatedF16(const EmulatedF16&) = delete;
  EmulatedF16& operator=(const EmulatedF16&) = delete;
};

// Whatever VKF_F16_ACTIVATIONS or an earlier test left them at.
struct F16ActivationSwitchesRestored {
  const bool projection = ops::gated_projection_enabled(), mlp = ops::gated_mlp_enabled();
  F16ActivationSwitchesRestored() = default;
  ~F16ActivationSwitchesRestored() {
    ops::set_gated_projection(projection);
    ops::set_gated_mlp(mlp);
  }
  F16ActivationSwitchesRestored(const F16ActivationSwitchesRestored&) = delete;
  F16ActivationSwitchesRestored& operator=(const F16ActivationSwitchesRestored&) = delete;
};

}  // namespace vkf::test
