// Ops of incremental decoding that read the step's varying values (the cache slot, how many keys
// the cache holds) from a device buffer instead of push constants, so that a decode step recorded
// once can be replayed at every position (infer/decode_step.h), and the greedy token choice on
// the device. None is differentiable; none reads anything back to the host.
#pragma once

#include "core/tensor.h"
#include "ops/attention.h"

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
