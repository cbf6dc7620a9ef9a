// Generation throughput of vkformer: greedy decoding with the KV cache (vkf::infer::generate) on
// the model shapes of bench/bench_models.h, at batch 1 and 8. Decode tokens/s counts the tokens
// after the first of each row (the first comes from the prefill), over the time between the first
// and the last token callback. Also prints the memory roofline of a decode step at batch 1: every
// weight byte read once per token at the given bandwidth. Weights are f32 (vkformer computes in
// f32; f16 weights are part of the mixed-precision work of the performance issue).
//
//   decode_bench [--shape 1b|135m|tiny] [--prompt 32] [--new 64] [--batch 1,8] [--gbps 4300]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "bench_models.h"
#include "core/launch.h"
#include "infer/generate.h"
#include "vk/context.h"

using namespace vkf;

int main(int argc, char** argv) {
  CLI::App app("vkformer generation throughput on fixed model shapes");
  std::string shape = "1b", batches = "1,8";
  int64_t prompt_len = 32, new_tokens = 64;
  double gbps = 4300;
  int device = -1;
  app.add_option("--shape", shape, "1b, 135m or tiny")->capture_default_str();
  app.add_option("--prompt", prompt_len, "prompt tokens")->capture_default_str();
  app.add_option("--new", new_tokens, "tokens generated per row")->capture_default_str();
  app.add_option("--batch", batches, "batch sizes, comma separated")->capture_default_str();
  app.add_option("--gbps", gbps, "memory bandwidth for the roofline (H200: 4300)")->capture_default_str();
  app.add_option("--device", device, "Vulkan device index");
  CLI11_PARSE(app, argc, argv);
  try {
    if (device >= 0) vk::Context::select_device(device);
    set_math_mode(MathMode::Fast);
    int64_t params = 0;
    models::DecoderModel model = bench::make_model(shape, params);
    const double roofline = gbps * 1e9 / (static_cast<double>(params) * 4.0);
    std::stringstream list(batches);
    for (std::string item; std::getline(list, item, ',');) {
      const int64_t batch = std::stoll(item);
      std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch));
      for (int64_t r = 0; r < batch; ++r)
        for (int64_t t = 0; t < prompt_len; ++t)
          prompts[static_cast<size_t>(r)].push_back(static_cast<int32_t>((r * 7919 + t * 104729) % model.spec().vocab_size));
      infer::GenerationConfig cfg;
      cfg.max_new_tokens = new_tokens;
      auto run = [&](double& decode_s, int64_t& decoded) {
        using clock = std::chrono::steady_clock;
        clock::time_point first, last;
        int64_t count = 0;
        bool started = false;
        infer::generate(model, prompts, cfg, [&](size_t, int32_t) {
          const auto now = clock::now();
          if (!started) started = true, first = now;
          last = now;
          ++count;
        });
        decode_s = std::chrono::duration<double>(last - first).count();
        decoded = count - batch;  // tokens after each row's first
      };
      double s = 0;
      int64_t n = 0;
      run(s, n);  // warm-up: pipelines, caches
      run(s, n);
      const double tps = s > 0 ? static_cast<double>(n) / s : 0;
      fmt::print("{{\"tool\":\"vkformer\",\"shape\":\"{}\",\"batch\":{},\"prompt\":{},\"new\":{},\"params\":{},"
                 "\"decode_tokens_per_s\":{:.1f},\"ms_per_step\":{:.2f},\"roofline_b1_f32\":{:.1f},\"device\":\"{}\"}}\n",
                 shape, batch, prompt_len, new_tokens, params, tps, 1e3 * s / static_cast<double>(new_tokens - 1),
                 roofline, vk::Context::get().info().name);
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_bench: error: %s\n", e.what());
    return 1;
  }
}
