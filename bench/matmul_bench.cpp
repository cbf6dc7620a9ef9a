// Micro-benchmark of the fp32 GEMM behind ops::matmul: for each shape and transpose mode, the
// median time of one out = op(A) op(B) call (matmul_into, beta = 0) over timed repeats after a
// warm-up, measured with GPU timestamps (wall-clock around synchronize() where the device has no
// timestamps), and the GFLOP/s that gives (2*M*N*K flops per call). Results go in
// bench/RESULTS.md by hand.
//
//   matmul_bench [--device N] [--quick] [--shapes MxNxK[:mode],...] [--repeats R]
//                [--tile auto|medium|large]
// mode is nn (default), nt (A B^T, the linear layout), tn (A^T B) or tt.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/matmul.h"
#include "ops/matmul_kernels.h"
#include "vk/context.h"
#include "vk/error.h"

namespace {

using vkf::Tensor;

struct Case {
  int64_t m, n, k;
  bool trans_a = false, trans_b = false;
  std::string mode() const { return std::string(trans_a ? "t" : "n") + (trans_b ? "t" : "n"); }
};

Case parse_case(const std::string& text) {
  Case c{};
  std::string dims = text, mode = "nn";
  if (auto colon = text.find(':'); colon != std::string::npos) {
    dims = text.substr(0, colon);
    mode = text.substr(colon + 1);
  }
  char x1 = 0, x2 = 0;
  long long m = 0, n = 0, k = 0;
  int used = 0;
  if (std::sscanf(dims.c_str(), "%lld%c%lld%c%lld%n", &m, &x1, &n, &x2, &k, &used) != 5 ||
      x1 != 'x' || x2 != 'x' || used != static_cast<int>(dims.size()) || m <= 0 || n <= 0 ||
      k <= 0 || mode.size() != 2 || (mode[0] != 'n' && mode[0] != 't') ||
      (mode[1] != 'n' && mode[1] != 't')) {
    throw vkf::Error(fmt::format(
        "--shapes: cannot read '{}'; expected MxNxK with positive sizes, optionally followed by "
        ":nn, :nt, :tn or :tt (e.g. 8192x1536x576:nt)",
        text));
  }
  c.m = m;
  c.n = n;
  c.k = k;
  c.trans_a = mode[0] == 't';
  c.trans_b = mode[1] == 't';
  return c;
}

std::vector<Case> default_cases() {
  return {{256, 256, 256},
          {512, 512, 512},
          {1024, 1024, 1024},
          {2048, 2048, 2048},
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

// Random operands in [-1, 1): a cheap generator is plenty for timing.
Tensor random_tensor(const vkf::Shape& shape, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(vkf::shape_numel(shape)));
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(s >> 40) / 8388608.0 - 1.0);
  }
  return Tensor::from_host(std::span<const float>(v), shape);
}

struct Timer {
  bool gpu;
  // Milliseconds of one call of fn.
  template <typename Fn>
  double time(Fn&& fn) const {
    auto& stream = vkf::vk::Context::get().stream();
    if (gpu) {
      stream.set_profiling(false);
      stream.set_profiling(true);  // clears the totals
      fn();
      double ms = 0;
      for (const auto& p : stream.profile()) ms += p.total_ms;
      return ms;
    }
    stream.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    stream.synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
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
  app.add_option("--tile", tile, "tile of the tiled kernel")
      ->check(CLI::IsMember({"auto", "medium", "large"}));
  CLI11_PARSE(app, argc, argv);
  if (quick && app.count("--budget") == 0) budget_s = 1.0;

  std::vector<Case> cases;
  if (!shapes.empty()) {
    size_t start = 0;
    while (start <= shapes.size()) {
      const size_t end = std::min(shapes.find(',', start), shapes.size());
      if (end > start) cases.push_back(parse_case(shapes.substr(start, end - start)));
      start = end + 1;
    }
  } else {
    cases = quick ? quick_cases() : default_cases();
  }
  using vkf::ops::detail::TileChoice;
  vkf::ops::detail::set_tile_choice(tile == "medium"  ? TileChoice::Medium
                                    : tile == "large" ? TileChoice::Large
                                                      : TileChoice::Auto);
  if (device >= 0) vkf::vk::Context::select_device(device);
  auto& ctx = vkf::vk::Context::get();
  const Timer timer{ctx.info().timestamps};
  fmt::print("device: {} ({})\n", ctx.info().name, ctx.info().driver_info);
  fmt::print("timing: median of up to {} calls after one warm-up, {}\n\n", repeats,
             timer.gpu ? "GPU timestamps around each dispatch" : "wall clock around synchronize()");
  fmt::print("{:>22}  {:>4}  {:<18}  {:>10}  {:>10}  {:>9}\n", "M x N x K", "mode", "kernel", "ms",
             "best ms", "GFLOP/s");

  for (const Case& c : cases) {
    const Tensor a = random_tensor(c.trans_a ? vkf::Shape{c.k, c.m} : vkf::Shape{c.m, c.k}, 1);
    const Tensor b = random_tensor(c.trans_b ? vkf::Shape{c.n, c.k} : vkf::Shape{c.k, c.n}, 2);
    const Tensor out = Tensor::empty({c.m, c.n});
    auto call = [&] { vkf::ops::matmul_into(a, b, c.trans_a, c.trans_b, out); };
    const double first_ms = timer.time(call);  // warm-up: pipeline creation, first touch
    const int n =
        std::clamp(static_cast<int>(budget_s * 1000.0 / std::max(first_ms, 1e-3)), 3, repeats);
    std::vector<double> ms;
    for (int i = 0; i < n; ++i) ms.push_back(timer.time(call));
    const double med = median(ms), best = *std::min_element(ms.begin(), ms.end());
    const double flops = 2.0 * static_cast<double>(c.m) * c.n * c.k;
    fmt::print("{:>22}  {:>4}  {:<18}  {:>10.3f}  {:>10.3f}  {:>9.1f}\n",
               fmt::format("{} x {} x {}", c.m, c.n, c.k), c.mode(),
               vkf::ops::detail::gemm_plan(1, c.m, c.n), med, best, flops / (med * 1e6));
    std::fflush(stdout);
  }
  return 0;
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
