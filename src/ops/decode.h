// Ops of incremental decoding that read the step's varying values (the cache slot, how many keys
// the cache holds) from a device buffer instead of push constants, so that a decode step recorded
// once can be replayed at every position (infer/decode_step.h), and the greedy token choice on
// the device. None is differentiable; none reads anything back to the host.
#pragma once

#include <string>

#include "core/tensor.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/norm.h"
#include "ops/rope.h"

namespace vkf::ops {

// A decode step that feeds the next one on the device (infer::DecodeStepRunner::run): the argmax
// writes each row's token into state's ids, adds one to each row's position and to the cache
// length, and writes the tokens to row (cache length before the step) % slots of `ring`, where
// the host reads them. state: contiguous I32 [2R + 1] (ids, positions, positions cached: the
// layout of DecodeInputs' views); ring: contiguous I32 [slots, R], e.g. host-visible.
// fold_record (one row; argmax_fold_record): where defined, normed_linear_argmax folds its
// workgroups' pairs and advances the step inside the product's own dispatch
// (matmul_skinny_f16.comp's ARGMAX_FOLD) instead of in argmax_rows' final pass after it.
struct ArgmaxAdvance {
  Tensor state;
  Tensor ring;
  Tensor fold_record;
};
constexpr int64_t kArgmaxAdvanceMaxRows = 256;  // argmax_rows.comp's LOCAL_SIZE

// The record of an in-dispatch fold for a one-row `advance` (its state and ring as they are now:
// the record holds their addresses), or an undefined tensor where the device has no 64-bit buffer
// atomics or set_argmax_fold_in_product(false) turned the fold off. The kernel leaves the record
// as it found it after every step, so it serves every step of a decode.
Tensor argmax_fold_record(const ArgmaxAdvance& advance);
// On by default; off times the final pass instead (decode_bench --argmax-fold-pass) and lets tests
// compare the two.
void set_argmax_fold_in_product(bool on);

// out[r] = torch.argmax(x[r, :]): the first index of the largest value of each row (NaN counts
// as the largest). x is f32 [R, V] (rows may be strided, elements contiguous) or [R, 1, V];
// returns I32 [R]. With `advance` (at most kArgmaxAdvanceMaxRows rows), the ids also become the
// next decode step's inputs on the device (see ArgmaxAdvance): returns advance->state's ids.
Tensor argmax_rows(const Tensor& x, const ArgmaxAdvance* advance = nullptr);

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

// linear(rms_norm(x, ...), weight, bias) with the norm folded into the product where norm_folds()
// says so: one dispatch, every workgroup normalizing the row it reads with rms_norm's sums in
// rms_norm's order (the same values rms_norm would have stored); otherwise rms_norm, then linear.
// x: f32 [..., in]; weight [out, in]; bias f32 [out] or undefined. Not differentiable (inference).
Tensor normed_linear(const Tensor& x, const RowNorm& norm, const Tensor& weight,
                     const Tensor& bias = {});

// normed_linear(x, norm, weight) for one row of x, and `ids` = argmax_rows of its outputs (I32
// [1]). Where normed_linear folds the norm, the product's workgroups keep their best output as
// they store it (matmul_skinny_f16.comp's ARGMAX), so only argmax_rows' final fold of those pairs
// follows: no pass over the outputs, one dependent stage fewer (a decode step's greedy choice
// from its LM head), or none with an advance's fold_record. Otherwise normed_linear then
// argmax_rows. The same outputs and ids either way. `advance` as argmax_rows'.
Tensor normed_linear_argmax(const Tensor& x, const RowNorm& norm, const Tensor& weight, Tensor& ids,
                            const ArgmaxAdvance* advance = nullptr);

// A decode step's token embedding read by the step's first products themselves (batch 1): the
// row of `table` (f16 [V, K], contiguous) at the id in `ids` (I32 [1], read on the device), which
// normed_linear_of_embedding's storing dispatch also writes into `store` (f32 [1, 1, K], where
// the layers after it read it). Made once per decode (make_embedded_input checks the tensors) and
// kept as long as the inputs that point to it.
struct EmbeddedInput {
  Tensor table, ids, store;
};
EmbeddedInput make_embedded_input(const Tensor& table, const Tensor& ids, const Tensor& store);
// Whether normed_linear_of_embedding takes this product (and the fold is on:
// set_embedding_fold); else the caller embeds the token first and takes normed_linear.
bool embedding_folds(const EmbeddedInput& in, const Tensor& weight, const RowNorm& norm);
// normed_linear(embedding(in.table, in.ids), norm, weight, bias), reading the table row in the
// product's own dispatch; with `store`, that dispatch also writes the embedding into in.store
// (bit for bit embedding()'s row; an id outside the table gives zeros, as embedding() does). The
// same outputs as embedding then normed_linear. Needs embedding_folds().
Tensor normed_linear_of_embedding(const EmbeddedInput& in, bool store, const RowNorm& norm,
                                  const Tensor& weight, const Tensor& bias = {});
// On by default; off: decode steps embed their tokens in a dispatch of their own (tests, A/B
// timing: decode_bench --embedding-pass).
void set_embedding_fold(bool on);

// Whether normed_linear and gated_linear fold `norm` into their product for this x and weight:
// f16 weights, one row of x (decode at batch 1), Fast math, in % 8 == 0, x's rows and the norm
// weight contiguous and 16-byte aligned. Measured on the H200 (bench/RESULTS.md): a 1B decode
// step at batch 1 1.499 -> 1.458 ms, but 3.03 -> 3.67 ms at batch 8, where every workgroup
// normalizing 8 rows costs more than the norm's own dispatch. Callers with several products over
// one normalized x take rms_norm once where this is false.
bool norm_folds(const Tensor& x, const Tensor& weight, const RowNorm& norm);
// The most activation rows a fold takes (1 by default, up to 8), for tests and benchmarks.
void set_norm_fold_rows(int64_t rows);

// act(x Wg^T) * (x Wu^T): the first half of a gated MLP (SwiGLU, GeGLU; Llama's gate_proj and
// up_proj), without biases. x: f32 [..., in]; w_gate, w_up: [inner, in], f32 or f16 alike; returns
// f32 [..., inner]. Weights in f16 and at most 8 rows of x take one dispatch (both products and the
// activation, each activation read once); otherwise it is linear(), linear() and gated_act(),
// which the fused kernel matches sum for sum. Not differentiable (inference).
// With `norm`, x's rows are normalized first as normed_linear does (folded into the same dispatch
// where the fused kernel runs).
Tensor gated_linear(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, Activation act,
                    const RowNorm* norm = nullptr);

// Attention of one new query per row over a KV cache whose first cached[0] + 1 positions are
// filled (cached: I32, read on the device; the new key/value sits at slot cached[0]). q: f32
// [B, 1, Hq, D]; caches: contiguous f32 [B, capacity, Hkv, D]; key_padding_mask: undefined or I32
// [B, capacity] (nonzero = token; only the filled slots are read). The query sits at position
// cached[0] (the causal rule hides nothing; a sliding window hides keys j <= cached[0] - window).
// Same semantics as ops::attention over the filled slots with Tq = 1 (dropout must be 0).
// Returns [B, 1, Hq, D].
// Devices with subgroup shuffles over 8 invocations run attention_decode_fast.comp (see its
// header: query heads sharing a kv head in one workgroup, long caches split over workgroups and
// combined by a second dispatch, fixed summation orders); others, and VKF_ATTENTION=plain, one
// workgroup per query head. The two differ in the order of their sums, not in what they compute.
Tensor attention_decode(const Tensor& q, const Tensor& cache_k, const Tensor& cache_v,
                        const Tensor& key_padding_mask, const Tensor& cached,
                        const AttentionOptions& opts);

// rope_kv_write and attention_decode in one dispatch: attention_decode(apply_rope(q), ...) over
// the cache after writing apply_rope(k) and v at slot slot_buf[0], bit for bit what the two ops
// give one after the other (same rotation, same sums), and the same cache contents. Each
// workgroup rotates its queries and the new key for itself and takes the new key and value from
// registers, so nothing in the dispatch reads the slot it writes. Arguments as rope_kv_write's and
// attention_decode's (slot_buf is attention_decode's `cached`). Devices that lack the fast kernel
// run the two ops.
Tensor attention_decode_rope(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cos,
                             const Tensor& sin, const Tensor& positions, const Tensor& cache_k,
                             const Tensor& cache_v, const Tensor& slot_buf,
                             const Tensor& key_padding_mask, const AttentionOptions& opts,
                             int64_t rotary_dim, RopeLayout layout);

namespace detail {

// Why attention_decode_fast.comp cannot serve a call with this head_dim on this device ("" when
// it can).
std::string decode_attention_fast_unfit(int64_t head_dim);

// How attention_decode_fast.comp divides a call: ceil(head_dim / 8) dims per lane; the query
// heads of a kv head in `head_groups` workgroups of at most `heads_per_group`; keys per lane
// group per pass; vec4 loads; workgroups per (head group, row) over the cache (`splits`, chosen
// from the capacity: the filled length, known on the device only, decides how many take part;
// more than one adds the combine dispatch).
struct DecodeAttentionPlan {
  int64_t dims_per_lane = 0, heads_per_group = 0, head_groups = 0, keys_per_lane_group = 0;
  bool vec4 = false;
  int64_t splits = 1;
};
DecodeAttentionPlan decode_attention_plan(int64_t batch, int64_t capacity, int64_t q_heads,
                                          int64_t kv_heads, int64_t head_dim);
// Caps the query heads per workgroup (tests: the grouped path on small grids); 0 restores the
// rule (fewer heads per workgroup until the grid is large enough).
void set_decode_heads_per_group(int64_t heads);
// Forces the keys per lane group and pass (1..8; benches and tests); 0 restores the rule.
void set_decode_keys_per_lane_group(int64_t keys);
// Whether the one-query attention may run its chained variant where stages are chained (default
// on; off keeps a barrier before and after it, for timing).
void set_decode_attention_chaining(bool on);
// Whether the one-query attention's shared-memory loops run equally often in every invocation
// (1), skip what an invocation does not own (0), or follow the rule (-1, default: only where
// lavapipe runs the memory-model builds, which need them).
void set_decode_attention_uniform_loops(int mode);

}  // namespace detail

}  // namespace vkf::ops
