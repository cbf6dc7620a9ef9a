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
// The workgroup walks the visible queries in tiles of 2 BQ and is made of two halves (64 or 32
// invocations each) that split every tile: half `hf` takes its queries hf BQ .. hf BQ + BQ - 1,
// each half with accumulators of its own for all the block's keys, which the first half adds to
// the second's once at the end, in that order (deterministic, no atomics). The halves share the
// staged K and V (and the barriers), so the workgroup holds twice the invocations of a design
// with one set of accumulators for the same shared memory: more warps to hide latency behind.
// In the layout of attention_fast.glsl the row groups of a half own keys (rows rg + NRG r of the
// block) and the lanes the half's queries lane + 8 c: each lane forms v.do and then k.q for its 4
// keys and those queries from vec4 reads, turns them into p and ds, passes both to its row group
// through shared memory, and adds p dO and ds Q into its 4 x 8 blocks of dv and dk (8 reads of p
// and ds and 16 of dO and Q feed 256 multiply-adds). Two workgroup barriers per query tile
// (staging Q, dO, lse, delta). Scores in log2 units as in the forward.
//
// Variants: k32 (32 keys, 128 invocations, query tiles of 2 x 16, 45.3 KiB of shared memory:
// NVIDIA's 48 KiB), k16 (16 keys, 64 invocations, 2 x 16 queries, 31.3 KiB: lavapipe's 32 KiB)
// with subgroup synchronisation, and k16_shared (workgroup barriers, for devices without the
// subgroups ROW_SHUFFLE needs). The host mirrors BK and the sizes (src/ops/attention_coopmat.cpp).
//!novariant_base
//!variant k32 -DBK=32 -DROW_SHUFFLE=1
//!variant k16 -DBK=16 -DROW_SHUFFLE=1
//!variant k16_shared -DBK=16 -DROW_SHUFFLE=0
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"
#define BQ 16             // queries per half and tile
#define CQ (BQ / 8)       // queries per lane (LANES = 8)
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
  AttnDropoutBuf dropout;  // unused: the fast kernels run without dropout
  AttnParams a;
  uint flags;
} p;

shared vec4 sK[BK * ROW4];   // K row j of the block at j * ROW4
shared vec4 sV[BK * ROW4];   // V row j
shared vec4 sQ[2 * BQ * ROW4];   // Q row i of the tile at i * ROW4 (half hf's from hf BQ)
shared vec4 sDO[2 * BQ * ROW4];  // dO row i
// Row group g of half hf (region hf NRG + g): p of key r, query i at float 4 (g XG4 + r XP4) + i.
shared vec4 sP[2 * NRG * XG4];
shared vec4 sG[2 * NRG * XG4];   // and its ds
shared float sLse2[2 * BQ];      // the tile's logsumexp in log2 units (0 past the end)
shared float sDelta[2 * BQ];

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint hf = t / HALF;                        // half: queries hf BQ .. of every tile
  const uint rg = (t % HALF) / LANES, lane = t % LANES;
  const uint xg = (hf * NRG + rg) * XG4;           // this row group's exchange region
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
  vec4 acc_k[RQ][2], acc_v[RQ][2];  // dk, dv rows, dims 4 lane + (0..3), 32 + 4 lane + (0..3)
  [[unroll]] for (uint r = 0; r < RQ; ++r)
    acc_k[r][0] = acc_k[r][1] = acc_v[r][0] = acc_v[r][1] = vec4(0.0);

  // Queries that can see a key of the block: position i + q_offset >= k0 (causal) and
  // position - (k0 + k_rows - 1) < window.
  int i_lo = 0, i_hi = int(p.a.tq);
  if (p.a.causal != 0) i_lo = max(i_lo, int(k0) - p.a.q_offset);
  if (p.a.window != 0) i_hi = min(i_hi, int(k0 + k_rows) - 1 + int(p.a.window) - p.a.q_offset);

  for (int i0 = i_lo; i0 < i_hi; i0 += 2 * BQ) {
    barrier();  // the previous tile is consumed (and sK, sV are written)
    const uint tile_rows = min(uint(2 * BQ), p.a.tq - uint(i0));
    const uint q_base = ((b * p.a.tq + uint(i0)) * p.a.hq + h) * D;
    STAGE_ROWS(sQ, 2 * BQ, ROW4, p.q, q_base, q_stride, tile_rows);
    STAGE_ROWS(sDO, 2 * BQ, ROW4, p.dout, q_base, q_stride, tile_rows);
    if (t < 2 * BQ) {
      const uint at = (b * p.a.hq + h) * p.a.tq + uint(i0) + t;
      sLse2[t] = t < tile_rows ? p.lse.v[at] * LOG2E : 0.0;
      sDelta[t] = t < tile_rows ? p.delta.v[at] : 0.0;
    }
    barrier();

    // This half's queries: tile rows hf BQ .. hf BQ + q_rows - 1 (none when the tile is short).
    const uint h0 = hf * BQ;
    const uint q_rows = tile_rows > h0 ? min(uint(BQ), tile_rows - h0) : 0u;

    // dp[r][c] = V[rg + NRG r] . dO[h0 + lane + 8 c], then dot[r][c] = K[rg + NRG r] . Q[...]:
    // two passes over the head dim rather than one, so that only one product's operands are live
    // beside the other's results (fewer registers, the same reads and the same sums).
    float dot[RQ][CQ], dp[RQ][CQ];
    [[unroll]] for (uint r = 0; r < RQ; ++r)
      [[unroll]] for (uint c = 0; c < CQ; ++c) dot[r][c] = dp[r][c] = 0.0;
    for (uint d0 = 0; d0 < DCH; d0 += 4) {
      [[unroll]] for (uint dc = 0; dc < 4; ++dc) {
        vec4 oo[CQ];
        [[unroll]] for (uint c = 0; c < CQ; ++c)
          oo[c] = sDO[(h0 + lane + LANES * c) * ROW4 + d0 + dc];
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          const vec4 vv = sV[(rg + NRG * r) * ROW4 + d0 + dc];
          [[unroll]] for (uint c = 0; c < CQ; ++c) dp[r][c] = fma4(oo[c], vv, dp[r][c]);
        }
      }
    }
    for (uint d0 = 0; d0 < DCH; d0 += 4) {
      [[unroll]] for (uint dc = 0; dc < 4; ++dc) {
        vec4 qq[CQ];
        [[unroll]] for (uint c = 0; c < CQ; ++c)
          qq[c] = sQ[(h0 + lane + LANES * c) * ROW4 + d0 + dc];
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          const vec4 kk = sK[(rg + NRG * r) * ROW4 + d0 + dc];
          [[unroll]] for (uint c = 0; c < CQ; ++c) dot[r][c] = fma4(qq[c], kk, dot[r][c]);
        }
      }
    }

    // p and ds = p (dp - delta) d(score)/d(dot); without a soft-cap the derivative is the
    // constant scale, applied to dk once at the end. Hidden pairs get 0 (selected, so whatever
    // exp2 made of their scores is dropped); a half-tile whose queries all see every key of the
    // block skips the tests.
    float pr[RQ][CQ], g[RQ][CQ];
    float lse2[CQ], dlt[CQ];
    [[unroll]] for (uint c = 0; c < CQ; ++c) {
      lse2[c] = sLse2[h0 + lane + LANES * c];
      dlt[c] = sDelta[h0 + lane + LANES * c];
    }
    if (softcap) {
      [[unroll]] for (uint r = 0; r < RQ; ++r)
        [[unroll]] for (uint c = 0; c < CQ; ++c) {
          const float th = vtanh(dot[r][c] * p.a.scale / p.a.softcap);
          pr[r][c] = exp2(p.a.softcap * th * LOG2E - lse2[c]);
          g[r][c] = pr[r][c] * (dp[r][c] - dlt[c]) * (p.a.scale * (1.0 - th * th));
        }
    } else {
      [[unroll]] for (uint r = 0; r < RQ; ++r)
        [[unroll]] for (uint c = 0; c < CQ; ++c) {
          pr[r][c] = exp2(dot[r][c] * to_log2 - lse2[c]);
          g[r][c] = pr[r][c] * (dp[r][c] - dlt[c]);
        }
    }
    const int pos_first = i0 + int(h0) + p.a.q_offset;
    const bool whole = all_keys_ok && q_rows == BQ &&
                       (p.a.causal == 0 || int(k0) + BK - 1 <= pos_first) &&
                       (p.a.window == 0 || pos_first + BQ - 1 - int(k0) < int(p.a.window));
    if (!whole) {
      [[unroll]] for (uint c = 0; c < CQ; ++c) {
        const uint ii = lane + LANES * c;
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          if (!key_ok[r] || ii >= q_rows ||
              !position_visible(p.a, pos_first + int(ii), int(k0 + rg + NRG * r))) {
            pr[r][c] = 0.0;
            g[r][c] = 0.0;
          }
        }
      }
    }
    [[unroll]] for (uint r = 0; r < RQ; ++r)
      [[unroll]] for (uint c = 0; c < CQ; ++c) {
        const uint at = 4u * (xg + r * XP4) + lane + LANES * c;
        sP[at / 4u][at % 4u] = pr[r][c];
        sG[at / 4u][at % 4u] = g[r][c];
      }
    ROW_SYNC();

    // dv[r] += sum_i p[r][i] dO[i] and dk[r] += sum_i ds[r][i] Q[i] over the half's queries,
    // in order.
    [[unroll]] for (uint i4 = 0; i4 < BQ / 4; ++i4) {
      vec4 pr[RQ], g[RQ];
      [[unroll]] for (uint r = 0; r < RQ; ++r) {
        pr[r] = sP[xg + r * XP4 + i4];
        g[r] = sG[xg + r * XP4 + i4];
      }
      [[unroll]] for (uint u = 0; u < 4; ++u) {
        const uint i = h0 + 4 * i4 + u;
        const vec4 o0 = sDO[i * ROW4 + lane], o1 = sDO[i * ROW4 + LANES + lane];
        const vec4 q0 = sQ[i * ROW4 + lane], q1 = sQ[i * ROW4 + LANES + lane];
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          acc_v[r][0] = fma(vec4(pr[r][u]), o0, acc_v[r][0]);
          acc_v[r][1] = fma(vec4(pr[r][u]), o1, acc_v[r][1]);
          acc_k[r][0] = fma(vec4(g[r][u]), q0, acc_k[r][0]);
          acc_k[r][1] = fma(vec4(g[r][u]), q1, acc_k[r][1]);
        }
      }
    }
  }

  // The second half hands its sums to the first through the (now free) Q and dO tiles: for key
  // row rg + NRG r, chunk s (0: dims 4 lane.., 1: 32 + 4 lane..) at ((rg RQ + r) 2 + s) 8 + lane,
  // BK 16 vec4 in all, within the 2 BQ ROW4 of each tile.
  barrier();  // every half is done with the last tile
  if (hf == 1u) {
    [[unroll]] for (uint r = 0; r < RQ; ++r)
      [[unroll]] for (uint s2 = 0; s2 < 2; ++s2) {
        const uint at = ((rg * RQ + r) * 2 + s2) * LANES + lane;
        sQ[at] = acc_k[r][s2];
        sDO[at] = acc_v[r][s2];
      }
  }
  barrier();
  if (hf == 1u) return;
  const vec4 grad_scale = vec4(softcap ? 1.0 : p.a.scale);
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    const uint jj = rg + NRG * r;
    if (jj >= k_rows) continue;
    const uint row = out_base + jj * q_stride;
    const uint at = (rg * RQ + r) * 2 * LANES + lane;
    store_chunk(p.dk, row, lane, D, vec4_rows, (acc_k[r][0] + sQ[at]) * grad_scale);
    store_chunk(p.dk, row, LANES + lane, D, vec4_rows,
                (acc_k[r][1] + sQ[at + LANES]) * grad_scale);
    store_chunk(p.dv, row, lane, D, vec4_rows, acc_v[r][0] + sDO[at]);
    store_chunk(p.dv, row, LANES + lane, D, vec4_rows, acc_v[r][1] + sDO[at + LANES]);
  }
}
