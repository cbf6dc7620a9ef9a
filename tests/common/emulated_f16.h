// Mixed precision (MatmulPrecision::F16) on the emulated tensor-core kernel for one scope, so that
// lavapipe runs the products the H200 runs on its tensor cores (f16 operand copies included);
// everything back to the defaults after, also when a check fails.
#pragma once

#include "core/launch.h"
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

}  // namespace vkf::test
