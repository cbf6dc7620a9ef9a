// Shared by the attention tests (test_attention, test_attention_f16): a test case's shape and
// options, its random inputs rounded to f32 (so the double references see exactly what the GPU
// sees), padding masks, and the forward + backward pass run twice for the determinism checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "core/autograd.h"
#include "ops/attention.h"
#include "ops/attention_ref.h"
#include "test_util.h"

namespace vkf::test::attention {

using ops::AttentionOptions;

enum class Pad { kNone, kRight, kLeft };

struct Case {
  const char* name;
  int64_t b, tq, tk, hq, hkv, d;
  bool causal;
  int64_t window;
  float softcap;
  Pad pad;
  double q_gain;  // larger queries give larger logits, so the soft-cap bends them
};

// Inputs of one case, rounded to f32 so the reference sees exactly what the GPU sees.
struct Inputs {
  ref::AttentionShape shape;
  AttentionOptions opts;
  std::vector<double> q, k, v, dout;
  std::vector<int64_t> mask;  // empty = none
};

// Right padding: batch row b keeps its first tk - 3 b keys (like a batch of shorter sequences).
// Left padding: row b > 0 drops its first 3 b + 2 keys, so under a causal mask the first queries
// of that row see no key at all.
inline std::vector<int64_t> make_mask(Pad pad, int64_t batch, int64_t tk) {
  if (pad == Pad::kNone) return {};
  std::vector<int64_t> m(static_cast<size_t>(batch * tk), 1);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t cut = pad == Pad::kRight ? 3 * b : 3 * b + (b > 0 ? 2 : 0);
    for (int64_t j = 0; j < std::min(cut, tk - 1); ++j) {
      const int64_t col = pad == Pad::kRight ? tk - 1 - j : j;
      m[static_cast<size_t>(b * tk + col)] = 0;
    }
  }
  return m;
}

inline Inputs make_inputs(const Case& c, uint64_t seed) {
  test::Rng rng(seed);
  Inputs in;
  in.shape = {c.b, c.tq, c.tk, c.hq, c.hkv, c.d};
  in.opts.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  in.opts.causal = c.causal;
  in.opts.sliding_window = c.window;
  in.opts.softcap = c.softcap;
  const auto nq = static_cast<size_t>(c.b * c.tq * c.hq * c.d);
  const auto nk = static_cast<size_t>(c.b * c.tk * c.hkv * c.d);
  in.q = test::as_f32(rng.normal(nq, c.q_gain));
  in.k = test::as_f32(rng.normal(nk));
  in.v = test::as_f32(rng.normal(nk));
  in.dout = test::as_f32(rng.normal(nq));
  in.mask = make_mask(c.pad, c.b, c.tk);
  return in;
}

inline Tensor mask_tensor(const Inputs& in) {
  if (in.mask.empty()) return {};
  std::vector<int32_t> m(in.mask.begin(), in.mask.end());
  return Tensor::from_host_i32(m, {in.shape.batch, in.shape.tk});
}

inline Shape q_shape(const ref::AttentionShape& s) {
  return {s.batch, s.tq, s.hq, s.d};
}
inline Shape kv_shape(const ref::AttentionShape& s) {
  return {s.batch, s.tk, s.hkv, s.d};
}

// Forward and backward twice on the same inputs (seed: the output gradient); the outputs and
// the three gradients of both runs must be bitwise equal. `before_run(i)`, where given, changes
// a setting before run i (two builds that must agree bit for bit).
inline void expect_deterministic(const Inputs& in,
                                 const std::function<void(int)>& before_run = {}) {
  const Tensor mask = mask_tensor(in);
  const Tensor seed = test::to_gpu(in.dout, q_shape(in.shape));
  Tensor q = test::to_gpu(in.q, q_shape(in.shape)).set_requires_grad(true);
  Tensor k = test::to_gpu(in.k, kv_shape(in.shape)).set_requires_grad(true);
  Tensor v = test::to_gpu(in.v, kv_shape(in.shape)).set_requires_grad(true);
  std::vector<Tensor> runs[2];
  for (int i = 0; i < 2; ++i) {
    auto& run = runs[i];
    if (before_run) before_run(i);
    q.zero_grad();
    k.zero_grad();
    v.zero_grad();
    autograd::Tape tape;
    Tensor out;
    {
      autograd::TapeScope scope(tape);
      out = ops::attention(q, k, v, mask, in.opts);
    }
    tape.backward(out, seed);
    run = {out, q.grad(), k.grad(), v.grad()};
  }
  const char* what[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < 4; ++i) test::expect_bitwise_equal(runs[0][i], runs[1][i], what[i]);
}

}  // namespace vkf::test::attention
