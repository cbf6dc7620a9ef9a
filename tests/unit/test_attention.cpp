// Fused attention vs the double CPU reference: forward and dq/dk/dv over odd shapes (GQA, MQA,
// head dims of every kernel variant, Tq != Tk), padding (right, and left so that whole rows see no
// key), sliding windows, soft-capping and the non-causal mode, for the register-tiled kernels
// (both their subgroup and their workgroup-barrier builds) and the plain ones; the reference
// backward against central finite differences; determinism; and the errors raised on bad input.
#include <cmath>
#include <cstdlib>
#include <string>

#include "attention_cases.h"
#include "core/autograd.h"
#include "ops/attention.h"
#include "ops/attention_coopmat.h"
#include "ops/attention_ref.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {

using ops::AttentionOptions;
using namespace test::attention;

// Cover each kernel variant (padded head dims 32, 64, 128, 256), tiles left partly empty (sizes 1
// and primes), GQA and MQA, and every mask kind. Sizes stay moderate for lavapipe.
const Case kCases[] = {
    {"t1", 2, 1, 1, 4, 4, 8, true, 0, 0, Pad::kNone, 1},
    {"t5_d3_window2_pad", 2, 5, 5, 2, 1, 3, true, 2, 0, Pad::kRight, 1},
    {"t7_gqa_right_pad", 2, 7, 7, 6, 2, 10, true, 0, 0, Pad::kRight, 1},
    {"t37_mqa_left_pad", 2, 37, 37, 8, 1, 48, true, 0, 0, Pad::kLeft, 1},
    {"t65_window16", 2, 65, 65, 4, 4, 64, true, 16, 0, Pad::kNone, 1},
    {"t130_gqa_d128_right_pad", 2, 130, 130, 6, 2, 128, true, 0, 0, Pad::kRight, 1},
    {"t37_noncausal_right_pad", 2, 37, 37, 4, 4, 64, false, 0, 0, Pad::kRight, 1},
    {"t13_window1", 2, 13, 13, 4, 2, 32, true, 1, 0, Pad::kNone, 1},
    {"t37_window5_softcap50_d80", 2, 37, 37, 6, 2, 80, true, 5, 50, Pad::kRight, 8},
    {"t65_softcap5_d96", 2, 65, 65, 4, 1, 96, true, 0, 5, Pad::kLeft, 3},
    {"kv_cache_13_of_61", 2, 13, 61, 8, 1, 64, true, 0, 0, Pad::kLeft, 1},
    {"decode_1_of_130_window16", 2, 1, 130, 8, 2, 128, true, 16, 0, Pad::kRight, 1},
    {"noncausal_7_of_37", 2, 7, 37, 4, 2, 10, false, 0, 0, Pad::kNone, 1},
    {"more_queries_than_keys", 1, 9, 5, 2, 1, 8, true, 0, 0, Pad::kNone, 1},
    {"d256_softcap50", 1, 19, 19, 2, 1, 256, true, 0, 50, Pad::kNone, 8},
    // Soft-capping and a window through the register-tiled kernels (head_dim <= 64).
    {"t41_softcap5_window9_d40_gqa", 2, 41, 41, 6, 2, 40, true, 9, 5, Pad::kRight, 3},
    // Edges of the register-tiled kernels' tiles (32 queries or keys per workgroup, tiles of 16
    // or 32, 64 on large devices): lengths that are no multiple of any tile, windows that cross
    // tiles, GQA ratios 4 and 3, head dims off the 4-float chunks (6, 17, 61) and inside the last
    // chunks (24), query blocks that see no key at all, Tq != Tk; and tiles that every row sees
    // whole (no padding, no window, past the causal diagonal or non-causal), which skip the
    // visibility tests.
    {"t100_gqa4_d24", 2, 100, 100, 8, 2, 24, true, 0, 0, Pad::kNone, 1},
    {"t80_noncausal_softcap20_gqa2", 1, 80, 80, 4, 2, 64, false, 0, 20, Pad::kNone, 4},
    {"kv_cache_45_of_83_gqa3_d6_window40", 2, 45, 83, 6, 2, 6, true, 40, 0, Pad::kRight, 1},
    {"t97_window33_mqa_d17_softcap", 1, 97, 97, 4, 1, 17, true, 33, 8, Pad::kLeft, 3},
    {"t70_noncausal_window20_d61", 1, 70, 70, 2, 2, 61, false, 20, 0, Pad::kRight, 1},
    {"queries_75_keys_40_d16_gqa3", 1, 75, 40, 3, 1, 16, true, 0, 0, Pad::kNone, 1},
    // The backward kernels' two halves (one forms p, the other dp and ds from it) over 3 batches
    // and 48 rows (a last tile of 16 where tiles are 32), with GQA 3: dk/dv partials per query
    // head to add over each group.
    {"t48_b3_gqa3_halves", 3, 48, 48, 6, 2, 64, true, 0, 0, Pad::kNone, 1},
};

TEST(Attention, ForwardMatchesReference) {
  uint64_t seed = 100;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    // Head dims up to 64 run the register-tiled kernels in Fast math mode (the default).
    if (c.d <= 64) {
      EXPECT_EQ(ops::detail::attention_kernels(c.d, 0), ops::detail::AttentionKernels::Fast);
    }
    const Inputs in = make_inputs(c, ++seed);
    const Tensor out = ops::attention(
        test::to_gpu(in.q, q_shape(in.shape)), test::to_gpu(in.k, kv_shape(in.shape)),
        test::to_gpu(in.v, kv_shape(in.shape)), mask_tensor(in), in.opts);
    ASSERT_EQ(out.shape(), q_shape(in.shape));
    test::expect_close(out, ref::attention(in.q, in.k, in.v, in.mask, in.shape, in.opts), 2e-5,
                       1e-4, std::string(c.name) + " out");
  }
}

TEST(Attention, BackwardMatchesReference) {
  uint64_t seed = 200;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Inputs in = make_inputs(c, ++seed);
    const Tensor mask = mask_tensor(in);
    const auto grads = test::gpu_grads(
        [&](std::vector<Tensor>& x) { return ops::attention(x[0], x[1], x[2], mask, in.opts); },
        {test::to_gpu(in.q, q_shape(in.shape)), test::to_gpu(in.k, kv_shape(in.shape)),
         test::to_gpu(in.v, kv_shape(in.shape))},
        test::to_gpu(in.dout, q_shape(in.shape)));
    const auto want =
        ref::attention_backward(in.q, in.k, in.v, in.mask, in.dout, in.shape, in.opts);
    test::expect_close(grads[0], want.dq, 1e-4, 5e-4, std::string(c.name) + " dq");
    test::expect_close(grads[1], want.dk, 1e-4, 5e-4, std::string(c.name) + " dk");
    test::expect_close(grads[2], want.dv, 1e-4, 5e-4, std::string(c.name) + " dv");
  }
}

// One forward and backward of a case under the current kernel choice against the references.
void expect_forward_and_backward_match_reference(const Inputs& in, const std::string& name) {
  const Tensor mask = mask_tensor(in);
  Tensor out;
  const auto grads = test::gpu_grads(
      [&](std::vector<Tensor>& x) {
        return out = ops::attention(x[0], x[1], x[2], mask, in.opts);
      },
      {test::to_gpu(in.q, q_shape(in.shape)), test::to_gpu(in.k, kv_shape(in.shape)),
       test::to_gpu(in.v, kv_shape(in.shape))},
      test::to_gpu(in.dout, q_shape(in.shape)));
  test::expect_close(out, ref::attention(in.q, in.k, in.v, in.mask, in.shape, in.opts), 2e-5,
                     1e-4, name + " out");
  const auto want =
      ref::attention_backward(in.q, in.k, in.v, in.mask, in.dout, in.shape, in.opts);
  test::expect_close(grads[0], want.dq, 1e-4, 5e-4, name + " dq");
  test::expect_close(grads[1], want.dk, 1e-4, 5e-4, name + " dk");
  test::expect_close(grads[2], want.dv, 1e-4, 5e-4, name + " dv");
}

// Fast math mode runs the register-tiled kernels for head_dim <= 64 (the cases above); the plain
// kernels serve larger heads, Precise mode and VKF_ATTENTION=plain. Check the plain ones on the
// small-head cases too.
TEST(Attention, PlainKernelsMatchReferenceForSmallHeads) {
  ::setenv("VKF_ATTENTION", "plain", 1);
  uint64_t seed = 300;
  for (const Case& c : kCases) {
    if (c.d > 64) continue;
    SCOPED_TRACE(c.name);
    expect_forward_and_backward_match_reference(make_inputs(c, ++seed), c.name);
  }
  ::unsetenv("VKF_ATTENTION");
}

// The register-tiled kernels synchronise a row group through subgroup shuffles and barriers where
// the device has subgroups of 8 or more (lavapipe, NVIDIA), else through shared memory and
// workgroup barriers: check the second build here too, forward and backward.
TEST(Attention, FastKernelsWithWorkgroupBarriersMatchReference) {
  struct BarrierBuilds {
    BarrierBuilds() {
      ops::detail::set_fast_attention_builds(ops::detail::FastAttentionBuilds::WorkgroupBarriers);
    }
    ~BarrierBuilds() { ops::detail::set_fast_attention_builds(ops::detail::FastAttentionBuilds::Auto); }
  } barrier_builds;
  EXPECT_NE(ops::detail::fast_attention_modules().fwd.find("_shared"), std::string::npos);
  uint64_t seed = 700;
  for (const Case& c : kCases) {
    if (c.d > 64) continue;
    SCOPED_TRACE(c.name);
    ASSERT_EQ(ops::detail::attention_kernels(c.d, 0), ops::detail::AttentionKernels::Fast);
    expect_forward_and_backward_match_reference(make_inputs(c, ++seed), c.name);
  }
}

// The fp32 register-tiled backward takes dq from the score gradients its dk/dv kernel stores
// (attention_fast_bwd_dq_ds.comp; Auto does so for every case above) or recomputes them
// (attention_fast_bwd_dq.comp): both must give the same bits, and dk, dv and the output must not
// change either. Over every small-head case (padding, windows, soft-caps, GQA, Tq != Tk, tile
// edges, head dims off the vec4 chunks), and with the workgroup-barrier builds (16-query dk/dv
// tiles).
TEST(Attention, FastDqFromStoredScoreGradientsGivesTheRecomputedBits) {
  using ops::detail::FastDqSource;
  struct ResetSource {
    ~ResetSource() {
      ops::detail::set_fast_dq_source(FastDqSource::Auto);
      ops::detail::set_fast_attention_builds(ops::detail::FastAttentionBuilds::Auto);
    }
  } reset;
  uint64_t seed = 900;
  for (const auto builds : {ops::detail::FastAttentionBuilds::Auto,
                            ops::detail::FastAttentionBuilds::WorkgroupBarriers}) {
    ops::detail::set_fast_attention_builds(builds);
    for (const Case& c : kCases) {
      if (c.d > 64) continue;
      SCOPED_TRACE(c.name);
      expect_deterministic(make_inputs(c, ++seed), [](int run) {
        ops::detail::set_fast_dq_source(run == 0 ? FastDqSource::Recompute : FastDqSource::Stored);
      });
    }
  }
}

// Auto stores the score gradients up to fast_stored_ds_max_bytes() (1 GiB, or a 32nd of the
// device's memory where that is less) and recomputes beyond.
TEST(Attention, FastDqSourceAutoFollowsTheBufferSize) {
  ops::detail::set_fast_dq_source(ops::detail::FastDqSource::Auto);
  const uint64_t cap = ops::detail::fast_stored_ds_max_bytes();
  EXPECT_LE(cap, ops::detail::kFastStoredDsMaxBytes);
  EXPECT_GE(cap, uint64_t{1} << 20);  // every device we test on has more than 32 MiB
  EXPECT_TRUE(ops::detail::fast_dq_from_stored_ds(cap));
  EXPECT_FALSE(ops::detail::fast_dq_from_stored_ds(cap + 1));
}

// The reference backward against central differences of the reference forward, on tiny sizes.
TEST(Attention, ReferenceBackwardMatchesFiniteDifferences) {
  const Case tiny[] = {
      {"causal", 1, 5, 5, 2, 1, 3, true, 0, 0, Pad::kNone, 1},
      {"window2", 1, 5, 5, 2, 1, 3, true, 2, 0, Pad::kNone, 1},
      {"softcap", 1, 5, 5, 2, 1, 3, true, 0, 1.5f, Pad::kNone, 3},
      {"noncausal_right_pad", 2, 5, 5, 2, 1, 3, false, 0, 0, Pad::kRight, 1},
      {"left_pad_empty_rows", 2, 5, 5, 2, 1, 3, true, 0, 0, Pad::kLeft, 1},
      {"kv_cache", 1, 3, 5, 2, 1, 3, true, 3, 2.0f, Pad::kNone, 2},
  };
  uint64_t seed = 300;
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

// A left-padded row under a causal mask: its first queries see no key, so they output exact zeros
// and send no gradient; the reference agrees (checked above), and here the zeros are checked
// directly rather than through a tolerance.
TEST(Attention, RowsWithoutKeysAreZero) {
  const Case c{"left_pad", 2, 11, 11, 4, 2, 10, true, 0, 0, Pad::kLeft, 1};
  const Inputs in = make_inputs(c, 400);
  const Tensor mask = mask_tensor(in);
  const int64_t empty_rows = 5;  // row b = 1 drops its first 3 + 2 keys
  ASSERT_EQ(in.mask[static_cast<size_t>(c.tk + empty_rows - 1)], 0);
  ASSERT_EQ(in.mask[static_cast<size_t>(c.tk + empty_rows)], 1);
  Tensor q = test::to_gpu(in.q, q_shape(in.shape)).set_requires_grad(true);
  Tensor k = test::to_gpu(in.k, kv_shape(in.shape)).set_requires_grad(true);
  Tensor v = test::to_gpu(in.v, kv_shape(in.shape)).set_requires_grad(true);
  autograd::Tape tape;
  Tensor out;
  {
    autograd::TapeScope scope(tape);
    out = ops::attention(q, k, v, mask, in.opts);
  }
  tape.backward(out, test::to_gpu(in.dout, q_shape(in.shape)));
  const auto o = out.to_double();
  const auto dq = q.grad().to_double();
  const size_t row = static_cast<size_t>(c.hq * c.d);  // one query position, all heads
  for (int64_t i = 0; i < c.tq; ++i)
    for (size_t e = 0; e < row; ++e) {
      const size_t at = static_cast<size_t>(c.tq + i) * row + e;  // batch row 1
      if (i < empty_rows) {
        EXPECT_EQ(o[at], 0.0) << "query " << i;
        EXPECT_EQ(dq[at], 0.0) << "query " << i;
      } else {
        EXPECT_TRUE(std::isfinite(o[at]));
      }
    }
}

// Non-contiguous inputs (q, k, v as [B, H, T, D] transposed to [B, T, H, D]) and an I64 mask give
// the same result, and the gradient reaches the original tensors.
TEST(Attention, StridedInputsAndI64Mask) {
  const Case c{"strided", 2, 13, 13, 4, 2, 10, true, 0, 0, Pad::kRight, 1};
  const Inputs in = make_inputs(c, 500);
  const Tensor mask32 = mask_tensor(in);
  const Tensor mask64 = Tensor::from_host_i64(in.mask, {c.b, c.tk});
  const Tensor q = test::to_gpu(in.q, q_shape(in.shape));
  const Tensor k = test::to_gpu(in.k, kv_shape(in.shape));
  const Tensor v = test::to_gpu(in.v, kv_shape(in.shape));
  const Tensor plain = ops::attention(q, k, v, mask32, in.opts);
  const Tensor seed = test::to_gpu(in.dout, q_shape(in.shape));
  const auto grads = test::gpu_grads(
      [&](std::vector<Tensor>& x) {
        return ops::attention(x[0].transpose(1, 2), x[1].transpose(1, 2), x[2].transpose(1, 2),
                              mask64, in.opts);
      },
      {q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous(),
       v.transpose(1, 2).contiguous()},
      seed);
  const Tensor strided =
      ops::attention(q.transpose(1, 2).contiguous().transpose(1, 2),
                     k.transpose(1, 2).contiguous().transpose(1, 2),
                     v.transpose(1, 2).contiguous().transpose(1, 2), mask64, in.opts);
  test::expect_bitwise_equal(strided, plain, "strided inputs with an i64 mask");
  const auto want = ref::attention_backward(in.q, in.k, in.v, in.mask, in.dout, in.shape, in.opts);
  // Gradients come back in the [B, H, T, D] layout of the original tensors.
  const auto to_bhtd = [](const std::vector<double>& x, int64_t b, int64_t t, int64_t h,
                          int64_t d) {
    std::vector<double> y(x.size());
    for (int64_t ib = 0; ib < b; ++ib)
      for (int64_t it = 0; it < t; ++it)
        for (int64_t ih = 0; ih < h; ++ih)
          for (int64_t id = 0; id < d; ++id)
            y[static_cast<size_t>(((ib * h + ih) * t + it) * d + id)] =
                x[static_cast<size_t>(((ib * t + it) * h + ih) * d + id)];
    return y;
  };
  test::expect_close(grads[0], to_bhtd(want.dq, c.b, c.tq, c.hq, c.d), 1e-4, 5e-4, "dq");
  test::expect_close(grads[1], to_bhtd(want.dk, c.b, c.tk, c.hkv, c.d), 1e-4, 5e-4, "dk");
  test::expect_close(grads[2], to_bhtd(want.dv, c.b, c.tk, c.hkv, c.d), 1e-4, 5e-4, "dv");
}

TEST(Attention, Deterministic) {
  const Case c{"det", 2, 37, 37, 6, 2, 48, true, 16, 30, Pad::kRight, 4};
  expect_deterministic(make_inputs(c, 600));
}

TEST(Attention, RejectsBadInput) {
  const AttentionOptions opts{.scale = 0.5f};
  const Tensor q = Tensor::zeros({2, 5, 4, 8});
  const Tensor k = Tensor::zeros({2, 7, 2, 8});
  const Tensor v = Tensor::zeros({2, 7, 2, 8});
  const Tensor mask = Tensor::zeros({2, 7}, DType::I32);
  EXPECT_NO_THROW(ops::attention(q, k, v, mask, opts));
  // Head dim mismatch, heads not divisible, k/v mismatch, batch mismatch, head dim too large.
  EXPECT_THROW(
      ops::attention(q, Tensor::zeros({2, 7, 2, 6}), Tensor::zeros({2, 7, 2, 6}), {}, opts), Error);
  EXPECT_THROW(
      ops::attention(q, Tensor::zeros({2, 7, 3, 8}), Tensor::zeros({2, 7, 3, 8}), {}, opts), Error);
  EXPECT_THROW(ops::attention(q, k, Tensor::zeros({2, 6, 2, 8}), {}, opts), Error);
  EXPECT_THROW(
      ops::attention(q, Tensor::zeros({3, 7, 2, 8}), Tensor::zeros({3, 7, 2, 8}), {}, opts), Error);
  EXPECT_THROW(ops::attention(Tensor::zeros({1, 2, 1, 264}), Tensor::zeros({1, 2, 1, 264}),
                              Tensor::zeros({1, 2, 1, 264}), {}, opts),
               Error);
  // Mask: wrong shape, wrong dtype.
  EXPECT_THROW(ops::attention(q, k, v, Tensor::zeros({2, 5}, DType::I32), opts), Error);
  EXPECT_THROW(ops::attention(q, k, v, Tensor::zeros({2, 7, 1}, DType::I32), opts), Error);
  EXPECT_THROW(ops::attention(q, k, v, Tensor::zeros({2, 7}), opts), Error);
  // Wrong dtype, rank, undefined or empty tensors.
  EXPECT_THROW(ops::attention(Tensor::zeros({2, 5, 4, 8}, DType::F16), k, v, {}, opts), Error);
  EXPECT_THROW(ops::attention(Tensor::zeros({10, 4, 8}), k, v, {}, opts), Error);
  EXPECT_THROW(ops::attention({}, k, v, {}, opts), Error);
  EXPECT_THROW(
      ops::attention(q, Tensor::zeros({2, 0, 2, 8}), Tensor::zeros({2, 0, 2, 8}), {}, opts), Error);
  // Options.
  EXPECT_THROW(ops::attention(q, k, v, {}, {.scale = NAN}), Error);
  EXPECT_THROW(ops::attention(q, k, v, {}, AttentionOptions{}), Error);  // scale left unset
  EXPECT_THROW(ops::attention(q, k, v, {}, {.scale = 0.5f, .sliding_window = -1}), Error);
  EXPECT_THROW(ops::attention(q, k, v, {}, {.scale = 0.5f, .softcap = -5}), Error);
  // Messages name the op and what was seen.
  test::expect_error(
      [&] {
        ops::attention(q, Tensor::zeros({2, 7, 3, 8}), Tensor::zeros({2, 7, 3, 8}), {}, opts);
      },
      {"attention", "[2, 7, 3, 8]"});
}

}  // namespace
}  // namespace vkf
