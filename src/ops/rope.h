// Rotary position embeddings applied to a projection laid out [B, T, heads, head_dim] (a linear
// output reshaped, no transpose), as transformers' apply_rotary_pos_emb does with the cos/sin of
// its rotary embedding module. The tables come from rope_tables.h.
//
// For each rotated pair (a, b) with frequency index j and position p:
//   a' = a * cos[p, j] - b * sin[p, j]      b' = b * cos[p, j] + a * sin[p, j]
// RotateHalf (Llama, and most models): pairs (j, j + rotary_dim / 2).
// Interleaved (GPT-J, Cohere, ...):    pairs (2j, 2j + 1).
// Dimensions from rotary_dim to head_dim pass through unchanged (partial rotary, as in Phi,
// StableLM, GPT-NeoX), matching transformers' split into q_rot / q_pass.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "ops/rope_tables.h"

namespace vkf::ops {

enum class RopeLayout { RotateHalf, Interleaved };

// x: f32 [B, T, heads, D] (made contiguous if it is a strided view).
// cos, sin: f32 [P, rotary_dim / 2], as rope_cos_sin() builds them.
// position_ids: [B, T] or [1, T] (shared by the batch), I32 or I64 (converted to I32: ids past
//               2^31 - 1 do not survive the conversion).
// rotary_dim: even, 2 <= rotary_dim <= D.
// Returns a new f32 [B, T, heads, D]. Differentiable w.r.t. x (the backward rotates by -angle).
//
// Positions outside [0, P) cannot be checked without reading the ids back; the kernel clamps
// them to [0, P - 1] (so garbage ids give wrong values, never out-of-bounds reads). Build ids
// known on the host with rope_position_ids(), which rejects out-of-range values.
Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& position_ids,
                  int64_t rotary_dim, RopeLayout layout);

// Uploads host position ids of `shape` ([B, T] or [1, T]) as I32 after checking that each lies
// in [0, table_positions).
Tensor rope_position_ids(std::span<const int64_t> ids, const Shape& shape, int64_t table_positions);

}  // namespace vkf::ops
