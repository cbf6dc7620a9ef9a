// The tensor-core attention kernels (F16 matmul precision; flash_attn_*.comp) against a CPU
// reference in double on f16-rounded q, k, v and dout (rounded with core/dtype's
// f32_to_f16_bits, as the kernels and the tensor-core GEMM round them), forward and all three
// gradients, within a per-element error bound derived below. On devices without cooperative
// matrices (lavapipe in CI) the kernels' emulated builds run: the same code with the fragment
// operations replaced by plain shared-memory arithmetic. Covers causal and not, GQA, sequence
// lengths that are not multiples of any tile, fewer queries than keys (and more), key padding
// (with rows that see no key), sliding windows, soft-capping, head dims 64, 40, 20 and 10;
// determinism; that the inputs really are rounded; and which kernels each setting routes to.
//
// The error bound. The kernels compute in f32 from exactly the rounded inputs the reference uses,
// and round two more things to f16: the probabilities p entering p v (forward) and p^T do (dv),
// and ds = p (dp - delta) d(score)/d(dot) entering ds k (dq) and ds^T q (dk). Rounding to nearest
// f16 changes x by at most 2^-11 |x| + 2^-25 (the second term for f16 subnormals), so per element
//   out_d:  2^-11 sum_j p_j |v_jd| + 2^-24 sum_j |v_jd|
//   dv_jd:  sum_{h,i} (2^-11 p_ij + 2^-24) |do_id|
//   dq_id:  scale sum_j |k_jd| (2^-11 |ds_ij| + 2^-24 + err(ds_ij))   (dk alike with q)
// plus the f32 arithmetic, counted at one ulp per addition (tensor cores need not round to
// nearest): r = 2^-17 scale max_j sum_d |q_d k_jd| + 2^-20 of relative error in each p (f32 dot
// products of D <= 64 terms, exp, the logsumexp), 2^-17 of sum |terms| in every f32 dot product
// over d (dp, delta), and 2^-15 of the magnitude of every sum the kernels accumulate (at most 256
// terms here). err(ds) = 2 r |ds| + p (error of dp + error of delta).
// delta = sum_d do_d o_d comes from the existing f32 kernel on the unrounded dout and the forward's
// output; the reference takes that output from the GPU forward (itself checked against its bound)
// so that the forward's error does not widen the backward's bound. The bounds are worst cases,
// usually far from reached; what makes the test sharp is that skipping the f16 rounding of the
// inputs, or running the fp32 kernels, lands outside them (asserted), as does any indexing or
// masking mistake.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "attention_cases.h"
#include "core/dtype.h"
#include "core/launch.h"
#include "ops/attention.h"
#include "ops/attention_coopmat.h"
#include "ops/attention_ref.h"
#include "ops/coopmat_layout.h"
#include "ops/matmul_coopmat.h"
#include "test_util.h"

namespace vkf {
namespace {

using ops::AttentionOptions;
using ops::detail::AttentionKernels;
using namespace test::attention;

// F16 precision with the tensor-core attention kernels, emulated where the device has no
// cooperative matrices; everything back to the defaults after, also when a check fails.
struct CoopmatScope {
  CoopmatScope() {
    set_matmul_precision(MatmulPrecision::F16);
    if (!ops::detail::coopmat_support().unsupported.empty())
      ops::detail::set_coopmat_emulation(true);
  }
  ~CoopmatScope() {
    set_matmul_precision(MatmulPrecision::F32);
    ops::detail::set_coopmat_emulation(false);
    ops::detail::set_f16_convert(ops::detail::F16Convert::Auto);
    ops::detail::set_flash_row_shuffle(true);
    ops::detail::set_flash_quad_rows(true);
  }
  CoopmatScope(const CoopmatScope&) = delete;
  CoopmatScope& operator=(const CoopmatScope&) = delete;
};

std::vector<double> f16_rounded(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    r[i] = f16_bits_to_f32(f32_to_f16_bits(static_cast<float>(v[i])));
  return r;
}

struct Expected {
  std::vector<double> value, tol;
};

// Scores of one query row against every key, in double on the rounded inputs: which keys it sees,
// the probabilities, the soft-cap derivative, and r, the relative f32 error bound of each p (see
// the header comment).
struct Row {
  std::vector<char> seen;
  std::vector<double> p, cap_grad;
  double r = 0;
  bool any = false;
};
struct Rounded {
  std::vector<double> q, k, v, dout;
};
Rounded rounded_inputs(const Inputs& in) {
  return {f16_rounded(in.q), f16_rounded(in.k), f16_rounded(in.v), f16_rounded(in.dout)};
}

size_t q_at(const ref::AttentionShape& s, int64_t b, int64_t i, int64_t h) {
  return static_cast<size_t>(((b * s.tq + i) * s.hq + h) * s.d);
}
size_t kv_at(const ref::AttentionShape& s, int64_t b, int64_t j, int64_t h) {
  return static_cast<size_t>(((b * s.tk + j) * s.hkv + h) * s.d);
}

// Error bounds (see the header comment): f16 rounding, f16 subnormal spacing, f32 dot products
// over d, f32 accumulated sums.
constexpr double kU11 = 1.0 / 2048, kU24 = 1.0 / 16777216, kDot = 1.0 / 131072, kSum = 1.0 / 32768;

Row score_row(const Inputs& in, const Rounded& x, int64_t b, int64_t h, int64_t i) {
  const auto& s = in.shape;
  const auto& o = in.opts;
  const int64_t hk = h / (s.hq / s.hkv), pos = i + s.tk - s.tq;
  Row row;
  row.seen.assign(static_cast<size_t>(s.tk), 0);
  row.p.assign(static_cast<size_t>(s.tk), 0.0);
  row.cap_grad.assign(static_cast<size_t>(s.tk), 1.0);
  std::vector<double> score(static_cast<size_t>(s.tk), 0.0);
  double m = -INFINITY, mag = 0;  // mag: max_j sum_d |q_d k_jd|
  for (int64_t j = 0; j < s.tk; ++j) {
    const auto jj = static_cast<size_t>(j);
    bool ok = in.mask.empty() || in.mask[static_cast<size_t>(b * s.tk + j)] != 0;
    if (o.causal && j > pos) ok = false;
    if (o.sliding_window > 0 && pos - j >= o.sliding_window) ok = false;
    if (!ok) continue;
    row.seen[jj] = 1;
    double dot = 0, abs_dot = 0;
    for (int64_t d = 0; d < s.d; ++d) {
      const double t = x.q[q_at(s, b, i, h) + d] * x.k[kv_at(s, b, j, hk) + d];
      dot += t;
      abs_dot += std::fabs(t);
    }
    mag = std::max(mag, abs_dot);
    double sc = dot * o.scale;
    if (o.softcap > 0) {
      const double t = std::tanh(sc / o.softcap);
      sc = o.softcap * t;
      row.cap_grad[jj] = 1.0 - t * t;
    }
    score[jj] = sc;
    m = std::max(m, sc);
  }
  row.any = m != -INFINITY;
  if (!row.any) return row;
  double l = 0;
  for (int64_t j = 0; j < s.tk; ++j)
    if (row.seen[static_cast<size_t>(j)]) l += std::exp(score[static_cast<size_t>(j)] - m);
  for (int64_t j = 0; j < s.tk; ++j)
    if (row.seen[static_cast<size_t>(j)])
      row.p[static_cast<size_t>(j)] = std::exp(score[static_cast<size_t>(j)] - m) / l;
  row.r = kDot * o.scale * mag + std::ldexp(1.0, -20);
  return row;
}

// Calls fn(b, h, i, hk, row) for every query row (batch entry b, query head h, position i) that
// sees at least one key, hk being its key/value head.
template <typename Fn>
void for_each_seen_row(const Inputs& in, const Rounded& x, Fn fn) {
  const auto& s = in.shape;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.hq; ++h)
      for (int64_t i = 0; i < s.tq; ++i) {
        const Row row = score_row(in, x, b, h, i);
        if (row.any) fn(b, h, i, h / (s.hq / s.hkv), row);
      }
}

// out: ref::attention on the rounded inputs, and per element the bound
// (2^-11 + 2 r + 2^-15) sum_j p_j |v_jd| + 2^-24 sum_j |v_jd| (1e-7 where a row sees no key:
// exact zeros).
Expected expect_out(const Inputs& in) {
  const auto& s = in.shape;
  const Rounded x = rounded_inputs(in);
  Expected e{ref::attention(x.q, x.k, x.v, in.mask, s, in.opts), {}};
  e.tol.assign(e.value.size(), 1e-7);
  for_each_seen_row(in, x, [&](int64_t b, int64_t h, int64_t i, int64_t hk, const Row& row) {
    for (int64_t d = 0; d < s.d; ++d) {
      double pv = 0, vsum = 0;
      for (int64_t j = 0; j < s.tk; ++j) {
        if (!row.seen[static_cast<size_t>(j)]) continue;
        const double vj = std::fabs(x.v[kv_at(s, b, j, hk) + d]);
        pv += row.p[static_cast<size_t>(j)] * vj;
        vsum += vj;
      }
      e.tol[q_at(s, b, i, h) + d] += (kU11 + 2 * row.r + kSum) * pv + kU24 * vsum;
    }
  });
  return e;
}

struct GradExpectation {
  Expected dq, dk, dv;
};

// The gradients, in double on the rounded inputs, given the forward output `o` that the kernels'
// delta = sum_d dout_d o_d reads (attention_bwd_delta, on the unrounded dout) -- the GPU forward's,
// so that its own error does not enter this bound -- and per element the bound of the header
// comment. With `o` empty, delta is the exact sum_j p_j dp_j of the rounded inputs and the values
// are ref::attention_backward's.
GradExpectation expect_grads(const Inputs& in, const std::vector<double>& o) {
  const auto& s = in.shape;
  const auto& opts = in.opts;
  const Rounded x = rounded_inputs(in);
  GradExpectation e;
  for (Expected* g : {&e.dq, &e.dk, &e.dv}) {
    const size_t n = g == &e.dq ? x.q.size() : x.k.size();
    g->value.assign(n, 0.0);
    g->tol.assign(n, 1e-7);
  }
  std::vector<double> dp(static_cast<size_t>(s.tk)), dp_mag(static_cast<size_t>(s.tk));
  for_each_seen_row(in, x, [&](int64_t b, int64_t h, int64_t i, int64_t hk, const Row& row) {
    const size_t qi = q_at(s, b, i, h);
    double delta = 0, delta_err = 0;
    for (int64_t j = 0; j < s.tk; ++j) {
      const auto jj = static_cast<size_t>(j);
      if (!row.seen[jj]) continue;
      dp[jj] = dp_mag[jj] = 0;
      for (int64_t d = 0; d < s.d; ++d) {
        const double t = x.dout[qi + d] * x.v[kv_at(s, b, j, hk) + d];
        dp[jj] += t;
        dp_mag[jj] += std::fabs(t);
      }
      if (o.empty()) delta += row.p[jj] * dp[jj];
    }
    if (!o.empty()) {
      for (int64_t d = 0; d < s.d; ++d) {
        delta += in.dout[qi + d] * o[qi + d];
        delta_err += kDot * std::fabs(in.dout[qi + d] * o[qi + d]);
      }
    }
    for (int64_t j = 0; j < s.tk; ++j) {
      const auto jj = static_cast<size_t>(j);
      if (!row.seen[jj]) continue;
      const double p = row.p[jj];
      const double ds = p * (dp[jj] - delta) * row.cap_grad[jj];
      const double ds_tol = kU11 * std::fabs(ds) + kU24 +
                            p * row.cap_grad[jj] * (delta_err + kDot * dp_mag[jj]) +
                            (2 * row.r + kSum) * std::fabs(ds);
      const size_t kj = kv_at(s, b, j, hk);
      for (int64_t d = 0; d < s.d; ++d) {
        e.dq.value[qi + d] += opts.scale * ds * x.k[kj + d];
        e.dk.value[kj + d] += opts.scale * ds * x.q[qi + d];
        e.dv.value[kj + d] += p * x.dout[qi + d];
        e.dq.tol[qi + d] += opts.scale * std::fabs(x.k[kj + d]) * ds_tol;
        e.dk.tol[kj + d] += opts.scale * std::fabs(x.q[qi + d]) * ds_tol;
        e.dv.tol[kj + d] += ((kU11 + row.r + kSum) * p + kU24) * std::fabs(x.dout[qi + d]);
      }
    }
  });
  return e;
}

// Every element within its bound (NaN never is); reports the count and the worst element.
void expect_within(const std::vector<double>& got, const Expected& e, const std::string& what) {
  ASSERT_EQ(got.size(), e.value.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double ratio = std::fabs(got[i] - e.value[i]) / e.tol[i];
    if (!(ratio <= 1.0)) {
      if (bad == 0 || !(ratio <= worst_ratio)) {
        worst = i;
        worst_ratio = ratio;
      }
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements outside the bound; e.g. at " << worst << ": got "
                     << (got.empty() ? 0.0 : got[worst]) << " want "
                     << (got.empty() ? 0.0 : e.value[worst]) << " (bound "
                     << (got.empty() ? 0.0 : e.tol[worst]) << ")";
}

// How many elements lie outside the bound.
size_t count_outside(const std::vector<double>& got, const Expected& e) {
  size_t n = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - e.value[i]) <= e.tol[i])) ++n;
  return n;
}

struct Results {
  Tensor out;
  std::vector<std::vector<double>> grads;  // dq, dk, dv
};
Results run(const Inputs& in) {
  const Tensor mask = mask_tensor(in);
  Results r;
  r.grads = test::gpu_grads(
      [&](std::vector<Tensor>& x) {
        return r.out = ops::attention(x[0], x[1], x[2], mask, in.opts);
      },
      {test::to_gpu(in.q, q_shape(in.shape)), test::to_gpu(in.k, kv_shape(in.shape)),
       test::to_gpu(in.v, kv_shape(in.shape))},
      test::to_gpu(in.dout, q_shape(in.shape)));
  return r;
}

// Small shapes (the emulation is slow) that still span several workgroups and leave tiles partly
// empty in every kernel: per workgroup the forward takes 128 queries (64 emulated) in steps of 32
// keys, dq 64 queries (32) in steps of 64 keys, dk/dv 64 keys (32) in steps of 32 queries.
const Case kCases[] = {
    {"t37_gqa3_causal_d64", 2, 37, 37, 6, 2, 64, true, 0, 0, Pad::kNone, 1},
    {"t150_mqa_causal_right_pad_d64", 1, 150, 150, 2, 1, 64, true, 0, 0, Pad::kRight, 1},
    {"t70_noncausal_right_pad_d40", 2, 70, 70, 2, 1, 40, false, 0, 0, Pad::kRight, 1},
    {"kv_cache_13_of_75_left_pad_window20", 2, 13, 75, 4, 2, 64, true, 20, 0, Pad::kLeft, 1},
    {"t41_softcap5_window9_gqa_d20", 2, 41, 41, 6, 2, 20, true, 9, 5, Pad::kRight, 3},
    {"t11_left_pad_rows_without_keys_d10", 2, 11, 11, 4, 2, 10, true, 0, 0, Pad::kLeft, 1},
    {"more_queries_than_keys_window3", 1, 9, 5, 2, 1, 16, true, 3, 0, Pad::kNone, 1},
    // dk/dv walk 8 heads x 2 query tiles: lavapipe's per-invocation loop budget (flash_frag.glsl).
    {"t40_group8_noncausal_d40", 1, 40, 40, 8, 1, 40, false, 0, 0, Pad::kNone, 1},
};

// One case through the kernels, forward and backward, against the bounds.
void check_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(c.name);
  ASSERT_EQ(ops::detail::attention_kernels(c.d, 0), AttentionKernels::Coopmat)
      << ops::detail::attention_coopmat_unfit(c.d, 0);
  const Inputs in = make_inputs(c, seed);
  const Results got = run(in);
  ASSERT_EQ(got.out.shape(), q_shape(in.shape));
  const auto out = got.out.to_double();
  expect_within(out, expect_out(in), std::string(c.name) + " out");
  const GradExpectation want = expect_grads(in, out);
  expect_within(got.grads[0], want.dq, std::string(c.name) + " dq");
  expect_within(got.grads[1], want.dk, std::string(c.name) + " dk");
  expect_within(got.grads[2], want.dv, std::string(c.name) + " dv");
}

// Every case, with each f16 conversion the device offers (on tensor cores: the hardware one where
// the device guarantees its rounding, and the exact integer one; emulated: the exact one).
TEST(AttentionF16, MatchesRoundedReference) {
  using ops::detail::F16Convert;
  CoopmatScope scope;
  std::vector<F16Convert> converts = {F16Convert::Auto};
  if (!ops::detail::coopmat_emulation() && ops::detail::coopmat_support().hardware_convert)
    converts.push_back(F16Convert::Exact);
  for (const F16Convert convert : converts) {
    for (const bool row_shuffle : {true, false}) {
      ops::detail::set_f16_convert(convert);
      ops::detail::set_flash_row_shuffle(row_shuffle);
      SCOPED_TRACE(ops::detail::flash_module("fwd") +
                   (ops::detail::flash_row_shuffle() ? " row shuffles" : " shared-memory rows"));
      uint64_t seed = 700;
      for (const Case& c : kCases) check_case(c, ++seed);
    }
  }
}

// dq from the score gradients the dk/dv kernel stores (flash_attn_dq_ds.comp; opt-in,
// kFlashStoresDsByDefault) and from recomputed ones (flash_attn_dq.comp): both within the bounds on
// every case, and close to each other (they differ only in how the tensor cores order the f32 sums
// of s and dp: k q^T in dk/dv, q k^T in the recomputing kernel).
TEST(AttentionF16, DqFromStoredOrRecomputedScoreGradients) {
  using ops::detail::FastDqSource;
  CoopmatScope scope;
  struct Restore {
    ~Restore() { ops::detail::set_fast_dq_source(FastDqSource::Auto); }
  } restore;
  ASSERT_TRUE(ops::detail::flash_dq_from_stored_ds_available());
  // Besides the shared cases, one whose rows of ds^T start 16-byte aligned (Tq a multiple of 8)
  // under a causal mask: whole 16 x 16 blocks that the hardware build stores as fragments.
  std::vector<Case> cases(std::begin(kCases), std::end(kCases));
  cases.push_back({"t64_gqa2_causal_d64", 1, 64, 64, 4, 2, 64, true, 0, 0, Pad::kNone, 1});
  uint64_t seed = 1700;
  for (const Case& c : cases) {
    const Inputs in = make_inputs(c, ++seed);
    Results got[2];
    for (int i = 0; i < 2; ++i) {
      ops::detail::set_fast_dq_source(i == 0 ? FastDqSource::Stored : FastDqSource::Recompute);
      check_case(c, seed);
      got[i] = run(in);
    }
    SCOPED_TRACE(c.name);
    // dk, dv and the output come from the same kernels either way.
    EXPECT_EQ(got[0].grads[1], got[1].grads[1]) << "dk";
    EXPECT_EQ(got[0].grads[2], got[1].grads[2]) << "dv";
    test::expect_close(got[0].grads[0], got[1].grads[0], 2e-3, 2e-3, "dq stored vs recomputed");
  }
}

// The dk/dv kernel's two ways through a GQA group -- one workgroup per query head writing
// partials that a second pass adds (the default), and one per key/value head walking the group --
// both within the bounds, on every GQA case.
TEST(AttentionF16, DkvPerHeadPartialsAndWholeGroups) {
  CoopmatScope scope;
  struct Restore {
    ~Restore() { ops::detail::set_flash_dkv_per_head(true); }
  } restore;
  for (const bool per_head : {true, false}) {
    ops::detail::set_flash_dkv_per_head(per_head);
    SCOPED_TRACE(per_head ? "per-head partials" : "whole groups");
    uint64_t seed = 800;
    for (const Case& c : kCases)
      if (c.hq != c.hkv) check_case(c, ++seed);
  }
}

// Cases 0, 1, 3-6 run twice, with `use(true)` and then `use(false)` (seeds from seed0), and must
// give the same bits; skipped where `available` says the device runs only one of the two.
void expect_switch_changes_no_bit(bool available, const char* only_one,
                                  const std::function<void(bool)>& use, uint64_t seed0) {
  if (!available)
    GTEST_SKIP() << "the device's accumulator layout is not the quad one (vkformer devices): "
                 << only_one;
  for (const size_t i : {0, 1, 3, 4, 5, 6}) {
    SCOPED_TRACE(kCases[i].name);
    expect_deterministic(make_inputs(kCases[i], seed0 + i), [&](int run) { use(run == 0); });
  }
}

// The forward's row maxima by subgroup shuffles (the quad layout; the emulation has it) and
// through shared memory give the same bits: a maximum is exact in any order.
TEST(AttentionF16, RowShufflesGiveTheSharedMemoryBits) {
  CoopmatScope scope;
  expect_switch_changes_no_bit(ops::detail::flash_row_shuffle(),
                               "only the shared-memory rows run here",
                               ops::detail::set_flash_row_shuffle, 900);
}

// Accumulator rows and columns taken from the lane (the quad layout; the emulation has it) and
// loaded from index matrices give the same bits in all three kernels.
TEST(AttentionF16, QuadRowsGiveTheIndexMatrixBits) {
  CoopmatScope scope;
  expect_switch_changes_no_bit(ops::detail::flash_quad_rows(), "only the index matrices run here",
                               ops::detail::set_flash_quad_rows, 950);
}

// The test's own gradient loops, with the exact delta, agree with ref::attention_backward.
TEST(AttentionF16, GradientReferenceMatchesRefBackward) {
  for (const Case& c : {kCases[0], kCases[4], kCases[6]}) {
    SCOPED_TRACE(c.name);
    const Inputs in = make_inputs(c, 750);
    const Rounded x = rounded_inputs(in);
    const auto want = ref::attention_backward(x.q, x.k, x.v, in.mask, x.dout, in.shape, in.opts);
    const GradExpectation got = expect_grads(in, {});
    test::expect_close(got.dq.value, want.dq, 1e-12, 1e-9, "dq");
    test::expect_close(got.dk.value, want.dk, 1e-12, 1e-9, "dk");
    test::expect_close(got.dv.value, want.dv, 1e-12, 1e-9, "dv");
  }
}

// The bounds are sharp enough to tell f16 inputs from f32 ones: with large logits, the reference
// on unrounded inputs lies outside them for over 5% of the elements, and so do the fp32 kernels'
// results (about 9% of out, 20-35% of each gradient here); the tensor-core kernels' do not.
TEST(AttentionF16, RoundsInputsToF16) {
  const Case c{"t70_gain6", 1, 70, 70, 2, 1, 64, true, 0, 0, Pad::kNone, 6};
  const Inputs in = make_inputs(c, 800);
  const Expected want_out = expect_out(in);
  const auto unrounded = ref::attention(in.q, in.k, in.v, in.mask, in.shape, in.opts);
  const size_t q_many = unrounded.size() / 20, kv_many = in.k.size() / 20;
  EXPECT_GT(count_outside(unrounded, want_out), q_many);
  const Results fp32 = run(in);  // F32 precision: the fp32 fast kernels
  EXPECT_GT(count_outside(fp32.out.to_double(), want_out), q_many);
  CoopmatScope scope;
  const Results f16 = run(in);
  const auto out = f16.out.to_double();
  expect_within(out, want_out, "out");
  const GradExpectation want = expect_grads(in, out);
  expect_within(f16.grads[0], want.dq, "dq");
  expect_within(f16.grads[1], want.dk, "dk");
  expect_within(f16.grads[2], want.dv, "dv");
  EXPECT_GT(count_outside(fp32.grads[0], want.dq), q_many);
  EXPECT_GT(count_outside(fp32.grads[1], want.dk), kv_many);
  EXPECT_GT(count_outside(fp32.grads[2], want.dv), kv_many);
}

// A row that sees no key outputs exact zeros and sends no gradient (left padding, causal).
TEST(AttentionF16, RowsWithoutKeysAreZero) {
  CoopmatScope scope;
  const Case c{"left_pad", 2, 11, 11, 4, 2, 16, true, 0, 0, Pad::kLeft, 1};
  const Inputs in = make_inputs(c, 810);
  const Results r = run(in);
  const auto out = r.out.to_double();
  const int64_t empty_rows = 5;  // batch row 1 drops its first 3 + 2 keys
  const size_t row = static_cast<size_t>(c.hq * c.d);
  for (int64_t i = 0; i < c.tq; ++i)
    for (size_t e = 0; e < row; ++e) {
      const size_t at = static_cast<size_t>(c.tq + i) * row + e;
      if (i < empty_rows) {
        EXPECT_EQ(out[at], 0.0) << "query " << i;
        EXPECT_EQ(r.grads[0][at], 0.0) << "query " << i;
      }
    }
}

TEST(AttentionF16, Deterministic) {
  CoopmatScope scope;
  const Case c{"det", 2, 70, 70, 6, 2, 64, true, 40, 30, Pad::kRight, 3};
  expect_deterministic(make_inputs(c, 820));
}

// The layout test accepts the tensor cores' layout (as NVIDIA's driver reports it) and nothing
// else: not the same elements in another component order.
TEST(AttentionF16, QuadLayoutRecognised) {
  ops::detail::AccumulatorLayout layout;
  layout.components = 8;
  for (uint16_t l = 0; l < 32; ++l)
    for (uint16_t t = 0; t < 8; ++t)
      layout.elements.push_back(static_cast<uint16_t>(16 * (l / 4 + 8 * (t / 4)) + 2 * (l % 4) +
                                                      t % 2 + 8 * (t / 2 % 2)));
  EXPECT_TRUE(ops::detail::is_quad_layout(layout));
  EXPECT_EQ(ops::detail::describe(layout).substr(0, 4), "quad");
  for (size_t l = 0; l < 32; ++l) std::swap(layout.elements[l * 8 + 2], layout.elements[l * 8 + 4]);
  EXPECT_FALSE(ops::detail::is_quad_layout(layout));
  EXPECT_FALSE(ops::detail::is_quad_layout(ops::detail::AccumulatorLayout{}));
}

// Which kernels each setting selects; the tensor-core ones only in F16 precision, Fast math,
// without dropout, for head_dim <= 64, with cooperative matrices (or their emulation) on.
TEST(AttentionF16, Routing) {
  using ops::detail::attention_coopmat_unfit;
  using ops::detail::attention_kernels;
  EXPECT_EQ(attention_kernels(64, 0), AttentionKernels::Fast);  // F32 precision
  EXPECT_EQ(attention_coopmat_unfit(64, 0), "matmul precision is fp32");
  EXPECT_EQ(attention_kernels(96, 0), AttentionKernels::Plain);
  {
    set_matmul_precision(MatmulPrecision::F16);
    const bool device_has_coopmat = ops::detail::coopmat_support().unsupported.empty();
    EXPECT_EQ(attention_kernels(64, 0),
              device_has_coopmat ? AttentionKernels::Coopmat : AttentionKernels::Fast);
    if (!device_has_coopmat) {
      EXPECT_EQ(attention_coopmat_unfit(64, 0), ops::detail::coopmat_support().unsupported);
    }
    set_matmul_precision(MatmulPrecision::F32);
  }
  CoopmatScope scope;
  EXPECT_EQ(attention_kernels(64, 0), AttentionKernels::Coopmat);
  EXPECT_EQ(attention_kernels(1, 0), AttentionKernels::Coopmat);
  EXPECT_EQ(attention_kernels(65, 0), AttentionKernels::Plain);
  EXPECT_NE(attention_coopmat_unfit(65, 0).find("head_dim 65"), std::string::npos);
  EXPECT_EQ(attention_kernels(64, 0.1f), AttentionKernels::Plain);
  if (ops::detail::coopmat_emulation()) {
    EXPECT_EQ(ops::detail::flash_module("fwd"), "flash_attn_fwd_d64_emulated");
  }
  set_math_mode(MathMode::Precise);
  EXPECT_EQ(attention_kernels(64, 0), AttentionKernels::Plain);
  set_math_mode(MathMode::Fast);
  ops::detail::set_coopmat_choice("off");
  EXPECT_EQ(attention_kernels(64, 0), AttentionKernels::Fast);
  ops::detail::set_coopmat_choice("auto");
  EXPECT_EQ(attention_kernels(64, 0), AttentionKernels::Coopmat);
}

}  // namespace
}  // namespace vkf
