// The LM head fused with cross-entropy (ops::linear_cross_entropy): loss_sum, count, dh and dW
// against the double reference, with ignored labels, a chunk made only of ignored rows, chunk
// sizes that do not divide the rows (and exceed them), a logit scale and a soft-cap, both label
// dtypes; the reference backward against finite differences; the GPU op against the unfused
// GPU composition (matmul, scale, softcap, cross_entropy_parts); a gradient for the weight alone
// or the hidden states alone; no tape; accumulation; the weight gradient handed to the tape
// without a copy; determinism; the automatic chunk size; bad input. Then the training
// micro-batch (train::backward_micro_batch) on small models, tied and untied, with a soft-cap
// and a logit scale: every parameter's gradient through the fused loss against the unfused one;
// and LoRA, which keeps the fused loss unless it adapts the head.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "emulated_f16.h"
#include "models/decoder.h"
#include "models/registry.h"
#include "ops/elementwise.h"
#include "ops/linear_cross_entropy.h"
#include "ops/linear_cross_entropy_ref.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/matmul_coopmat.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_relayout.h"
#include "ops/reduce.h"
#include "ops/softcap.h"
#include "peft/lora.h"
#include "test_models.h"
#include "test_util.h"
#include "train/causal_lm.h"
#include "train/trainer.h"
#include "vk/context.h"
#include "vk/error.h"
#include "vk/memory.h"

namespace vkf {
namespace {

using test::labels_tensor;
using test::Rng;
constexpr int64_t kIgnore = -100;

struct Case {
  std::string name;
  int64_t rows, hidden, vocab, chunk;  // chunk 0: automatic
  float scale, softcap;
  std::vector<int64_t> ignored_rows;
  DType label_dtype = DType::I32;
};

std::vector<Case> cases() {
  return {
      {"chunk 5 of 13 rows", 13, 16, 37, 5, 1.0f, 0.0f, {1, 6, 12}},
      {"an all-ignored chunk, scale 1/4", 11, 8, 300, 4, 0.25f, 0.0f, {4, 5, 6, 7, 9}, DType::I64},
      {"soft-cap, one chunk", 7, 24, 61, 0, 1.0f, 5.0f, {3}},
      {"scale and soft-cap, chunk of 3", 16, 5, 1000, 3, 0.0625f, 30.0f, {0, 15}, DType::I64},
      {"chunk larger than the rows", 6, 12, 129, 100, 2.0f, 0.0f, {}},
      {"single-class vocabulary, one row per chunk", 3, 4, 1, 1, 1.0f, 0.0f, {1}},
  };
}

struct Inputs {
  std::vector<double> h, w;
  std::vector<int64_t> labels;
};

Inputs random_inputs(Rng& rng, const Case& c) {
  Inputs in;
  in.h = test::as_f32(rng.normal(static_cast<size_t>(c.rows * c.hidden), 1.0));
  in.w = test::as_f32(rng.normal(static_cast<size_t>(c.vocab * c.hidden), 0.4));
  in.labels.resize(static_cast<size_t>(c.rows));
  for (auto& l : in.labels) l = rng.ints(1, 0, static_cast<int32_t>(c.vocab - 1))[0];
  for (int64_t r : c.ignored_rows) in.labels[static_cast<size_t>(r)] = kIgnore;
  return in;
}

ops::LinearCrossEntropyOptions options_of(const Case& c) {
  ops::LinearCrossEntropyOptions o;
  o.logit_scale = c.scale;
  o.softcap = c.softcap;
  o.chunk_rows = c.chunk;
  return o;
}

TEST(LinearCrossEntropy, LossAndGradientsMatchReference) {
  Rng rng(31);
  const double seed = 0.7;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Inputs in = random_inputs(rng, c);
    const auto want = ref::linear_cross_entropy(in.h, in.w, c.rows, c.hidden, c.vocab, in.labels,
                                                c.scale, c.softcap, kIgnore, seed);
    const Tensor labels = labels_tensor(in.labels, c.label_dtype);
    Tensor count;
    float loss_sum = 0;
    const auto grads = test::gpu_grads(
        [&](std::vector<Tensor>& t) {
          const auto parts = ops::linear_cross_entropy(t[0], t[1], labels, options_of(c));
          count = parts.count;
          loss_sum = parts.loss_sum.item();
          return parts.loss_sum;
        },
        {test::to_gpu(in.h, {c.rows, c.hidden}), test::to_gpu(in.w, {c.vocab, c.hidden})},
        test::to_gpu({seed}, {}));
    EXPECT_EQ(count.item(), static_cast<float>(want.count));
    test::expect_close({loss_sum}, {want.loss_sum}, 2e-6 * static_cast<double>(c.rows), 2e-6,
                       "loss_sum");
    test::expect_close(grads[0], want.dh, 2e-6, 1e-5, "dh");
    test::expect_close(grads[1], want.dw, 2e-6, 1e-5, "dW");
  }
}

TEST(LinearCrossEntropy, ReferenceBackwardMatchesFiniteDifferences) {
  Rng rng(32);
  const int64_t rows = 4, hidden = 3, vocab = 5;
  const std::vector<int64_t> labels = {2, kIgnore, 0, 4};
  const auto h = rng.normal(rows * hidden, 1.0), w = rng.normal(vocab * hidden, 0.8);
  for (double softcap : {0.0, 1.5}) {
    const double scale = 0.5, dloss = 1.3;
    const auto r = ref::linear_cross_entropy(h, w, rows, hidden, vocab, labels, scale, softcap,
                                             kIgnore, dloss);
    const auto dh = test::numeric_grad(
        [&](const std::vector<double>& x) {
          return std::vector<double>{ref::linear_cross_entropy(x, w, rows, hidden, vocab, labels,
                                                               scale, softcap, kIgnore, 1.0)
                                         .loss_sum};
        },
        h, {dloss});
    const auto dw = test::numeric_grad(
        [&](const std::vector<double>& x) {
          return std::vector<double>{ref::linear_cross_entropy(h, x, rows, hidden, vocab, labels,
                                                               scale, softcap, kIgnore, 1.0)
                                         .loss_sum};
        },
        w, {dloss});
    test::expect_close(r.dh, dh, 1e-8, 1e-6, "dh");
    test::expect_close(r.dw, dw, 1e-8, 1e-6, "dW");
    EXPECT_EQ(r.count, 3);
  }
}

// The unfused head as the decoder runs it: logits = linear(h, W), scaled, soft-capped, then
// cross_entropy_parts; same f32 expressions, so close to rounding of the products' order.
TEST(LinearCrossEntropy, MatchesTheUnfusedHeadOnTheGpu) {
  Rng rng(33);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Inputs in = random_inputs(rng, c);
    const Tensor labels = labels_tensor(in.labels, c.label_dtype);
    const Tensor seed = test::to_gpu({0.3}, {});
    const std::vector<Tensor> inputs = {test::to_gpu(in.h, {c.rows, c.hidden}),
                                        test::to_gpu(in.w, {c.vocab, c.hidden})};
    float fused_loss = 0, unfused_loss = 0;
    const auto fused = test::gpu_grads(
        [&](std::vector<Tensor>& t) {
          const Tensor l = ops::linear_cross_entropy(t[0], t[1], labels, options_of(c)).loss_sum;
          fused_loss = l.item();
          return l;
        },
        inputs, seed);
    const auto unfused = test::gpu_grads(
        [&](std::vector<Tensor>& t) {
          Tensor logits = ops::linear(t[0], t[1]);
          if (c.scale != 1.0f) logits = ops::scale(logits, c.scale);
          if (c.softcap > 0) logits = ops::softcap(logits, c.softcap);
          const Tensor l = ops::cross_entropy_parts(logits, labels).loss_sum;
          unfused_loss = l.item();
          return l;
        },
        inputs, seed);
    test::expect_close({fused_loss}, {unfused_loss}, 1e-6 * static_cast<double>(c.rows), 1e-6,
                       "loss");
    test::expect_close(fused[0], unfused[0], 1e-6, 1e-5, "dh");
    test::expect_close(fused[1], unfused[1], 1e-6, 1e-5, "dW");
  }
}

TEST(LinearCrossEntropy, GradientOfOneInputOnlyAndNoTape) {
  Rng rng(34);
  const Case c{"", 9, 7, 50, 4, 1.0f, 0.0f, {2}};
  const Inputs in = random_inputs(rng, c);
  const auto want = ref::linear_cross_entropy(in.h, in.w, c.rows, c.hidden, c.vocab, in.labels, 1.0,
                                              0.0, kIgnore, 1.0);
  const Tensor labels = labels_tensor(in.labels, DType::I32);
  for (int trained = 0; trained < 2; ++trained) {
    Tensor h = test::to_gpu(in.h, {c.rows, c.hidden}), w = test::to_gpu(in.w, {c.vocab, c.hidden});
    (trained == 0 ? h : w).set_requires_grad(true);
    autograd::Tape tape;
    Tensor loss;
    {
      autograd::TapeScope scope(tape);
      loss = ops::linear_cross_entropy(h, w, labels, options_of(c)).loss_sum;
    }
    tape.backward(loss);
    EXPECT_EQ(h.grad().defined(), trained == 0);
    EXPECT_EQ(w.grad().defined(), trained == 1);
    if (trained == 0) test::expect_close(h.grad(), want.dh, 2e-6, 1e-5, "dh alone");
    if (trained == 1) test::expect_close(w.grad(), want.dw, 2e-6, 1e-5, "dW alone");
  }
  // Without a tape: the loss alone, nothing recorded even for inputs that require gradients.
  Tensor h = test::to_gpu(in.h, {c.rows, c.hidden}), w = test::to_gpu(in.w, {c.vocab, c.hidden});
  h.set_requires_grad(true);
  const auto parts = ops::linear_cross_entropy(h, w, labels, options_of(c));
  EXPECT_FALSE(parts.loss_sum.requires_grad());
  test::expect_close({parts.loss_sum.item()}, {want.loss_sum}, 2e-5, 2e-6, "no-tape loss");
}

// Gradient accumulation: a second backward into a weight that already has a gradient adds to it.
TEST(LinearCrossEntropy, AccumulatesIntoAnExistingGradient) {
  Rng rng(35);
  const Case c{"", 10, 6, 40, 3, 1.0f, 0.0f, {0}};
  const Inputs in = random_inputs(rng, c);
  const auto want = ref::linear_cross_entropy(in.h, in.w, c.rows, c.hidden, c.vocab, in.labels, 1.0,
                                              0.0, kIgnore, 1.0);
  Tensor h = test::to_gpu(in.h, {c.rows, c.hidden}), w = test::to_gpu(in.w, {c.vocab, c.hidden});
  w.set_requires_grad(true);
  const Tensor labels = labels_tensor(in.labels, DType::I64);
  for (double dloss : {1.0, 0.5}) {
    autograd::Tape tape;
    Tensor loss;
    {
      autograd::TapeScope scope(tape);
      loss = ops::linear_cross_entropy(h, w, labels, options_of(c)).loss_sum;
    }
    tape.backward(loss, test::to_gpu({dloss}, {}));
  }
  std::vector<double> sum = want.dw;
  for (double& g : sum) g *= 1.5;
  test::expect_close(w.grad(), sum, 2e-6, 1e-5, "dW after two backwards");
}

// The weight gradient made in the forward becomes the weight's gradient as it is: a later
// backward that adds to it (here a linear layer sharing the weight, as a tied embedding does)
// writes into it in place instead of copying [V, H] first.
TEST(LinearCrossEntropy, HandsTheWeightGradientOverWithoutACopy) {
  Rng rng(37);
  const Case c{"", 5, 64, 4096, 0, 1.0f, 0.0f, {}};
  const Inputs in = random_inputs(rng, c);
  const auto x2 = test::as_f32(rng.normal(c.hidden, 1.0));
  Tensor h = test::to_gpu(in.h, {c.rows, c.hidden}), w = test::to_gpu(in.w, {c.vocab, c.hidden});
  w.set_requires_grad(true);
  autograd::Tape tape;
  Tensor loss;
  {
    autograd::TapeScope scope(tape);
    // Recorded first, so its backward runs after the fused loss has handed over dW.
    const Tensor shared_use = ops::sum(ops::linear(test::to_gpu(x2, {1, c.hidden}), w));
    loss = ops::add(ops::linear_cross_entropy(h, w, labels_tensor(in.labels, DType::I32)).loss_sum,
                    shared_use);
  }
  vk::stream().synchronize();
  vk::reset_memory_peak();
  const uint64_t before = vk::memory_stats().live_bytes;
  tape.backward(loss);
  const uint64_t weight_bytes = static_cast<uint64_t>(c.vocab * c.hidden * 4);
  EXPECT_LT(vk::memory_stats().peak_live_bytes - before, weight_bytes / 4)
      << "the backward allocated a second weight-sized gradient";
  // dW of the loss plus, for sum(x2·Wᵀ), x2 in every row.
  auto want = ref::linear_cross_entropy(in.h, in.w, c.rows, c.hidden, c.vocab, in.labels, 1.0, 0.0,
                                        kIgnore, 1.0)
                  .dw;
  for (int64_t v = 0; v < c.vocab; ++v)
    for (int64_t k = 0; k < c.hidden; ++k) want[v * c.hidden + k] += x2[k];
  test::expect_close(w.grad(), want, 2e-6, 1e-5, "dW");
}

// The fused loss on a tape and its backward: {loss_sum, dh, dW}. With `forward_dispatches`, the
// number of dispatches the forward recorded.
std::vector<Tensor> loss_and_grads(const Inputs& in, const Case& c, const Tensor& labels,
                                   uint64_t* forward_dispatches = nullptr) {
  auto& stream = vk::Context::get().stream();
  Tensor h = test::to_gpu(in.h, {c.rows, c.hidden}), w = test::to_gpu(in.w, {c.vocab, c.hidden});
  h.set_requires_grad(true);
  w.set_requires_grad(true);
  autograd::Tape tape;
  Tensor loss;
  {
    autograd::TapeScope scope(tape);
    const uint64_t d0 = stream.dispatch_count();
    loss = ops::linear_cross_entropy(h, w, labels, options_of(c)).loss_sum;
    if (forward_dispatches) *forward_dispatches = stream.dispatch_count() - d0;
  }
  tape.backward(loss);
  return {loss, h.grad(), w.grad()};
}

TEST(LinearCrossEntropy, IsDeterministic) {
  Rng rng(36);
  const Case c{"", 21, 9, 333, 8, 0.5f, 10.0f, {3, 4}};
  const Inputs in = random_inputs(rng, c);
  const Tensor labels = labels_tensor(in.labels, DType::I32);
  const std::vector<Tensor> runs[2] = {loss_and_grads(in, c, labels),
                                       loss_and_grads(in, c, labels)};
  for (size_t i = 0; i < 3; ++i)
    test::expect_bitwise_equal(runs[0][i], runs[1][i], "output " + std::to_string(i));
}

// On the fp32 tiled kernel the logits products read the head weight through one copy of W^T in
// the kernel's fast layout, made once for all chunks (ops/matmul_relayout.h,
// tiled_b_kept_relaid), and nothing changes by a bit. Relayout forced on every product (Always)
// against none (Off): the same loss and gradients; one transpose for the weight and, per chunk,
// one for the chunk's h (the logits product) and one for its dz (dh = dz W), where relaying W
// per product would take one more per chunk.
TEST(LinearCrossEntropy, RelaidHeadWeightChangesNoBit) {
  ASSERT_EQ(matmul_precision(), MatmulPrecision::F32);
  struct Guard {
    ~Guard() { ops::detail::set_tiled_relayout(ops::detail::RelayoutChoice::Auto); }
  } guard;
  Rng rng(37);
  const Case c{"", 45, 12, 333, 15, 0.5f, 0.0f, {7}};
  const int64_t chunks = 3;
  const Inputs in = random_inputs(rng, c);
  const Tensor labels = labels_tensor(in.labels, DType::I32);
  std::vector<Tensor> runs[2];
  uint64_t dispatches[2] = {0, 0};
  for (int relaid = 0; relaid < 2; ++relaid) {
    ops::detail::set_tiled_relayout(relaid ? ops::detail::RelayoutChoice::Always
                                           : ops::detail::RelayoutChoice::Off);
    runs[relaid] = loss_and_grads(in, c, labels, &dispatches[relaid]);
  }
  EXPECT_EQ(dispatches[1], dispatches[0] + 1 + 2 * chunks);
  for (size_t i = 0; i < 3; ++i)
    test::expect_bitwise_equal(runs[1][i], runs[0][i], "output " + std::to_string(i));
}

// Mixed precision with f16 operand copies (the emulated tensor-core kernel, so that lavapipe runs
// the path the H200 runs): the chunks' dz are grouped in f16 and the gradient products run per
// group. Against the double reference at half-precision tolerance, and against per-chunk
// products (group_chunks 1: the same f16 operands, dW summed in another order) closely, for
// groups that divide the chunks, that do not, and the automatic one (all chunks here).
TEST(LinearCrossEntropy, F16GroupedGradientsMatchPerChunkAndReference) {
  const test::EmulatedF16 f16;
  ASSERT_TRUE(ops::detail::f16_operands_active());
  Rng rng(35);
  const Case c{"f16 groups", 37, 24, 300, 5, 1.0f, 0.0f, {2, 30}};
  const Inputs in = random_inputs(rng, c);
  const double seed = 0.5;
  const auto want = ref::linear_cross_entropy(in.h, in.w, c.rows, c.hidden, c.vocab, in.labels,
                                              c.scale, c.softcap, kIgnore, seed);
  const Tensor labels = labels_tensor(in.labels, c.label_dtype);
  auto run = [&](int64_t group_chunks) {
    ops::LinearCrossEntropyOptions o = options_of(c);
    o.group_chunks = group_chunks;
    return test::gpu_grads(
        [&](std::vector<Tensor>& t) {
          return ops::linear_cross_entropy(t[0], t[1], labels, o).loss_sum;
        },
        {test::to_gpu(in.h, {c.rows, c.hidden}), test::to_gpu(in.w, {c.vocab, c.hidden})},
        test::to_gpu({seed}, {}));
  };
  const auto per_chunk = run(1);
  // Without f16 operand copies each chunk's products round dz to f16 as they stage it, with the
  // same rounding as the f16 gradient the grouped path writes: every dh row is the same sum over
  // the vocabulary, so the same bits (lavapipe splits no K).
  ops::detail::set_coopmat_f16_operands(false);
  const auto staged = run(0);
  ops::detail::set_coopmat_f16_operands(true);
  if (vk::Context::get().info().type == VK_PHYSICAL_DEVICE_TYPE_CPU) {
    EXPECT_EQ(per_chunk[0], staged[0]) << "dh: grouped f16 gradient against in-kernel rounding";
  }
  double dw_max = 0, dh_max = 0;
  for (double x : want.dw) dw_max = std::max(dw_max, std::fabs(x));
  for (double x : want.dh) dh_max = std::max(dh_max, std::fabs(x));
  for (int64_t group : {0, 2, 3}) {
    SCOPED_TRACE("group_chunks " + std::to_string(group));
    const auto grouped = run(group);
    test::expect_close(grouped[0], per_chunk[0], 1e-6 * dh_max, 1e-5, "dh vs per chunk");
    test::expect_close(grouped[1], per_chunk[1], 1e-6 * dw_max, 1e-5, "dW vs per chunk");
    test::expect_close(grouped[0], want.dh, 4e-3 * dh_max, 1e-2, "dh vs reference");
    test::expect_close(grouped[1], want.dw, 4e-3 * dw_max, 1e-2, "dW vs reference");
  }
  EXPECT_EQ(ops::linear_cross_entropy_group_chunks(8192, 128256, 512), 8);
  EXPECT_EQ(ops::linear_cross_entropy_group_chunks(8192, 49152, 1280), 4);
  EXPECT_EQ(ops::linear_cross_entropy_group_chunks(8192, 256000, 512), 4);  // the f16 bytes bound
  EXPECT_EQ(ops::linear_cross_entropy_group_chunks(37, 300, 5), 8);
  EXPECT_EQ(ops::linear_cross_entropy_group_chunks(100, 128256, 100), 1);
  test::expect_error(
      [&] {
        ops::linear_cross_entropy(Tensor::zeros({4, 3}), Tensor::zeros({5, 3}),
                                  labels_tensor({0, 1, 2, 3}, DType::I32), {.group_chunks = -1});
      },
      {"group_chunks"});
}

TEST(LinearCrossEntropy, AutomaticChunkKeepsTheLogitsBlockInBudget) {
  // 256 MiB (the smallest default): 512 rows of Llama-3's 128256-token vocabulary (523 rounded
  // down to whole 128-row tiles); everything at once when it fits.
  ops::set_linear_cross_entropy_chunk_bytes(uint64_t{256} << 20);
  EXPECT_EQ(ops::linear_cross_entropy_chunk_rows(8192, 128256), 512);
  EXPECT_EQ(ops::linear_cross_entropy_chunk_rows(8192, 49152), 1280);
  EXPECT_EQ(ops::linear_cross_entropy_chunk_rows(100, 128256), 100);
  EXPECT_EQ(ops::linear_cross_entropy_chunk_rows(0, 10), 1);
  ops::set_linear_cross_entropy_chunk_bytes(1000 * 4 * 50);
  EXPECT_EQ(ops::linear_cross_entropy_chunk_rows(1000, 1000), 50);  // below a tile: not rounded
  ops::set_linear_cross_entropy_chunk_bytes(1);
  EXPECT_EQ(ops::linear_cross_entropy_chunk_rows(1000, 1000), 1);
  // The default: a 64th of the device's memory, within 256 MiB .. 1 GiB (1 GiB, 2048 rows of the
  // 128256 vocabulary, on an 80 GB GPU).
  ops::set_linear_cross_entropy_chunk_bytes(0);
  const uint64_t sixty_fourth = vk::Context::get().info().device_local_bytes() / 64;
  EXPECT_EQ(ops::linear_cross_entropy_chunk_bytes(),
            std::clamp(sixty_fourth, uint64_t{256} << 20, uint64_t{1} << 30));
  ops::set_linear_cross_entropy_chunk_bytes(uint64_t{1} << 30);
  EXPECT_EQ(ops::linear_cross_entropy_chunk_rows(8192, 128256), 2048);
  // A vocabulary so large that the 32-bit element limit binds before the budget.
  ops::set_linear_cross_entropy_chunk_bytes(uint64_t{64} << 30);
  EXPECT_EQ(ops::linear_cross_entropy_chunk_rows(100000, 1 << 24), 127);
  ops::set_linear_cross_entropy_chunk_bytes(0);
}

TEST(LinearCrossEntropy, RejectsBadInput) {
  const Tensor h = Tensor::zeros({4, 3}), w = Tensor::zeros({5, 3});
  const Tensor labels = labels_tensor({0, 1, 2, 3}, DType::I32);
  using ops::linear_cross_entropy;
  test::expect_error(
      [&] {
        linear_cross_entropy(h, Tensor::zeros({5, 2}), labels);
      },
      {"linear_cross_entropy", "weight must be [V, H]", "[5, 2]"});
  test::expect_error(
      [&] {
        linear_cross_entropy(h, w, labels_tensor({0, 1}, DType::I32));
      },
      {"labels must be [N] = [4]"});
  test::expect_error([&] { linear_cross_entropy(h, w, Tensor::zeros({4})); },
                     {"labels must be i32 or i64"});
  test::expect_error(
      [&] {
        linear_cross_entropy(Tensor::zeros({4, 3, 1}), w, labels);
      },
      {"hidden must be [N, H]"});
  test::expect_error([&] { linear_cross_entropy(h, w, labels, {.softcap = -1.0f}); }, {"softcap"});
  test::expect_error([&] { linear_cross_entropy(h, w, labels, {.logit_scale = 0.0f}); },
                     {"logit_scale"});
  test::expect_error([&] { linear_cross_entropy(h, w, labels, {.chunk_rows = -2}); },
                     {"chunk_rows"});
  test::expect_error([&] { linear_cross_entropy(h, Tensor(), labels); }, {"must all be defined"});
}

// ------------------------------------------------------------ through the training micro-batch

nlohmann::json model_config(const std::string& type, bool tied) {
  nlohmann::json c = {{"model_type", type},         {"vocab_size", 97},
                      {"hidden_size", 32},          {"intermediate_size", 48},
                      {"num_hidden_layers", 2},     {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},   {"max_position_embeddings", 256},
                      {"tie_word_embeddings", tied}};
  if (type == "gemma2") {
    c["layer_types"] = {"sliding_attention", "full_attention"};
    c["sliding_window"] = 8;
    c["query_pre_attn_scalar"] = 8;
    c["head_dim"] = 8;
    c["attn_logit_softcapping"] = 50.0;
    c["final_logit_softcapping"] = 3.0;  // low, so the cap bends the logits
  }
  if (type == "granite") c["logits_scaling"] = 0.25;  // logits x 4
  return c;
}

models::DecoderModel random_model(const nlohmann::json& cfg) {
  return test::random_decoder(cfg, 5, 0.2);
}

struct MicroBatch {
  Tensor ids, mask;
  std::vector<int64_t> labels;
  int64_t counted = 0;
};

// Two rows of 12 tokens, the second right-padded by 4 with those labels ignored.
MicroBatch micro_batch(int64_t vocab) {
  Rng rng(8);
  const int64_t B = 2, T = 12;
  std::vector<int32_t> ids(B * T), mask(B * T, 1);
  std::vector<int64_t> labels(B * T);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = rng.ints(1, 0, static_cast<int32_t>(vocab - 1))[0];
  for (size_t i = 0; i < ids.size(); ++i) labels[i] = ids[i];
  for (int64_t t = T - 4; t < T; ++t) mask[T + t] = 0, labels[T + t] = kIgnore;
  MicroBatch b{Tensor::from_host_i32(ids, {B, T}), Tensor::from_host_i32(mask, {B, T}), labels, 0};
  const auto shifted = train::shift_labels(labels, B, T);
  for (int32_t l : shifted) b.counted += l != kIgnore;
  return b;
}

// || a - b || <= tol · || b ||, with both norms on the GPU.
void expect_relative_l2(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  autograd::NoGradScope no_grad;
  const double diff = ops::global_l2_norm({ops::sub(a, b)}).item();
  const double norm = ops::global_l2_norm({b}).item();
  EXPECT_GT(norm, 0.0) << what;
  EXPECT_LE(diff, tol * norm) << what << ": relative L2 difference " << diff / norm;
}

// Gradients of the trained tensors after one micro-batch with the given loss.
std::vector<Tensor> micro_batch_grads(models::DecoderModel& m, const std::vector<Tensor>& trained,
                                      const MicroBatch& b, bool fused, float* loss) {
  for (const Tensor& t : trained) t.zero_grad();
  const Tensor part =
      train::backward_micro_batch(m, b.ids, b.mask, b.labels, b.counted, fused, nullptr);
  *loss = part.item();
  std::vector<Tensor> out;
  for (const Tensor& t : trained) out.push_back(t.grad());
  return out;
}

TEST(LinearCrossEntropy, TrainingGradientsMatchTheUnfusedLoss) {
  for (const auto& [type, tied] : std::vector<std::pair<std::string, bool>>{
           {"llama", true}, {"llama", false}, {"gemma2", true}, {"granite", false}}) {
    SCOPED_TRACE(type + (tied ? " tied" : " untied"));
    auto m = random_model(model_config(type, tied));
    m.set_requires_grad(true);
    const MicroBatch b = micro_batch(m.spec().vocab_size);
    // Two chunks of the 24 tokens, the second partly padding.
    ops::set_linear_cross_entropy_chunk_bytes(static_cast<uint64_t>(16 * m.spec().vocab_size * 4));
    float loss_fused = 0, loss_unfused = 0;
    const auto fused = micro_batch_grads(m, m.parameters(), b, true, &loss_fused);
    const auto unfused = micro_batch_grads(m, m.parameters(), b, false, &loss_unfused);
    ops::set_linear_cross_entropy_chunk_bytes(0);
    EXPECT_NEAR(loss_fused, loss_unfused, 2e-6 * std::abs(loss_unfused));
    for (size_t i = 0; i < fused.size(); ++i)
      expect_relative_l2(fused[i], unfused[i], 2e-5, m.parameter_names()[i]);
    m.set_requires_grad(false);
  }
}

TEST(LinearCrossEntropy, LoraKeepsTheFusedLossUnlessItAdaptsTheHead) {
  auto m = random_model(model_config("llama", false));
  const MicroBatch b = micro_batch(m.spec().vocab_size);
  for (bool on_head : {false, true}) {
    SCOPED_TRACE(on_head ? "LoRA on q_proj and lm_head" : "LoRA on q_proj");
    nlohmann::ordered_json targets = nlohmann::ordered_json::array({"q_proj"});
    if (on_head) targets.push_back("lm_head");
    const auto config = peft::LoraConfig::from_json(
        {{"r", 4}, {"lora_alpha", 8}, {"target_modules", targets}, {"init_lora_weights", "false"}},
        "test config");
    auto adapter = peft::LoraAdapter::create(m, config, 3);
    m.add_adapter(on_head ? "head" : "layers", adapter);
    m.set_active_adapter(on_head ? "head" : "layers");
    EXPECT_EQ(m.lora_on_head(), on_head);
    if (on_head) {
      test::expect_error([&] { m.forward_hidden(b.ids, b.mask); },
                         {"LoRA on the LM head", "forward()"});
    }
    adapter->set_requires_grad(true);
    std::vector<Tensor> trained;
    for (const auto& [name, t] : adapter->parameters()) trained.push_back(t);
    float loss_fused = 0, loss_unfused = 0;
    const auto fused = micro_batch_grads(m, trained, b, true, &loss_fused);
    const auto unfused = micro_batch_grads(m, trained, b, false, &loss_unfused);
    adapter->set_requires_grad(false);
    if (on_head) {  // the composed form both times: the same bits
      EXPECT_EQ(loss_fused, loss_unfused);
      for (size_t i = 0; i < fused.size(); ++i)
        test::expect_bitwise_equal(fused[i], unfused[i], adapter->parameters()[i].first);
    } else {  // the base head weight trains not: only dh is made
      EXPECT_NEAR(loss_fused, loss_unfused, 2e-6 * std::abs(loss_unfused));
      for (size_t i = 0; i < fused.size(); ++i)
        expect_relative_l2(fused[i], unfused[i], 2e-5, adapter->parameters()[i].first);
    }
    EXPECT_FALSE(m.param(m.spec().names.lm_head).grad().defined());
  }
}

}  // namespace
}  // namespace vkf
