// Micro-benchmark of fused attention (ops::attention), forward and backward, on the attention
// shapes of the training benchmarks: for each shape, any of the plain fp32 kernels (`plain`, the
// reference path), the fp32 register-tiled kernels (`fast`, F32 matmul precision, the builds the
// device gets; `fast-small` forces their 32 KiB tiles, to compare on large devices) and the f16
// tensor-core kernels (`coopmat`, F16 precision, where the device has NV cooperative matrices) on
// the same random inputs, timed per kernel with GPU timestamps (median over repeats after a
// warm-up), forward and backward apart, and each family's results checked against the first
// family of the row's list that ran.
//
// FLOP counts follow FlashAttention's convention, so that rates compare with published ones: a
// causal call does half the pairs; the forward is 2 products (4 B Hq D pairs flops) and the
// backward 5 (10 B Hq D pairs: s, dp, dv, dk, dq), although the two backward kernels here both
// recompute s and dp (7 products done). Per-kernel columns show the flops each kernel does.
//
// The check: per output, max |family - reference| / max |reference|, PASS below --tolerance for
// coopmat (the f16 path's error relative to the tensor's scale) and below --fp32-tolerance for
// the fp32 families against each other. tests/unit/test_attention*.cpp hold the strict
// per-element checks against double-precision references.
//
//   attention_bench [--device N] [--shapes 135m,1b | BxTxHqxHkvxD[:nc],...] [--repeats 10]
//                   [--kernels plain,fast,fast-small,coopmat] [--coopmat-convert auto|exact|hw]
//                   [--tolerance 1e-2] [--fp32-tolerance 1e-4] [--emulate]
// A shape's ":nc" suffix makes it non-causal. --emulate runs the tensor-core kernels' emulated
// builds on a device without cooperative matrices (slow; to check the benchmark itself).
//
// --decode times the decode step's one-query attention instead (ops/decode.h), at Llama-3.2-1B's
// heads by default (Hq 32, Hkv 8, D 64), for each batch and cache length (the new key is the
// last slot, every slot a token): the plain kernels (rope_kv_write, then attention_decode.comp,
// as VKF_ATTENTION=plain runs them), the same two stages with the fast kernel, and the fused
// attention_decode_rope. "GPU us" is the dispatches' own time (GPU timestamps, median over
// --repeats); "chain us" the time per call of --chain calls recorded back to back in one captured
// graph and replayed, each depending on the last as the layers of a decode step do, so that it
// includes each stage's launch and drain. Checks in the same run: the fused output equals the
// fast pair's bit for bit, and all three are within --fp32-tolerance (relative to the largest
// output) of a double-precision CPU reference.
//   attention_bench --decode [--decode-heads 32x8x64] [--decode-lengths 64,256,1024,4096]
//                   [--decode-batches 1,8] [--repeats 20] [--chain 64] [--device N]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/autograd.h"
#include "core/launch.h"
#include "ops/attention.h"
#include "ops/attention_coopmat.h"
#include "ops/attention_ref.h"
#include "ops/decode.h"
#include "ops/matmul_coopmat.h"
#include "ops/rope_ref.h"
#include "vk/context.h"
#include "vk/error.h"

namespace {

using vkf::Tensor;
using vkf::bench::median;
using vkf::bench::random_values;

struct Shape {
  std::string name;
  int64_t b, t, hq, hkv, d;
  bool causal = true;
};

Shape parse_shape(const std::string& text) {
  if (text == "135m") return {"135m", 8, 1024, 9, 3, 64};
  if (text == "1b") return {"1b", 8, 1024, 32, 8, 64};
  Shape s{text, 0, 0, 0, 0, 0};
  std::string dims = text;
  if (auto colon = text.find(':'); colon != std::string::npos) {
    dims = text.substr(0, colon);
    s.causal = text.substr(colon + 1) != "nc";
  }
  const auto sizes = vkf::bench::parse_sizes(dims, 5);
  if (!sizes || (*sizes)[2] % (*sizes)[3] != 0) {
    throw vkf::Error(fmt::format(
        "--shapes: cannot read '{}'; expected 135m, 1b or BxTxHqxHkvxD (Hkv dividing Hq), "
        "optionally followed by :nc for non-causal, e.g. 8x1024x9x3x64",
        text));
  }
  s.b = (*sizes)[0];
  s.t = (*sizes)[1];
  s.hq = (*sizes)[2];
  s.hkv = (*sizes)[3];
  s.d = (*sizes)[4];
  return s;
}

// Which part of the attention a profiled kernel label belongs to ("" for anything else).
std::string part_of(const std::string& label) {
  if (label.find("bwd_delta") != std::string::npos) return "delta";
  if (label.find("dkv") != std::string::npos) return "dkv";
  if (label.find("dq") != std::string::npos) return "dq";
  if (label.find("fwd") != std::string::npos) return "fwd";
  return "";
}

// One forward + backward with profiling on; per-part milliseconds.
std::map<std::string, double> timed_step(Tensor q, Tensor k, Tensor v, const Tensor& seed,
                                         const vkf::ops::AttentionOptions& opts,
                                         std::string* modules,
                                         std::vector<std::vector<double>>* results) {
  auto& stream = vkf::vk::Context::get().stream();
  q.zero_grad();
  k.zero_grad();
  v.zero_grad();
  stream.set_profiling(false);
  stream.set_profiling(true);  // clears the totals
  vkf::autograd::Tape tape;
  Tensor out;
  {
    vkf::autograd::TapeScope scope(tape);
    out = vkf::ops::attention(q, k, v, {}, opts);
  }
  tape.backward(out, seed);
  std::map<std::string, double> ms;
  std::string names;
  for (const auto& p : stream.profile()) {
    const std::string part = part_of(p.label);
    if (part.empty()) continue;
    ms[part] += p.total_ms;
    names += (names.empty() ? "" : " ") + p.label;
  }
  stream.set_profiling(false);
  if (modules) *modules = names;
  // Downloaded now: later calls reuse the gradient buffers.
  if (results)
    *results = {out.to_double(), q.grad().to_double(), k.grad().to_double(), v.grad().to_double()};
  return ms;
}

double rel_error(const std::vector<double>& got, const std::vector<double>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(got[i] - want[i]);
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    scale = std::max(scale, std::fabs(want[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// --decode: one batch size and cache length.
struct DecodeRow {
  int64_t batch, keys;
  double gpu_us[3] = {}, chain_us[3] = {};  // plain, fast pair, fused
  double err[3] = {};                       // vs the double reference
  bool bitwise = false;
  int64_t splits = 1;
};

// One call of each decode path over the same inputs (`path`: 0 plain, 1 fast pair, 2 fused).
Tensor decode_call(int path, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cos,
                   const Tensor& sin, const Tensor& pos, const Tensor& ck, const Tensor& cv,
                   const Tensor& slot, const Tensor& mask, const vkf::ops::AttentionOptions& opts) {
  const int64_t rot = ck.dim(3);
  if (path == 2)
    return vkf::ops::attention_decode_rope(q, k, v, cos, sin, pos, ck, cv, slot, mask, opts, rot,
                                           vkf::ops::RopeLayout::RotateHalf);
  const Tensor rotated = vkf::ops::rope_kv_write(q, k, v, cos, sin, pos, ck, cv, slot, rot,
                                                 vkf::ops::RopeLayout::RotateHalf);
  return vkf::ops::attention_decode(rotated, ck, cv, mask, slot, opts);
}

DecodeRow time_decode(int64_t B, int64_t L, int64_t hq, int64_t hkv, int64_t D, int repeats,
                      int chain) {
  auto& stream = vkf::vk::Context::get().stream();
  DecodeRow row{B, L};
  const int64_t half = D / 2;
  const auto qh = random_values(B * hq * D, 11), kh = random_values(B * hkv * D, 12),
             vh = random_values(B * hkv * D, 13), ckh = random_values(B * L * hkv * D, 14),
             cvh = random_values(B * L * hkv * D, 15);
  // Rotary tables of Llama's form (base 10000) over the cache's positions.
  std::vector<float> cosh(static_cast<size_t>(L * half)), sinh(cosh.size());
  for (int64_t p = 0; p < L; ++p)
    for (int64_t j = 0; j < half; ++j) {
      const double angle =
          static_cast<double>(p) *
          std::pow(10000.0, -2.0 * static_cast<double>(j) / static_cast<double>(D));
      cosh[static_cast<size_t>(p * half + j)] = static_cast<float>(std::cos(angle));
      sinh[static_cast<size_t>(p * half + j)] = static_cast<float>(std::sin(angle));
    }
  const auto f32 = [](const std::vector<float>& h, vkf::Shape shape) {
    return Tensor::from_host(std::span<const float>(h), shape);
  };
  const Tensor q = f32(qh, {B, 1, hq, D}), k = f32(kh, {B, 1, hkv, D}), v = f32(vh, {B, 1, hkv, D});
  const Tensor cos = f32(cosh, {L, half}), sin = f32(sinh, {L, half});
  const Tensor ck = f32(ckh, {B, L, hkv, D}), cv = f32(cvh, {B, L, hkv, D});
  const std::vector<int32_t> last(static_cast<size_t>(B), static_cast<int32_t>(L - 1));
  const Tensor pos = Tensor::from_host_i32(last, {B, 1});
  const Tensor slot = Tensor::from_host_i32(std::vector<int32_t>{static_cast<int32_t>(L - 1)}, {1});
  const Tensor mask =
      Tensor::from_host_i32(std::vector<int32_t>(static_cast<size_t>(B * L), 1), {B, L});
  vkf::ops::AttentionOptions opts;
  opts.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  row.splits = vkf::ops::detail::decode_attention_plan(B, L, hq, hkv, D).splits;

  // The reference: rotated queries in double over the cache as the calls leave it (the new key
  // rotated at the last slot; unit tests check that write against ref::rope_apply).
  std::vector<double> outs[3];
  for (int path = 0; path < 3; ++path) {
    if (path == 0) ::setenv("VKF_ATTENTION", "plain", 1);
    outs[path] = decode_call(path, q, k, v, cos, sin, pos, ck, cv, slot, mask, opts).to_double();
    ::unsetenv("VKF_ATTENTION");
  }
  const std::vector<double> qd(qh.begin(), qh.end()), cosd(cosh.begin(), cosh.end()),
      sind(sinh.begin(), sinh.end());
  const auto q_rot = vkf::ref::rope_apply(
      qd, B, 1, hq, D, cosd, sind, std::vector<int64_t>(static_cast<size_t>(B), L - 1), D, false);
  const auto want =
      vkf::ref::attention(q_rot, ck.to_double(), cv.to_double(), {}, {B, 1, L, hq, hkv, D}, opts);
  for (int path = 0; path < 3; ++path) row.err[path] = rel_error(outs[path], want);
  row.bitwise = outs[1] == outs[2];

  for (int path = 0; path < 3; ++path) {
    if (path == 0) ::setenv("VKF_ATTENTION", "plain", 1);
    decode_call(path, q, k, v, cos, sin, pos, ck, cv, slot, mask, opts);  // warm-up
    std::vector<double> gpu;
    for (int r = 0; r < repeats; ++r) {
      stream.set_profiling(false);
      stream.set_profiling(true);
      decode_call(path, q, k, v, cos, sin, pos, ck, cv, slot, mask, opts);
      double ms = 0;
      for (const auto& p : stream.profile()) ms += p.total_ms;
      gpu.push_back(ms);
    }
    stream.set_profiling(false);
    row.gpu_us[path] = 1e3 * median(gpu);
    stream.synchronize();
    stream.begin_capture();
    for (int c = 0; c < chain; ++c)
      decode_call(path, q, k, v, cos, sin, pos, ck, cv, slot, mask, opts);
    auto graph = stream.end_capture();
    row.chain_us[path] =
        vkf::bench::median_replay_us(stream, *graph, std::max(3, repeats / 4)) / chain;
    graph.reset();
    ::unsetenv("VKF_ATTENTION");
  }
  return row;
}

int run_decode(const std::string& heads, const std::string& lengths, const std::string& batches,
               int repeats, int chain, double tolerance) {
  const auto h = vkf::bench::parse_sizes(heads, 3);
  if (!h || (*h)[0] % (*h)[1] != 0 || (*h)[2] % 2 != 0 || (*h)[2] > 256)
    throw vkf::Error(
        fmt::format("--decode-heads: cannot read '{}'; expected HqxHkvxD with Hkv "
                    "dividing Hq and an even D up to 256, e.g. 32x8x64",
                    heads));
  const int64_t hq = (*h)[0], hkv = (*h)[1], D = (*h)[2];
  auto& ctx = vkf::vk::Context::get();
  fmt::print("device: {} ({})\n", ctx.info().name, ctx.info().driver_info);
  if (!ctx.info().timestamps) throw vkf::Error("the device has no timestamps: nothing to time");
  const std::string unfit = vkf::ops::detail::decode_attention_fast_unfit(D);
  fmt::print("decode attention, Hq {} Hkv {} D {}; fast kernel: {}\n", hq, hkv, D,
             unfit.empty() ? "yes" : "no (" + unfit + "): the fast columns run the plain path");
  fmt::print(
      "GPU us: median of {} calls (timestamps); chain us: per call of {} chained calls in "
      "a replayed graph; GB/s: K and V bytes over the fused GPU time\n\n",
      repeats, chain);
  fmt::print(
      "| batch | keys | splits | plain GPU us | pair GPU us | fused GPU us | fused GB/s | "
      "plain chain us | pair chain us | fused chain us | fused = pair | err plain / "
      "pair / fused | check |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n");
  bool all_pass = true;
  for (const auto& b_item : vkf::bench::split_list(batches)) {
    for (const auto& l_item : vkf::bench::split_list(lengths)) {
      const auto b = vkf::bench::parse_sizes(b_item, 1), l = vkf::bench::parse_sizes(l_item, 1);
      if (!b || !l) throw vkf::Error("--decode-batches and --decode-lengths take positive sizes");
      const DecodeRow r = time_decode((*b)[0], (*l)[0], hq, hkv, D, repeats, chain);
      const bool pass =
          r.bitwise && r.err[0] <= tolerance && r.err[1] <= tolerance && r.err[2] <= tolerance;
      all_pass = all_pass && pass;
      const double bytes = 8.0 * static_cast<double>(r.batch * r.keys * hkv * D);
      fmt::print(
          "| {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.0f} | {:.1f} | {:.1f} | {:.1f} | "
          "{} | {:.1e} / {:.1e} / {:.1e} | {} |\n",
          r.batch, r.keys, r.splits, r.gpu_us[0], r.gpu_us[1], r.gpu_us[2],
          r.gpu_us[2] > 0 ? bytes / (r.gpu_us[2] * 1e3) : 0.0, r.chain_us[0], r.chain_us[1],
          r.chain_us[2], r.bitwise ? "yes" : "NO", r.err[0], r.err[1], r.err[2],
          pass ? "PASS" : "FAIL");
      std::fflush(stdout);
    }
  }
  fmt::print("\ncheck: {}\n", all_pass ? "all PASS" : "some FAIL");
  return all_pass ? 0 : 2;
}

int run(int argc, char** argv) {
  CLI::App app{"vkformer fused attention micro-benchmark"};
  int device = -1, repeats = 10;
  std::string shapes = "135m,1b", kernels = "fast,coopmat", convert = "auto";
  double tolerance = 1e-2, fp32_tolerance = 1e-4;
  bool emulate = false;
  app.add_option("--device", device, "Vulkan device index (see `vkformer devices`)");
  app.add_option("--shapes", shapes, "comma-separated 135m, 1b or BxTxHqxHkvxD[:nc]");
  app.add_option("--repeats", repeats, "timed forward+backward calls per row")
      ->check(CLI::Range(1, 1000));
  app.add_option("--kernels", kernels,
                 "comma-separated kernel families: plain, fast, fast-small, coopmat (the first "
                 "one run is the reference of the checks)");
  app.add_option("--coopmat-convert", convert,
                 "f32 -> f16 conversion of the tensor-core kernels: auto, exact, hw")
      ->check(CLI::IsMember({"auto", "exact", "hw"}));
  app.add_option("--tolerance", tolerance,
                 "coopmat check: max |coopmat - reference| / max |reference| per output for PASS");
  app.add_option("--fp32-tolerance", fp32_tolerance,
                 "fast/plain check: max |family - reference| / max |reference| per output for "
                 "PASS");
  app.add_flag("--emulate", emulate,
               "run the tensor-core kernels' emulated builds (devices without cooperative "
               "matrices; slow, for checking this benchmark)");
  bool decode = false;
  std::string decode_heads = "32x8x64", decode_lengths = "64,256,1024,4096", decode_batches = "1,8";
  int chain = 64;
  app.add_flag("--decode", decode,
               "time the decode step's one-query attention (plain, fast pair, fused) instead");
  app.add_option("--decode-heads", decode_heads, "--decode: HqxHkvxD")->capture_default_str();
  app.add_option("--decode-lengths", decode_lengths, "--decode: cache lengths, comma separated")
      ->capture_default_str();
  app.add_option("--decode-batches", decode_batches, "--decode: batch sizes, comma separated")
      ->capture_default_str();
  app.add_option("--chain", chain, "--decode: calls per captured graph for the chain timing")
      ->check(CLI::Range(1, 10000));
  CLI11_PARSE(app, argc, argv);
  if (decode) {
    if (device >= 0) vkf::vk::Context::select_device(device);
    return run_decode(decode_heads, decode_lengths, decode_batches, repeats, chain, fp32_tolerance);
  }

  std::vector<Shape> cases;
  for (const auto& item : vkf::bench::split_list(shapes)) cases.push_back(parse_shape(item));
  const std::vector<std::string> families = vkf::bench::split_list(kernels);
  if (cases.empty() || families.empty())
    throw vkf::Error("--shapes and --kernels each need at least one item");
  for (const auto& name : families)
    if (name != "plain" && name != "fast" && name != "fast-small" && name != "coopmat")
      throw vkf::Error(fmt::format(
          "--kernels: unknown family '{}'; use plain, fast, fast-small, coopmat", name));
  if (device >= 0) vkf::vk::Context::select_device(device);
  auto& ctx = vkf::vk::Context::get();
  namespace detail = vkf::ops::detail;
  detail::set_f16_convert(convert == "exact" ? detail::F16Convert::Exact
                          : convert == "hw"  ? detail::F16Convert::Hardware
                                             : detail::F16Convert::Auto);
  detail::set_coopmat_emulation(emulate);
  fmt::print("device: {} ({})\n", ctx.info().name, ctx.info().driver_info);
  if (!ctx.info().timestamps) throw vkf::Error("the device has no timestamps: nothing to time");
  fmt::print("timing: median of {} forward+backward calls after one warm-up, GPU timestamps\n",
             repeats);
  fmt::print(
      "flops: FlashAttention's convention (causal = half the pairs; backward = 2.5 x "
      "forward); per-kernel TFLOP/s count the products each kernel does\n\n");
  fmt::print("{:<20} {:<10} {:>8} {:>8} {:>9} {:>9} {:>8} {:>9} {:>8} {:>8} {:>8}  {}\n", "shape",
             "kernels", "fwd ms", "bwd ms", "fwd TF/s", "bwd TF/s", "total ms", "all TF/s",
             "delta ms", "dq ms", "dkv ms", "per-kernel TF/s (fwd, dq, dkv)");
  bool all_pass = true;
  int compared = 0;
  for (const Shape& s : cases) {
    const int64_t nq = s.b * s.t * s.hq * s.d, nk = s.b * s.t * s.hkv * s.d;
    const auto qh = random_values(nq, 1), kh = random_values(nk, 2), vh = random_values(nk, 3);
    const auto dh = random_values(nq, 4);
    Tensor q = Tensor::from_host(std::span<const float>(qh), {s.b, s.t, s.hq, s.d});
    Tensor k = Tensor::from_host(std::span<const float>(kh), {s.b, s.t, s.hkv, s.d});
    Tensor v = Tensor::from_host(std::span<const float>(vh), {s.b, s.t, s.hkv, s.d});
    const Tensor seed = Tensor::from_host(std::span<const float>(dh), {s.b, s.t, s.hq, s.d});
    q.set_requires_grad(true);
    k.set_requires_grad(true);
    v.set_requires_grad(true);
    vkf::ops::AttentionOptions opts;
    opts.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.d)));
    opts.causal = s.causal;
    const double pairs = static_cast<double>(s.b * s.hq) *
                         (s.causal ? 0.5 * static_cast<double>(s.t) * static_cast<double>(s.t + 1)
                                   : static_cast<double>(s.t) * static_cast<double>(s.t));
    const double unit = pairs * static_cast<double>(s.d) * 2.0;  // flops of one product
    const std::string dims =
        fmt::format("{}x{}x{}/{}x{}{}", s.b, s.t, s.hq, s.hkv, s.d, s.causal ? "" : " nc");
    const std::string label = s.name.find('x') == std::string::npos ? s.name + " " + dims : dims;
    std::vector<std::vector<double>> reference;
    std::string reference_name;
    for (const std::string& family : families) {
      const bool coopmat = family == "coopmat", plain = family == "plain";
      vkf::set_matmul_precision(coopmat ? vkf::MatmulPrecision::F16 : vkf::MatmulPrecision::F32);
      detail::set_fast_attention_builds(family == "fast-small"
                                            ? detail::FastAttentionBuilds::SmallTiles
                                            : detail::FastAttentionBuilds::Auto);
      // VKF_ATTENTION=plain routes every call to the plain kernels (ops/attention_coopmat.cpp).
      if (plain) {
        ::setenv("VKF_ATTENTION", "plain", 1);
      } else {
        ::unsetenv("VKF_ATTENTION");
      }
      const auto kind = detail::attention_kernels(s.d, 0);
      const auto want = coopmat ? detail::AttentionKernels::Coopmat
                        : plain ? detail::AttentionKernels::Plain
                                : detail::AttentionKernels::Fast;
      if (kind != want) {
        fmt::print("{:<20} {:<10} not run: this call takes the {} kernels{}\n", label, family,
                   detail::attention_kernels_name(kind),
                   coopmat ? " (" + detail::attention_coopmat_unfit(s.d, 0) + ")" : "");
        continue;
      }
      std::vector<std::vector<double>> results;
      std::string modules;
      timed_step(q, k, v, seed, opts, &modules, &results);  // warm-up: pipelines, first touch
      std::map<std::string, std::vector<double>> samples;
      for (int i = 0; i < repeats; ++i)
        for (const auto& [part, ms] : timed_step(q, k, v, seed, opts, nullptr, nullptr))
          samples[part].push_back(ms);
      std::map<std::string, double> ms;
      for (const auto& [part, list] : samples) ms[part] = median(list);
      const double fwd = ms["fwd"], bwd = ms["delta"] + ms["dq"] + ms["dkv"];
      const auto tflops = [](double flops, double t) { return t > 0 ? flops / (t * 1e9) : 0.0; };
      fmt::print(
          "{:<20} {:<10} {:>8.3f} {:>8.3f} {:>9.1f} {:>9.1f} {:>8.3f} {:>9.1f} {:>8.3f} {:>8.3f} "
          "{:>8.3f}  {:.1f}, {:.1f}, {:.1f}\n",
          label, family, fwd, bwd, tflops(2 * unit, fwd), tflops(5 * unit, bwd), fwd + bwd,
          tflops(7 * unit, fwd + bwd), ms["delta"], ms["dq"], ms["dkv"], tflops(2 * unit, fwd),
          tflops(3 * unit, ms["dq"]), tflops(4 * unit, ms["dkv"]));
      fmt::print("{:<20} {:<10} modules: {}\n", "", "", modules);
      if (reference.empty()) {
        reference = results;
        reference_name = family;
      } else {
        const double limit = coopmat ? tolerance : fp32_tolerance;
        const char* names[] = {"out", "dq", "dk", "dv"};
        std::string line;
        bool pass = true;
        for (size_t i = 0; i < 4; ++i) {
          const double err = rel_error(results[i], reference[i]);
          pass = pass && err <= limit;
          line += fmt::format("{}{} {:.2e}", i ? ", " : "", names[i], err);
        }
        all_pass = all_pass && pass;
        ++compared;
        fmt::print("{:<20} {:<10} check vs {} (max err / max |{}|, limit {:.0e}): {}  {}\n", "", "",
                   reference_name, reference_name, limit, line, pass ? "PASS" : "FAIL");
      }
      std::fflush(stdout);
    }
    ::unsetenv("VKF_ATTENTION");
  }
  vkf::set_matmul_precision(vkf::MatmulPrecision::F32);
  detail::set_fast_attention_builds(detail::FastAttentionBuilds::Auto);
  if (compared > 0) fmt::print("\ncheck: {}\n", all_pass ? "all PASS" : "some FAIL");
  return all_pass ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
}
