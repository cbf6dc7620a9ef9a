// Cross-entropy tests: forward (mean and sum/count parts) and backward against the double
// reference for vocabularies of 1 to 50257 with ignored rows and both label dtypes; every row
// ignored (NaN mean, zero gradient, as torch); the reference backward against finite differences;
// gradient accumulation; bitwise determinism; bad labels; errors on bad input.
#include <cmath>
#include <limits>

#include "ops/loss.h"
#include "ops/loss_ref.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {

using test::labels_tensor;
using test::Rng;

constexpr int64_t kIgnore = -100;

// Random labels in [0, vocab), every `ignore_every`-th row (from row 1) set to ignore_index.
std::vector<int64_t> random_labels(Rng& rng, int64_t rows, int64_t vocab, int ignore_every) {
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  for (int64_t n = 0; n < rows; ++n) {
    labels[n] = rng.ints(1, 0, static_cast<int32_t>(vocab - 1))[0];
    if (ignore_every > 0 && n % ignore_every == 1) labels[n] = kIgnore;
  }
  return labels;
}

struct Case {
  int64_t rows, vocab;
  int ignore_every;
};
const Case kCases[] = {{1, 1, 0},    {7, 1, 3},    {7, 7, 0},     {13, 61, 4},
                       {5, 1000, 2}, {37, 257, 5}, {3, 50257, 3}, {2, 50257, 0}};

TEST(CrossEntropy, ForwardMatchesReference) {
  Rng rng(21);
  for (const auto& c : kCases) {
    for (DType dt : {DType::I32, DType::I64}) {
      const auto x = test::as_f32(rng.normal(static_cast<size_t>(c.rows * c.vocab), 3.0));
      const auto labels = random_labels(rng, c.rows, c.vocab, c.ignore_every);
      const auto want = ref::cross_entropy(x, c.rows, c.vocab, labels, kIgnore);
      const std::string what =
          "N=" + std::to_string(c.rows) + " V=" + std::to_string(c.vocab) + " " + dtype_name(dt);
      Tensor logits = test::to_gpu(x, {c.rows, c.vocab});
      Tensor mean = ops::cross_entropy(logits, labels_tensor(labels, dt));
      EXPECT_EQ(mean.shape(), Shape{});
      test::expect_close({mean.item()}, {want.mean}, 3e-6, 3e-6, what + " mean");
      auto parts = ops::cross_entropy_parts(logits, labels_tensor(labels, dt));
      EXPECT_EQ(parts.count.item(), static_cast<float>(want.count)) << what;
      test::expect_close({parts.loss_sum.item()}, {want.loss_sum},
                         3e-6 * static_cast<double>(c.rows), 3e-6, what + " loss_sum");
    }
  }
}

TEST(CrossEntropy, BackwardMatchesReference) {
  Rng rng(22);
  for (const auto& c : kCases) {
    for (bool mean : {true, false}) {
      const DType dt = mean ? DType::I64 : DType::I32;
      const auto x = test::as_f32(rng.normal(static_cast<size_t>(c.rows * c.vocab), 3.0));
      const auto labels = random_labels(rng, c.rows, c.vocab, c.ignore_every);
      const double seed = 0.7;
      auto grads = test::gpu_grads(
          [&](std::vector<Tensor>& in) {
            return mean ? ops::cross_entropy(in[0], labels_tensor(labels, dt))
                        : ops::cross_entropy_parts(in[0], labels_tensor(labels, dt)).loss_sum;
          },
          {test::to_gpu(x, {c.rows, c.vocab})}, test::to_gpu({seed}, {}));
      const auto want =
          ref::cross_entropy_backward(x, c.rows, c.vocab, labels, kIgnore, seed, mean);
      test::expect_close(grads[0], want, 1e-6, 1e-5,
                         "N=" + std::to_string(c.rows) + " V=" + std::to_string(c.vocab) +
                             (mean ? " mean" : " sum"));
    }
  }
}

TEST(CrossEntropy, ReferenceBackwardMatchesFiniteDifferences) {
  Rng rng(23);
  const int64_t rows = 4, vocab = 5;
  const std::vector<int64_t> labels = {2, kIgnore, 0, 4};
  const auto x = rng.normal(rows * vocab, 2.0);
  for (bool mean : {true, false}) {
    const auto numeric = test::numeric_grad(
        [&](const std::vector<double>& v) {
          const auto r = ref::cross_entropy(v, rows, vocab, labels, kIgnore);
          return std::vector<double>{mean ? r.mean : r.loss_sum};
        },
        x, {1.3});
    test::expect_close(ref::cross_entropy_backward(x, rows, vocab, labels, kIgnore, 1.3, mean),
                       numeric, 1e-8, 1e-6, mean ? "mean" : "sum");
  }
}

TEST(CrossEntropy, AllRowsIgnoredGivesNanMeanAndZeroGradient) {
  Rng rng(24);
  const int64_t rows = 5, vocab = 7;
  const std::vector<int64_t> labels(rows, kIgnore);
  const auto x = test::as_f32(rng.normal(rows * vocab));
  EXPECT_TRUE(std::isnan(ref::cross_entropy(x, rows, vocab, labels, kIgnore).mean));
  Tensor logits = test::to_gpu(x, {rows, vocab});
  EXPECT_TRUE(std::isnan(ops::cross_entropy(logits, labels_tensor(labels, DType::I64)).item()));
  auto parts = ops::cross_entropy_parts(logits, labels_tensor(labels, DType::I32));
  EXPECT_EQ(parts.loss_sum.item(), 0.0f);
  EXPECT_EQ(parts.count.item(), 0.0f);
  auto grads = test::gpu_grads(
      [&](std::vector<Tensor>& in) {
        return ops::cross_entropy(in[0], labels_tensor(labels, DType::I64));
      },
      {logits}, Tensor());
  EXPECT_EQ(grads[0], std::vector<double>(rows * vocab, 0.0));
  // No rows at all: the mean is NaN too.
  EXPECT_TRUE(
      std::isnan(ops::cross_entropy(Tensor::zeros({0, 3}), labels_tensor({}, DType::I64)).item()));
}

TEST(CrossEntropy, CustomIgnoreIndexAndMaskedLogits) {
  Rng rng(25);
  const int64_t rows = 6, vocab = 11;
  auto x = test::as_f32(rng.normal(rows * vocab));
  // -inf logits (a masked vocabulary) other than at the label: zero probability, finite loss.
  for (int64_t n = 0; n < rows; ++n) x[n * vocab + 10] = -std::numeric_limits<double>::infinity();
  // ignore_index 3 is a valid class here (as with a pad id), and 2^40 never matches an i32 label.
  for (int64_t ignore : {int64_t{3}, int64_t{1} << 40, int64_t{-1}}) {
    std::vector<int64_t> labels = {3, 0, 9, 3, 5, 1};
    const auto want = ref::cross_entropy(x, rows, vocab, labels, ignore);
    for (DType dt : {DType::I32, DType::I64}) {
      Tensor loss =
          ops::cross_entropy(test::to_gpu(x, {rows, vocab}), labels_tensor(labels, dt), ignore);
      test::expect_close({loss.item()}, {want.mean}, 3e-6, 3e-6,
                         "ignore_index " + std::to_string(ignore) + " " + dtype_name(dt));
      auto grads = test::gpu_grads(
          [&](std::vector<Tensor>& in) {
            return ops::cross_entropy(in[0], labels_tensor(labels, dt), ignore);
          },
          {test::to_gpu(x, {rows, vocab})}, Tensor());
      test::expect_close(grads[0],
                         ref::cross_entropy_backward(x, rows, vocab, labels, ignore, 1.0, true),
                         1e-6, 1e-5, "grad, ignore_index " + std::to_string(ignore));
    }
  }
}

TEST(CrossEntropy, MicroBatchPartsAndGradientAccumulation) {
  Rng rng(26);
  const int64_t rows = 19, vocab = 37;
  const auto x = test::as_f32(rng.normal(rows * vocab, 2.0));
  const auto labels = random_labels(rng, rows, vocab, 3);
  const auto whole = ref::cross_entropy(x, rows, vocab, labels, kIgnore);
  // Two micro-batches (rows [0, 8) and [8, 19)): sums and counts add up to the whole batch.
  Tensor logits = test::to_gpu(x, {rows, vocab});
  Tensor lab = labels_tensor(labels, DType::I64);
  auto a = ops::cross_entropy_parts(logits.slice(0, 0, 8), lab.slice(0, 0, 8));
  auto b = ops::cross_entropy_parts(logits.slice(0, 8, rows), lab.slice(0, 8, rows));
  EXPECT_EQ(a.count.item() + b.count.item(), static_cast<float>(whole.count));
  test::expect_close({(a.loss_sum.item() + b.loss_sum.item()) / (a.count.item() + b.count.item())},
                     {whole.mean}, 3e-6, 3e-6, "mean over micro-batches");
  // A leaf's gradient accumulates across two backward passes (the accumulate path of the kernel).
  Tensor leaf = test::to_gpu(x, {rows, vocab});
  leaf.set_requires_grad(true);
  for (int pass = 0; pass < 2; ++pass) {
    autograd::Tape tape;
    Tensor loss;
    {
      autograd::TapeScope scope(tape);
      loss = ops::cross_entropy(leaf, lab);
    }
    tape.backward(loss);
  }
  auto want = ref::cross_entropy_backward(x, rows, vocab, labels, kIgnore, 1.0, true);
  for (auto& w : want) w *= 2;
  test::expect_close(leaf.grad(), want, 2e-6, 1e-5, "two accumulated passes");
}

TEST(CrossEntropy, IsBitwiseDeterministic) {
  Rng rng(27);
  const int64_t rows = 33, vocab = 5003;
  const auto x = test::as_f32(rng.normal(rows * vocab, 4.0));
  const auto labels = random_labels(rng, rows, vocab, 4);
  Tensor seed = test::to_gpu({1.0}, {});
  Tensor loss[2], grad[2];
  for (int k = 0; k < 2; ++k) {
    Tensor logits = test::to_gpu(x, {rows, vocab});
    logits.set_requires_grad(true);
    autograd::Tape tape;
    {
      autograd::TapeScope scope(tape);
      loss[k] = ops::cross_entropy(logits, labels_tensor(labels, DType::I32));
    }
    tape.backward(loss[k], seed);
    grad[k] = logits.grad();
  }
  test::expect_bitwise_equal(loss[0], loss[1], "loss");
  test::expect_bitwise_equal(grad[0], grad[1], "dlogits");
}

TEST(CrossEntropy, OutOfRangeLabelsGiveNan) {
  const int64_t rows = 3, vocab = 4;
  Tensor logits = Tensor::zeros({rows, vocab});
  for (int64_t bad : {int64_t{4}, int64_t{-1}, int64_t{1} << 33}) {
    const std::vector<int64_t> labels = {1, bad, kIgnore};
    Tensor lab = labels_tensor(labels, DType::I64);
    EXPECT_TRUE(std::isnan(ops::cross_entropy(logits, lab).item())) << bad;
    auto grads =
        test::gpu_grads([&](std::vector<Tensor>& in) { return ops::cross_entropy(in[0], lab); },
                        {logits}, Tensor());
    for (int64_t v = 0; v < vocab; ++v) {
      EXPECT_TRUE(std::isfinite(grads[0][v])) << "row 0 stays finite";
      EXPECT_TRUE(std::isnan(grads[0][vocab + v])) << "the bad row is NaN";
      EXPECT_EQ(grads[0][2 * vocab + v], 0.0) << "the ignored row is 0";
    }
  }
  EXPECT_NO_THROW(ops::check_labels({0, 3, kIgnore}, vocab, kIgnore, "batch 0"));
  test::expect_error(
      [&] {
        ops::check_labels({0, kIgnore, 4}, vocab, kIgnore, "batch 7");
      },
      {"batch 7", "label 4", "position 2"});
  EXPECT_THROW(ops::check_labels({-100}, vocab, -1, "x"), Error);
}

TEST(CrossEntropy, ErrorsOnBadInput) {
  Tensor logits = Tensor::zeros({3, 5});
  Tensor labels = labels_tensor({0, 1, 2}, DType::I32);
  EXPECT_THROW(ops::cross_entropy(Tensor(), labels), Error);
  EXPECT_THROW(ops::cross_entropy(logits, Tensor()), Error);
  EXPECT_THROW(ops::cross_entropy(Tensor::zeros({3, 5}, DType::I32), labels), Error);
  EXPECT_THROW(ops::cross_entropy(Tensor::zeros({15}), labels), Error);
  EXPECT_THROW(ops::cross_entropy(Tensor::zeros({3, 5, 1}), labels), Error);
  EXPECT_THROW(ops::cross_entropy(Tensor::zeros({3, 0}), labels), Error);
  EXPECT_THROW(ops::cross_entropy(logits, Tensor::zeros({3})), Error);  // f32 labels
  EXPECT_THROW(ops::cross_entropy(logits, labels_tensor({0, 1}, DType::I64)), Error);
  EXPECT_THROW(ops::cross_entropy(logits, Tensor::zeros({3, 1}, DType::I64)), Error);
  EXPECT_THROW(ops::cross_entropy_parts(logits, labels_tensor({0, 1, 2, 3}, DType::I32)), Error);
  test::expect_error(
      [&] {
        ops::cross_entropy(logits, labels_tensor({0, 1}, DType::I64));
      },
      {"cross_entropy", "labels", "[2]"});
}

}  // namespace
}  // namespace vkf
