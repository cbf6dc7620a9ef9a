// The workgroup-scope tensor-core GEMM (ops/matmul_workgroup.h) in F16 precision against the
// double reference of f16_product_check.h: on a device with tensor-addressed workgroup-scope
// matrices every tile in every layout, accumulation into row- and column-major C, the unrolled K
// loop with its remainder, and auto's picks by shape; elsewhere, that the same products fall back
// to the other kernels with the same checks.
#include <cstdint>
#include <string>
#include <vector>

#include "f16_product_check.h"
#include "ops/matmul.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_workgroup.h"
#include "test_util.h"

namespace vkf {
namespace {

using namespace test;  // f16_product_check.h
using ops::matmul_into;

struct Mnk {
  int64_t m, n, k;
};

// The workgroup-scope kernel: on devices that have it, every tile on every transpose, with and
// without accumulation into C (beta 1), K long enough for both the unrolled loop and its
// remainder; on the others a named workgroup tile must leave the products to the other kernels,
// with the same results (checked for the first tile: the fallback is the same for all).
TEST(MatmulWorkgroup, EveryTile) {
  Rng rng(113);
  const std::string unsupported = ops::detail::workgroup_unsupported(true);
  for (const auto& tile : ops::detail::workgroup_tiles()) {
    if (!unsupported.empty() && &tile != &ops::detail::workgroup_tiles().front()) break;
    F16Scope scope(tile.name());
    const int64_t m = 2 * tile.bm, n = 2 * tile.bn, k = (tile.unroll + 1) * tile.bk;
    const std::string plan = ops::detail::gemm_plan(1, m, n, k);
    EXPECT_EQ(plan.find(tile.name()) != std::string::npos, unsupported.empty()) << plan;
    for (int t = 0; t < 4; ++t) {
      const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
      check_product(rng, {}, {1, m, n, k, ta, tb, false}, plan, true);
    }
    check_product(rng, {2}, {1, m, n, k, false, true, false}, plan);
    // Accumulating (beta 1) into a row-major C and into a column-major view of one.
    const ref::MatmulShape s{1, m, n, k, false, true, false};
    const auto a = test::as_f32(rng.uniform(s.a_size()));
    const auto b = test::as_f32(rng.uniform(s.b_size()));
    const auto before = test::as_f32(rng.uniform(m * n));
    Expected e = expect_f16(a, b, s);
    add_epilogue(e, 1.0, before, std::vector<double>(), n);
    Tensor out = test::to_gpu(before, {m, n});
    matmul_into(test::to_gpu(a, s.a_shape({})), test::to_gpu(b, s.b_shape({})), false, true, out,
                1.0f, 1.0f, Tensor());
    expect_within(out.to_double(), e, describe(s, plan) + " beta 1");
    Tensor out_t = test::to_gpu(before, {n, m}).transpose(0, 1);  // element (i, j) at j*m + i
    std::vector<double> before_t(before.size());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) before_t[i * n + j] = before[j * m + i];
    Expected e_t = expect_f16(a, b, s);
    add_epilogue(e_t, 1.0, before_t, std::vector<double>(), n);
    matmul_into(test::to_gpu(a, s.a_shape({})), test::to_gpu(b, s.b_shape({})), false, true, out_t,
                1.0f, 1.0f, Tensor());
    expect_within(out_t.contiguous().to_double(), e_t, describe(s, plan) + " beta 1, C^T");
  }
  if (!unsupported.empty()) GTEST_SKIP() << "ran the fallback only: " << unsupported;
}

// Auto takes the workgroup-scope kernel's tensor-addressed tiles where the device has them and
// they divide the product (the largest that still gives kMinTiles tiles), else the other kernels.
TEST(MatmulWorkgroup, AutoPicksByShape) {
  Rng rng(114);
  const std::string unsupported = ops::detail::workgroup_unsupported(true);
  F16Scope scope("auto");
  struct Case {
    Mnk d;
    const char* tile;  // auto's pick where the device has the kernel; nullptr: another kernel
  };
  for (const auto& [d, tile] :
       {Case{{2048, 2048, 32}, "wgt128x128x32u4i128"}, Case{{256, 1024, 64}, "wgt128x128x32u4i128"},
        Case{{192, 576, 160}, "wgt64x192x32u4"}, Case{{200, 256, 64}, nullptr}}) {
    const std::string plan = ops::detail::gemm_plan(1, d.m, d.n, d.k);
    const bool expect_wg = tile && unsupported.empty();
    EXPECT_EQ(plan.find(" wg") != std::string::npos, expect_wg) << plan;
    if (expect_wg) {
      EXPECT_NE(plan.find(tile), std::string::npos) << plan;
    }
    for (int t = 0; t < 4; ++t)
      check_product(rng, {}, {1, d.m, d.n, d.k, (t & 1) != 0, (t & 2) != 0, false}, plan, true);
  }
  if (!unsupported.empty()) GTEST_SKIP() << "ran the other kernels only: " << unsupported;
}

}  // namespace
}  // namespace vkf
