// Fused attention backward, key side, from stored probabilities or score gradients (the fp32
// register-tiled family's split backward, Fast math mode, head_dim <= 64):
//   out_j = out_scale * sum_i x_ij y_i
// over the queries i of one query head, with x read from x^T [B, Hq, Tk, Tq] as the scores
// builds of attention_fast_bwd_dkv.comp stored it and y a row of [B, Tq, Hq, D]. The split
// backward runs it twice: dv from p and dO (out_scale 1), dk from ds and q (out_scale the
// softmax scale without a soft-cap, 1 with one, where ds already carries d(score)/d(dot)).
// Output rows are [B, Tk, Hq, D]: dk or dv themselves when Hq = Hkv, else head h's partials,
// which attention_fast_bwd_dkv_group_sum.comp adds over each group, as for the fused kernel.
//
// Same sums as the fused dk/dv kernel, bit for bit: the same x values (the scores builds form
// them with its expressions), added into each output in increasing query order by single fused
// multiply-adds from zero, hidden pairs as exact zeros, then the same scaling. Entries of x^T that
// no scores workgroup wrote lie in query tiles its key block never visits (pairs hidden by the
// causal rule or the window): they are read (the buffer is not cleared) but replaced by zero by
// the visibility test before use, as in attention_fast_bwd_dq_ds.comp.
//
// A workgroup owns BKB = 64 keys of one query head and walks the queries that can see them in
// tiles of BQT = 32. Invocation t holds an 8 x 4 block of the output: keys 8 (t / 16) .. + 7 of
// the block, dims 4 (t % 16) .. + 3. Per tile the workgroup stages x, transposed to [query][key]
// as it is written to shared memory (so that an invocation's 8 keys of one query are two vec4;
// the 32 invocations of a subgroup write 32 consecutive keys of one query, distinct banks), and
// the tile's y rows; the next tile's chunks are read into registers during the current tile's
// work. Per query each invocation reads two vec4 of x and one of y for 32 multiply-adds. 128
// invocations, 17 KiB of shared memory, no subgroup operations: one build for every device.
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"
#define ROW_SHUFFLE 0
#define NT 128            // invocations
#define XW 32             // (unused exchange width of attention_fast.glsl)
#include "attention_fast.glsl"
#define BKB 64                    // keys per workgroup
#define BQT 32                    // queries per tile
#define QCH (BQT / 4)             // vec4 chunks of queries per x^T row of the tile
#define XCHUNKS (BKB * QCH / NT)  // x chunks each invocation stages per tile (4)
#define SX4 (BKB / 4 + 1)         // vec4 per shared x row: one query's keys, padded
layout(local_size_x = NT) in;

layout(push_constant, std430) uniform Push {
  F32Buf x;     // p^T or ds^T [B, Hq, Tk, Tq]
  F32Buf y;     // dO or q [B, Tq, Hq, D]
  I32Buf mask;  // [B, Tk], read when flags has FLAG_MASK
  F32Buf grad;  // [B, Tk, Hq, D]: dk or dv, or head h's partials
  AttnParams a;
  uint flags;
  float out_scale;
} p;

shared vec4 sX[BQT * SX4];  // x of the tile: query ii, keys 4c .. 4c + 3 at ii * SX4 + c
shared vec4 sY[BQT * DCH];  // y row ii at ii * DCH

// The chunk of key jj of the block at k0, queries i4 .. i4 + 3 of the tile at i0: each element x
// where the pair is visible (key present, not padding, causal and window; `whole`: every pair of
// the tile is, no test needed), else zero.
vec4 x_chunk(uint jj, uint i4, uint k0, uint k_rows, int i0, uint q_rows, bool whole,
             uint x_head, uint b, bool masked, bool x_vec4) {
  const uint row = (x_head + k0 + jj) * p.a.tq + uint(i0) + i4;
  const bool vec4_chunk = x_vec4 && i4 + 4u <= q_rows;
  if (whole && vec4_chunk) return Vec4Buf(uint64_t(p.x)).v[row / 4u];
  vec4 v = vec4(0.0);
  if (jj >= k_rows || (masked && p.mask.v[b * p.a.tk + k0 + jj] == 0)) return v;
  if (vec4_chunk) v = Vec4Buf(uint64_t(p.x)).v[row / 4u];
  const int pos_first = i0 + p.a.q_offset;
  [[unroll]] for (uint u = 0; u < 4u; ++u) {
    const bool in_range = i4 + u < q_rows;
    if (!vec4_chunk && in_range) v[u] = p.x.v[row + u];
    if (!in_range || (!whole && !position_visible(p.a, pos_first + int(i4 + u), int(k0 + jj))))
      v[u] = 0.0;
  }
  return v;
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint tk = t / 16u, td = t % 16u;  // keys 8 tk + (0..7), dims 4 td + (0..3)
  // Grid (query heads, batch, key blocks), blocks slowest: the first blocks (seen by the most
  // queries under a causal mask) are dispatched first.
  const uint k0 = gl_WorkGroupID.z * BKB;
  const uint h = gl_WorkGroupID.x;
  const uint b = gl_WorkGroupID.y;
  const uint D = p.a.d;
  const uint k_rows = min(uint(BKB), p.a.tk - k0);
  const bool vec4_rows = (p.flags & FLAG_ROWS_VEC4) != 0u;
  const bool x_vec4 = (p.flags & FLAG_DS_VEC4) != 0u;
  const bool masked = (p.flags & FLAG_MASK) != 0u;
  const uint q_stride = p.a.hq * D;
  const uint x_head = (b * p.a.hq + h) * p.a.tk;  // x^T row of key 0 of this head

  // Queries that can see a key of the block (as in the fused kernel), from a whole tile.
  int i_lo = 0, i_hi = int(p.a.tq);
  if (p.a.causal != 0) i_lo = max(i_lo, int(k0) - p.a.q_offset);
  if (p.a.window != 0) i_hi = min(i_hi, int(k0 + k_rows) - 1 + int(p.a.window) - p.a.q_offset);
  i_lo = (i_lo / BQT) * BQT;

  vec4 acc[8];  // output rows 8 tk + u, dims 4 td + (0..3)
  [[unroll]] for (uint u = 0; u < 8u; ++u) acc[u] = vec4(0.0);

  // This invocation's chunks of a tile: e = t + n NT, key e % BKB, queries 4 (e / BKB) + (0..3).
  vec4 x_next[XCHUNKS], y_next[BQT * DCH / NT];
#define FETCH_X(I0)                                                                         \
  {                                                                                         \
    const int i0_ = (I0);                                                                   \
    const uint q_rows_ = min(uint(BQT), p.a.tq - uint(i0_));                                \
    const int pos_first_ = i0_ + p.a.q_offset;                                              \
    const bool whole_ = !masked && k_rows == BKB && q_rows_ == BQT &&                       \
                        (p.a.causal == 0 || int(k0) + BKB - 1 <= pos_first_) &&             \
                        (p.a.window == 0 || pos_first_ + BQT - 1 - int(k0) < int(p.a.window)); \
    [[unroll]] for (uint n_ = 0; n_ < XCHUNKS; ++n_) {                                      \
      const uint e_ = t + n_ * NT;                                                          \
      x_next[n_] = x_chunk(e_ % BKB, (e_ / BKB) * 4u, k0, k_rows, i0_, q_rows_, whole_,     \
                           x_head, b, masked, x_vec4);                                      \
    }                                                                                       \
  }
  if (i_lo < i_hi) {
    FETCH_X(i_lo)
    if (vec4_rows) {
      const uint rows = min(uint(BQT), p.a.tq - uint(i_lo));
      FETCH_ROWS(y_next, BQT, p.y, ((b * p.a.tq + uint(i_lo)) * p.a.hq + h) * D, q_stride, rows)
    }
  }
  for (int i0 = i_lo; i0 < i_hi; i0 += BQT) {
    barrier();  // the previous tile is consumed
    [[unroll]] for (uint n = 0; n < XCHUNKS; ++n) {
      const uint e = t + n * NT, jj = e % BKB, i4 = (e / BKB) * 4u;
      [[unroll]] for (uint u = 0; u < 4u; ++u) sX[(i4 + u) * SX4 + jj / 4u][jj % 4u] = x_next[n][u];
    }
    const uint y_base = ((b * p.a.tq + uint(i0)) * p.a.hq + h) * D;
    if (vec4_rows) {
      STORE_ROWS(sY, y_next, BQT, DCH)
    } else {
      STAGE_ROWS(sY, BQT, DCH, p.y, y_base, q_stride, min(uint(BQT), p.a.tq - uint(i0)));
    }
    if (i0 + BQT < i_hi) {
      FETCH_X(i0 + BQT)
      if (vec4_rows) {
        const uint rows = min(uint(BQT), p.a.tq - uint(i0 + BQT));
        FETCH_ROWS(y_next, BQT, p.y, y_base + BQT * q_stride, q_stride, rows)
      }
    }
    barrier();

    // acc[u] += x[key][i] y[i] over the tile's queries, in order.
    [[unroll]] for (uint ii = 0; ii < BQT; ++ii) {
      const vec4 g0 = sX[ii * SX4 + 2u * tk], g1 = sX[ii * SX4 + 2u * tk + 1u];
      const vec4 yy = sY[ii * DCH + td];
      [[unroll]] for (uint u = 0; u < 4u; ++u) {
        acc[u] = fma(vec4(g0[u]), yy, acc[u]);
        acc[4u + u] = fma(vec4(g1[u]), yy, acc[4u + u]);
      }
    }
  }
#undef FETCH_X

  const vec4 out_scale = vec4(p.out_scale);
  [[unroll]] for (uint u = 0; u < 8u; ++u) {
    const uint jj = 8u * tk + u;
    if (jj >= k_rows) continue;
    store_chunk(p.grad, ((b * p.a.tk + k0 + jj) * p.a.hq + h) * D, td, D, vec4_rows,
                acc[u] * out_scale);
  }
}
