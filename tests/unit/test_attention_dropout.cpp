// Dropout of the attention probabilities inside the fused attention kernels, against the double
// CPU reference (which applies ref::dropout's mask to the [B, Hq, Tq, Tk] probabilities): forward
// and dq/dk/dv over every kernel variant, GQA, padding, windows, soft-capping and Tq < Tk, with
// counters crossing 2^32; the reference backward with dropout against finite differences; p = 0
// equal to no dropout bit for bit; determinism; and bad probabilities.
#include <cmath>
#include <string>

#include "core/autograd.h"
#include "ops/attention.h"
#include "ops/attention_ref.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {

using ops::AttentionOptions;

struct Case {
  const char* name;
  int64_t b, tq, tk, hq, hkv, d;
  int64_t window;
  float softcap;
  bool right_pad;
  float p;
  uint64_t offset;
};

struct Inputs {
  ref::AttentionShape shape;
  AttentionOptions opts;
  std::vector<double> q, k, v, dout;
  std::vector<int64_t> mask;
  Tensor mask_gpu;
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  test::Rng rng(seed);
  Inputs in;
  in.shape = {c.b, c.tq, c.tk, c.hq, c.hkv, c.d};
  in.opts.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  in.opts.sliding_window = c.window;
  in.opts.softcap = c.softcap;
  in.opts.dropout_p = c.p;
  in.opts.dropout_seed = 0x9e3779b97f4a7c15ull ^ seed;
  in.opts.dropout_offset = c.offset;
  in.q =
      test::as_f32(rng.normal(static_cast<size_t>(c.b * c.tq * c.hq * c.d), c.softcap > 0 ? 4 : 1));
  in.k = test::as_f32(rng.normal(static_cast<size_t>(c.b * c.tk * c.hkv * c.d)));
  in.v = test::as_f32(rng.normal(static_cast<size_t>(c.b * c.tk * c.hkv * c.d)));
  in.dout = test::as_f32(rng.normal(in.q.size()));
  if (c.right_pad) {
    in.mask.assign(static_cast<size_t>(c.b * c.tk), 1);
    std::vector<int32_t> m32(in.mask.size(), 1);
    for (int64_t b = 1; b < c.b; ++b)
      for (int64_t j = c.tk - std::min<int64_t>(3 * b, c.tk - 1); j < c.tk; ++j)
        in.mask[static_cast<size_t>(b * c.tk + j)] = m32[static_cast<size_t>(b * c.tk + j)] = 0;
    in.mask_gpu = Tensor::from_host_i32(m32, {c.b, c.tk});
  }
  return in;
}

Shape q_shape(const ref::AttentionShape& s) {
  return {s.batch, s.tq, s.hq, s.d};
}
Shape kv_shape(const ref::AttentionShape& s) {
  return {s.batch, s.tk, s.hkv, s.d};
}

constexpr uint64_t kNear32 = (1ull << 32) - 1500;  // counters of these calls cross 2^32

const Case kCases[] = {
    {"t7_gqa_pad_d10", 2, 7, 7, 6, 2, 10, 0, 0, true, 0.1f, 0},
    {"t37_mqa_d48_half", 1, 37, 37, 8, 1, 48, 0, 0, false, 0.5f, kNear32},
    {"t65_window16_d64", 2, 65, 65, 4, 4, 64, 16, 0, true, 0.2f, 12345},
    {"t19_softcap_d96", 1, 19, 19, 4, 2, 96, 0, 5, false, 0.3f, kNear32},
    {"kv_cache_9_of_41_d128", 2, 9, 41, 4, 2, 128, 0, 0, true, 0.25f, 7},
    {"t11_d256", 1, 11, 11, 2, 1, 256, 0, 0, false, 0.4f, kNear32},
    {"t5_all_dropped", 1, 5, 5, 2, 1, 8, 0, 0, false, 1.0f, 0},
};

Tensor run_attention(const Inputs& in) {
  return ops::attention(test::to_gpu(in.q, q_shape(in.shape)),
                        test::to_gpu(in.k, kv_shape(in.shape)),
                        test::to_gpu(in.v, kv_shape(in.shape)), in.mask_gpu, in.opts);
}

TEST(AttentionDropout, ForwardMatchesReference) {
  uint64_t seed = 10;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Inputs in = make_inputs(c, ++seed);
    const auto want = ref::attention(in.q, in.k, in.v, in.mask, in.shape, in.opts);
    test::expect_close(run_attention(in), want, 5e-5, 2e-4, std::string(c.name) + " out");
    // The reference really drops something (and keeps something, below p = 1).
    AttentionOptions plain = in.opts;
    plain.dropout_p = 0;
    EXPECT_GT(test::max_abs_diff(want, ref::attention(in.q, in.k, in.v, in.mask, in.shape, plain)),
              1e-3);
  }
}

TEST(AttentionDropout, BackwardMatchesReference) {
  uint64_t seed = 20;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Inputs in = make_inputs(c, ++seed);
    const auto grads = test::gpu_grads(
        [&](std::vector<Tensor>& x) {
          return ops::attention(x[0], x[1], x[2], in.mask_gpu, in.opts);
        },
        {test::to_gpu(in.q, q_shape(in.shape)), test::to_gpu(in.k, kv_shape(in.shape)),
         test::to_gpu(in.v, kv_shape(in.shape))},
        test::to_gpu(in.dout, q_shape(in.shape)));
    const auto want =
        ref::attention_backward(in.q, in.k, in.v, in.mask, in.dout, in.shape, in.opts);
    test::expect_close(grads[0], want.dq, 2e-4, 1e-3, std::string(c.name) + " dq");
    test::expect_close(grads[1], want.dk, 2e-4, 1e-3, std::string(c.name) + " dk");
    test::expect_close(grads[2], want.dv, 2e-4, 1e-3, std::string(c.name) + " dv");
  }
}

// With the mask fixed by (seed, offset), attention is smooth in q, k, v: the reference backward
// must match central differences of the reference forward.
TEST(AttentionDropout, ReferenceBackwardMatchesFiniteDifferences) {
  const Case tiny[] = {
      {"causal", 1, 5, 5, 2, 1, 3, 0, 0, false, 0.4f, 3},
      {"softcap_window_pad", 2, 5, 5, 2, 1, 3, 2, 1.5f, true, 0.3f, kNear32},
      {"kv_cache", 1, 3, 6, 2, 2, 3, 0, 0, false, 0.5f, 1},
  };
  uint64_t seed = 30;
  for (const Case& c : tiny) {
    SCOPED_TRACE(c.name);
    const Inputs in = make_inputs(c, ++seed);
    const auto g = ref::attention_backward(in.q, in.k, in.v, in.mask, in.dout, in.shape, in.opts);
    const auto fq = [&](const std::vector<double>& x) {
      return ref::attention(x, in.k, in.v, in.mask, in.shape, in.opts);
    };
    const auto fk = [&](const std::vector<double>& x) {
      return ref::attention(in.q, x, in.v, in.mask, in.shape, in.opts);
    };
    const auto fv = [&](const std::vector<double>& x) {
      return ref::attention(in.q, in.k, x, in.mask, in.shape, in.opts);
    };
    test::expect_close(g.dq, test::numeric_grad(fq, in.q, in.dout), 1e-7, 1e-6, "dq");
    test::expect_close(g.dk, test::numeric_grad(fk, in.k, in.dout), 1e-7, 1e-6, "dk");
    test::expect_close(g.dv, test::numeric_grad(fv, in.v, in.dout), 1e-7, 1e-6, "dv");
  }
}

TEST(AttentionDropout, ZeroProbabilityIsPlainAttentionAndRunsRepeat) {
  const Case c{"det", 2, 23, 23, 4, 2, 32, 0, 0, true, 0.3f, 99};
  Inputs in = make_inputs(c, 40);
  const Tensor with = run_attention(in);
  test::expect_bitwise_equal(with, run_attention(in), "dropout forward twice");
  Inputs other = in;
  other.opts.dropout_offset += 1;
  EXPECT_GT(test::max_abs_diff(run_attention(other).to_double(), with.to_double()), 1e-3);
  Inputs zero = in;
  zero.opts.dropout_p = 0;
  Inputs none = in;
  none.opts = AttentionOptions{.scale = in.opts.scale};
  test::expect_bitwise_equal(run_attention(zero), run_attention(none), "p = 0 vs no dropout");
  // Backward twice: the same bits.
  Tensor q = test::to_gpu(in.q, q_shape(in.shape)).set_requires_grad(true);
  Tensor k = test::to_gpu(in.k, kv_shape(in.shape)).set_requires_grad(true);
  Tensor v = test::to_gpu(in.v, kv_shape(in.shape)).set_requires_grad(true);
  std::vector<Tensor> runs[2];
  for (auto& run : runs) {
    for (Tensor* t : {&q, &k, &v}) t->zero_grad();
    autograd::Tape tape;
    Tensor out;
    {
      autograd::TapeScope scope(tape);
      out = ops::attention(q, k, v, in.mask_gpu, in.opts);
    }
    tape.backward(out, test::to_gpu(in.dout, q_shape(in.shape)));
    run = {q.grad(), k.grad(), v.grad()};
  }
  for (size_t i = 0; i < 3; ++i) test::expect_bitwise_equal(runs[0][i], runs[1][i], "gradient");
}

TEST(AttentionDropout, RejectsBadProbability) {
  const Tensor q = Tensor::zeros({1, 3, 2, 8});
  const Tensor kv = Tensor::zeros({1, 3, 2, 8});
  test::expect_error([&] { ops::attention(q, kv, kv, {}, {.scale = 0.5f, .dropout_p = 1.5f}); },
                     {"attention", "dropout_p", "[0, 1]"});
  test::expect_error([&] { ops::attention(q, kv, kv, {}, {.scale = 0.5f, .dropout_p = -0.5f}); },
                     {"attention", "dropout_p"});
}

}  // namespace
}  // namespace vkf
