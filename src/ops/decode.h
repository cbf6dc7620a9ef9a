// Ops of incremental decoding that read the step's varying values (the cache slot, how many keys
// the cache holds) from a device buffer instead of push constants, so that a decode step recorded
// once can be replayed at every position (infer/decode_step.h), and the greedy token choice on
// the device; and the projections that compute the RMSNorm before them in their prologue. None is
// differentiable; none reads anything back to the host.
#pragma once

#include <optional>

#include "core/tensor.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/rope.h"

namespace vkf::ops {

// out[r] = torch.argmax(x[r, :]): the first index of the largest value of each row (NaN counts
// as the largest). x is f32 [R, V] (rows may be strided, elements contiguous) or [R, 1, V];
// returns I32 [R].
Tensor argmax_rows(const Tensor& x);

// cache_k[b, slot] = k[b, 0] and cache_v[b, slot] = v[b, 0] for every row b, slot = slot_buf[0]
// (I32, read on the device; a slot outside the cache writes nothing). k, v: f32 [B, 1, Hkv, D];
// caches: contiguous f32 [B, capacity, Hkv, D].
void kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& cache_k, const Tensor& cache_v,
                    const Tensor& slot_buf);

// kv_cache_write with the rotary embedding of the step applied on the way, in one dispatch:
// returns apply_rope(q) and writes apply_rope(k) and v at slot slot_buf[0]. q: f32 [B, 1, Hq, D];
// k, v: f32 [B, 1, Hkv, D]; cos, sin: f32 [P, rotary_dim / 2]; positions: I32 [B, 1] (one per row,
// read on the device); caches as kv_cache_write's. Same rotation as ops::apply_rope.
Tensor rope_kv_write(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cos,
                     const Tensor& sin, const Tensor& positions, const Tensor& cache_k,
                     const Tensor& cache_v, const Tensor& slot_buf, int64_t rotary_dim,
                     RopeLayout layout);

// out += x W^T (+ bias) in place: a residual connection folded into the epilogue of the
// projection that feeds it (one dispatch and one barrier fewer than linear + residual_add). x: f32
// [..., in]; weight: f32 or f16 [out_features, in]; bias: f32 [out_features] or undefined; out: f32
// [..., out_features] with x's leading shape, contiguous, not overlapping x or the weight. Not
// differentiable.
void linear_accumulate(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& out);

// act(x Wg^T) * (x Wu^T): the first half of a gated MLP (SwiGLU, GeGLU; Llama's gate_proj and
// up_proj), without biases. x: f32 [..., in]; w_gate, w_up: [inner, in], f32 or f16 alike; returns
// f32 [..., inner]. Weights in f16 and at most 8 rows of x take one dispatch (both products and the
// activation, each activation read once); otherwise it is linear(), linear() and gated_act(),
// which the fused kernel matches sum for sum. Not differentiable (inference).
Tensor gated_linear(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, Activation act);

// An input that projections read through an RMSNorm: rms_norm(x, weight, eps, one_plus) as
// ops::rms_norm computes it. x: f32 [..., H]; weight: f32 [H].
struct RmsNormed {
  Tensor x;
  Tensor weight;
  float eps = 0.0f;
  bool one_plus = false;  // scale by (1 + weight), as Gemma
};

// Whether rms_norm_linear / rms_norm_gated_linear compute the norm of `in` in the prologue of
// their product with `weight` (rather than running rms_norm first): an f16 weight with contiguous
// rows, at most 8 rows of x, and norm_prologue() on. The norm is then never stored, and the
// results are bitwise those of the composed path.
bool norm_prologue_applies(const RmsNormed& in, const Tensor& weight);

// linear(rms_norm(in), weight, bias) for decoding: when norm_prologue_applies, one dispatch whose
// workgroups each compute the rows' RMS statistic as rms_norm does and read every activation as
// the value rms_norm would have stored, so the result is bitwise that of rms_norm followed by
// linear; otherwise exactly those two ops. weight: f32 or f16 [out, H]; bias: f32 [out] or
// undefined; returns f32 [..., out]. Not differentiable (inference).
Tensor rms_norm_linear(const RmsNormed& in, const Tensor& weight, const Tensor& bias);

// gated_linear(rms_norm(in), w_gate, w_up, act) the same way: one dispatch for f16 weights and
// at most 8 rows, bitwise the composed result. Not differentiable (inference).
Tensor rms_norm_gated_linear(const RmsNormed& in, const Tensor& w_gate, const Tensor& w_up,
                             Activation act);

// Whether the rms_norm_* ops may compute the norm in their products' prologue (off: they run
// rms_norm and the plain op). By default on, except on CPU devices (lavapipe), where the
// prologue's repeated work per workgroup costs more than the dispatch it saves;
// VKF_NORM_PROLOGUE=1|0 or set_norm_prologue() choose (nullopt: back to the default), for
// benchmarks that measure what it buys and tests of both paths.
void set_norm_prologue(std::optional<bool> on);
bool norm_prologue();

// Attention of one new query per row over a KV cache whose first cached[0] + 1 positions are
// filled (cached: I32, read on the device; the new key/value sits at slot cached[0]). q: f32
// [B, 1, Hq, D]; caches: contiguous f32 [B, capacity, Hkv, D]; key_padding_mask: undefined or I32
// [B, capacity] (nonzero = token; only the filled slots are read). The query sits at position
// cached[0] (the causal rule hides nothing; a sliding window hides keys j <= cached[0] - window).
// Same semantics as ops::attention over the filled slots with Tq = 1 (dropout must be 0).
// Returns [B, 1, Hq, D].
Tensor attention_decode(const Tensor& q, const Tensor& cache_k, const Tensor& cache_v,
                        const Tensor& key_padding_mask, const Tensor& cached,
                        const AttentionOptions& opts);

}  // namespace vkf::ops
