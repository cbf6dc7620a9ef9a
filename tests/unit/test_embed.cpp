// Embedding tests: forward (odd shapes, both id dtypes, repeated and out-of-range ids) and the
// deterministic scatter-add backward against the double reference, padding_idx, accumulation into
// an existing gradient, bitwise determinism, a large case, and errors on bad input.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/embed.h"
#include "ops/embed_ref.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {

using test::Rng;

std::vector<int64_t> random_ids(Rng& rng, size_t n, int64_t vocab) {
  std::vector<int64_t> ids(n);
  for (auto& id : ids) id = rng.ints(1, 0, static_cast<int32_t>(vocab - 1))[0];
  return ids;
}

Tensor ids_tensor(const std::vector<int64_t>& ids, const Shape& shape, DType dtype) {
  if (dtype == DType::I64) return Tensor::from_host_i64(ids, shape);
  std::vector<int32_t> i32(ids.begin(), ids.end());
  return Tensor::from_host_i32(i32, shape);
}

// Tolerance of an f32 sum of k terms against the exact sum: (k - 1) u sum|x| plus a little.
std::vector<double> sum_tolerance(const std::vector<int64_t>& ids, const std::vector<double>& dy,
                                  int64_t vocab, int64_t hidden) {
  std::vector<double> abs_dy(dy.size());
  for (size_t i = 0; i < dy.size(); ++i) abs_dy[i] = std::fabs(dy[i]);
  std::vector<double> counts(static_cast<size_t>(vocab), 0.0);
  for (auto id : ids)
    if (id >= 0 && id < vocab) counts[static_cast<size_t>(id)] += 1;
  auto abs_sum = ref::embedding_backward(ids, abs_dy, vocab, hidden);
  for (int64_t v = 0; v < vocab; ++v)
    for (int64_t c = 0; c < hidden; ++c) {
      double& t = abs_sum[static_cast<size_t>(v * hidden + c)];
      t = 1e-7 + 1.2e-7 * counts[static_cast<size_t>(v)] * t;
    }
  return abs_sum;
}

void expect_within(const std::vector<double>& got, const std::vector<double>& want,
                   const std::vector<double>& tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    if (!(err <= tol[i])) {
      if (bad++ == 0) first = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " out of tolerance; first at " << first << ": got " << got[first]
                     << " want " << want[first] << " tol " << tol[first];
}

TEST(Embedding, ForwardOddShapesBothDtypes) {
  Rng rng(11);
  struct Case {
    int64_t vocab, hidden;
    Shape ids_shape;
  };
  const Case cases[] = {{1, 1, {1}},       {7, 13, {37}},   {61, 37, {3, 7}},
                        {5, 300, {2, 61}}, {1000, 7, {13}}, {13, 257, {1, 1, 5}}};
  for (const auto& c : cases) {
    for (DType dt : {DType::I32, DType::I64}) {
      const auto w = test::as_f32(rng.uniform(static_cast<size_t>(c.vocab * c.hidden)));
      // Few distinct ids so that many repeat.
      const auto ids = random_ids(rng, static_cast<size_t>(shape_numel(c.ids_shape)),
                                  std::min<int64_t>(c.vocab, 4));
      Tensor out =
          ops::embedding(test::to_gpu(w, {c.vocab, c.hidden}), ids_tensor(ids, c.ids_shape, dt));
      Shape want_shape = c.ids_shape;
      want_shape.push_back(c.hidden);
      EXPECT_EQ(out.shape(), want_shape);
      // A lookup copies: exact.
      EXPECT_EQ(out.to_double(), ref::embedding(w, c.vocab, c.hidden, ids))
          << "V=" << c.vocab << " H=" << c.hidden << " " << dtype_name(dt);
    }
  }
}

TEST(Embedding, OutOfRangeIdsGiveZeroRowsAndNoGradient) {
  Rng rng(12);
  const int64_t vocab = 7, hidden = 5;
  const auto w = test::as_f32(rng.uniform(vocab * hidden));
  std::vector<int64_t> ids = {3, -1, 7, 0, int64_t{1} << 40, 6, -(int64_t{1} << 33) + 2, 3};
  for (DType dt : {DType::I32, DType::I64}) {
    std::vector<int64_t> used = ids;
    if (dt == DType::I32)  // the 64-bit extremes become the 32-bit ones
      for (auto& id : used)
        id = std::clamp<int64_t>(id, std::numeric_limits<int32_t>::min(),
                                 std::numeric_limits<int32_t>::max());
    const int64_t n = static_cast<int64_t>(used.size());
    const auto dy = test::as_f32(rng.uniform(used.size() * hidden));
    auto grads = test::gpu_grads(
        [&](std::vector<Tensor>& in) { return ops::embedding(in[0], ids_tensor(used, {n}, dt)); },
        {test::to_gpu(w, {vocab, hidden})}, test::to_gpu(dy, {n, hidden}));
    Tensor out = ops::embedding(test::to_gpu(w, {vocab, hidden}), ids_tensor(used, {n}, dt));
    EXPECT_EQ(out.to_double(), ref::embedding(w, vocab, hidden, used)) << dtype_name(dt);
    test::expect_close(grads[0], ref::embedding_backward(used, dy, vocab, hidden), 1e-6, 1e-6,
                       std::string("grad with bad ids ") + dtype_name(dt));
  }
}

TEST(Embedding, BackwardMatchesReference) {
  Rng rng(13);
  struct Case {
    int64_t vocab, hidden, n, distinct;
  };
  // distinct = how many different ids appear; 1 puts every token in one bucket.
  const Case cases[] = {{1, 1, 1, 1},      {7, 13, 37, 7},   {61, 37, 61, 3},   {61, 300, 200, 1},
                        {1000, 7, 13, 13}, {37, 520, 97, 5}, {3000, 3, 2500, 2}};
  for (const auto& c : cases) {
    for (DType dt : {DType::I32, DType::I64}) {
      const auto w = test::as_f32(rng.uniform(static_cast<size_t>(c.vocab * c.hidden)));
      // Spread the few ids over the vocabulary so that empty rows sit between used ones.
      auto ids = random_ids(rng, static_cast<size_t>(c.n), c.distinct);
      for (auto& id : ids) id = (id * 7919) % c.vocab;
      const auto dy = test::as_f32(rng.uniform(static_cast<size_t>(c.n * c.hidden)));
      auto grads = test::gpu_grads(
          [&](std::vector<Tensor>& in) {
            return ops::embedding(in[0], ids_tensor(ids, {c.n}, dt));
          },
          {test::to_gpu(w, {c.vocab, c.hidden})}, test::to_gpu(dy, {c.n, c.hidden}));
      expect_within(grads[0], ref::embedding_backward(ids, dy, c.vocab, c.hidden),
                    sum_tolerance(ids, dy, c.vocab, c.hidden),
                    "V=" + std::to_string(c.vocab) + " H=" + std::to_string(c.hidden) +
                        " N=" + std::to_string(c.n) + " " + dtype_name(dt));
    }
  }
}

TEST(Embedding, ReferenceBackwardMatchesFiniteDifferences) {
  Rng rng(14);
  const int64_t vocab = 5, hidden = 3;
  const std::vector<int64_t> ids = {4, 1, 4, 0, 4, 2};
  const auto w = rng.uniform(vocab * hidden);
  const auto dy = rng.uniform(ids.size() * hidden);
  const auto numeric = test::numeric_grad(
      [&](const std::vector<double>& x) { return ref::embedding(x, vocab, hidden, ids); }, w, dy);
  test::expect_close(ref::embedding_backward(ids, dy, vocab, hidden), numeric, 1e-8, 1e-7,
                     "reference backward vs finite differences");
}

TEST(Embedding, AccumulatesIntoExistingGradient) {
  Rng rng(15);
  const int64_t vocab = 61, hidden = 37, n = 101;
  auto ids = random_ids(rng, n, 9);  // rows 9..60 get no tokens
  const auto dy = test::as_f32(rng.uniform(n * hidden));
  const auto old = test::as_f32(rng.uniform(vocab * hidden, -3, 3));
  for (DType dt : {DType::I32, DType::I64}) {
    Tensor grad = test::to_gpu(old, {vocab, hidden});
    ops::embedding_backward(ids_tensor(ids, {n}, dt), test::to_gpu(dy, {n, hidden}), grad, true);
    const auto got = grad.to_double();
    auto want = ref::embedding_backward(ids, dy, vocab, hidden);
    auto tol = sum_tolerance(ids, dy, vocab, hidden);
    for (size_t i = 0; i < want.size(); ++i) {
      want[i] += old[i];
      tol[i] += 4e-7 * std::fabs(want[i]);
    }
    expect_within(got, want, tol, std::string("accumulate ") + dtype_name(dt));
    for (int64_t v = 9; v < vocab; ++v)
      for (int64_t c = 0; c < hidden; ++c)
        ASSERT_EQ(got[v * hidden + c], old[v * hidden + c]) << "untouched row " << v << " changed";
  }
  // Through the tape: a leaf's gradient accumulates across two backward passes.
  Tensor w = test::to_gpu(test::as_f32(rng.uniform(vocab * hidden)), {vocab, hidden});
  w.set_requires_grad(true);
  for (int pass = 0; pass < 2; ++pass) {
    autograd::Tape tape;
    Tensor out;
    {
      autograd::TapeScope scope(tape);
      out = ops::embedding(w, ids_tensor(ids, {n}, DType::I64));
    }
    tape.backward(out, test::to_gpu(dy, {n, hidden}));
  }
  auto want = ref::embedding_backward(ids, dy, vocab, hidden);
  auto tol = sum_tolerance(ids, dy, vocab, hidden);
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] *= 2;
    tol[i] = 2 * tol[i] + 2.4e-7 * std::fabs(want[i]);
  }
  expect_within(w.grad().to_double(), want, tol, "two passes through the tape");
}

TEST(Embedding, PaddingIdxGetsNoGradient) {
  Rng rng(18);
  const int64_t vocab = 11, hidden = 9, n = 40;
  auto ids = random_ids(rng, n, 4);  // ids 0..3: the padding row 2 is used often
  const auto w = test::as_f32(rng.uniform(vocab * hidden));
  const auto dy = test::as_f32(rng.uniform(n * hidden));
  const auto want = ref::embedding_backward(ids, dy, vocab, hidden, 2);
  for (int64_t c = 0; c < hidden; ++c) ASSERT_EQ(want[2 * hidden + c], 0.0);
  // torch's padding_idx = -9 is row 2 of 11.
  for (int64_t padding_idx : {int64_t{2}, int64_t{-9}}) {
    Tensor out;
    auto grads = test::gpu_grads(
        [&](std::vector<Tensor>& in) {
          out = ops::embedding(in[0], ids_tensor(ids, {n}, DType::I32), padding_idx);
          return out;
        },
        {test::to_gpu(w, {vocab, hidden})}, test::to_gpu(dy, {n, hidden}));
    EXPECT_EQ(out.to_double(), ref::embedding(w, vocab, hidden, ids)) << "lookup is unchanged";
    expect_within(grads[0], want, sum_tolerance(ids, dy, vocab, hidden),
                  "padding_idx " + std::to_string(padding_idx));
  }
  // Accumulating leaves the padding row as it was.
  const auto old = test::as_f32(rng.uniform(vocab * hidden));
  Tensor grad = test::to_gpu(old, {vocab, hidden});
  ops::embedding_backward(ids_tensor(ids, {n}, DType::I64), test::to_gpu(dy, {n, hidden}), grad,
                          true, 2);
  const auto got = grad.to_double();
  for (int64_t c = 0; c < hidden; ++c) EXPECT_EQ(got[2 * hidden + c], old[2 * hidden + c]);
  Tensor wt = test::to_gpu(w, {vocab, hidden});
  EXPECT_THROW(ops::embedding(wt, ids_tensor(ids, {n}, DType::I32), 11), Error);
  EXPECT_THROW(ops::embedding(wt, ids_tensor(ids, {n}, DType::I32), -12), Error);
}

TEST(Embedding, BackwardIsBitwiseDeterministic) {
  Rng rng(16);
  const int64_t vocab = 500, hidden = 129, n = 3001;
  auto ids = random_ids(rng, n, 6);  // a few hot ids with ~500 tokens each
  for (size_t i = 0; i < ids.size(); i += 3) ids[i] = rng.ints(1, 0, vocab - 1)[0];
  Tensor idt = ids_tensor(ids, {n}, DType::I32);
  Tensor dy = test::to_gpu(rng.normal(n * hidden, 10.0), {n, hidden});
  Tensor a = Tensor::empty({vocab, hidden}), b = Tensor::empty({vocab, hidden});
  ops::embedding_backward(idt, dy, a, false);
  ops::embedding_backward(idt, dy, b, false);
  test::expect_bitwise_equal(a, b, "embedding backward twice");
}

TEST(Embedding, LargeCaseMatchesReference) {
  Rng rng(17);
  const int64_t vocab = 30000, hidden = 257, n = 5000;
  // Zipf-like ids: a handful of very frequent tokens and a long tail.
  std::vector<int64_t> ids(n);
  for (auto& id : ids) {
    const double u = rng.uniform(1, 0.0, 1.0)[0];
    id = static_cast<int64_t>(std::pow(static_cast<double>(vocab), u * u * u)) - 1;
  }
  const auto w = test::as_f32(rng.uniform(vocab * hidden));
  const auto dy = test::as_f32(rng.uniform(n * hidden));
  Tensor wt = test::to_gpu(w, {vocab, hidden});
  Tensor idt = ids_tensor(ids, {n}, DType::I64);
  EXPECT_EQ(ops::embedding(wt, idt).to_double(), ref::embedding(w, vocab, hidden, ids));
  Tensor grad = Tensor::empty({vocab, hidden});
  ops::embedding_backward(idt, test::to_gpu(dy, {n, hidden}), grad, false);
  expect_within(grad.to_double(), ref::embedding_backward(ids, dy, vocab, hidden),
                sum_tolerance(ids, dy, vocab, hidden), "V=30000 H=257 N=5000");
}

TEST(Embedding, ErrorsOnBadInput) {
  Tensor w = Tensor::zeros({7, 3});
  Tensor ids = Tensor::from_host_i32(std::vector<int32_t>{1, 2}, {2});
  EXPECT_THROW(ops::embedding(Tensor(), ids), Error);
  EXPECT_THROW(ops::embedding(w, Tensor()), Error);
  EXPECT_THROW(ops::embedding(Tensor::zeros({7, 3}, DType::I32), ids), Error);
  EXPECT_THROW(ops::embedding(Tensor::zeros({21}), ids), Error);
  EXPECT_THROW(ops::embedding(w, Tensor::zeros({2})), Error);  // f32 ids
  Tensor g = Tensor::zeros({7, 3});
  EXPECT_THROW(ops::embedding_backward(ids, Tensor::zeros({2, 4}), g, false), Error);
  EXPECT_THROW(ops::embedding_backward(ids, Tensor::zeros({3, 3}), g, false), Error);
  EXPECT_THROW(ops::embedding_backward(ids, Tensor::zeros({2, 3}, DType::I32), g, false), Error);
  EXPECT_THROW(ops::embedding_backward(ids, Tensor::zeros({2, 3}), g.transpose(0, 1), false),
               Error);
  EXPECT_NO_THROW(ops::check_ids({0, 6, 3}, 7, "batch 0"));
  test::expect_error(
      [&] {
        ops::check_ids({0, 6, 7, 3}, 7, "batch 3");
      },
      {"batch 3", "id 7", "position 2"});
  EXPECT_THROW(ops::check_ids({-1}, 7, "x"), Error);
  // f32 tables, and f16 ones for inference (tests/unit/test_matmul_f16.cpp); nothing else.
  test::expect_error(
      [&] {
        ops::embedding(Tensor::zeros({7, 3}, DType::BF16), ids);
      },
      {"embedding", "bf16"});
}

}  // namespace
}  // namespace vkf
