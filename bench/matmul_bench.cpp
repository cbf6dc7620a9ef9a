// Micro-benchmark of the GEMM behind ops::matmul: for each shape and transpose mode, the median
// time of one out = op(A) op(B) call (matmul_into, beta = 0) over timed repeats after a warm-up,
// measured with GPU timestamps (wall-clock around synchronize() where the device has no
// timestamps), and the GFLOP/s that gives (2*M*N*K flops per call). In fp32 (default) or f16
// precision (operands rounded to f16, fp32 accumulation: tensor cores where the device has NV
// cooperative matrices). --check compares each result with a CPU reference in double on the same
// (rounded) operands. --tiled-variant old,new runs each product on each implementation of the
// fp32 tiled kernel (ops::detail::set_tiled_variant), one row each, and compares every tiled
// result bit for bit with the first one's (column "bits": same, or how many elements differ).
// Results go in bench/RESULTS.md by hand.
//
//   matmul_bench [--device N] [--quick] [--shapes MxNxK[:mode],...] [--repeats R]
//                [--tile auto|medium|large] [--split-k 0|-1|N] [--stream-k 0|-1|N]
//                [--stream-k-region 1] [--tiled-variant V,...]
//                [--precision fp32|f16]
//                [--check] [--kernels]
//                [--coopmat-tile auto|off|all|<tile>,...] [--coopmat-convert auto|exact|hw|all]
//                [--coopmat-operands f16|f32|all]
// mode is nn (default), nt (A B^T, the linear layout), tn (A^T B) or tt.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/dtype.h"
#include "core/launch.h"
#include "ops/matmul.h"
#include "ops/matmul_coopmat.h"
#include "ops/matmul_workgroup.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_tiling.h"
#include "vk/context.h"
#include "vk/error.h"

namespace {

using vkf::Tensor;
using vkf::bench::median;
using vkf::bench::random_values;

struct Case {
  int64_t m, n, k;
  bool trans_a = false, trans_b = false;
  std::string mode() const { return std::string(trans_a ? "t" : "n") + (trans_b ? "t" : "n"); }
};

Case parse_case(const std::string& text) {
  std::string dims = text, mode = "nn";
  if (auto colon = text.find(':'); colon != std::string::npos) {
    dims = text.substr(0, colon);
    mode = text.substr(colon + 1);
  }
  const auto sizes = vkf::bench::parse_sizes(dims, 3);
  if (!sizes || mode.size() != 2 || (mode[0] != 'n' && mode[0] != 't') ||
      (mode[1] != 'n' && mode[1] != 't')) {
    throw vkf::Error(fmt::format(
        "--shapes: cannot read '{}'; expected MxNxK with positive sizes, optionally followed by "
        ":nn, :nt, :tn or :tt (e.g. 8192x1536x576:nt)",
        text));
  }
  return Case{(*sizes)[0], (*sizes)[1], (*sizes)[2], mode[0] == 't', mode[1] == 't'};
}

std::vector<Case> default_cases() {
  return {{256, 256, 256},
          {512, 512, 512},
          {1024, 1024, 1024},
          {2048, 2048, 2048},
          {4096, 4096, 4096},
          {8192, 1536, 576},
          {8192, 576, 1536},
          {8192, 49152, 576},
          {8192, 1536, 576, false, true},
          {8192, 1536, 576, true, false},
          // Decode: a few rows against a Hugging Face [out, in] weight.
          {1, 49152, 576, false, true},
          {8, 1536, 576, false, true}};
}

std::vector<Case> quick_cases() {
  return {{128, 128, 128},
          {256, 256, 256},
          {512, 512, 512},
          {512, 512, 512, false, true},
          {512, 512, 512, true, false},
          {1024, 576, 192, false, true},
          {1, 4096, 1024, false, true}};
}

// The result checked against a reference in double on the operands the kernel multiplies (each
// rounded to f16 in f16 precision), on up to 16 rows spread over M (all rows of small products)
// and every column. The error of each element is measured against sum_k |a||b| (a plain
// relative error means nothing where the sum cancels); it passes under the bound of fp32
// accumulation, 4 K 2^-24 sum_k |a||b| (as tests/unit/test_matmul_f16.cpp).
struct CheckResult {
  double max_rel = 0;  // max |got - want| / sum_k |a||b|
  bool pass = true;
  int64_t rows = 0;
};
CheckResult check_result(const Case& c, const std::vector<float>& a, const std::vector<float>& b,
                         const Tensor& out, bool f16) {
  auto operand = [f16](float x) {
    return f16 ? static_cast<double>(vkf::f16_bits_to_f32(vkf::f32_to_f16_bits(x))) : double{x};
  };
  // op(A)(m, k) and op(B)(k, n) in their stored layouts.
  auto a_at = [&](int64_t m, int64_t k) {
    return operand(a[static_cast<size_t>(c.trans_a ? k * c.m + m : m * c.k + k)]);
  };
  auto b_at = [&](int64_t k, int64_t n) {
    return operand(b[static_cast<size_t>(c.trans_b ? n * c.k + k : k * c.n + n)]);
  };
  CheckResult r;
  const int64_t rows = std::min<int64_t>(c.m, 16);
  std::vector<double> col_b(static_cast<size_t>(c.k));
  std::vector<std::vector<double>> a_rows;
  std::vector<int64_t> row_ids;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t m = rows == c.m ? i : (i * (c.m - 1)) / (rows - 1);
    row_ids.push_back(m);
    std::vector<double> row(static_cast<size_t>(c.k));
    for (int64_t k = 0; k < c.k; ++k) row[static_cast<size_t>(k)] = a_at(m, k);
    a_rows.push_back(std::move(row));
  }
  std::vector<std::vector<double>> got;
  for (int64_t m : row_ids) got.push_back(out.slice(0, m, m + 1).to_double());
  const double u = std::ldexp(1.0, -24);
  for (int64_t n = 0; n < c.n; ++n) {
    for (int64_t k = 0; k < c.k; ++k) col_b[static_cast<size_t>(k)] = b_at(k, n);
    for (size_t i = 0; i < row_ids.size(); ++i) {
      double sum = 0, mag = 0;
      for (int64_t k = 0; k < c.k; ++k) {
        const double p = a_rows[i][static_cast<size_t>(k)] * col_b[static_cast<size_t>(k)];
        sum += p;
        mag += std::fabs(p);
      }
      const double err = std::fabs(got[i][static_cast<size_t>(n)] - sum);
      const double rel = mag > 0 ? err / mag : (err > 0 ? INFINITY : 0.0);
      if (!(rel <= r.max_rel)) r.max_rel = std::isnan(rel) ? INFINITY : rel;
      if (!(err <= 4.0 * static_cast<double>(c.k) * u * mag)) r.pass = false;
    }
  }
  r.rows = static_cast<int64_t>(row_ids.size());
  return r;
}

struct Timer {
  bool gpu;
  // Milliseconds of one call of fn; with GPU timestamps, `kernels` receives each kernel's share.
  template <typename Fn>
  double time(Fn&& fn, std::string* kernels = nullptr) const {
    auto& stream = vkf::vk::Context::get().stream();
    if (gpu) {
      stream.set_profiling(false);
      stream.set_profiling(true);  // clears the totals
      fn();
      double ms = 0;
      if (kernels) kernels->clear();
      for (const auto& p : stream.profile()) {
        ms += p.total_ms;
        if (kernels) *kernels += fmt::format("    {:<48} {:>8.3f} ms\n", p.label, p.total_ms);
      }
      return ms;
    }
    stream.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    stream.synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
};

// Every (x, y) of two lists, x outermost.
template <typename X, typename Y>
std::vector<std::pair<X, Y>> pairs(const std::vector<X>& xs, const std::vector<Y>& ys) {
  std::vector<std::pair<X, Y>> all;
  for (const X& x : xs)
    for (const Y& y : ys) all.emplace_back(x, y);
  return all;
}

int run(int argc, char** argv) {
  CLI::App app{"vkformer fp32 matmul micro-benchmark"};
  int device = -1;
  bool quick = false;
  std::string shapes, tile = "auto";
  int repeats = 10;
  double budget_s = 2.0;
  app.add_option("--device", device, "Vulkan device index (see `vkformer devices`)");
  app.add_flag("--quick", quick, "a small set that finishes in seconds (CI, lavapipe)");
  app.add_option("--shapes", shapes, "comma-separated MxNxK[:nn|nt|tn|tt] to run instead");
  app.add_option("--repeats", repeats, "most timed calls per shape (fewer when slow)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--budget", budget_s,
                 "seconds of timed calls per shape (at least 3 calls); 1 with --quick")
      ->check(CLI::PositiveNumber);
  double warmup_ms = 500;
  app.add_option("--warmup-ms", warmup_ms,
                 "untimed calls of each row first, for this long (GPU clocks ramp up)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--tile", tile, "tile of the tiled kernel")
      ->check(CLI::IsMember({"auto", "medium", "large"}));
  int64_t split_k = 0;
  app.add_option("--split-k", split_k,
                 "K-splitting: 0 by heuristic, -1 never, N forced where N divides K");
  int64_t stream_k = 0, stream_k_region = 1;
  app.add_option("--stream-k-region", stream_k_region,
                 "stream-K: rounds of tiles the streamed region holds at most (1 or 2)");
  app.add_option("--stream-k", stream_k,
                 "stream-K products of the fp32 tiled kernel: 0 by rule, -1 never, N workers "
                 "forced (see ops/matmul_tiling.h)");
  std::string precision = "fp32", coopmat_tiles = "auto", coopmat_convert = "auto";
  bool check = false, list_kernels = false;
  app.add_flag("--kernels", list_kernels,
               "after each row, the kernels of its last timed call with their GPU time");
  app.add_option("--precision", precision,
                 "operand precision: fp32, or f16 (operands rounded to f16, fp32 accumulation)")
      ->check(CLI::IsMember({"fp32", "f16"}));
  app.add_flag("--check", check,
               "compare each result with a CPU reference in double (up to 16 rows): max error "
               "relative to sum|a||b|, PASS/FAIL");
  app.add_option("--coopmat-tile", coopmat_tiles,
                 "f16 kernels: auto, off (portable kernels), all (every tensor-core tile), or "
                 "comma-separated tile names such as 128x128x32/64x32");
  app.add_option("--coopmat-convert", coopmat_convert,
                 "f32 -> f16 conversion of the tensor-core kernel: auto, exact (integer), hw "
                 "(where the device guarantees its rounding), all")
      ->check(CLI::IsMember({"auto", "exact", "hw", "all"}));
  std::string tiled_variants;
  app.add_option("--tiled-variant", tiled_variants,
                 "implementations of the fp32 tiled kernel to run, comma-separated: old, new, or "
                 "new with options such as new/bk16 (see matmul_kernels.h); default: "
                 "VKF_TILED_GEMM, else new. With several, tiled results are compared bit for bit");
  std::string coopmat_operands = "f16";
  app.add_option("--coopmat-operands", coopmat_operands,
                 "tensor-core kernel operands: f16 (f32 inputs converted once per call, timed "
                 "with it), f32 (converted as each tile is staged), all")
      ->check(CLI::IsMember({"f16", "f32", "all"}));
  CLI11_PARSE(app, argc, argv);
  if (quick && app.count("--budget") == 0) budget_s = 1.0;

  std::vector<Case> cases;
  if (!shapes.empty()) {
    for (const auto& item : vkf::bench::split_list(shapes)) cases.push_back(parse_case(item));
  } else {
    cases = quick ? quick_cases() : default_cases();
  }
  using vkf::ops::detail::TileChoice;
  vkf::ops::detail::set_split_k(split_k);
  vkf::ops::detail::set_stream_k(stream_k);
  vkf::ops::detail::set_stream_k_region(stream_k_region);
  vkf::ops::detail::set_tile_choice(tile == "medium"  ? TileChoice::Medium
                                    : tile == "large" ? TileChoice::Large
                                                      : TileChoice::Auto);
  if (device >= 0) vkf::vk::Context::select_device(device);
  auto& ctx = vkf::vk::Context::get();
  const bool f16 = precision == "f16";
  vkf::set_matmul_precision(f16 ? vkf::MatmulPrecision::F16 : vkf::MatmulPrecision::F32);
  namespace detail = vkf::ops::detail;
  // The tensor-core settings to run each shape under (one row each).
  std::vector<std::string> tile_choices;
  if (coopmat_tiles == "all") {
    for (const auto& t : detail::coopmat_tiles()) tile_choices.push_back(t.name());
    for (const auto& t : detail::workgroup_tiles()) tile_choices.push_back(t.name());
  } else {
    tile_choices = vkf::bench::split_list(coopmat_tiles);
  }
  for (const auto& choice : tile_choices) detail::set_coopmat_choice(choice);  // validates names
  using detail::F16Convert;
  std::vector<F16Convert> converts;
  if (coopmat_convert == "all") converts = {F16Convert::Exact, F16Convert::Hardware};
  else if (coopmat_convert == "exact") converts = {F16Convert::Exact};
  else if (coopmat_convert == "hw") converts = {F16Convert::Hardware};
  else converts = {F16Convert::Auto};
  std::vector<std::string> variants = {detail::tiled_variant()};
  if (!tiled_variants.empty()) variants = vkf::bench::split_list(tiled_variants);
  for (const auto& v : variants) detail::set_tiled_variant(v);  // validates names
  const bool compare_bits = variants.size() > 1;
  std::vector<bool> operand_modes;
  if (coopmat_operands != "f32") operand_modes.push_back(true);
  if (coopmat_operands != "f16") operand_modes.push_back(false);
  // The settings to run each shape under after the tensor-core tile (one row each, where they
  // change the kernel).
  struct Setting {
    std::string tiled_variant;
    F16Convert convert;
    bool f16_operands;
  };
  std::vector<Setting> settings;
  for (const auto& v : variants)
    for (const auto& [convert, f16_operands] : pairs(converts, operand_modes))
      settings.push_back({v, convert, f16_operands});

  const Timer timer{ctx.info().timestamps};
  const auto support = detail::coopmat_support();
  fmt::print("device: {} ({})\n", ctx.info().name, ctx.info().driver_info);
  fmt::print("precision: {}{}\n", precision,
             !f16 ? ""
             : support.unsupported.empty()
                 ? fmt::format("; cooperative matrices {}x{}x{}, hardware f16 conversion {}",
                               support.mma_m, support.mma_n, support.mma_k,
                               support.hardware_convert
                                   ? "available"
                                   : "unavailable (no f16 RTE / subnormal guarantee)")
                 : "; no cooperative matrices (" + support.unsupported + ")");
  fmt::print("timing: median of up to {} calls after {} ms of warm-up calls, {}\n", repeats,
             warmup_ms,
             timer.gpu ? "GPU timestamps around each dispatch" : "wall clock around synchronize()");
  if (compare_bits)
    fmt::print("tiled variants: {} (each tiled result compared bit for bit with the first)\n",
               fmt::join(variants, ", "));
  fmt::print("\n{:>22}  {:>4}  {:<36}  {:>10}  {:>10}  {:>9}{}{}\n", "M x N x K", "mode", "kernel",
             "ms", "best ms", "GFLOP/s", check ? "  max err/sum|ab|  check" : "",
             compare_bits ? "  bits" : "");

  bool all_pass = true, all_same = true;
  for (const Case& c : cases) {
    const auto a_host = random_values(c.m * c.k, 1), b_host = random_values(c.k * c.n, 2);
    const Tensor a = Tensor::from_host(std::span<const float>(a_host),
                                       c.trans_a ? vkf::Shape{c.k, c.m} : vkf::Shape{c.m, c.k});
    const Tensor b = Tensor::from_host(std::span<const float>(b_host),
                                       c.trans_b ? vkf::Shape{c.n, c.k} : vkf::Shape{c.k, c.n});
    const Tensor out = Tensor::empty({c.m, c.n});
    std::string last_plan;
    std::vector<float> first_tiled;  // the first tiled result of this product, for "bits"
    for (const auto& choice : tile_choices) {
      for (const auto& [variant, convert, f16_operands] : settings) {
        detail::set_tiled_variant(variant);
        detail::set_coopmat_choice(choice);
        detail::set_f16_convert(convert);
        detail::set_coopmat_f16_operands(f16_operands);
        std::string plan = detail::gemm_plan(1, c.m, c.n, c.k);
        if (plan.rfind("coopmat", 0) == 0) plan += f16_operands ? " f16-in" : " f32-in";
        // gemm_plan names a tiled variant other than the default; side by side, name it too.
        if (compare_bits && plan.rfind("tiled", 0) == 0 && variant == "new") plan += " new";
        if (plan == last_plan) continue;  // a setting that does not apply here: same kernel
        last_plan = plan;
        auto call = [&] { vkf::ops::matmul_into(a, b, c.trans_a, c.trans_b, out); };
        double first_ms = timer.time(call);  // warm-up: pipeline creation, first touch
        // Then --warmup-ms of GPU work, so that clocks have ramped up: the H200's SM clock falls
        // from 1,980 to 345 MHz within about a second of light use (the host's checks and input
        // generation between rows) and takes a few hundred ms of work to come back; with 100 ms
        // here, rows after the first few of a process ran up to 3x slow.
        double warm_ms = first_ms;
        for (int i = 0; i < 100000 && warm_ms < warmup_ms; ++i)
          warm_ms += first_ms = timer.time(call);
        const int n =
            std::clamp(static_cast<int>(budget_s * 1000.0 / std::max(first_ms, 1e-3)), 3, repeats);
        std::vector<double> ms;
        std::string kernel_times;
        for (int i = 0; i < n; ++i) ms.push_back(timer.time(call, &kernel_times));
        const double med = median(ms), best = *std::min_element(ms.begin(), ms.end());
        const double flops = 2.0 * static_cast<double>(c.m) * c.n * c.k;
        std::string verdict;
        if (check) {
          const CheckResult r = check_result(c, a_host, b_host, out, f16);
          all_pass = all_pass && r.pass;
          verdict = fmt::format("  {:>15.3e}  {}", r.max_rel, r.pass ? "PASS" : "FAIL");
        }
        if (compare_bits && plan.rfind("tiled", 0) == 0) {
          const std::vector<float> got = out.to_float();
          if (first_tiled.empty()) {
            first_tiled = got;
            verdict += "  first";
          } else {
            int64_t differ = 0;
            for (size_t i = 0; i < got.size(); ++i)
              differ += std::memcmp(&got[i], &first_tiled[i], sizeof(float)) != 0;
            all_same = all_same && differ == 0;
            verdict += differ == 0 ? "  same" : fmt::format("  DIFF in {} elements", differ);
          }
        }
        fmt::print("{:>22}  {:>4}  {:<36}  {:>10.3f}  {:>10.3f}  {:>9.1f}{}\n",
                   fmt::format("{} x {} x {}", c.m, c.n, c.k), c.mode(), plan, med, best,
                   flops / (med * 1e6), verdict);
        if (list_kernels) fmt::print("{}", kernel_times);
        std::fflush(stdout);
      }
    }
  }
  if (check) fmt::print("\ncheck: {}\n", all_pass ? "all PASS" : "some FAIL");
  if (compare_bits)
    fmt::print("bits: {}\n",
               all_same ? "every tiled variant gave the same bits" : "tiled variants DIFFER");
  return (check && !all_pass) || !all_same ? 2 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "matmul_bench: %s\n", e.what());
    return 1;
  }
}
