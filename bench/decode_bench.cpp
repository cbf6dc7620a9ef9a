// Generation throughput of vkformer: greedy decoding with the KV cache (vkf::infer::generate) on
// the model shapes of bench/bench_models.h, for each weight dtype (f32, f16), decode mode
// (replay: the decode step recorded once and replayed; eager: the same step recorded anew each
// token; generic: the general forward pass per token) and batch size; greedy tokens are chosen on
// the device unless --host-argmax reads the logits back instead. Decode tokens/s counts the
// tokens after the first of each row (the first comes from the prefill), over the time between the
// first and the last token callback; ms_per_step_minus_prefill times it as torch_decode_bench.py
// times transformers (the whole generate minus a generate of one token), which also counts the
// decode's one-time work before the first token. The memory roofline at batch 1 reads every weight
// byte once per token at --gbps. It also checks correctness in the same run: the tokens of every
// mode are compared with those of the first mode of the same dtype (replay and eager run the same
// kernels, so they must agree exactly), and f16 tokens with f32 ones (random weights make
// near-ties, so this is a rate, not a gate). One JSON line per run, then a table.
//
//   decode_bench [--shape 1b|135m|tiny] [--dtype f32,f16] [--modes replay,eager,generic]
//                [--no-replay] [--host-argmax] [--prompt 32] [--new 64] [--batch 1,8] [--gbps 4300]
//                [--profile [--profile-shapes]] [--stage-profile] [--top 20]
//                [--skinny-rows 0|1|2|4]
//                [--skinny-groups N] [--skinny-shared-tree] [--skinny-k-split 0|1|2|4|8]
//                [--skinny-unstaged] [--skinny-full-rounds] [--head-norm-separate]
//                [--argmax-separate] [--argmax-fold-pass] [--embedding-pass]
//                [--skinny-early-epilogue] [--skinny-uniform-loops -1]
//                [--stage-chain | --stage-barriers] [--chain-coherent] [--chain-rows 1]
//                [--attention-unchained] [--attn-uniform-loops -1]
//                [--norm-fold-rows 1..8] [--attn-keys 0..8]
//                [--warmup-ms 0] [--stage-floor N] [--stage-stream N]
// --warmup-ms keeps decoding (untimed) that long before each timed run, so that the GPU's clocks
// have ramped up (measured on the H200: the usual single warm-up run already suffices).
// --stage-floor N only times N dependent one-dispatch stages in a replayed graph: what each of a
// decode step's dependent stages costs before any work (see print_stage_floor). --stage-stream N
// times N dependent stages that only stream weights, by how the weights are allocated: the floor
// under a decode product of that size; and what 64-bit atomic sums add to it (see
// print_stage_stream).
// --profile lists the decode steps' kernels by GPU time (eager mode only: timestamps go around each
// dispatch as it is recorded, so the replayed graph is not profiled; eager runs the same kernels).
// --stage-profile splits the replayed step's GPU time into its dependent stages instead (a
// timestamp at each of the graph's barriers: the stages as replay runs them, concurrent
// dispatches within a stage together), with --profile-shapes naming products by shape.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "bench_models.h"
#include "bench_util.h"
#include "core/launch.h"
#include "infer/decode_step.h"  // kMaxRunSteps, decode_host_times
#include "infer/generate.h"
#include "ops/decode.h"
#include "ops/elementwise.h"
#include "ops/matmul_kernels.h"
#include "profile_table.h"
#include "vk/context.h"

using namespace vkf;

namespace {

infer::DecodeMode parse_mode(const std::string& m) {
  if (m == "replay") return infer::DecodeMode::Replay;
  if (m == "eager") return infer::DecodeMode::Eager;
  if (m == "generic") return infer::DecodeMode::Generic;
  throw Error(fmt::format("--modes: '{}' is not replay, eager or generic", m));
}

struct Result {
  std::string dtype, mode;
  int64_t batch = 0;
  double tps = 0, ms = 0, roofline = 0, dispatches = 0;
  double ms_minus_prefill = 0;  // transformers' timing (see main)
  std::string check;
};

// Fraction of generated tokens equal at the same place (rows compared up to the shorter length).
double agreement(const std::vector<std::vector<int32_t>>& a,
                 const std::vector<std::vector<int32_t>>& b) {
  size_t same = 0, total = 0;
  for (size_t r = 0; r < std::min(a.size(), b.size()); ++r) {
    const size_t n = std::max(a[r].size(), b[r].size());
    total += n;
    for (size_t i = 0; i < std::min(a[r].size(), b[r].size()); ++i) same += a[r][i] == b[r][i];
  }
  return total ? static_cast<double>(same) / static_cast<double>(total) : 1.0;
}

// What one dependent stage costs on this device: the floor under a recorded decode step, whose
// stages (about 7 per layer) each wait for the previous one to finish. A captured graph of `n`
// in-place additions into one tensor (each reads what the previous one wrote, so a barrier
// separates every pair) is replayed; the wall time of a replay over n, the median of 7. Once with
// a tensor small enough for one workgroup, once with enough elements for every compute unit.
void print_stage_floor(int n) {
  auto& stream = vk::Context::get().stream();
  for (const int64_t elements : {int64_t{256}, int64_t{1} << 20}) {
    const Tensor dst = Tensor::zeros({elements}), src = Tensor::zeros({elements});
    ops::add_(dst, src);  // creates the pipeline outside the capture
    stream.synchronize();
    stream.begin_capture();
    for (int i = 0; i < n; ++i) ops::add_(dst, src);
    const auto graph = stream.end_capture();
    fmt::print(
        "stage floor: {:.2f} us per dependent dispatch ({} f32 elements per addition; "
        "median of 7 replays of {})\n",
        bench::median_replay_us(stream, *graph, 7) / n, elements, n);
  }
}

// How fast dependent stages stream weights, by how the weights are allocated: a replayed graph of
// n stages of stage_stream.comp, each reading `groups` x 32 KiB of weights, cycling over
// `distinct` weight sets that are either tensors of their own (as a model's weights) or
// consecutive ranges of one tensor of at least `one_bytes`; then, over tensors of their own and
// where the device has 64-bit buffer atomics, the same stages with every workgroup adding into
// 2048 shared 64-bit sums (stage_stream_atomics: what fixed-point split-K sums would cost).
// Median of 7 replays.
void print_stage_stream(int n, double warm_ms) {
  auto& stream = vk::Context::get().stream();
  struct Push {
    uint64_t weights, act_in, act_out, sink, sums;
  };
  constexpr int64_t kGroupBytes = 8 * 256 * 16;
  const Tensor act[2] = {Tensor::zeros({256}), Tensor::zeros({256})};
  const Tensor sink = Tensor::zeros({256}, DType::I32);
  const Tensor sums = Tensor::zeros({2 * 2048}, DType::I32);                   // int64 [2048]
  std::vector<std::pair<bool, uint32_t>> rows{{false, 264u}, {false, 1056u}};  // atomics, groups
  if (vk::Context::get().info().int64_atomics) {
    rows.insert(rows.end(), {{true, 264u}, {true, 1056u}});
  } else {
    fmt::print("stage stream: this device has no 64-bit buffer atomics; no atomics rows\n");
  }
  for (const auto& [atomics, groups] : rows) {
    const int64_t stage_bytes = groups * kGroupBytes;
    std::vector<int> set_counts{std::min(16, n)};
    if (n > 16 && !atomics) set_counts.push_back(n);
    for (const int distinct : set_counts) {
      const int64_t sets_bytes = distinct * stage_bytes;
      std::vector<int64_t> layouts{0};  // 0: tensors of their own
      if (!atomics) layouts = {0, sets_bytes, std::max(sets_bytes, int64_t{5} << 30)};
      for (const int64_t one_bytes : layouts) {
        // random bits: no compression of uniform data can help
        std::vector<Tensor> sets;
        std::vector<uint64_t> address;
        if (one_bytes == 0) {
          for (int i = 0; i < distinct; ++i) {
            sets.push_back(Tensor::from_host(bench::random_values(stage_bytes / 4, groups + i),
                                             {stage_bytes / 4}));
            address.push_back(sets.back().address());
          }
        } else {
          sets.push_back(Tensor::zeros({one_bytes / 4}));
          for (int i = 0; i < distinct; ++i) {
            const Tensor part = sets[0].slice(0, i * stage_bytes / 4, (i + 1) * stage_bytes / 4);
            part.copy_(Tensor::from_host(bench::random_values(stage_bytes / 4, groups + i),
                                         {stage_bytes / 4}));
            address.push_back(part.address());
          }
        }
        stream.synchronize();
        stream.begin_capture();
        stream.fill(act[0].allocation(), static_cast<uint64_t>(act[0].offset()) * 4, 256 * 4, 0);
        for (int i = 0; i < n; ++i) {
          const Tensor &in = act[i % 2], &out = act[(i + 1) % 2];
          const Tensor& w = sets[one_bytes == 0 ? i % distinct : 0];
          const Push push{address[i % distinct], in.address(), out.address(), sink.address(),
                          sums.address()};
          launch_raw(atomics ? "stage_stream_atomics" : "stage_stream", {}, &push, sizeof(push),
                     {groups, 1, 1}, {&w, &in}, {&out, &sink, &sums},
                     {0, static_cast<double>(stage_bytes)});
        }
        const auto graph = stream.end_capture();
        if (warm_ms > 0) bench::warm_clocks(stream, *graph, warm_ms);
        const double us = bench::median_replay_us(stream, *graph, 7);
        const std::vector<float> out = act[n % 2].to_float();
        const bool ok = std::all_of(out.begin(), out.end(), [&](float v) { return v == n; });
        fmt::print(
            "stage stream: {:.2f} us per stage of {} workgroups ({:.1f} MB, {:.0f} GB/s), {} "
            "stages over {} weight sets ({:.2f} GB) in {}{}{}\n",
            us / n, groups, stage_bytes / 1e6, stage_bytes * n / us / 1e3, n, distinct,
            distinct * stage_bytes / 1e9,
            one_bytes == 0 ? std::string("tensors of their own")
                           : fmt::format("one tensor of {:.2f} GB", one_bytes / 1e9),
            atomics ? ", 2048 int64 atomic additions per workgroup" : "",
            ok ? "" : "; WRONG outputs");
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("vkformer generation throughput on fixed model shapes");
  std::string shape = "1b", batches = "1,8", dtypes = "f32,f16", modes = "replay,eager,generic";
  int64_t prompt_len = 32, new_tokens = 64;
  double gbps = 4300;
  int device = -1;
  bool no_replay = false, host_argmax = false;
  app.add_option("--shape", shape, "1b, 135m or tiny")->capture_default_str();
  app.add_option("--dtype", dtypes, "weight matrix dtypes, comma separated: f32, f16")
      ->capture_default_str();
  app.add_option("--modes", modes, "decode modes, comma separated: replay, eager, generic")
      ->capture_default_str();
  app.add_flag("--no-replay", no_replay, "drop the replay mode from --modes");
  app.add_flag("--host-argmax", host_argmax,
               "read the logits back and pick tokens on the host (the old path)");
  app.add_option("--prompt", prompt_len, "prompt tokens")->capture_default_str();
  app.add_option("--new", new_tokens, "tokens generated per row")->capture_default_str();
  app.add_option("--batch", batches, "batch sizes, comma separated")->capture_default_str();
  app.add_option("--gbps", gbps, "memory bandwidth for the roofline (H200: 4300)")
      ->capture_default_str();
  app.add_option("--device", device, "Vulkan device index");
  bool profile = false;
  int top = 20;
  app.add_flag("--profile", profile, "per-kernel GPU time of the eager mode's decode steps");
  app.add_option("--top", top, "kernels listed by --profile")->capture_default_str();
  bool stage_profile = false, gpu_time = false;
  app.add_flag("--stage-profile", stage_profile,
               "GPU time of the replayed decode step per dependent stage (timestamps at barriers)");
  bool profile_shapes = false;
  app.add_flag("--gpu-time", gpu_time,
               "the replay's GPU time per step (two timestamps per replay: first command to "
               "last), beside its wall time")
      ->excludes("--stage-profile");
  int64_t steps_per_submission = infer::GenerationConfig{}.steps_per_submission;
  app.add_option("--steps-per-submission", steps_per_submission,
                 "greedy decode steps submitted at once (1: each step on its own)")
      ->check(CLI::Range(int64_t{1}, infer::DecodeStepRunner::kMaxRunSteps))
      ->capture_default_str();
  app.add_flag("--profile-shapes", profile_shapes,
               "with --profile: list products per shape (M x N x K) instead of per kernel");
  uint32_t skinny_rows = 0;
  app.add_option("--skinny-rows", skinny_rows,
                 "weight rows per thread of the skinny f16 products: 0 (by shape), 1, 2 or 4")
      ->check(CLI::IsMember({0, 1, 2, 4}))
      ->capture_default_str();
  int skinny_groups = -1;
  app.add_option("--skinny-groups", skinny_groups,
                 "most workgroups of a skinny f16 product (0: one per block of weight rows; "
                 "-1: four per multiprocessor where the device reports them)")
      ->check(CLI::Range(-1, 1 << 20))
      ->capture_default_str();
  int norm_fold_rows = 1;
  app.add_option("--norm-fold-rows", norm_fold_rows,
                 "most activation rows whose RMSNorm folds into the next products (1 to 8)")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  int attn_keys = 0;
  app.add_option("--attn-keys", attn_keys,
                 "keys per lane group and pass of the one-query attention (0: the rule, 1 to 8)")
      ->check(CLI::Range(0, 8))
      ->capture_default_str();
  bool shared_tree = false;
  app.add_flag("--skinny-shared-tree", shared_tree,
               "skinny f16 products: the shared-memory trees even where subgroup shuffles could "
               "end them");
  bool unstaged = false;
  app.add_flag("--skinny-unstaged", unstaged,
               "skinny f16 products with a folded norm: normalize activations per weight row "
               "instead of staging the normalized row in shared memory");
  uint32_t k_split = 0;
  app.add_option("--skinny-k-split", k_split,
                 "groups of 32 threads sharing one weight row of the plain skinny f16 products "
                 "(one row per thread): 0 (by shape), 1, 2, 4 or 8")
      ->check(CLI::IsMember({0, 1, 2, 4, 8}))
      ->capture_default_str();
  bool full_rounds = false;
  app.add_flag("--skinny-full-rounds", full_rounds,
               "skinny f16 products of one plain activation row: K split by whole rounds of "
               "loads only (no half-round slices at two weight rows per thread)");
  // Loops that run as often in every invocation (1), the plain loops (0) or the rule (-1).
  auto add_loops_option = [&app](const char* name, int& mode, const std::string& what,
                                 const std::string& rule) {
    app.add_option(name, mode,
                   what +
                       ": loops as often in every invocation (1), the plain loops (0) or the "
                       "rule (-1: " +
                       rule + ")")
        ->check(CLI::Range(-1, 1))
        ->capture_default_str();
  };
  int uniform_loops = -1, attn_uniform_loops = -1;
  add_loops_option("--skinny-uniform-loops", uniform_loops, "skinny f16 products",
                   "one activation row, or where lavapipe runs the memory-model builds");
  add_loops_option("--attn-uniform-loops", attn_uniform_loops,
                   "the one-query attention (its shared-memory loops)",
                   "only where lavapipe runs the memory-model builds");
  bool early_epilogue = false;
  app.add_flag("--skinny-early-epilogue", early_epilogue,
               "skinny f16 products of one activation row: read the old output values and the "
               "bias before the main loop instead of in the epilogue");
  bool argmax_fold_pass = false;
  app.add_flag("--argmax-fold-pass", argmax_fold_pass,
               "batch 1: fold the head's greedy choice in argmax_rows' final pass after the head "
               "instead of inside the head's dispatch (ops::set_argmax_fold_in_product(false))");
  bool embedding_pass = false;
  app.add_flag("--embedding-pass", embedding_pass,
               "batch 1: embed the step's token in a dispatch of its own instead of in the first "
               "products (ops::set_embedding_fold(false))");
  bool eager_first_step = false;
  app.add_flag("--eager-first-step", eager_first_step,
               "replay mode: run the first decode step eagerly and capture the step while the "
               "GPU runs it, instead of capturing it during the prefill "
               "(infer::set_decode_capture_during_prefill(false))");
  bool stage_chain = false, stage_barriers = false;
  app.add_flag(
      "--stage-chain", stage_chain,
      "replayed steps chain their product stages on device counters instead of pipeline "
      "barriers (vk::Stream::set_stage_chaining; off by default unless VKF_STAGE_CHAIN=1)");
  app.add_flag("--stage-barriers", stage_barriers,
               "replayed steps keep a pipeline barrier between all dependent stages (no chaining)")
      ->excludes("--stage-chain");
  bool attention_unchained = false;
  app.add_flag("--attention-unchained", attention_unchained,
               "with chained stages: the one-query attention keeps its barriers (only the "
               "products chain)");
  int chain_rows = 1;
  app.add_option("--chain-rows", chain_rows,
                 "with chained stages: the largest batch whose products and attention chain "
                 "(larger ones keep their barriers; set_chain_max_rows)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  bool chain_coherent = false;
  app.add_flag("--chain-coherent", chain_coherent,
               "with --stage-chain: the chained kernels' legacy-memory-model builds (coherent "
               "reads of other stages' outputs) instead of their Vulkan-memory-model builds");
  bool head_norm_separate = false;
  app.add_flag("--head-norm-separate", head_norm_separate,
               "run the final RMSNorm as its own dispatch instead of folding it into the head");
  bool argmax_separate = false;
  app.add_flag("--argmax-separate", argmax_separate,
               "greedy tokens by argmax_rows over the logits instead of from the head's product");
  int stage_floor = 0;
  app.add_option("--stage-floor", stage_floor,
                 "only time N dependent in-place additions in a replayed graph: the cost of one "
                 "dependent stage (e.g. 512)")
      ->check(CLI::Range(0, 100000));
  double warmup_ms = 0;
  app.add_option("--warmup-ms", warmup_ms,
                 "keep the GPU busy this long before each timed run, so that its clocks have "
                 "ramped up (untimed decoding; --stage-stream: replays)")
      ->capture_default_str();
  int stage_stream = 0;
  app.add_option("--stage-stream", stage_stream,
                 "only time N dependent weight-streaming stages over weight sets of different "
                 "total sizes (e.g. 64)")
      ->check(CLI::Range(0, 4096));
  CLI11_PARSE(app, argc, argv);
  try {
    if (device >= 0) vk::Context::select_device(device);
    set_math_mode(MathMode::Fast);
    ops::detail::set_skinny_f16_rows_per_thread(skinny_rows);
    ops::detail::set_skinny_f16_shuffle_tree(!shared_tree);
    ops::detail::set_skinny_f16_k_split(k_split);
    ops::detail::set_skinny_f16_stage_normed(!unstaged);
    ops::detail::set_skinny_f16_half_round_split(!full_rounds);
    ops::detail::set_skinny_f16_early_epilogue(early_epilogue);
    ops::detail::set_skinny_f16_uniform_loops(uniform_loops);
    if (stage_chain || stage_barriers) vk::Context::get().stream().set_stage_chaining(stage_chain);
    infer::set_decode_capture_during_prefill(!eager_first_step);
    ops::set_argmax_fold_in_product(!argmax_fold_pass);
    ops::set_embedding_fold(!embedding_pass);
    set_vmm_chaining(!chain_coherent);
    set_chain_max_rows(chain_rows);
    ops::detail::set_decode_attention_chaining(!attention_unchained);
    ops::detail::set_decode_attention_uniform_loops(attn_uniform_loops);
    models::DecoderModel::set_decode_head_norm_fold(!head_norm_separate);
    models::DecoderModel::set_decode_head_argmax_fold(!argmax_separate);
    ops::set_norm_fold_rows(norm_fold_rows);
    ops::detail::set_decode_keys_per_lane_group(attn_keys);
    if (skinny_groups >= 0)
      ops::detail::set_skinny_f16_max_groups(static_cast<uint32_t>(skinny_groups));
    if (stage_floor > 0) {
      print_stage_floor(stage_floor);
      return 0;
    }
    if (stage_stream > 0) {
      print_stage_stream(stage_stream, warmup_ms);
      return 0;
    }
    std::vector<std::string> dtype_list = bench::split_list(dtypes);
    std::vector<std::string> mode_list = bench::split_list(modes);
    for (const auto& d : dtype_list)
      if (d != "f32" && d != "f16") throw Error(fmt::format("--dtype: '{}' is not f32 or f16", d));
    // f32 runs first: the model is built in f32 and converted to f16 in place afterwards.
    std::stable_sort(dtype_list.begin(), dtype_list.end(),
                     [](const auto& a, const auto& b) { return a == "f32" && b != "f32"; });
    dtype_list.erase(std::unique(dtype_list.begin(), dtype_list.end()), dtype_list.end());
    if (no_replay)
      mode_list.erase(std::remove(mode_list.begin(), mode_list.end(), "replay"), mode_list.end());
    if (dtype_list.empty() || mode_list.empty())
      throw Error("nothing to run: give --dtype and --modes");
    for (const auto& m : mode_list) parse_mode(m);
    VKF_REQUIRE(new_tokens >= 2, "--new must be at least 2 (decode steps follow the first token)");

    int64_t params = 0;
    models::DecoderModel model = bench::make_model(shape, params);
    // Weight bytes per token at batch 1: matrices in the dtype, vectors (norms) in f32.
    int64_t vector_params = 0;
    for (const auto& [name, s] : models::DecoderModel::parameter_shapes(model.spec()))
      if (s.size() == 1) vector_params += shape_numel(s);
    std::vector<Result> results;
    // "dtype/batch" -> the tokens of the first mode run
    std::map<std::string, std::vector<std::vector<int32_t>>> reference;
    std::map<int64_t, std::vector<std::vector<int32_t>>> f32_tokens;
    for (const auto& dtype : dtype_list) {
      if (dtype == "f16") model.convert_matrices(DType::F16);
      const double bytes =
          static_cast<double>(params - vector_params) * (dtype == "f16" ? 2.0 : 4.0) +
          4.0 * static_cast<double>(vector_params);
      const double roofline = gbps * 1e9 / bytes;
      for (const auto& batch_item : bench::split_list(batches)) {
        const int64_t batch = std::stoll(batch_item);
        std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch));
        for (int64_t r = 0; r < batch; ++r)
          for (int64_t t = 0; t < prompt_len; ++t)
            prompts[static_cast<size_t>(r)].push_back(
                static_cast<int32_t>((r * 7919 + t * 104729) % model.spec().vocab_size));
        for (const auto& mode : mode_list) {
          infer::GenerationConfig cfg;
          cfg.max_new_tokens = new_tokens;
          cfg.decode_mode = parse_mode(mode);
          cfg.device_argmax = !host_argmax;
          cfg.steps_per_submission = steps_per_submission;
          auto& stream = vk::Context::get().stream();
          bool profiling = false;
          double whole_s = 0;  // the last run's whole generate call
          auto run = [&](double& decode_s, int64_t& decoded, uint64_t& dispatches) {
            using clock = std::chrono::steady_clock;
            const auto called = clock::now();
            clock::time_point first, last;
            int64_t count = 0;
            bool started = false;
            uint64_t d0 = 0;
            auto out = infer::generate(model, prompts, cfg, [&](size_t, int32_t) {
              const auto now = clock::now();
              if (!started) {
                started = true, first = now, d0 = stream.dispatch_count();
                // From the first token on: the decode steps, not the prefill.
                if (profiling) stream.set_profiling(true, profile_shapes);
              }
              last = now;
              ++count;
            });
            whole_s = std::chrono::duration<double>(clock::now() - called).count();
            decode_s = std::chrono::duration<double>(last - first).count();
            decoded = count - batch;  // tokens after each row's first
            dispatches = stream.dispatch_count() - d0;
            return out;
          };
          // transformers' timing (torch_decode_bench.py): a whole generate minus the best of two
          // generates of one new token (the prefill), so that the decode's one-time work counts
          // wherever it sits (before the first token or after it).
          auto minus_prefill_ms = [&] {
            infer::GenerationConfig one = cfg;
            one.max_new_tokens = 1;
            double prefill_s = 1e30;
            for (int i = 0; i < 2; ++i) {
              const auto t0 = std::chrono::steady_clock::now();
              infer::generate(model, prompts, one);
              prefill_s = std::min(
                  prefill_s,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            }
            return 1e3 * (whole_s - prefill_s) / static_cast<double>(new_tokens - 1);
          };
          double s = 0;
          int64_t n = 0;
          uint64_t dispatches = 0;
          // Warm-up: pipelines, caches, and (--warmup-ms) the GPU's clocks.
          const auto warm_start = std::chrono::steady_clock::now();
          do {
            run(s, n, dispatches);
          } while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                             warm_start)
                       .count() < warmup_ms);
          profiling = profile && mode == "eager";
          const bool stage_timed = (stage_profile || gpu_time) && mode == "replay";
          if (stage_timed) stream.set_stage_timing(true, profile_shapes, gpu_time);
          infer::decode_host_times() = {};
          const auto tokens = run(s, n, dispatches);
          if (gpu_time) {
            const infer::DecodeHostTimes& h = infer::decode_host_times();
            if (h.steps > 0)
              std::fprintf(stderr,
                           "host per replayed step: submit %.4f ms, wait %.4f ms (%lld steps in "
                           "%lld submissions); once: first step %.3f ms, capture %.3f ms\n",
                           1e3 * h.submit_s / h.steps, 1e3 * h.wait_s / h.steps,
                           static_cast<long long>(h.steps), static_cast<long long>(h.runs),
                           1e3 * h.eager_s, 1e3 * h.capture_s);
          }
          if (stage_timed) {
            stream.set_stage_timing(false);
            std::fprintf(stderr, "stage profile: %s weights, replay, batch %lld (%llu replays)\n",
                         dtype.c_str(), static_cast<long long>(batch),
                         static_cast<unsigned long long>(stream.stage_timed_replays()));
            bench::print_profile(
                stream.stage_profile(), static_cast<double>(stream.stage_timed_replays()),
                1e3 * s / static_cast<double>(new_tokens - 1), top, {67, 990, gbps});
          }
          if (profiling) {
            auto prof = stream.profile();
            stream.set_profiling(false);
            profiling = false;
            std::fprintf(stderr, "profile: %s weights, eager, batch %lld\n", dtype.c_str(),
                         static_cast<long long>(batch));
            bench::print_profile(std::move(prof), static_cast<double>(new_tokens - 1),
                                 1e3 * s / static_cast<double>(new_tokens - 1), top,
                                 {67, 990, gbps});
          }
          Result r;
          r.dtype = dtype;
          r.mode = mode;
          r.batch = batch;
          r.tps = s > 0 ? static_cast<double>(n) / s : 0;
          r.ms = 1e3 * s / static_cast<double>(new_tokens - 1);
          r.roofline = roofline;
          r.dispatches = static_cast<double>(dispatches) / static_cast<double>(new_tokens - 1);
          r.ms_minus_prefill = minus_prefill_ms();  // of the timed run's whole_s
          const std::string key = dtype + "/" + batch_item;
          if (!reference.contains(key)) {
            reference[key] = tokens;
            r.check = "reference";
          } else {
            const double same = agreement(tokens, reference[key]);
            // replay and eager run the same kernels: any difference is a bug.
            const bool exact_pair = (mode == "replay" || mode == "eager") &&
                                    (mode_list.front() == "replay" || mode_list.front() == "eager");
            r.check =
                fmt::format("{:.1f}% = {}{}", 100 * same, mode_list.front(),
                            exact_pair ? (same == 1.0 ? " (exact: ok)" : " (exact: FAIL)") : "");
          }
          if (dtype == "f32" && !f32_tokens.contains(batch)) f32_tokens[batch] = tokens;
          if (dtype == "f16" && f32_tokens.contains(batch))
            r.check += fmt::format(", {:.1f}% = f32", 100 * agreement(tokens, f32_tokens[batch]));
          fmt::print(
              "{{\"tool\":\"vkformer\",\"shape\":\"{}\",\"dtype\":\"{}\",\"mode\":\"{}\","
              "\"batch\":{},\"prompt\":{},\"new\":{},\"params\":{},"
              "\"decode_tokens_per_s\":{:.1f},\"ms_per_step\":{:.3f},\"dispatches_per_step\":{:.1f}"
              ",\"ms_per_step_minus_prefill\":{:.3f},"
              "\"roofline_b1_tokens_per_s\":{:.1f},\"check\":\"{}\",\"stage_chaining\":{},"
              "\"device\":\"{}\"}}\n",
              shape, dtype, mode, batch, prompt_len, new_tokens, params, r.tps, r.ms, r.dispatches,
              r.ms_minus_prefill, roofline, r.check, vk::Context::get().stream().stage_chaining(),
              vk::Context::get().info().name);
          std::fflush(stdout);
          results.push_back(r);
        }
      }
    }
    fmt::print(
        "\n| dtype | mode | batch | tok/s | ms/step | dispatches/step | of b1 roofline | "
        "tokens |\n");
    fmt::print("|---|---|---:|---:|---:|---:|---:|---|\n");
    for (const auto& r : results) {
      const std::string share =
          r.batch == 1 ? fmt::format("{:.0f}% of {:.0f}", 100 * r.tps / r.roofline, r.roofline)
                       : "";
      fmt::print("| {} | {} | {} | {:.1f} | {:.3f} | {:.0f} | {} | {} |\n", r.dtype, r.mode,
                 r.batch, r.tps, r.ms, r.dispatches, share, r.check);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_bench: error: %s\n", e.what());
    return 1;
  }
}
