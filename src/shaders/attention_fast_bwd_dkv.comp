// Fused attention backward, key side, register-tiled fp32 (Fast math mode, head_dim <= 64): the
// contributions of one query head to dk and dv for a block of BK = 32 keys of its key/value head,
// walking the visible queries in tiles of BQ (ascending). Same arithmetic as
// attention_bwd_dkv.comp:
//   dv_j = sum_{h, i} p_ij do_i        dk_j = sum_{h, i} ds_ij q_i
// here with h fixed: the workgroup writes sum_i over head h to row (b, key, h) of [B, Tk, Hq, D]
// outputs. Without GQA (Hq = Hkv) those are dk and dv themselves; with GQA they are per-head
// partials that attention_fast_bwd_dkv_group_sum.comp adds over the group in head order. One
// workgroup per query head rather than per key/value head gives the grid `group` times more
// workgroups, each `group` times shorter: a GQA model with few key/value heads (3 in a 135M
// Llama) otherwise fills barely more than one wave of the GPU, with the workgroups of the first
// key blocks (seen by every query under a causal mask) running long after the rest are done.
// The workgroup is made of two halves of 64 invocations that split the accumulation by product
// rather than by rows, so that each holds one accumulator block instead of two (fewer registers)
// and the workgroup twice the invocations for the shared memory of one set of tiles: half 0 adds
// dv += p dO, half 1 dk += ds Q. Before that, each half scores half of the tile's queries: it
// forms k.q and v.do for them, turns them into p (hidden pairs 0) and ds = p (dp - delta)
// d(score)/d(dot), and stores both in its row group's exchange regions, which one workgroup
// barrier hands to both halves. (Until the fourteenth session half 0 formed every p and half 1
// every dp, and half 1 waited for half 0's p before it could form ds: the whole p computation
// and then the ds one lay on each tile's critical path, bench/RESULTS.md.)
// In the layout of attention_fast.glsl the row groups own keys (rows rg + NRG r of the block) and
// the lanes the tile's queries lane + 8 c, the same in both halves, half 0 taking c < CQ / 2 and
// half 1 the rest. Each lane forms its two products for 4 keys and its queries from vec4 reads
// (12 reads feed 64 multiply-adds), and adds p dO (or ds Q) into its 4 x 8 block of dv (or dk)
// through its row group's exchange region (4 reads of p and 8 of dO feed 128 multiply-adds).
// Three workgroup barriers per query tile (staging Q, dO, lse and delta; handing p and ds over);
// sums in a fixed order (deterministic, no atomics; the same values and sums as before the
// split). Scores in log2 units as in the forward.
//
// Where the host passes a ds buffer (ds^T, [B, Hq, Tk, Tq]), the kernel also stores each tile's ds
// there after the exchange barrier, for attention_fast_bwd_dq_ds.comp, which then forms dq from
// them instead of recomputing q.k and do.v (hidden pairs are stored as the zeros used here; pairs
// of query tiles the block never visits are not written).
//
// Variants by queries per tile: q32 (43.8 KiB of shared memory, NVIDIA's 48 KiB) and q16 (31.1
// KiB, lavapipe's 32 KiB). The kernel synchronises through workgroup barriers only, so it needs
// no subgroup operations (ROW_SHUFFLE 0) and one build of each serves every device, the
// family's barrier builds included. 128 invocations. The host mirrors BK = 32 and the sizes
// (src/ops/attention_coopmat.cpp).
//!novariant_base
//!variant q32 -DBQ=32
//!variant q16 -DBQ=16
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"
#define ROW_SHUFFLE 0     // no subgroup operations (see above)
#define BK 32             // keys per workgroup
#define CQ (BQ / 8)       // queries per lane (LANES = 8)
#define CH (CQ / 2)       // of which each half scores
#define NRG (BK / 4)      // row groups per half (RQ = 4 keys each)
#define HALF (NRG * 8)    // invocations per half
#define NT (2 * HALF)     // invocations
#define XW BQ             // columns of the exchange regions
#include "attention_fast.glsl"
layout(local_size_x = NT) in;

layout(push_constant, std430) uniform Push {
  F32Buf q;      // [B, Tq, Hq, D]
  F32Buf k;      // [B, Tk, Hkv, D]
  F32Buf v;      // [B, Tk, Hkv, D]
  I32Buf mask;   // [B, Tk], read when flags has FLAG_MASK
  F32Buf dout;   // [B, Tq, Hq, D]
  F32Buf lse;    // [B, Hq, Tq]
  F32Buf delta;  // [B, Hq, Tq]
  F32Buf dk;     // [B, Tk, Hq, D]: dk itself when Hq = Hkv, else head h's partial
  F32Buf dv;     // [B, Tk, Hq, D]
  F32Buf ds;     // 0, or ds^T [B, Hq, Tk, Tq] for attention_fast_bwd_dq_ds.comp (see below)
  AttnParams a;
  uint flags;
} p;

shared vec4 sK[BK * ROW4];   // K row j of the block at j * ROW4
shared vec4 sV[BK * ROW4];   // V row j
shared vec4 sQ[BQ * ROW4];   // Q row i of the tile at i * ROW4
shared vec4 sDO[BQ * ROW4];  // dO row i
// Row group g's exchange regions: key r, query i at float 4 (g XG4 + r XP4) + i. sP holds p for
// half 0's dv, sG ds for half 1's dk, each written by the half that scored query i.
shared vec4 sP[NRG * XG4];
shared vec4 sG[NRG * XG4];
shared float sLse2[BQ];      // the tile's logsumexp in log2 units (0 past the end)
shared float sDelta[BQ];

// acc[r] += sum_i W[r][i] X[i] over the tile's queries, in order: W a row group's exchange
// region, X the tile's rows.
#define ACCUMULATE_ROWS(W, X)                                                   \
  [[unroll]] for (uint i4 = 0; i4 < BQ / 4; ++i4) {                             \
    vec4 w[RQ];                                                                 \
    [[unroll]] for (uint r = 0; r < RQ; ++r) w[r] = W[xg + r * XP4 + i4];       \
    [[unroll]] for (uint u = 0; u < 4; ++u) {                                   \
      const vec4 x0 = X[(4 * i4 + u) * ROW4 + lane];                            \
      const vec4 x1 = X[(4 * i4 + u) * ROW4 + LANES + lane];                    \
      [[unroll]] for (uint r = 0; r < RQ; ++r) {                                \
        acc[r][0] = fma(vec4(w[r][u]), x0, acc[r][0]);                          \
        acc[r][1] = fma(vec4(w[r][u]), x1, acc[r][1]);                          \
      }                                                                         \
    }                                                                           \
  }

void main() {
  const uint t = gl_LocalInvocationID.x;
  const bool first_half = t < HALF;  // accumulates dv; else dk
  const uint rg = (t % HALF) / LANES, lane = t % LANES;
  const uint xg = rg * XG4;          // this row group's exchange regions
  const uint c0 = first_half ? 0u : CH;  // this half's queries: lane + 8 (c0 + c), c < CH
  // Grid (query heads, batch, key blocks), blocks slowest: the first blocks of every head and
  // batch (seen by the most queries under a causal mask) are dispatched first.
  const uint k0 = gl_WorkGroupID.z * BK;
  const uint h = gl_WorkGroupID.x;
  const uint b = gl_WorkGroupID.y;
  const uint D = p.a.d;
  const uint hk = h / (p.a.hq / p.a.hkv);
  const uint k_rows = min(uint(BK), p.a.tk - k0);
  const bool vec4_rows = (p.flags & FLAG_ROWS_VEC4) != 0u;
  const bool softcap = p.a.softcap > 0.0;
  const float to_log2 = p.a.scale * LOG2E;
  const uint q_stride = p.a.hq * D;
  const uint kv_base = ((b * p.a.tk + k0) * p.a.hkv + hk) * D;
  const uint out_base = ((b * p.a.tk + k0) * p.a.hq + h) * D;  // row k0 of head h's output

  STAGE_ROWS(sK, BK, ROW4, p.k, kv_base, p.a.hkv * D, k_rows);
  STAGE_ROWS(sV, BK, ROW4, p.v, kv_base, p.a.hkv * D, k_rows);
  // This lane's keys: present and not padding.
  bool key_ok[RQ];
  bool all_keys_ok = k_rows == BK;  // every key of the block, for the whole-tile test
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    const uint jj = rg + NRG * r;
    key_ok[r] = jj < k_rows;
    if (key_ok[r] && (p.flags & FLAG_MASK) != 0u) key_ok[r] = p.mask.v[b * p.a.tk + k0 + jj] != 0;
  }
  all_keys_ok = all_keys_ok && (p.flags & FLAG_MASK) == 0u;
  // dv rows (half 0) or dk rows (half 1), dims 4 lane + (0..3) and 32 + 4 lane + (0..3).
  vec4 acc[RQ][2];
  [[unroll]] for (uint r = 0; r < RQ; ++r) acc[r][0] = acc[r][1] = vec4(0.0);

  // Queries that can see a key of the block: position i + q_offset >= k0 (causal) and
  // position - (k0 + k_rows - 1) < window.
  int i_lo = 0, i_hi = int(p.a.tq);
  if (p.a.causal != 0) i_lo = max(i_lo, int(k0) - p.a.q_offset);
  if (p.a.window != 0) i_hi = min(i_hi, int(k0 + k_rows) - 1 + int(p.a.window) - p.a.q_offset);

  // With vec4 rows the next tile's Q and dO are read into registers before the current tile's
  // work (FETCH_ROWS), so that their loads overlap it.
  vec4 q_next[BQ * DCH / NT], do_next[BQ * DCH / NT];
  if (vec4_rows && i_lo < i_hi) {
    const uint rows = min(uint(BQ), p.a.tq - uint(i_lo));
    const uint base = ((b * p.a.tq + uint(i_lo)) * p.a.hq + h) * D;
    FETCH_ROWS(q_next, BQ, p.q, base, q_stride, rows)
    FETCH_ROWS(do_next, BQ, p.dout, base, q_stride, rows)
  }
  // Invocations t < BQ read query t's logsumexp and delta a tile ahead too: read in the tile, the
  // load's latency held the whole workgroup at the barrier after the staging.
  const uint stat_base = (b * p.a.hq + h) * p.a.tq;
  float lse_next = 0.0, delta_next = 0.0;
  if (t < BQ && i_lo < i_hi && uint(i_lo) + t < p.a.tq) {
    lse_next = p.lse.v[stat_base + uint(i_lo) + t];
    delta_next = p.delta.v[stat_base + uint(i_lo) + t];
  }
  for (int i0 = i_lo; i0 < i_hi; i0 += BQ) {
    barrier();  // the previous tile is consumed (and sK, sV are written)
    const uint q_rows = min(uint(BQ), p.a.tq - uint(i0));
    const uint q_base = ((b * p.a.tq + uint(i0)) * p.a.hq + h) * D;
    if (vec4_rows) {
      STORE_ROWS(sQ, q_next, BQ, ROW4)
      STORE_ROWS(sDO, do_next, BQ, ROW4)
      if (i0 + BQ < i_hi) {
        const uint rows = min(uint(BQ), p.a.tq - uint(i0 + BQ));
        const uint base = q_base + BQ * q_stride;
        FETCH_ROWS(q_next, BQ, p.q, base, q_stride, rows)
        FETCH_ROWS(do_next, BQ, p.dout, base, q_stride, rows)
      }
    } else {
      STAGE_ROWS(sQ, BQ, ROW4, p.q, q_base, q_stride, q_rows);
      STAGE_ROWS(sDO, BQ, ROW4, p.dout, q_base, q_stride, q_rows);
    }
    if (t < BQ) {
      sLse2[t] = t < q_rows ? lse_next * LOG2E : 0.0;
      sDelta[t] = t < q_rows ? delta_next : 0.0;
      if (i0 + BQ < i_hi && uint(i0 + BQ) + t < p.a.tq) {
        lse_next = p.lse.v[stat_base + uint(i0 + BQ) + t];
        delta_next = p.delta.v[stat_base + uint(i0 + BQ) + t];
      }
    }
    barrier();

    // Both halves, for this lane's keys (rg + NRG r) and its half's queries (lane + 8 (c0 + c)):
    // sc = K . Q and dp = V . dO.
    float sc[RQ][CH], dp[RQ][CH];
    [[unroll]] for (uint r = 0; r < RQ; ++r)
      [[unroll]] for (uint c = 0; c < CH; ++c) sc[r][c] = dp[r][c] = 0.0;
    // One product after the other: fewer operands live at once than interleaved.
    for (uint d0 = 0; d0 < DCH; d0 += 4) {
      [[unroll]] for (uint dc = 0; dc < 4; ++dc) {
        vec4 qq[CH];
        [[unroll]] for (uint c = 0; c < CH; ++c)
          qq[c] = sQ[(lane + LANES * (c0 + c)) * ROW4 + d0 + dc];
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          const vec4 kk = sK[(rg + NRG * r) * ROW4 + d0 + dc];
          [[unroll]] for (uint c = 0; c < CH; ++c) sc[r][c] = fma4(qq[c], kk, sc[r][c]);
        }
      }
    }
    for (uint d0 = 0; d0 < DCH; d0 += 4) {
      [[unroll]] for (uint dc = 0; dc < 4; ++dc) {
        vec4 oo[CH];
        [[unroll]] for (uint c = 0; c < CH; ++c)
          oo[c] = sDO[(lane + LANES * (c0 + c)) * ROW4 + d0 + dc];
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          const vec4 vv = sV[(rg + NRG * r) * ROW4 + d0 + dc];
          [[unroll]] for (uint c = 0; c < CH; ++c) dp[r][c] = fma4(oo[c], vv, dp[r][c]);
        }
      }
    }
    // p, and ds = p d(score)/d(dot) (dp - delta) (without a soft-cap the derivative is the
    // constant scale, applied to dk once at the end, and the factor here is 1). Hidden pairs get
    // p = 0 (selected, so whatever exp2 made of their scores is dropped); a tile whose queries all
    // see every key of the block skips the tests.
    {
      const int pos_first = i0 + p.a.q_offset;
      const bool whole = all_keys_ok && q_rows == BQ &&
                         (p.a.causal == 0 || int(k0) + BK - 1 <= pos_first) &&
                         (p.a.window == 0 || pos_first + BQ - 1 - int(k0) < int(p.a.window));
      [[unroll]] for (uint c = 0; c < CH; ++c) {
        const uint ii = lane + LANES * (c0 + c);
        const float lse2 = sLse2[ii], dlt = sDelta[ii];
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          float pr, dfac = 1.0;
          if (softcap) {
            const float th = vtanh(sc[r][c] * p.a.scale / p.a.softcap);
            pr = exp2(p.a.softcap * th * LOG2E - lse2);
            dfac = p.a.scale * (1.0 - th * th);
          } else {
            pr = exp2(sc[r][c] * to_log2 - lse2);
          }
          if (!whole && (!key_ok[r] || ii >= q_rows ||
                         !position_visible(p.a, pos_first + int(ii), int(k0 + rg + NRG * r))))
            pr = 0.0;
          const uint at = 4u * (xg + r * XP4) + ii;
          sP[at / 4u][at % 4u] = pr;
          sG[at / 4u][at % 4u] = (pr * dfac) * (dp[r][c] - dlt);
        }
      }
    }
    barrier();  // both halves' p and ds reach every row group

    // With a ds^T buffer, the tile's ds (keys of the block x queries i0 ..) goes to it for the dq
    // kernel that reads them instead of recomputing them: key rows of BQ queries, vec4 where the
    // rows allow (FLAG_DS_VEC4 and i0 a multiple of 4), only queries that exist.
    if (uint64_t(p.ds) != 0ul) {
      const bool ds_vec4 = (p.flags & FLAG_DS_VEC4) != 0u && i0 % 4 == 0;
      [[unroll]] for (uint n = 0; n < (BK * BQ / 4 + NT - 1) / NT; ++n) {
        const uint e = t + n * NT, jj = e / (BQ / 4), i4 = (e % (BQ / 4)) * 4u;
        if (jj >= k_rows || i4 >= q_rows) continue;
        const vec4 x = sG[(jj % NRG) * XG4 + (jj / NRG) * XP4 + i4 / 4u];
        const uint at = ((b * p.a.hq + h) * p.a.tk + k0 + jj) * p.a.tq + uint(i0) + i4;
        if (ds_vec4 && i4 + 4u <= q_rows) {
          Vec4Buf(uint64_t(p.ds)).v[at / 4u] = x;
        } else {
          [[unroll]] for (uint u = 0; u < 4u; ++u)
            if (i4 + u < q_rows) p.ds.v[at + u] = x[u];
        }
      }
    }

    // dv[r] += sum_i p[r][i] dO[i] (half 0) or dk[r] += sum_i ds[r][i] Q[i] (half 1) over the
    // tile's queries, in order (one loop per half: a selection between two shared arrays would
    // read both).
    if (first_half) {
      ACCUMULATE_ROWS(sP, sDO);
    } else {
      ACCUMULATE_ROWS(sG, sQ);
    }
  }

  const vec4 grad_scale = vec4(first_half || softcap ? 1.0 : p.a.scale);
  F32Buf grad_out = first_half ? p.dv : p.dk;  // an address, not a shared read
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    const uint jj = rg + NRG * r;
    if (jj >= k_rows) continue;
    const uint row = out_base + jj * q_stride;
    store_chunk(grad_out, row, lane, D, vec4_rows, acc[r][0] * grad_scale);
    store_chunk(grad_out, row, LANES + lane, D, vec4_rows, acc[r][1] * grad_scale);
  }
}
