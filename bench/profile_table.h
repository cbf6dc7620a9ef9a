// The per-kernel GPU-time table of the benchmarks' --profile: kernels by total time, with the
// achieved TFLOP/s or GB/s (where the launch declared its cost) against the device's roofline.
// Header-only: train_bench and decode_bench print it.
#pragma once

#include <algorithm>
#include <cstdio>
#include <vector>

#include "vk/stream.h"

namespace vkf::bench {

struct Peaks {
  double tflops = 67;        // fp32
  double tflops_f16 = 990;   // f16 tensor cores
  double gbps = 4300;        // memory
};

// `steps` is how many steps the profile covers; `wall_ms` the measured wall time per step.
inline void print_profile(std::vector<vk::KernelProfile> prof, double steps, double wall_ms, int top,
                          const Peaks& peaks) {
  std::sort(prof.begin(), prof.end(),
            [](const auto& l, const auto& r) { return l.total_ms > r.total_ms; });
  double total = 0;
  for (const auto& p : prof) total += p.total_ms;
  std::fprintf(stderr, "\nGPU time per step %.3f ms (wall %.3f ms); top kernels:\n", total / steps,
               wall_ms);
  std::fprintf(stderr, "  %-56s %8s %7s %6s %9s %9s  %s\n", "kernel", "ms/step", "calls", "share",
               "TFLOP/s", "GB/s", "of roofline");
  for (size_t i = 0; i < prof.size() && static_cast<int>(i) < top; ++i) {
    const auto& p = prof[i];
    const double s = p.total_ms / 1e3;
    const double tf = p.flops > 0 ? p.flops / s / 1e12 : 0, gb = p.bytes > 0 ? p.bytes / s / 1e9 : 0;
    // Tensor-core kernels (products, attention) against the f16 matrix peak, everything else
    // against fp32's.
    const bool tensor_cores = p.label.rfind("matmul_coopmat", 0) == 0 ||
                              p.label.rfind("matmul_wg", 0) == 0 ||
                              p.label.rfind("flash_attn_", 0) == 0;
    const double roof =
        std::max(tf / (tensor_cores ? peaks.tflops_f16 : peaks.tflops), gb / peaks.gbps);
    std::fprintf(stderr, "  %-56s %8.3f %7.1f %5.1f%% %9.2f %9.1f  %5.1f%%\n", p.label.c_str(),
                 p.total_ms / steps, static_cast<double>(p.calls) / steps, 100 * p.total_ms / total,
                 tf, gb, 100 * roof);
  }
  std::fprintf(stderr, "\n");
}

}  // namespace vkf::bench
