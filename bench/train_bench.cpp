// Training throughput of vkformer on the model shapes of bench/torch_train_bench.py: a Llama model
// built in memory (random weights), batches of random token ids, and full training steps —
// forward, causal-LM loss, backward, AdamW — timed after a warm-up. Prints tokens/s, step time and
// peak device memory, as one JSON line per row (for bench/train_compare.sh) and a readable line;
// with --profile, the kernels that cost most (GPU timestamps), with achieved TFLOP/s or GB/s
// against the device's roofline.
// The loss is fused with the LM head (ops::linear_cross_entropy) unless --loss unfused; --loss
// both times the two in one run, and --check first compares one step's loss and gradients of the
// two paths from the same weights (PASS/FAIL by relative L2 difference).
//
//   train_bench [--shape 135m|1b|tiny] [--batch 8] [--seq 1024] [--steps 10] [--warmup 3]
//               [--loss fused|unfused|both] [--check] [--loss-chunk-mib 256]
//               [--profile] [--top 20] [--peak-tflops 67] [--peak-gbps 4300] [--device N]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_models.h"
#include "core/autograd.h"
#include "core/launch.h"
#include "models/decoder.h"
#include "models/registry.h"
#include "ops/elementwise.h"
#include "ops/linear_cross_entropy.h"
#include "ops/optim.h"
#include "ops/reduce.h"
#include "train/causal_lm.h"
#include "vk/context.h"
#include "vk/error.h"

using namespace vkf;

int main(int argc, char** argv) {
  CLI::App app("vkformer training throughput on fixed model shapes");
  std::string shape = "135m";
  int64_t batch = 8, seq = 1024;
  int steps = 10, warmup = 3, top = 20;
  bool profile = false;
  double peak_tflops = 67, peak_gbps = 4300;
  int device = -1;
  std::string loss_path = "fused";
  bool check = false;
  uint64_t chunk_mib = 0;
  app.add_option("--shape", shape, "135m, 1b or tiny")->capture_default_str();
  app.add_option("--loss", loss_path, "fused (the head fused with the loss), unfused or both")
      ->check(CLI::IsMember({"fused", "unfused", "both"}))
      ->capture_default_str();
  app.add_flag("--check", check, "compare one step's loss and gradients of the fused and unfused loss first");
  app.add_option("--loss-chunk-mib", chunk_mib, "fused loss: logits chunk budget in MiB (0: default 256)");
  app.add_option("--batch", batch, "sequences per step")->capture_default_str();
  app.add_option("--seq", seq, "tokens per sequence")->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str();
  app.add_flag("--profile", profile, "per-kernel GPU time of the timed steps");
  app.add_option("--top", top, "kernels listed by --profile")->capture_default_str();
  app.add_option("--peak-tflops", peak_tflops, "roofline: the device's fp32 peak (H200: 67)")->capture_default_str();
  app.add_option("--peak-gbps", peak_gbps, "roofline: the device's memory bandwidth in GB/s")->capture_default_str();
  app.add_option("--device", device, "Vulkan device index");
  CLI11_PARSE(app, argc, argv);
  try {
    if (device >= 0) vk::Context::select_device(device);
    set_math_mode(MathMode::Fast);
    ops::set_linear_cross_entropy_chunk_bytes(chunk_mib << 20);
    int64_t n_params = 0;
    models::DecoderModel model = bench::make_model(shape, n_params);
    const models::ArchSpec& spec = model.spec();
    model.set_requires_grad(true);
    ops::AdamW opt(model.parameters(), {1e-4, 0.9, 0.999, 1e-8, 0.0});
    std::vector<int32_t> ids(static_cast<size_t>(batch * seq));
    uint64_t x = 12345;
    for (auto& id : ids) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      id = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(spec.vocab_size));
    }
    const Tensor input = Tensor::from_host_i32(ids, {batch, seq});
    // Labels: the next token (the last position ignored), as the shifted HF loss compares.
    std::vector<int32_t> shifted(ids.size(), -100);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t + 1 < seq; ++t)
        shifted[static_cast<size_t>(b * seq + t)] = ids[static_cast<size_t>(b * seq + t + 1)];
    const Tensor labels = Tensor::from_host_i32(shifted, {batch * seq});
    const float inv_count = 1.0f / static_cast<float>(batch * (seq - 1));
    auto& stream = vk::stream();
    // Forward, loss and backward; the gradients are left on the parameters.
    auto backward = [&](train::HeadLoss how) {
      autograd::Tape tape;
      Tensor loss;
      {
        autograd::TapeScope scope(tape);
        loss = ops::scale(train::causal_lm_loss_parts(model, input, {}, labels, how).loss_sum, inv_count);
      }
      tape.backward(loss);
      return loss;
    };
    auto step = [&](train::HeadLoss how) {
      const Tensor loss = backward(how);
      opt.step();
      opt.zero_grad();
      return loss;
    };
    const char* names[] = {"fused", "unfused"};
    if (check) {
      // One batch through both paths from the same weights: the loss and every parameter's
      // gradient, compared by relative L2 difference (summation order differs; fp32 gives ~1e-6).
      std::vector<Tensor> grads[2];
      float losses[2];
      for (int path = 0; path < 2; ++path) {
        losses[path] = backward(path == 0 ? train::HeadLoss::Fused : train::HeadLoss::Unfused).item();
        for (const Tensor& p : model.parameters()) grads[path].push_back(p.grad());
        opt.zero_grad();
      }
      autograd::NoGradScope no_grad;
      double worst = 0;
      std::string worst_name;
      const auto& pnames = model.parameter_names();
      std::fprintf(stderr, "\ncheck: fused vs unfused loss, one step from the same weights\n");
      std::fprintf(stderr, "  %-40s %14s %14s %10s\n", "quantity", "fused", "unfused", "rel diff");
      const double loss_diff = std::abs(losses[0] - losses[1]) / std::abs(losses[1]);
      std::fprintf(stderr, "  %-40s %14.6f %14.6f %10.2e\n", "loss", losses[0], losses[1], loss_diff);
      for (size_t i = 0; i < pnames.size(); ++i) {
        const double a = ops::global_l2_norm({grads[0][i]}).item();
        const double b = ops::global_l2_norm({grads[1][i]}).item();
        const double d = ops::global_l2_norm({ops::sub(grads[0][i], grads[1][i])}).item() / std::max(b, 1e-30);
        if (d > worst) worst = d, worst_name = pnames[i];
        if (i == 0 || i + 1 == pnames.size() || pnames[i] == spec.names.lm_head)
          std::fprintf(stderr, "  grad %-35s %14.6e %14.6e %10.2e\n", pnames[i].c_str(), a, b, d);
      }
      std::fprintf(stderr, "  worst gradient: %s, rel diff %.2e\n", worst_name.c_str(), worst);
      // fp32 summation order gives ~1e-6; f16 operands (both paths round alike) more.
      const bool ok = loss_diff < 1e-4 && worst < 1e-3;
      std::fprintf(stderr, "check: %s\n\n", ok ? "PASS" : "FAIL");
      fmt::print("{{\"tool\":\"vkformer\",\"check\":\"fused_loss\",\"shape\":\"{}\",\"loss_rel_diff\":{:.3e},"
                 "\"grad_worst_rel_diff\":{:.3e},\"pass\":{}}}\n",
                 shape, loss_diff, worst, ok);
      if (!ok) return 2;
    }
    auto& alloc = vk::Context::get().allocator();
    const auto& info = vk::Context::get().info();
    for (int path = 0; path < 2; ++path) {
      if (loss_path != "both" && loss_path != names[path]) continue;
      const train::HeadLoss how = path == 0 ? train::HeadLoss::Fused : train::HeadLoss::Unfused;
      for (int i = 0; i < warmup; ++i) step(how).item();
      stream.synchronize();
      alloc.reset_peak();
      vk::reset_memory_peak();
      if (profile) stream.set_profiling(true);
      // The loss is read every step, as vkformer train does: it bounds how far the host runs ahead
      // of the GPU (and so the memory that freed-but-queued tensors hold).
      float loss = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) loss = step(how).item();
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
      const double tps = static_cast<double>(batch * seq) / sec;
      const double peak_gib = static_cast<double>(alloc.stats().peak_device_bytes_in_use) / (1ull << 30);
      const double live_gib = static_cast<double>(vk::memory_stats().peak_live_bytes) / (1ull << 30);
      fmt::print("{{\"tool\":\"vkformer\",\"shape\":\"{}\",\"precision\":\"fp32\",\"head_loss\":\"{}\",\"batch\":{},"
                 "\"seq\":{},\"params\":{},\"step_ms\":{:.2f},\"tokens_per_s\":{:.1f},\"peak_gib\":{:.2f},"
                 "\"peak_live_gib\":{:.2f},\"loss\":{:.4f},\"device\":\"{}\"}}\n",
                 shape, names[path], batch, seq, n_params, sec * 1e3, tps, peak_gib, live_gib, loss, info.name);
      std::fprintf(stderr,
                   "vkformer %s fp32 %s loss params=%.1fM B=%lld T=%lld step=%.1fms tok/s=%.0f peak=%.2fGiB "
                   "(live tensors %.2fGiB) loss=%.3f\n",
                   shape.c_str(), names[path], static_cast<double>(n_params) / 1e6, static_cast<long long>(batch),
                   static_cast<long long>(seq), sec * 1e3, tps, peak_gib, live_gib, loss);
      if (profile) {
        auto prof = stream.profile();
        stream.set_profiling(false);
        std::sort(prof.begin(), prof.end(), [](const auto& a, const auto& b) { return a.total_ms > b.total_ms; });
        double total = 0;
        for (const auto& p : prof) total += p.total_ms;
        std::fprintf(stderr, "\nGPU time per step %.2f ms (wall %.2f ms); top kernels:\n", total / steps, sec * 1e3);
        std::fprintf(stderr, "  %-34s %8s %7s %6s %9s %9s  %s\n", "kernel", "ms/step", "calls", "share",
                     "TFLOP/s", "GB/s", "of roofline");
        for (size_t i = 0; i < prof.size() && static_cast<int>(i) < top; ++i) {
          const auto& p = prof[i];
          const double s = p.total_ms / 1e3;
          const double tf = p.flops > 0 ? p.flops / s / 1e12 : 0, gb = p.bytes > 0 ? p.bytes / s / 1e9 : 0;
          const double roof = std::max(tf / peak_tflops, gb / peak_gbps);
          std::fprintf(stderr, "  %-34s %8.2f %7llu %5.1f%% %9.2f %9.1f  %5.1f%%\n", p.label.c_str(),
                       p.total_ms / steps, static_cast<unsigned long long>(p.calls / static_cast<uint64_t>(steps)),
                       100 * p.total_ms / total, tf, gb, 100 * roof);
        }
        std::fprintf(stderr, "\n");
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_bench: error: %s\n", e.what());
    return 1;
  }
}
