// Fused attention backward, query side, from the score gradients that the register-tiled dk/dv
// kernel stored (fp32, Fast math mode, head_dim <= 64): dq_i = sum_j ds_ij k_j, times the scale
// (without a soft-cap; with one, ds already carries d(score)/d(dot)). attention_fast_bwd_dkv.comp
// forms every visible ds_ij anyway, for dk; where the host gives it a buffer it also writes them,
// as ds^T: [B, Hq, Tk, Tq] floats, row (b, h, key j) holding the queries in order. So this kernel
// does one product where attention_fast_bwd_dq.comp does three (q.k and do.v again, then ds k).
//
// Same sums as attention_fast_bwd_dq.comp, bit for bit: the same ds values (the dk/dv kernel
// computes them with the same expressions), added into each output in increasing key order by
// single fused multiply-adds, hidden pairs as exact zeros, then the same scaling. Entries of ds^T
// that no dk/dv workgroup wrote are pairs hidden by the causal rule or the window; they are read
// (the buffer is not cleared) but replaced by zero before use, by the visibility test the
// recomputing kernel applies, and never reach the sums.
//
// A workgroup owns BQ = 64 queries of one head and walks the keys they can see in tiles of BK =
// 32. Invocation t holds an 8 x 4 block of dq: queries 8 (t / 16) .. + 7 of the block, dims
// 4 (t % 16) .. + 3. Per tile the workgroup stages ds^T (32 keys x 64 queries) and K (32 keys x
// 64 dims) in shared memory, the next tile's chunks read into registers during the current tile's
// work; per key each invocation reads two vec4 of ds and one of K for 32 multiply-adds. 128
// invocations, 16 KiB of shared memory, no subgroup operations: one build for every device.
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"
#define ROW_SHUFFLE 0
#define NT 128            // invocations
#define XW 32             // (unused exchange width of attention_fast.glsl)
#include "attention_fast.glsl"
#define BQ 64             // queries per workgroup
#define BK 32             // keys per tile
#define QCH (BQ / 4)      // vec4 chunks of queries per ds^T row of the tile
#define CHUNKS (BK * QCH / NT)  // ds^T chunks each invocation stages per tile (4)
layout(local_size_x = NT) in;

layout(push_constant, std430) uniform Push {
  F32Buf k;      // [B, Tk, Hkv, D]
  I32Buf mask;   // [B, Tk], read when flags has FLAG_MASK
  F32Buf ds;     // ds^T [B, Hq, Tk, Tq], as attention_fast_bwd_dkv.comp wrote it
  F32Buf dq;     // [B, Tq, Hq, D]
  AttnParams a;
  uint flags;
} p;

shared vec4 sDS[BK * QCH];  // ds^T of the tile: key j, queries 4c .. 4c + 3 at j * QCH + c
shared vec4 sK[BK * DCH];   // K row j at j * DCH

// Chunk e of the ds^T tile of keys j0 .. (key e / QCH, queries q0 + 4 (e % QCH) + (0..3)): each
// element ds where the pair is visible (key present, not padding, causal and window; `whole`:
// every pair of the tile is, no test needed), else zero.
vec4 ds_chunk(uint e, int j0, uint kv_rows, bool whole, uint ds_head, uint q0, uint q_rows,
              int pos_first, uint b, bool masked, bool ds_vec4) {
  const uint jj = e / QCH, i4 = (e % QCH) * 4u;
  const uint row = (ds_head + uint(j0) + jj) * p.a.tq + q0 + i4;
  const bool vec4_chunk = ds_vec4 && i4 + 4u <= q_rows;
  if (whole && vec4_chunk) return Vec4Buf(uint64_t(p.ds)).v[row / 4u];
  vec4 x = vec4(0.0);
  if (jj >= kv_rows || (masked && p.mask.v[b * p.a.tk + uint(j0) + jj] == 0)) return x;
  if (vec4_chunk) x = Vec4Buf(uint64_t(p.ds)).v[row / 4u];
  [[unroll]] for (uint u = 0; u < 4u; ++u) {
    const bool in_range = i4 + u < q_rows;
    if (!vec4_chunk && in_range) x[u] = p.ds.v[row + u];
    if (!in_range || (!whole && !position_visible(p.a, pos_first + int(i4 + u), j0 + int(jj))))
      x[u] = 0.0;
  }
  return x;
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint tq = t / 16u, td = t % 16u;  // queries 8 tq + (0..7), dims 4 td + (0..3)
  // Grid (heads, batch, query blocks), blocks slowest, the blocks with the most keys first.
  const uint blocks = (p.a.tq + BQ - 1) / BQ;
  const uint q0 = (blocks - 1 - gl_WorkGroupID.z) * BQ;
  const uint h = gl_WorkGroupID.x;
  const uint b = gl_WorkGroupID.y;
  const uint D = p.a.d;
  const uint hk = h / (p.a.hq / p.a.hkv);
  const uint q_rows = min(uint(BQ), p.a.tq - q0);
  const bool vec4_rows = (p.flags & FLAG_ROWS_VEC4) != 0u;
  const bool ds_vec4 = (p.flags & FLAG_DS_VEC4) != 0u;
  const bool masked = (p.flags & FLAG_MASK) != 0u;
  const uint kv_stride = p.a.hkv * D;
  const uint ds_head = (b * p.a.hq + h) * p.a.tk;  // ds^T row of key 0 of this head

  const int pos_first = int(q0) + p.a.q_offset;
  const int pos_last = pos_first + int(q_rows) - 1;
  int j_lo = 0, j_hi = int(p.a.tk);
  if (p.a.causal != 0) j_hi = min(j_hi, pos_last + 1);
  if (p.a.window != 0) j_lo = max(j_lo, pos_first - int(p.a.window) + 1);
  j_lo = (j_lo / BK) * BK;

  vec4 acc[8];  // dq rows 8 tq + u, dims 4 td + (0..3)
  [[unroll]] for (uint u = 0; u < 8u; ++u) acc[u] = vec4(0.0);

  // This invocation's chunks of a tile: e = t + n NT (ds_chunk).
  vec4 ds_next[CHUNKS], k_next[BK * DCH / NT];
  const bool have_tiles = j_lo < j_hi;
#define FETCH_DS(J0)                                                                       \
  {                                                                                        \
    const int j0_ = (J0);                                                                  \
    const uint kv_rows_ = min(uint(BK), p.a.tk - uint(j0_));                               \
    const bool whole_ = !masked && kv_rows_ == BK && q_rows == BQ &&                       \
                        (p.a.causal == 0 || j0_ + BK - 1 <= pos_first) &&                  \
                        (p.a.window == 0 || pos_last - j0_ < int(p.a.window));             \
    [[unroll]] for (uint n_ = 0; n_ < CHUNKS; ++n_)                                        \
      ds_next[n_] = ds_chunk(t + n_ * NT, j0_, kv_rows_, whole_, ds_head, q0, q_rows,      \
                             pos_first, b, masked, ds_vec4);                               \
  }
  if (have_tiles) {
    FETCH_DS(j_lo)
    if (vec4_rows) {
      const uint rows = min(uint(BK), p.a.tk - uint(j_lo));
      FETCH_ROWS(k_next, BK, p.k, ((b * p.a.tk + uint(j_lo)) * p.a.hkv + hk) * D, kv_stride, rows)
    }
  }
  for (int j0 = j_lo; j0 < j_hi; j0 += BK) {
    barrier();  // the previous tile is consumed
    [[unroll]] for (uint n = 0; n < CHUNKS; ++n) sDS[t + n * NT] = ds_next[n];
    const uint kv_base = ((b * p.a.tk + uint(j0)) * p.a.hkv + hk) * D;
    if (vec4_rows) {
      STORE_ROWS(sK, k_next, BK, DCH)
    } else {
      STAGE_ROWS(sK, BK, DCH, p.k, kv_base, kv_stride, min(uint(BK), p.a.tk - uint(j0)));
    }
    if (j0 + BK < j_hi) {
      FETCH_DS(j0 + BK)
      if (vec4_rows) {
        const uint rows = min(uint(BK), p.a.tk - uint(j0 + BK));
        FETCH_ROWS(k_next, BK, p.k, kv_base + BK * kv_stride, kv_stride, rows)
      }
    }
    barrier();

    // acc[u] += ds[query][j] K[j] over the tile's keys, in order.
    [[unroll]] for (uint jj = 0; jj < BK; ++jj) {
      const vec4 g0 = sDS[jj * QCH + 2u * tq], g1 = sDS[jj * QCH + 2u * tq + 1u];
      const vec4 kk = sK[jj * DCH + td];
      [[unroll]] for (uint u = 0; u < 4u; ++u) {
        acc[u] = fma(vec4(g0[u]), kk, acc[u]);
        acc[4u + u] = fma(vec4(g1[u]), kk, acc[4u + u]);
      }
    }
  }
#undef FETCH_DS

  const vec4 grad_scale = vec4(p.a.softcap > 0.0 ? 1.0 : p.a.scale);
  [[unroll]] for (uint u = 0; u < 8u; ++u) {
    const uint i = 8u * tq + u;
    if (i >= q_rows) continue;
    store_chunk(p.dq, ((b * p.a.tq + q0 + i) * p.a.hq + h) * D, td, D, vec4_rows,
                acc[u] * grad_scale);
  }
}
