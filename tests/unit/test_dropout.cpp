// ops::dropout and the training dropout stream: the CPU Philox against the published known-answer
// vectors, GPU random words and masks against the CPU reference bit for bit (including counters
// that cross 2^32), the kept fraction within statistical bounds, forward and backward against the
// reference, the reference backward against finite differences, determinism and the counter
// property (a slice with a shifted offset draws the same mask), train_dropout's identity outside
// training and its offset bookkeeping, and bad input.
#include <cmath>
#include <cstring>

#include "core/autograd.h"
#include "core/dropout_rng.h"
#include "ops/dropout.h"
#include "ops/dropout_ref.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {

std::vector<uint32_t> words_of(const Tensor& t) {
  const auto bytes = t.to_bytes();
  std::vector<uint32_t> w(bytes.size() / 4);
  std::memcpy(w.data(), bytes.data(), bytes.size());
  return w;
}

// Random123's known-answer vectors for philox4x32 with 10 rounds (counter, key -> output).
TEST(Dropout, PhiloxMatchesKnownAnswers) {
  struct Kat {
    std::array<uint32_t, 4> ctr;
    std::array<uint32_t, 2> key;
    std::array<uint32_t, 4> out;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) EXPECT_EQ(ref::philox4x32_10(k.ctr, k.key), k.out);
}

TEST(Dropout, GpuWordsMatchReference) {
  // Offsets just below 2^32 carry into the counter's high word inside the launch.
  const std::pair<uint64_t, uint64_t> seeds_offsets[] = {
      {0, 0}, {42, 12345}, {0xfedcba9876543210ull, (1ull << 32) - 5}, {7, 0xffffffff00000000ull}};
  for (const auto& [seed, offset] : seeds_offsets) {
    for (int64_t n : {1, 257, 4099}) {
      const auto got = words_of(ops::dropout_bits(n, seed, offset));
      ASSERT_EQ(got.size(), static_cast<size_t>(n));
      size_t bad = 0;
      for (int64_t i = 0; i < n; ++i)
        bad += got[static_cast<size_t>(i)] !=
               ref::dropout_word(seed, offset + static_cast<uint64_t>(i));
      EXPECT_EQ(bad, 0u) << "seed " << seed << " offset " << offset << " n " << n;
    }
  }
}

TEST(Dropout, MaskMatchesReferenceAndKeptFractionIsRight) {
  const int64_t n = 100003;
  const Tensor ones = Tensor::full({n}, 1.0f);
  for (float p : {0.05f, 0.1f, 0.5f, 0.9f}) {
    const uint64_t seed = 1234, offset = (1ull << 32) - 777;
    const auto y = ops::dropout(ones, p, seed, offset).to_double();
    const double scale = 1.0 / (1.0 - static_cast<double>(p));
    size_t kept = 0, mismatched = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = y[static_cast<size_t>(i)];
      const bool gpu_keep = v != 0.0;
      kept += gpu_keep;
      mismatched += gpu_keep != ref::dropout_keep(seed, offset + static_cast<uint64_t>(i), p);
      if (gpu_keep) {
        EXPECT_NEAR(v, scale, 1e-6 * scale);
      }
    }
    EXPECT_EQ(mismatched, 0u) << "p " << p;
    // The kept count is Binomial(n, 1 - p): within 5 standard deviations of its mean.
    const double mean = static_cast<double>(n) * (1.0 - p);
    const double sd = std::sqrt(static_cast<double>(n) * p * (1.0 - p));
    EXPECT_NEAR(static_cast<double>(kept), mean, 5 * sd) << "p " << p;
  }
}

TEST(Dropout, ForwardAndBackwardMatchReference) {
  test::Rng rng(5);
  for (int64_t n : {1, 13, 1000, 65537}) {
    for (float p : {0.1f, 0.5f, 1.0f}) {
      const uint64_t seed = 99, offset = 77 * static_cast<uint64_t>(n);
      const auto x = test::as_f32(rng.normal(static_cast<size_t>(n)));
      const auto dy = test::as_f32(rng.normal(static_cast<size_t>(n)));
      const Tensor xt = test::to_gpu(x, {n});
      test::expect_close(ops::dropout(xt, p, seed, offset), ref::dropout(x, p, seed, offset), 1e-6,
                         1e-6, "dropout forward");
      const auto grads = test::gpu_grads(
          [&](std::vector<Tensor>& in) { return ops::dropout(in[0], p, seed, offset); }, {xt},
          test::to_gpu(dy, {n}));
      test::expect_close(grads[0], ref::dropout_backward(dy, p, seed, offset), 1e-6, 1e-6,
                         "dropout backward");
    }
  }
}

TEST(Dropout, ReferenceBackwardMatchesFiniteDifferences) {
  test::Rng rng(6);
  const auto x = rng.normal(40);
  const auto dy = rng.normal(40);
  const auto f = [](const std::vector<double>& v) { return ref::dropout(v, 0.3, 8, 3); };
  test::expect_close(ref::dropout_backward(dy, 0.3, 8, 3), test::numeric_grad(f, x, dy), 1e-8, 1e-6,
                     "dropout finite differences");
}

TEST(Dropout, DeterministicAndCounterBased) {
  test::Rng rng(7);
  const Tensor x = test::to_gpu(rng.normal(6000), {40, 150});
  test::expect_bitwise_equal(ops::dropout(x, 0.3f, 11, 500), ops::dropout(x, 0.3f, 11, 500),
                             "dropout");
  // Element i of a call at offset o uses counter o + i: the tail of x from element 150 on, at
  // offset 650, draws the same mask as the whole of x at offset 500.
  const Tensor whole =
      ops::dropout(x, 0.3f, 11, 500).reshape({6000}).slice(0, 150, 6000).contiguous();
  const Tensor tail = ops::dropout(x.slice(0, 1, 40), 0.3f, 11, 650).reshape({5850});
  test::expect_bitwise_equal(whole, tail, "dropout of a shifted slice");
  // Another seed or offset gives another mask.
  EXPECT_NE(ops::dropout(x, 0.3f, 12, 500).to_double(), ops::dropout(x, 0.3f, 11, 500).to_double());
  EXPECT_NE(ops::dropout(x, 0.3f, 11, 501).to_double(), ops::dropout(x, 0.3f, 11, 500).to_double());
  // A transposed view is read in its own row-major order.
  const auto xt = x.transpose(0, 1).contiguous().to_double();
  test::expect_close(ops::dropout(x.transpose(0, 1), 0.3f, 11, 500),
                     ref::dropout(xt, 0.3f, 11, 500), 1e-6, 1e-6, "dropout of a view");
}

TEST(Dropout, TrainDropoutFollowsTheActiveStream) {
  test::Rng rng(8);
  const Tensor x = test::to_gpu(rng.normal(300), {3, 100});
  // No stream: the identity (the very same tensor), and nothing is drawn.
  EXPECT_EQ(ops::train_dropout(x, 0.5f).impl(), x.impl());
  dropout_rng::Stream stream{21, 1000};
  {
    dropout_rng::StreamScope scope(&stream);
    EXPECT_EQ(ops::train_dropout(x, 0.0f).impl(), x.impl());  // p = 0 draws nothing
    EXPECT_EQ(stream.offset, 1000u);
    const Tensor a = ops::train_dropout(x, 0.5f);
    const Tensor b = ops::train_dropout(x, 0.25f);
    EXPECT_EQ(stream.offset, 1600u);
    test::expect_bitwise_equal(a, ops::dropout(x, 0.5f, 21, 1000), "first site");
    test::expect_bitwise_equal(b, ops::dropout(x, 0.25f, 21, 1300), "second site");
    {
      dropout_rng::StreamScope off(nullptr);  // a nested scope can turn dropout off
      EXPECT_EQ(ops::train_dropout(x, 0.5f).impl(), x.impl());
    }
    EXPECT_EQ(dropout_rng::active_stream(), &stream);
  }
  EXPECT_EQ(dropout_rng::active_stream(), nullptr);
  EXPECT_EQ(ops::train_dropout(x, 0.5f).impl(), x.impl());
}

TEST(Dropout, RejectsBadInput) {
  const Tensor x = Tensor::zeros({4});
  test::expect_error([&] { ops::dropout(x, -0.1f, 0, 0); }, {"dropout", "[0, 1]", "-0.1"});
  test::expect_error([&] { ops::dropout(x, 1.5f, 0, 0); }, {"dropout", "[0, 1]"});
  test::expect_error([&] { ops::dropout(x, std::nanf(""), 0, 0); }, {"dropout", "[0, 1]"});
  test::expect_error([&] { ops::train_dropout(x, 2.0f); }, {"train_dropout", "[0, 1]"});
  test::expect_error([&] { ops::dropout(Tensor::zeros({4}, DType::I32), 0.5f, 0, 0); },
                     {"dropout", "i32"});
  test::expect_error([&] { ops::dropout(Tensor(), 0.5f, 0, 0); }, {"dropout", "undefined"});
  test::expect_error(
      [&] {
        ops::dropout(Tensor::zeros({0, 3}), 0.5f, 0, 0);
      },
      {"dropout", "empty"});
  test::expect_error([&] { ops::dropout_bits(0, 0, 0); }, {"dropout_bits", "positive"});
}

}  // namespace
}  // namespace vkf
