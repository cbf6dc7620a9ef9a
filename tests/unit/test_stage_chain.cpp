// Stage chaining in captured graphs (vk::Stream::set_stage_chaining, stage_chain_push.glsl): which
// chained dispatches wait on which counter instead of a pipeline barrier (a dispatch that depends
// on a stage of chained dispatches waits for all of that stage's workgroups; one that depends
// only on the stages before waits on the same counter; any other command gets a barrier), that a
// replay counts every workgroup of every chained stage on the device, and that chained replays give
// bitwise the results of the same graph with barriers: for a chain of skinny f16 products and for
// the decode step of f16 models at batch 1 and 2, with the chained kernels' Vulkan-memory-model
// builds (the default where the device has the model) and their legacy "_coherent" builds, which
// also give the same bits as each other eagerly; batches over the row limit keep their barriers.
// (lavapipe runs dispatches one after another, so here the waits never hold anything up: the order
// they would enforce is checked through what the stream decided, the counts through the device's
// counters.) The binary runs without VKF_POISON: its fills of new tensors are commands of their own
// between the products, which the stream rightly separates by barriers, so the decisions checked
// here would not arise.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/dtype.h"
#include "core/launch.h"
#include "infer/decode_step.h"
#include "models/decoder.h"
#include "ops/activation.h"
#include "ops/decode.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "test_util.h"
#include "vk/context.h"

namespace vkf {
namespace {

// Before any tensor reads the setting (tensor.cpp caches it on first use).
const bool kPoisonOff = [] { return setenv("VKF_POISON", "0", 1) == 0; }();

using test::Rng;

// Chaining on (or off) for the scope's captures, back as it was after; `vmm`: the chained kernels'
// Vulkan-memory-model builds where the device has them (else the "_coherent" builds, whose
// chained reads are coherent loads); `max_rows`: the largest batch that chains (set_chain_max_rows;
// 8 here, so that multi-row kernels are checked chained too).
struct ChainingOn {
  explicit ChainingOn(bool on = true, bool vmm = true, int64_t max_rows = 8)
      : was_(vk::Context::get().stream().stage_chaining()), rows_was_(chain_max_rows()) {
    vk::Context::get().stream().set_stage_chaining(on);
    set_vmm_chaining(vmm);
    set_chain_max_rows(max_rows);
  }
  ~ChainingOn() {
    vk::Context::get().stream().set_stage_chaining(was_);
    set_vmm_chaining(true);
    set_chain_max_rows(rows_was_);
  }
  ChainingOn(const ChainingOn&) = delete;
  ChainingOn& operator=(const ChainingOn&) = delete;

 private:
  bool was_;
  int64_t rows_was_;
};

// Whether chained dispatches here run the Vulkan-memory-model builds (the default where the
// device has the model at device scope).
bool device_runs_vmm_builds() {
  return vk::Context::get().info().memory_model_at_device_scope();
}

Tensor half_weight(Rng& rng, int64_t rows, int64_t cols) {
  const auto v = rng.uniform(static_cast<size_t>(rows * cols));
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = f32_to_f16_bits(static_cast<float>(v[i]));
  return Tensor::from_bytes(bits.data(), DType::F16, {rows, cols});
}

struct ChainRun {
  std::vector<double> sum, last;  // two of the graph's results after one replay
  std::vector<vk::ChainSync> log;
  uint64_t links = 0, barriers = 0;
  std::string counters;  // check_chain_counters() after the replay
};

// A graph of one-row f16 products (the skinny kernel, which can be chained) and one plain addition
// between them:
//   x2 = 2 x; y1 = x2 W1^T; y2 = y1 W2^T; y3 = y1 W3^T; sum = y2 + y3; y4 = x2 W4^T; last = y4 W1^T
ChainRun run_chain(bool chaining, bool vmm = true) {
  autograd::NoGradScope no_grad;
  Rng rng(71);
  constexpr int64_t K = 256, N = 256;
  const Tensor x = test::to_gpu(test::as_f32(rng.uniform(K)), {1, K});
  const Tensor w1 = half_weight(rng, N, K), w2 = half_weight(rng, N, K),
               w3 = half_weight(rng, N, K), w4 = half_weight(rng, N, K);
  auto& stream = vk::Context::get().stream();
  ChainingOn scope(chaining, vmm);
  stream.synchronize();
  const uint64_t barriers_before = stream.barrier_count();
  stream.begin_capture();
  const Tensor x2 = ops::scale(x, 2.0f);
  const Tensor y1 = ops::linear(x2, w1);
  const Tensor y2 = ops::linear(y1, w2);
  const Tensor y3 = ops::linear(y1, w3);
  const Tensor sum = ops::add(y2, y3);
  const Tensor y4 = ops::linear(x2, w4);
  const Tensor last = ops::linear(y4, w1);
  auto graph = stream.end_capture();
  ChainRun out;
  out.barriers = stream.barrier_count() - barriers_before;
  stream.replay(*graph);
  stream.wait(*graph);
  out.sum = sum.to_double();
  out.last = last.to_double();
  out.log = graph->chain_log();
  out.links = graph->chain_links();
  out.counters = graph->check_chain_counters();
  return out;
}

uint32_t waited(const vk::ChainSync& s) {
  return s.slots & 0xFFFF;
}
uint32_t signalled(const vk::ChainSync& s) {
  return s.slots >> 16;
}

TEST(StageChain, WaitsWhereTheStageBeforeIsChained) {
  ASSERT_TRUE(kPoisonOff);
  const ChainRun chained = run_chain(true);
  ASSERT_EQ(chained.log.size(), 5u) << "the five products are chained dispatches";
  const auto& a = chained.log[0];  // y1: after the scale (not chained): a barrier, no wait
  const auto& b = chained.log[1];  // y2: waits for y1's stage
  const auto& c = chained.log[2];  // y3: independent of y2, but reads y1: the same wait
  const auto& e = chained.log[3];  // y4: after the addition's barrier, nothing to wait on
  const auto& f = chained.log[4];  // last: its stage holds the addition: a barrier
  constexpr uint32_t kNone = vk::ChainSync::kNoSlot;
  for (const auto& s : chained.log) EXPECT_NE(s.counters, 0u);
  EXPECT_EQ(waited(a), kNone);
  EXPECT_EQ(a.wait_count, 0u);
  EXPECT_EQ(signalled(a), 1u);
  EXPECT_EQ(waited(b), signalled(a));
  EXPECT_GT(b.wait_count, 0u);
  EXPECT_EQ(signalled(b), 2u);
  EXPECT_EQ(waited(c), signalled(a));
  EXPECT_EQ(c.wait_count, b.wait_count);
  EXPECT_EQ(signalled(c), 2u) << "y2 and y3 are one stage";
  EXPECT_EQ(waited(e), kNone);
  EXPECT_EQ(signalled(e), 3u);
  EXPECT_EQ(waited(f), kNone);
  EXPECT_EQ(signalled(f), 4u);
  EXPECT_EQ(chained.links, 1u);
  EXPECT_EQ(chained.counters, "") << "every chained workgroup counted itself on the device";

  const ChainRun plain = run_chain(false);
  EXPECT_EQ(plain.links, 0u);
  for (const auto& s : plain.log) EXPECT_EQ(s.counters, 0u) << "not chained: no counters";
  EXPECT_EQ(plain.barriers, chained.barriers + 1) << "one barrier left out";
  test::expect_close(chained.sum, plain.sum, 0, 0, "y2 + y3");
  test::expect_close(chained.last, plain.last, 0, 0, "y4 W1^T");

  // The other build of the chained kernels: the same decisions, counts and bits.
  const ChainRun legacy = run_chain(true, false);
  EXPECT_EQ(legacy.links, chained.links);
  EXPECT_EQ(legacy.counters, "");
  test::expect_close(legacy.sum, plain.sum, 0, 0, "y2 + y3, legacy build");
  test::expect_close(legacy.last, plain.last, 0, 0, "y4 W1^T, legacy build");
}

TEST(StageChain, MemoryModelBuildsExist) {
  // Both chainable kernels have their Vulkan-memory-model builds, which chained dispatches run on
  // devices with the model at device scope, and their coherent builds, the fallback otherwise.
  EXPECT_TRUE(vk::Pipelines::has_module("matmul_skinny_f16_vmm"));
  EXPECT_TRUE(vk::Pipelines::has_module("matmul_skinny_f16_gated_vmm"));
  EXPECT_TRUE(vk::Pipelines::has_module("matmul_skinny_f16_coherent"));
  EXPECT_TRUE(vk::Pipelines::has_module("matmul_skinny_f16_gated_coherent"));
  if (!device_runs_vmm_builds())
    GTEST_LOG_(INFO) << "this device lacks the memory model at device scope: legacy builds run";
}

// Each chainable kernel's two builds give the same bits for each of its forms, run eagerly (the
// stream's chaining setting picks the build, outside captures too): plain, with the norm folded
// (one row: staged in shared memory) or not (two rows), gated, 2-byte loads (K = 100), rows of
// 8 to 128 threads in the norm's sums, and a K split whose last slice is shorter (K = 4104).
TEST(StageChain, MemoryModelBuildsGiveTheLegacyBits) {
  if (!device_runs_vmm_builds()) GTEST_SKIP() << "no memory model at device scope: one build runs";
  autograd::NoGradScope no_grad;
  Rng rng(73);
  for (const int64_t K : {100, 64, 1024, 4104})
    for (const int64_t M : {1, 2}) {
      SCOPED_TRACE("K " + std::to_string(K) + " M " + std::to_string(M));
      const Tensor x = test::to_gpu(test::as_f32(rng.uniform(static_cast<size_t>(M * K))), {M, K});
      const Tensor w = half_weight(rng, 96, K), wu = half_weight(rng, 96, K);
      const ops::RowNorm norm{test::to_gpu(test::as_f32(rng.uniform(K)), {K}), 1e-5f, false};
      auto products = [&](bool vmm) {
        ChainingOn scope(true, vmm);
        std::vector<std::vector<double>> out;
        out.push_back(ops::linear(x, w).to_double());
        out.push_back(ops::normed_linear(x, norm, w).to_double());
        out.push_back(ops::gated_linear(x, w, wu, ops::Activation::SiLU, &norm).to_double());
        return out;
      };
      const auto vmm = products(true), legacy = products(false);
      const char* names[] = {"linear", "normed_linear", "gated_linear"};
      for (size_t i = 0; i < vmm.size(); ++i) test::expect_close(vmm[i], legacy[i], 0, 0, names[i]);
    }
}

TEST(StageChain, NeverOutsideCapturesAndByDeviceByDefault) {
  auto& stream = vk::Context::get().stream();
  EXPECT_EQ(stream.stage_chaining(), vk::stage_chaining_by_default(vk::Context::get().info()))
      << "VKF_STAGE_CHAIN is not set in the test environment";
  autograd::NoGradScope no_grad;
  Rng rng(72);
  const Tensor x = test::to_gpu(test::as_f32(rng.uniform(64)), {1, 64});
  const Tensor w1 = half_weight(rng, 64, 64), w2 = half_weight(rng, 32, 64);
  // Eagerly recorded products are never chained (there are no counters outside a graph): the
  // same barriers with chaining on as off.
  auto barriers = [&](bool chaining) {
    ChainingOn scope(chaining);
    stream.synchronize();
    const uint64_t before = stream.barrier_count();
    const Tensor y = ops::linear(ops::linear(x, w1), w2);
    stream.synchronize();
    return stream.barrier_count() - before;
  };
  const uint64_t off = barriers(false);
  EXPECT_GT(off, 0u);
  EXPECT_EQ(barriers(true), off);
}

// One attention layer of a decode step in a graph: a product, then q, k, v products of its
// output, the fused rotary attention
// over the cache (its chained variant waits for them where the Vulkan-memory-model builds run),
// the o product (which then waits for the attention). The inputs lie as a decode step's do: the
// sin table after the cos table, cached[0] after the positions.
constexpr int64_t kAttnQHeads = 4, kAttnKvHeads = 2;
struct AttentionCase {
  int64_t batch, cap, slot, d, window;
  float softcap;
};
struct AttentionRun {
  Tensor out, cache_k;
  uint64_t links = 0;
  std::string counters;
};
AttentionRun run_attention_layer(const AttentionCase& c, bool chaining) {
  autograd::NoGradScope no_grad;
  Rng rng(74);
  constexpr int64_t Hq = kAttnQHeads, Hkv = kAttnKvHeads, K = 64;
  const int64_t P = c.slot + 3, half = c.d / 2;
  const Tensor x =
      test::to_gpu(test::as_f32(rng.uniform(static_cast<size_t>(c.batch * K))), {c.batch, K});
  const Tensor w0 = half_weight(rng, K, K), wq = half_weight(rng, Hq * c.d, K),
               wk = half_weight(rng, Hkv * c.d, K), wv = half_weight(rng, Hkv * c.d, K),
               wo = half_weight(rng, K, Hq * c.d);
  const Tensor tables =
      test::to_gpu(test::as_f32(rng.uniform(static_cast<size_t>(2 * P * half))), {2, P, half});
  const Tensor cos = tables.slice(0, 0, 1).reshape({P, half});
  const Tensor sin = tables.slice(0, 1, 2).reshape({P, half});
  std::vector<int32_t> state;
  for (int64_t b = 0; b < c.batch; ++b) state.push_back(static_cast<int32_t>(c.slot - b));
  state.push_back(static_cast<int32_t>(c.slot));
  const Tensor st = Tensor::from_host_i32(state, {c.batch + 1});
  const Tensor positions = st.slice(0, 0, c.batch).reshape({c.batch, 1});
  const Tensor cached = st.slice(0, c.batch, c.batch + 1);
  const Shape cache_shape{c.batch, c.cap, Hkv, c.d};
  const auto cache_values = rng.normal(static_cast<size_t>(c.batch * c.cap * Hkv * c.d));
  AttentionRun run;
  run.cache_k = test::to_gpu(test::as_f32(cache_values), cache_shape);
  const Tensor cache_v = test::to_gpu(test::as_f32(cache_values), cache_shape);
  ops::AttentionOptions opts;
  opts.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  opts.sliding_window = c.window;
  opts.softcap = c.softcap;
  auto& stream = vk::Context::get().stream();
  ChainingOn scope(chaining);
  stream.synchronize();
  stream.begin_capture();
  // (The graph's first stage signals nothing: the fill that zeroes the counters is still due.)
  const Tensor h = ops::linear(x, w0);
  const Tensor q = ops::linear(h, wq).reshape({c.batch, 1, Hq, c.d});
  const Tensor k = ops::linear(h, wk).reshape({c.batch, 1, Hkv, c.d});
  const Tensor v = ops::linear(h, wv).reshape({c.batch, 1, Hkv, c.d});
  const Tensor a =
      ops::attention_decode_rope(q, k, v, cos, sin, positions, run.cache_k, cache_v, cached,
                                 Tensor(), opts, c.d, ops::RopeLayout::RotateHalf);
  run.out = ops::linear(a.reshape({c.batch, Hq * c.d}), wo);
  auto graph = stream.end_capture();
  stream.replay(*graph);
  stream.wait(*graph);
  run.links = graph->chain_links();
  run.counters = graph->check_chain_counters();
  return run;
}

TEST(StageChain, ChainedAttentionGivesTheSameBits) {
  // Head sizes 64 and 128, batch 1 and 2, a cache long enough to split over workgroups (then not
  // chained: the same bits all the same), a sliding window and soft-capping.
  const AttentionCase cases[] = {{1, 40, 17, 64, 0, 0.0f},
                                 {2, 40, 30, 128, 0, 0.0f},
                                 {1, 1100, 1000, 64, 0, 0.0f},
                                 {2, 64, 50, 64, 16, 30.0f}};
  for (const auto& c : cases) {
    SCOPED_TRACE("batch " + std::to_string(c.batch) + " cap " + std::to_string(c.cap) + " d " +
                 std::to_string(c.d));
    const AttentionRun chained = run_attention_layer(c, true);
    const AttentionRun plain = run_attention_layer(c, false);
    EXPECT_EQ(plain.links, 0u);
    // A cache split over workgroups keeps the attention's barriers (launch_fast).
    const bool split =
        ops::detail::decode_attention_plan(c.batch, c.cap, kAttnQHeads, kAttnKvHeads, c.d).splits >
        1;
    if (device_runs_vmm_builds() && !split) {
      EXPECT_GE(chained.links, 1u) << "the attention waits for q, k and v";
    }
    EXPECT_EQ(chained.counters, "");
    test::expect_bitwise_equal(chained.out, plain.out, "o product");
    test::expect_bitwise_equal(chained.cache_k, plain.cache_k, "key cache");
  }
}

// The decode step's logits with chaining on and off, over the steps of one prompt.
std::vector<std::vector<double>> decode_logits(models::DecoderModel& model, int64_t batch,
                                               bool chaining, uint64_t& links, bool vmm = true,
                                               int64_t chain_rows = 8) {
  autograd::NoGradScope no_grad;
  ChainingOn scope(chaining, vmm, chain_rows);
  constexpr int64_t kPrompt = 4, kSteps = 5;
  auto cache = model.make_cache(batch, kPrompt + kSteps);
  std::vector<int32_t> ids, pos;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < kPrompt; ++t) {
      ids.push_back(static_cast<int32_t>(3 + 5 * t + 7 * b));
      pos.push_back(static_cast<int32_t>(t));
    }
  model.forward(Tensor::from_host_i32(ids, {batch, kPrompt}),
                Tensor::from_host_i32(std::vector<int32_t>(ids.size(), 1), {batch, kPrompt}), {},
                &cache, pos);
  infer::DecodeStepRunner runner(
      model, cache, std::vector<int32_t>(static_cast<size_t>(batch * (kPrompt + kSteps)), 1), true,
      false);
  std::vector<std::vector<double>> out;
  for (int64_t s = 0; s < kSteps; ++s) {
    std::vector<int32_t> step_ids, step_pos;
    for (int64_t b = 0; b < batch; ++b) {
      step_ids.push_back(static_cast<int32_t>(11 + 3 * s + b));
      step_pos.push_back(static_cast<int32_t>(kPrompt + s));
    }
    runner.step(step_ids, step_pos);  // checks the first replay's counters itself
    const auto l = runner.logits();
    out.emplace_back(l.begin(), l.end());
  }
  links = runner.graph_chain_links();
  return out;
}

TEST(StageChain, DecodeStepGivesTheSameLogits) {
  for (const std::string c : {"llama", "qwen3"}) {
    auto model =
        models::DecoderModel::load((test::fixtures_dir() / "parity" / c).string(), DType::F16);
    for (const int64_t batch : {1, 2}) {
      SCOPED_TRACE(c + " batch " + std::to_string(batch));
      uint64_t links_on = 0, links_off = 0;
      const auto chained = decode_logits(model, batch, true, links_on);
      const auto plain = decode_logits(model, batch, false, links_off);
      EXPECT_GT(links_on, 0u) << "some stages chained";
      EXPECT_EQ(links_off, 0u);
      ASSERT_EQ(chained.size(), plain.size());
      for (size_t s = 0; s < chained.size(); ++s)
        test::expect_close(chained[s], plain[s], 0, 0, "step " + std::to_string(s));
      uint64_t links_legacy = 0;
      const auto legacy = decode_logits(model, batch, true, links_legacy, false);
      // The attention (and the o product after it) chain only in the memory-model builds.
      if (device_runs_vmm_builds()) {
        EXPECT_GT(links_on, links_legacy);
      } else {
        EXPECT_EQ(links_legacy, links_on);
      }
      for (size_t s = 0; s < legacy.size(); ++s)
        test::expect_close(legacy[s], plain[s], 0, 0, "legacy build, step " + std::to_string(s));
      // With the default row limit (one), a batch of two keeps every barrier.
      uint64_t links_default = 0;
      const auto by_default = decode_logits(model, batch, true, links_default, true, 1);
      if (batch > 1) {
        EXPECT_EQ(links_default, 0u);
      } else {
        EXPECT_EQ(links_default, links_on);
      }
      for (size_t s = 0; s < by_default.size(); ++s)
        test::expect_close(by_default[s], plain[s], 0, 0, "row limit 1, step " + std::to_string(s));
    }
  }
}

}  // namespace
}  // namespace vkf
