// The ceilings of vkformer's kernels on this device and driver: how fast the fp32 multiply-adds
// and the cooperative-matrix multiply-adds run with no memory traffic in the loop, next to the
// GEMM that does the same multiply-adds with its loads.
//   - fp32 (fma_peak.comp): 64 independent multiply-adds per invocation per round.
//   - Subgroup scope (mma_peak.comp): each subgroup repeats NA x NB 16x16x16 multiply-adds on
//     fragments held in registers; a1b1 is one dependent chain (the instruction's latency), the
//     others independent chains; `feed` the flash attention's accumulator-to-operand pattern.
//   - Workgroup scope (VK_NV_cooperative_matrix2, ops/matmul_workgroup.h): the GEMM kernel with
//     the first K-step's tiles loaded before its loop and multiplied at every step
//     (WorkgroupGemmKey::loads_hoisted), against the same kernel with its loads, on one product.
// Each row is the median wall time of replays of a recorded dispatch after a warm-up, in TFLOP/s.
// Results go in bench/RESULTS.md by hand.
//
//   mma_peak [--device N] [--size M] [--tiles wgt128x128x32u4i128,...] [--warmup-ms 500]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/launch.h"
#include "core/tensor.h"
#include "ops/matmul_coopmat.h"
#include "ops/matmul_dispatch.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_workgroup.h"
#include "vk/context.h"
#include "vk/error.h"

namespace {

using vkf::Tensor;
namespace detail = vkf::ops::detail;

// Median microseconds of one replay of what `record` dispatches, after `warm_ms` of replays.
template <typename Fn>
double replay_us(Fn&& record, double warm_ms) {
  auto& stream = vkf::vk::Context::get().stream();
  stream.synchronize();
  stream.begin_capture();
  record();
  const auto graph = stream.end_capture();
  vkf::bench::warm_clocks(stream, *graph, warm_ms);
  return vkf::bench::median_replay_us(stream, *graph, 7);
}

// Median microseconds of one dispatch of a peak kernel (push constants: src, dst, iters) over
// `groups` workgroups of `local` invocations, each of which writes one float of dst.
double time_peak(const std::string& module, const Tensor& src, uint32_t groups, uint32_t local,
                 uint32_t iters, double warm_ms) {
  const Tensor dst = Tensor::empty({static_cast<int64_t>(groups) * local});
  struct {
    uint64_t src, dst;
    uint32_t iters;
  } push{src.address(), dst.address(), iters};
  return replay_us(
      [&] {
        vkf::launch_raw(module, {}, &push, sizeof(push), {groups, 1, 1}, {&src}, {&dst});
      },
      warm_ms);
}

void subgroup_rows(double warm_ms) {
  const auto support = detail::coopmat_support();
  if (!support.unsupported.empty()) {
    fmt::print("subgroup scope: not run ({})\n", support.unsupported);
    return;
  }
  const uint32_t sms = std::max(vkf::vk::Context::get().info().multiprocessors, 1u);
  const Tensor src = Tensor::from_host(vkf::bench::random_values(8 * 256, 7), {8 * 256});
  // chains: multiply-adds per subgroup per round (feed: two per chain).
  for (const auto& [name, chains] :
       {std::pair{"a1b1", 1}, {"a2b2", 4}, {"a2b4", 8}, {"a4b4", 16}, {"feed", 8}}) {
    for (const uint32_t per_sm : {4u, 8u}) {
      const uint32_t groups = sms * per_sm;
      constexpr uint32_t kIters = 8192;
      const double flops = 2.0 * 16 * 16 * 16 * chains * kIters * 4.0 * groups;
      const double us =
          time_peak(std::string("mma_peak_") + name, src, groups, 128, kIters, warm_ms);
      fmt::print(
          "subgroup scope {}: {:>2} multiply-adds per subgroup per round, {} workgroups of "
          "4 subgroups ({} per multiprocessor): {:.1f} TFLOP/s ({:.0f} us)\n",
          name, chains, groups, per_sm, flops / us / 1e6, us);
      std::fflush(stdout);
    }
  }
}

void fma_rows(double warm_ms) {
  const uint32_t sms = std::max(vkf::vk::Context::get().info().multiprocessors, 1u);
  // x = 1 - 2^-20, y = 2^-20: the accumulators stay bounded (no infinities to speed anything up).
  const std::vector<float> xy{1.0f - 0x1p-20f, 0x1p-20f};
  const Tensor src = Tensor::from_host(std::span<const float>(xy), {2});
  for (const uint32_t per_sm : {4u, 8u}) {
    const uint32_t groups = sms * per_sm;
    constexpr uint32_t kIters = 4096;
    const double flops = 2.0 * 64 * kIters * 256.0 * groups;
    const double us = time_peak("fma_peak", src, groups, 256, kIters, warm_ms);
    fmt::print(
        "fp32 multiply-adds: {} workgroups of 256 ({} per multiprocessor): {:.1f} TFLOP/s "
        "({:.0f} us)\n",
        groups, per_sm, flops / us / 1e6, us);
    std::fflush(stdout);
  }
}

void workgroup_rows(const std::vector<std::string>& tiles, int64_t size, double warm_ms) {
  if (const std::string why = detail::workgroup_unsupported(true); !why.empty()) {
    fmt::print("workgroup scope: not run ({})\n", why);
    return;
  }
  // "tn": A column-major, B row-major (the layout auto's copies use for large products).
  const int64_t m = size, n = size, k = size;
  const Tensor a16 =
      Tensor::from_host(vkf::bench::random_values(m * k, 1), {k, m}).to(vkf::DType::F16);
  const Tensor b16 =
      Tensor::from_host(vkf::bench::random_values(k * n, 2), {k, n}).to(vkf::DType::F16);
  const Tensor c = Tensor::empty({m, n});
  const detail::MatDesc ad{a16, 1, m, k, 0, 1, m}, bd{b16, 1, k, n, 0, n, 1},
      cd{c, 1, m, n, 0, n, 1};
  const double flops = 2.0 * static_cast<double>(m) * n * k;
  for (const auto& name : tiles) {
    const detail::WorkgroupTile* tile = detail::find_workgroup_tile(name);
    VKF_REQUIRE(tile, "--tiles: no workgroup tile '{}'; the tiles are {}", name,
                detail::workgroup_tile_names());
    if (const std::string why =
            detail::workgroup_unsupported(tile->tensor_loads, tile->invocations);
        !why.empty() || m % tile->bm || n % tile->bn || k % tile->bk) {
      fmt::print("workgroup scope {}: not run ({})\n", name,
                 why.empty() ? fmt::format("the tile does not divide {}^3", size) : why);
      continue;
    }
    for (const bool hoisted : {true, false}) {
      detail::WorkgroupGemmKey key{*tile, true, false, false, false};
      key.loads_hoisted = hoisted;
      const std::string module = detail::workgroup_gemm_module(key);
      const double us = replay_us(
          [&] {
            detail::for_each_grid_part(1, m, n, tile->bm, tile->bn, [&](const detail::GridPart& g) {
              const detail::GemmPush push =
                  detail::make_push(ad, bd, cd, g.z0, g.m0, g.n0, g.mc, g.nc, 1.0f, 0.0f, {}, 0, 0);
              vkf::launch(module, push, g.grid, {&a16, &b16}, {&c});
            });
          },
          warm_ms);
      fmt::print("workgroup scope {} {}^3 \"tn\", {}: {:.1f} TFLOP/s ({:.0f} us)\n", name, size,
                 hoisted ? "loads hoisted out of the loop" : "the GEMM as it runs",
                 flops / us / 1e6, us);
      std::fflush(stdout);
    }
  }
}

int run(int argc, char** argv) {
  CLI::App app{"vkformer multiply-add ceilings (fp32 and tensor cores)"};
  int device = -1;
  int64_t size = 4096;
  double warm_ms = 500;
  std::string tiles = "wgt128x128x32u4i128,wgt128x256x32u8";
  app.add_option("--device", device, "Vulkan device index (see `vkformer devices`)");
  app.add_option("--size", size, "workgroup scope: the square product's size")
      ->check(CLI::Range(256, 16384))
      ->capture_default_str();
  app.add_option("--tiles", tiles, "workgroup scope: comma-separated tile names")
      ->capture_default_str();
  app.add_option("--warmup-ms", warm_ms, "replays of each row first (GPU clocks ramp up)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (device >= 0) vkf::vk::Context::select_device(device);
  auto& ctx = vkf::vk::Context::get();
  vkf::set_matmul_precision(vkf::MatmulPrecision::F16);
  fmt::print("device: {} ({}), {} multiprocessors\n", ctx.info().name, ctx.info().driver_info,
             ctx.info().multiprocessors);
  fma_rows(warm_ms);
  subgroup_rows(warm_ms);
  workgroup_rows(vkf::bench::split_list(tiles), size, warm_ms);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mma_peak: %s\n", e.what());
    return 1;
  }
}
