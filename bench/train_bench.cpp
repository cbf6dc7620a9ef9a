// Training benchmarks of vkformer, two modes.
//
// Throughput (default): on the model shapes of bench/torch_train_bench.py, a Llama model built in
// memory (random weights), batches of random token ids, and full training steps — forward,
// causal-LM loss, backward, AdamW; with --precision f16 also the loss scaler's check and unscale
// (train/optimizer_step.h) — timed after a warm-up. Prints tokens/s, step time and peak device
// memory, as one JSON line per row (for bench/train_compare.sh) and a readable line; with
// --profile, the kernels that cost most (GPU timestamps), with achieved TFLOP/s or GB/s against
// the device's roofline. The loss is fused with the LM head (ops::linear_cross_entropy) unless
// --loss unfused; --loss both times the two in one run, and --check first compares one step's
// loss and gradients of the two paths from the same weights (PASS/FAIL by relative L2 difference).
//
//   train_bench [--shape 135m|1b|tiny] [--precision fp32|f16] [--batch 8] [--seq 1024]
//               [--steps 10] [--warmup 3] [--loss fused|unfused|both] [--check]
//               [--loss-chunk-mib 256] [--loss-group-chunks 0] [--profile [--profile-shapes]]
//               [--stage-profile [--profile-shapes]]
//               [--top 20] [--peak-tflops 67]
//               [--peak-tflops-f16 990] [--peak-gbps 4300] [--coopmat-tile auto]
//               [--split-k 0] [--stream-k 0] [--separate-projections] [--no-f16-activations]
//               [--no-gated-mlp]
//               [--coopmat-operands f16|f32] [--tile auto|medium|large]
//               [--eager] [--device N]
// Steps are recorded once and replayed (train/step_runner.h) unless --eager or --profile.
// --stage-profile times the replayed step instead, stage by stage (timestamps at the recorded
// graph's barriers, Stream::set_stage_timing): concurrent dispatches count together, and nothing
// is serialized as --profile's per-dispatch timestamps are.
//
// Loss curve (--model DIR --tokens FILE): trains a Hugging Face model folder on fixed batches read
// from a token file (int32 little-endian, consecutive [batch, seq] blocks, one per step, used in
// order), so a run can be compared step by step with another framework on the very same data
// (bench/mixed_curve.py): AdamW (betas 0.9/0.999, eps 1e-8, no decay on biases and norm weights,
// as transformers' Trainer), a warmup + schedule learning rate, clipping, and in f16 dynamic loss
// scaling with the Trainer's semantics. Writes one JSON line per step to --loss-log.
//
//   train_bench --model DIR --tokens FILE --batch B --seq T --steps N --lr X [--precision f16]
//               [--lr-scheduler-type cosine] [--lr-warmup-steps W] [--weight-decay D]
//               [--max-grad-norm C] --loss-log FILE
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "bench_models.h"
#include "core/autograd.h"
#include "core/launch.h"
#include "models/decoder.h"
#include "models/registry.h"
#include "ops/elementwise.h"
#include "ops/gated_projection.h"
#include "ops/linear_cross_entropy.h"
#include "ops/matmul_coopmat.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_tiling.h"
#include "ops/optim.h"
#include "ops/reduce.h"
#include "profile_table.h"
#include "train/causal_lm.h"
#include "train/optimizer_step.h"
#include "train/step_runner.h"
#include "train/trainer.h"
#include "vk/context.h"
#include "vk/error.h"

using namespace vkf;

namespace {

struct Args {
  std::string shape = "135m", precision = "fp32";
  int64_t batch = 8, seq = 1024;
  int steps = 10, warmup = 3, top = 20;
  bool profile = false;
  bool profile_shapes = false;
  bool stage_profile = false;
  bool replay = true;  // steps captured once and replayed (train/step_runner.h)
  double peak_tflops = 67, peak_tflops_f16 = 990, peak_gbps = 4300;
  int device = -1;
  std::string loss_path = "fused";
  bool check = false;
  uint64_t chunk_mib = 0;
  int64_t group_chunks = 0;
  std::string coopmat_tile = "auto";
  int64_t split_k = 0;
  int64_t stream_k = 0;
  bool separate_projections = false;
  bool no_f16_activations = false, no_gated_mlp = false;
  std::string coopmat_operands = "f16";
  std::string tile = "auto";
  // Loss-curve mode.
  std::string model, tokens, loss_log, schedule = "cosine";
  double lr = 6e-4, weight_decay = 0.0, max_grad_norm = 1.0;
  int64_t lr_warmup_steps = 0;
};

// Labels: the next token (the last position of each row ignored), as the shifted HF loss compares.
std::vector<int32_t> next_token_labels(const std::vector<int32_t>& ids, int64_t batch, int64_t seq) {
  std::vector<int32_t> shifted(ids.size(), -100);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t + 1 < seq; ++t)
      shifted[static_cast<size_t>(b * seq + t)] = ids[static_cast<size_t>(b * seq + t + 1)];
  return shifted;
}

// Forward, mean causal-LM loss over batch * (seq - 1) tokens (the head fused with the loss or
// not), backward seeded by `update` (the loss scale in f16), as a training step's micro-batch
// (train::backward_from_device); returns the loss sum on the device.
Tensor forward_backward(models::DecoderModel& model, const Tensor& input, const Tensor& labels, int64_t batch,
                        int64_t seq, const train::OptimizerStep& update,
                        train::HeadLoss how = train::HeadLoss::Fused) {
  const Tensor seed = Tensor::full({}, train::backward_seed_value(update, batch * (seq - 1)));
  return train::backward_from_device(model, input, {}, labels, how, nullptr, seed);
}

// One batch through the fused and the unfused loss from the same weights: the loss and every
// parameter's gradient, compared by relative L2 difference. Returns whether they agree.
bool check_fused_loss(models::DecoderModel& model, ops::AdamW& opt, const train::OptimizerStep& update,
                      const Tensor& input, const Tensor& labels, const Args& a) {
  std::vector<Tensor> grads[2];
  double losses[2];
  for (int path = 0; path < 2; ++path) {
    const train::HeadLoss how = path == 0 ? train::HeadLoss::Fused : train::HeadLoss::Unfused;
    losses[path] = forward_backward(model, input, labels, a.batch, a.seq, update, how).item();
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
  std::fprintf(stderr, "  %-40s %14.6f %14.6f %10.2e\n", "loss sum", losses[0], losses[1], loss_diff);
  for (size_t i = 0; i < pnames.size(); ++i) {
    const double x = ops::global_l2_norm({grads[0][i]}).item();
    const double y = ops::global_l2_norm({grads[1][i]}).item();
    const double d = ops::global_l2_norm({ops::sub(grads[0][i], grads[1][i])}).item() / std::max(y, 1e-30);
    if (d > worst) worst = d, worst_name = pnames[i];
    if (i == 0 || i + 1 == pnames.size() || pnames[i] == model.spec().names.lm_head)
      std::fprintf(stderr, "  grad %-35s %14.6e %14.6e %10.2e\n", pnames[i].c_str(), x, y, d);
  }
  std::fprintf(stderr, "  worst gradient: %s, rel diff %.2e\n", worst_name.c_str(), worst);
  // fp32 summation order gives ~1e-6. With f16 operands the two paths' f32 sums differ in their
  // last bits, which flips some f16 roundings of the products' operands further down the
  // backward: on the H200, 1.8e-3 in the worst 135M gradient (also with f16 operand copies off),
  // a few f16 ulps (2^-11 = 4.9e-4); a wrong gradient is off by far more. In f16 the gradients
  // carry the loss scale on both paths alike.
  const double grad_tol = matmul_precision() == MatmulPrecision::F16 ? 1e-2 : 1e-3;
  const bool ok = loss_diff < 1e-4 && worst < grad_tol;
  std::fprintf(stderr, "check: %s\n\n", ok ? "PASS" : "FAIL");
  fmt::print("{{\"tool\":\"vkformer\",\"check\":\"fused_loss\",\"shape\":\"{}\",\"loss_rel_diff\":{:.3e},"
             "\"grad_worst_rel_diff\":{:.3e},\"pass\":{}}}\n",
             a.shape, loss_diff, worst, ok);
  return ok;
}

std::optional<train::GradScalerConfig> loss_scaling(MatmulPrecision p) {
  if (p == MatmulPrecision::F16) return train::GradScalerConfig{};
  return std::nullopt;
}

int run_throughput(const Args& a, MatmulPrecision precision) {
  int64_t n_params = 0;
  models::DecoderModel model = bench::make_model(a.shape, n_params);
  const models::ArchSpec& spec = model.spec();
  model.set_requires_grad(true);
  ops::AdamW opt(model.parameters(), {1e-4, 0.9, 0.999, 1e-8, 0.0});
  train::ScheduleConfig sc;
  sc.type = "constant";
  sc.learning_rate = 1e-4;
  sc.total_steps = a.warmup + a.steps;
  const train::LrSchedule schedule(sc);
  // No clipping, as bench/torch_train_bench.py.
  train::OptimizerStep update(opt, schedule, 0.0, loss_scaling(precision));
  const int64_t batch = a.batch, seq = a.seq;
  std::vector<int32_t> ids(static_cast<size_t>(batch * seq));
  uint64_t x = 12345;
  for (auto& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(spec.vocab_size));
  }
  const Tensor input = Tensor::from_host_i32(ids, {batch, seq});
  const std::vector<int32_t> shifted = next_token_labels(ids, batch, seq);
  const Tensor labels = Tensor::from_host_i32(shifted, {batch * seq});
  const double counted = static_cast<double>(batch * (seq - 1));
  const std::vector<train::MicroBatch> micro{{batch, seq, ids, {}, shifted, batch * (seq - 1)}};
  // GPU timestamps time eager dispatches only (a replayed graph is one submission).
  const bool replay = a.replay && !a.profile;
  auto& stream = vk::stream();
  int64_t step_number = 0;
  if (a.check && !check_fused_loss(model, opt, update, input, labels, a)) return 2;
  auto& alloc = vk::Context::get().allocator();
  const auto& info = vk::Context::get().info();
  const char* pname = train::precision_name(precision);
  const char* names[] = {"fused", "unfused"};
  for (int path = 0; path < 2; ++path) {
    if (a.loss_path != "both" && a.loss_path != names[path]) continue;
    const train::HeadLoss how = path == 0 ? train::HeadLoss::Fused : train::HeadLoss::Unfused;
    // The step's figures (loss, norm, overflow flag) are read every step, as vkformer train does:
    // it bounds how far the host runs ahead of the GPU (and so the memory that freed-but-queued
    // tensors hold).
    train::StepRunner runner(model, update, how, replay);
    auto step = [&] { return runner.run(++step_number, micro, nullptr); };
    // Stage timing must be on when the warm-up captures the step; turned on again after it, it
    // drops what the warm-up's replays collected.
    const bool stage_timed = a.stage_profile && replay;
    if (stage_timed) stream.set_stage_timing(true, a.profile_shapes);
    for (int i = 0; i < a.warmup; ++i) step();
    stream.synchronize();
    if (stage_timed) stream.set_stage_timing(true, a.profile_shapes);
    alloc.reset_peak();
    vk::reset_memory_peak();
    if (a.profile) stream.set_profiling(true, a.profile_shapes);
    double loss = 0;
    int skipped = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < a.steps; ++i) {
      const train::StepOutcome out = step();
      loss = out.loss_sum / counted;
      skipped += out.skipped;
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / a.steps;
    const double tps = static_cast<double>(batch * seq) / sec;
    const double peak_gib = static_cast<double>(alloc.stats().peak_device_bytes_in_use) / (1ull << 30);
    const double live_gib = static_cast<double>(vk::memory_stats().peak_live_bytes) / (1ull << 30);
    fmt::print(
        "{{\"tool\":\"vkformer\",\"shape\":\"{}\",\"precision\":\"{}\",\"head_loss\":\"{}\","
        "\"batch\":{},"
        "\"seq\":{},\"params\":{},\"step_ms\":{:.2f},\"tokens_per_s\":{:.1f},\"peak_gib\":{:.2f},"
        "\"peak_live_gib\":{:.2f},\"loss\":{:.4f},\"skipped_steps\":{},\"replayed_steps\":{},"
        "\"graph_dispatches\":{},\"arena_gib\":{:.2f},\"device\":\"{}\"}}\n",
        a.shape, pname, names[path], batch, seq, n_params, sec * 1e3, tps, peak_gib, live_gib, loss,
        skipped, runner.replayed_steps(), runner.graph_dispatches(),
        static_cast<double>(runner.arena_bytes()) / (1ull << 30), info.name);
    std::fprintf(stderr, "%s\n", runner.summary().c_str());
    std::fprintf(stderr,
                 "vkformer %s %s %s loss params=%.1fM B=%lld T=%lld step=%.1fms tok/s=%.0f peak=%.2fGiB "
                 "(live tensors %.2fGiB) loss=%.3f\n",
                 a.shape.c_str(), pname, names[path], static_cast<double>(n_params) / 1e6,
                 static_cast<long long>(batch), static_cast<long long>(seq), sec * 1e3, tps, peak_gib, live_gib, loss);
    if (a.profile) {
      auto prof = stream.profile();
      stream.set_profiling(false);
      bench::print_profile(std::move(prof), a.steps, sec * 1e3, a.top,
                           {a.peak_tflops, a.peak_tflops_f16, a.peak_gbps});
    }
    if (stage_timed) {
      stream.synchronize();
      stream.set_stage_timing(false);
      std::fprintf(stderr, "stage profile of the replayed step (%llu replays):\n",
                   static_cast<unsigned long long>(stream.stage_timed_replays()));
      bench::print_profile(stream.stage_profile(),
                           static_cast<double>(std::max<uint64_t>(stream.stage_timed_replays(), 1)),
                           sec * 1e3, a.top, {a.peak_tflops, a.peak_tflops_f16, a.peak_gbps});
    }
  }
  return 0;
}

// The token file's batches: int32 little-endian, [count, batch, seq].
std::vector<int32_t> read_tokens(const std::string& path, int64_t batch, int64_t seq, int64_t steps) {
  std::ifstream in(path, std::ios::binary);
  VKF_REQUIRE(in, "--tokens {}: cannot open", path);
  const uint64_t bytes = std::filesystem::file_size(path);
  const uint64_t per_batch = static_cast<uint64_t>(batch * seq) * 4;
  VKF_REQUIRE(bytes % per_batch == 0,
              "--tokens {}: {} bytes is not a whole number of batches of {} x {} int32 tokens ({} bytes each); "
              "check --batch and --seq against the file",
              path, bytes, batch, seq, per_batch);
  VKF_REQUIRE(bytes / per_batch >= static_cast<uint64_t>(steps),
              "--tokens {}: {} batches of {} x {} for --steps {}", path, bytes / per_batch, batch, seq, steps);
  std::vector<int32_t> ids(static_cast<size_t>(per_batch / 4 * static_cast<uint64_t>(steps)));
  in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
  VKF_REQUIRE(in, "--tokens {}: read failed", path);
  return ids;
}

int run_loss_curve(const Args& a, MatmulPrecision precision) {
  VKF_REQUIRE(!a.loss_log.empty(), "train_bench --model: --loss-log FILE is required (per-step losses)");
  VKF_REQUIRE(a.batch > 0 && a.seq > 1 && a.steps > 0, "train_bench: --batch, --seq > 1 and --steps must be positive");
  models::DecoderModel model = models::DecoderModel::load(a.model);
  const int64_t V = model.spec().vocab_size;
  const std::vector<int32_t> ids = read_tokens(a.tokens, a.batch, a.seq, a.steps);
  for (size_t i = 0; i < ids.size(); ++i)
    VKF_REQUIRE(ids[i] >= 0 && ids[i] < V, "--tokens {}: token {} at position {} is outside the vocabulary [0, {})",
                a.tokens, ids[i], i, V);
  model.set_requires_grad(true);
  std::vector<double> wd;
  for (const auto& n : model.parameter_names()) wd.push_back(train::decays(n) ? a.weight_decay : 0.0);
  ops::AdamW opt(model.parameters(), {a.lr, 0.9, 0.999, 1e-8, a.weight_decay}, wd);
  train::ScheduleConfig sc;
  sc.type = a.schedule;
  sc.learning_rate = a.lr;
  sc.total_steps = a.steps;
  sc.warmup_steps = a.lr_warmup_steps;
  const train::LrSchedule schedule(sc);
  train::OptimizerStep update(opt, schedule, a.max_grad_norm, loss_scaling(precision));
  train::StepRunner runner(model, update, train::HeadLoss::Fused, a.replay);
  std::ofstream log(a.loss_log, std::ios::trunc);
  VKF_REQUIRE(log, "--loss-log {}: cannot write", a.loss_log);
  const size_t per_batch = static_cast<size_t>(a.batch * a.seq);
  const double counted = static_cast<double>(a.batch * (a.seq - 1));
  int64_t skipped = 0;
  double loss = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= a.steps; ++step) {
    const std::vector<int32_t> batch_ids(ids.begin() + static_cast<std::ptrdiff_t>((step - 1) * per_batch),
                                         ids.begin() + static_cast<std::ptrdiff_t>(step * per_batch));
    const std::vector<train::MicroBatch> micro{{a.batch,
                                                a.seq,
                                                batch_ids,
                                                {},
                                                next_token_labels(batch_ids, a.batch, a.seq),
                                                a.batch * (a.seq - 1)}};
    const train::StepOutcome out = runner.run(step, micro, nullptr);
    loss = out.loss_sum / counted;
    skipped += out.skipped;
    nlohmann::json line{{"step", step}, {"loss", loss}, {"lr", out.lr}, {"grad_norm", out.grad_norm}};
    if (precision == MatmulPrecision::F16) line.update({{"loss_scale", out.loss_scale}, {"skipped", out.skipped}});
    log << line.dump() << "\n";
    if (step == 1 || step % 50 == 0 || step == a.steps) {
      std::fprintf(stderr, "step %lld/%d loss %.4f lr %.3e grad_norm %.3f%s\n", static_cast<long long>(step),
                   a.steps, loss, out.lr, out.grad_norm,
                   precision == MatmulPrecision::F16
                       ? fmt::format(" loss_scale {:g} skipped {}", out.loss_scale, skipped).c_str()
                       : "");
    }
  }
  log.flush();
  VKF_REQUIRE(log, "--loss-log {}: write failed", a.loss_log);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "%s\n", runner.summary().c_str());
  fmt::print("{{\"tool\":\"vkformer\",\"mode\":\"loss_curve\",\"precision\":\"{}\",\"steps\":{},\"final_loss\":{:.5f},"
             "\"skipped_steps\":{},\"seconds\":{:.1f},\"device\":\"{}\"}}\n",
             train::precision_name(precision), a.steps, loss, skipped, sec, vk::Context::get().info().name);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("vkformer training benchmarks: throughput on fixed shapes, or a loss curve on a token file");
  Args a;
  app.add_option("--shape", a.shape, "135m, 1b or tiny (throughput mode)")->capture_default_str();
  app.add_option("--precision", a.precision, "fp32 or f16 (mixed precision with dynamic loss scaling)")
      ->capture_default_str();
  app.add_option("--batch", a.batch, "sequences per step")->capture_default_str();
  app.add_option("--seq", a.seq, "tokens per sequence")->capture_default_str();
  app.add_option("--steps", a.steps, "timed steps (loss-curve mode: steps to train)")->capture_default_str();
  app.add_option("--warmup", a.warmup, "untimed steps first (throughput mode)")->capture_default_str();
  app.add_option("--loss", a.loss_path, "fused (the head fused with the loss), unfused or both")
      ->check(CLI::IsMember({"fused", "unfused", "both"}))
      ->capture_default_str();
  app.add_flag("--check", a.check, "compare one step's loss and gradients of the fused and unfused loss first");
  app.add_option("--loss-chunk-mib", a.chunk_mib,
                 "fused loss: logits chunk budget in MiB (0: the default, a 64th of the device's "
                 "memory within 256-1024)");
  app.add_option("--loss-group-chunks", a.group_chunks,
                 "fused loss in f16: chunks per gradient group (0: by rule, 1: per chunk)");
  app.add_flag("--profile", a.profile,
               "per-kernel GPU time of the timed steps (eager steps: a replay is not timed)");
  app.add_flag("--replay,!--eager", a.replay,
               "steps recorded once and replayed (the default, as vkformer train), or --eager: "
               "recorded every step")
      ->capture_default_str();
  app.add_flag("--profile-shapes", a.profile_shapes,
               "with --profile: list products per shape and layout (kernel MxNxK ab)");
  app.add_flag("--stage-profile", a.stage_profile,
               "GPU time of the replayed step per dependent stage (timestamps at its barriers)");
  app.add_option("--top", a.top, "kernels listed by --profile")->capture_default_str();
  app.add_option("--peak-tflops", a.peak_tflops, "roofline: the device's fp32 peak (H200: 67)")->capture_default_str();
  app.add_option("--peak-tflops-f16", a.peak_tflops_f16,
                 "roofline of the tensor-core (f16) products: the device's dense f16 peak (H200: 990)")
      ->capture_default_str();
  app.add_option("--peak-gbps", a.peak_gbps, "roofline: the device's memory bandwidth in GB/s")->capture_default_str();
  app.add_flag("--separate-projections", a.separate_projections,
               "q, k, v and gate, up as separate products (default: one product each)");
  app.add_flag("--no-f16-activations", a.no_f16_activations,
               "mixed precision: the gated MLP's activation and gate/up gradient stored in f32 "
               "and converted by each product that reads them, as the composed ops do (default: "
               "in f16, by ops::gated_mlp and ops::gated_projection; the same bits; "
               "VKF_F16_ACTIVATIONS=0 does the same)");
  app.add_flag("--no-gated-mlp", a.no_gated_mlp,
               "the gated projection alone (ops::gated_projection after grouped gate/up "
               "products; the gate/up gradient in f32), not ops::gated_mlp");
  app.add_option("--stream-k", a.stream_k,
                 "stream-K products of the fp32 tiled kernel: 0 by rule, -1 never, N workers forced");
  app.add_option("--split-k", a.split_k, "K-splitting of products: 0 by heuristic, -1 never, N forced")
      ->capture_default_str();
  app.add_option("--device", a.device, "Vulkan device index");
  app.add_option("--coopmat-tile", a.coopmat_tile,
                 "f16 products on tensor cores: auto (tile by shape), off, or one tile for every product "
                 "(e.g. 128x128x16/64x64; matmul_bench lists them)")
      ->capture_default_str();
  app.add_option("--tile", a.tile, "tile of the fp32 tiled kernel: auto (by shape) or forced")
      ->check(CLI::IsMember({"auto", "medium", "large"}))
      ->capture_default_str();
  app.add_option("--coopmat-operands", a.coopmat_operands,
                 "tensor-core products: f16 (whole-tensor f32 operands converted once per product) "
                 "or f32 (converted as each tile is staged)")
      ->check(CLI::IsMember({"f16", "f32"}))
      ->capture_default_str();
  app.add_option("--model", a.model, "loss-curve mode: Hugging Face model folder to train");
  app.add_option("--tokens", a.tokens, "loss-curve mode: int32 token file of [steps, batch, seq] batches");
  app.add_option("--loss-log", a.loss_log, "loss-curve mode: per-step JSON lines written here");
  app.add_option("--lr", a.lr, "loss-curve mode: peak learning rate")->capture_default_str();
  app.add_option("--lr-scheduler-type", a.schedule, "loss-curve mode: constant, linear, cosine, ...")->capture_default_str();
  app.add_option("--lr-warmup-steps", a.lr_warmup_steps, "loss-curve mode: linear warmup steps")->capture_default_str();
  app.add_option("--weight-decay", a.weight_decay, "loss-curve mode: AdamW weight decay (not on biases and norms)")
      ->capture_default_str();
  app.add_option("--max-grad-norm", a.max_grad_norm, "loss-curve mode: gradient clipping (<= 0: off)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (a.device >= 0) vk::Context::select_device(a.device);
    set_math_mode(MathMode::Fast);
    const MatmulPrecision precision = train::parse_precision(a.precision, "--precision");
    set_matmul_precision(precision);
    ops::set_linear_cross_entropy_chunk_bytes(a.chunk_mib << 20);
    ops::set_linear_cross_entropy_group_chunks(a.group_chunks);
    ops::detail::set_coopmat_choice(a.coopmat_tile);
    ops::detail::set_split_k(a.split_k);
    ops::detail::set_stream_k(a.stream_k);
    models::DecoderModel::set_projection_grouping(!a.separate_projections);
    if (a.no_f16_activations) ops::set_gated_projection(false);
    if (a.no_f16_activations || a.no_gated_mlp) ops::set_gated_mlp(false);
    ops::detail::set_coopmat_f16_operands(a.coopmat_operands == "f16");
    using ops::detail::TileChoice;
    ops::detail::set_tile_choice(a.tile == "medium"  ? TileChoice::Medium
                                 : a.tile == "large" ? TileChoice::Large
                                                     : TileChoice::Auto);
    if (!a.model.empty() || !a.tokens.empty()) {
      VKF_REQUIRE(!a.model.empty() && !a.tokens.empty(), "train_bench: the loss-curve mode needs both --model and --tokens");
      return run_loss_curve(a, precision);
    }
    return run_throughput(a, precision);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_bench: error: %s\n", e.what());
    return 1;
  }
}
