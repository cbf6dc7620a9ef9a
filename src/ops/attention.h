// Scaled dot-product attention as one fused, differentiable op: softmax(mask(softcap(scale * q k^T)))
// v over the natural [batch, time, heads, head_dim] layout of projection outputs, with GQA/MQA,
// causal and sliding-window masks, key padding, and Gemma2-style logit soft-capping. The forward is
// a tiled online-softmax kernel that never stores the score matrix; the backward recomputes scores
// from the saved row logsumexp and produces dq, dk, dv deterministically. Dropout of the
// attention probabilities (training) is applied inside the kernels: the mask is regenerated from
// (seed, offset) wherever it is needed (ops/dropout.h), never stored. In F16 matmul precision the
// kernels run on tensor cores where the device allows (ops/attention_coopmat.h says when), with
// q, k, v and the incoming gradient rounded to f16; tensors stay f32 either way.
#pragma once

#include <cstdint>
#include <limits>

#include "core/tensor.h"

namespace vkf::ops {

struct AttentionOptions {
  // Multiplies q.k: callers pass 1/sqrt(D), or Gemma2's query_pre_attn_scalar^-0.5. Left unset it
  // is NaN, which attention() rejects, so a forgotten scale is an error rather than a silent 1.
  float scale = std::numeric_limits<float>::quiet_NaN();
  bool causal = true;   // key j visible to query i only if j <= position(i)
  // 0 = none; else key j is visible to query i only if position(i) - j < sliding_window
  // (transformers' sliding-window rule: kv_idx > q_idx - window).
  int64_t sliding_window = 0;
  // 0 = none; else logits = softcap * tanh(logits / softcap), applied after scaling (Gemma2).
  float softcap = 0;
  // Inverted dropout of the probabilities after the softmax (transformers' attention_dropout in
  // training): probability (b, h, i, j) of the [B, Hq, Tq, Tk] matrix is kept iff dropout counter
  // dropout_offset + ((b * Hq + h) * Tq + i) * Tk + j under dropout_seed is kept (ops::dropout's
  // rule), and kept ones are scaled by 1 / (1 - p). 0 = none. The call uses B * Hq * Tq * Tk
  // counters; train-time callers reserve them from the dropout stream (core/dropout_rng.h).
  float dropout_p = 0;
  uint64_t dropout_seed = 0;
  uint64_t dropout_offset = 0;
};

// q [B, Tq, Hq, D], k and v [B, Tk, Hkv, D] (f32; made contiguous if they are not), Hkv divides Hq
// (query head h reads kv head h / (Hq / Hkv)), D <= 256. key_padding_mask is optional (undefined
// tensor = none): [B, Tk] I32 or I64, nonzero = token, 0 = padding (transformers' attention_mask).
// Returns [B, Tq, Hq, D].
//
// Query i sits at position Tk - Tq + i (queries aligned to the end of the keys, as with a KV
// cache); the causal and sliding-window rules compare that position with the key index.
//
// A query row that sees no key at all (for example a left-padding row under a causal mask)
// outputs zeros and passes zero gradient to q, k and v. transformers gives NaN or the mean of v
// for such rows depending on the attention implementation; zeros keep training finite and those
// rows are ignored by the loss anyway.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding_mask,
                 const AttentionOptions& opts);

// Bytes the backward of such a call allocates, under the current settings, for the score
// gradients its dk/dv kernel stores for dq ([B, Hq, Tk, Tq]: f32 from the fp32 register-tiled
// kernels, f16 from the tensor-core ones; see detail::fast_dq_from_stored_ds), or 0 where it
// recomputes them or runs the plain kernels. For train::plan_memory.
uint64_t attention_backward_stored_ds_bytes(int64_t batch, int64_t tq, int64_t tk, int64_t hq,
                                            int64_t head_dim, float dropout_p);

}  // namespace vkf::ops
