// Fused attention backward, query side, register-tiled fp32 (Fast math mode, head_dim <= 64): dq
// for a block of BQ queries of one head, walking the visible keys in tiles of 2 BK = 32. Same
// arithmetic as attention_bwd_dq.comp: probabilities recomputed from the saved logsumexp,
// ds = p (do.v - delta) d(score)/d(dot), dq = sum_j ds_ij k_j. The workgroup is made of two
// halves that split every key tile: half `hf` takes its keys hf BK .. hf BK + BK - 1, each half
// with dq accumulators of its own for all the block's queries, which the first half adds to the
// second's once at the end, in that order (deterministic, no atomics). The halves share the
// staged Q, dO, K and V (and the barriers), so the workgroup holds twice the invocations of a
// design with one set of accumulators for the same shared memory: more warps to hide latency.
// In the layout of attention_fast.glsl each lane keeps, for its 4 query rows and its half's keys
// lane + 8 c, the dot products do.v and then q.k in registers (vec4 reads), turns them into ds,
// passes ds to its row group through shared memory, and adds ds K into its 4 x 8 block of dq
// (4 reads of ds and 8 of K feed 128 multiply-adds). Two workgroup barriers per tile (staging K
// and V). Scores in log2 units as in the forward.
//
// Variants by queries per workgroup: q32 (128 invocations, 39.6 KiB of shared memory: NVIDIA's
// 48 KiB), q16 (64 invocations, 28.4 KiB: lavapipe's 32 KiB) with subgroup synchronisation, and
// q16_shared (workgroup barriers, for devices without the subgroups ROW_SHUFFLE needs). The host
// mirrors BQ and the sizes (src/ops/attention_coopmat.cpp).
//!novariant_base
//!variant q32 -DBQ=32 -DROW_SHUFFLE=1
//!variant q16 -DBQ=16 -DROW_SHUFFLE=1
//!variant q16_shared -DBQ=16 -DROW_SHUFFLE=0
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"
#define BK 16             // keys per half and tile
#define CK (BK / 8)       // keys per lane (LANES = 8)
#define NRG (BQ / 4)      // row groups per half (RQ = 4 rows each)
#define HALF (NRG * 8)    // invocations per half
#define NT (2 * HALF)     // invocations
#define XW BK             // columns of the exchange regions
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
  F32Buf dq;     // [B, Tq, Hq, D]
  AttnDropoutBuf dropout;  // unused: the fast kernels run without dropout
  AttnParams a;
  uint flags;
} p;

shared vec4 sQ[BQ * ROW4];   // Q row i of the block at i * ROW4
shared vec4 sDO[BQ * ROW4];  // dO row i
shared vec4 sK[2 * BK * ROW4];  // K row j of the tile at j * ROW4 (half hf's from hf BK)
shared vec4 sV[2 * BK * ROW4];  // V row j
// Row group g of half hf (region hf NRG + g): ds of row r, key j at float 4 (g XG4 + r XP4) + j.
shared vec4 sG[2 * NRG * XG4];
shared uint sKeyOk[2 * BK];     // key j of the tile exists and is not padding

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint hf = t / HALF;                        // half: keys hf BK .. of every tile
  const uint rg = (t % HALF) / LANES, lane = t % LANES;
  const uint xg = (hf * NRG + rg) * XG4;           // this row group's exchange region
  // Grid (heads, batch, query blocks), blocks slowest: the last blocks of every head and batch
  // (the most keys under a causal mask) are dispatched first, the shortest ones last.
  const uint blocks = (p.a.tq + BQ - 1) / BQ;
  const uint q0 = (blocks - 1 - gl_WorkGroupID.z) * BQ;
  const uint h = gl_WorkGroupID.x;
  const uint b = gl_WorkGroupID.y;
  const uint D = p.a.d;
  const uint hk = h / (p.a.hq / p.a.hkv);
  const uint q_rows = min(uint(BQ), p.a.tq - q0);
  const bool vec4_rows = (p.flags & FLAG_ROWS_VEC4) != 0u;
  const bool softcap = p.a.softcap > 0.0;
  const float to_log2 = p.a.scale * LOG2E;
  const uint kv_stride = p.a.hkv * D;
  const uint q_base = ((b * p.a.tq + q0) * p.a.hq + h) * D;

  STAGE_ROWS(sQ, BQ, ROW4, p.q, q_base, p.a.hq * D, q_rows);
  STAGE_ROWS(sDO, BQ, ROW4, p.dout, q_base, p.a.hq * D, q_rows);
  // This lane's rows: logsumexp in log2 units and delta. A row that saw no key has lse = +inf;
  // none of its scores is visible, so it is never used.
  float lse2[RQ], dlt[RQ];
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    const uint i = rg + NRG * r;
    const uint at = (b * p.a.hq + h) * p.a.tq + q0 + i;
    lse2[r] = i < q_rows ? p.lse.v[at] * LOG2E : 0.0;
    dlt[r] = i < q_rows ? p.delta.v[at] : 0.0;
  }
  vec4 acc[RQ][2];  // dq rows, dims 4 lane + (0..3) and 32 + 4 lane + (0..3)
  [[unroll]] for (uint r = 0; r < RQ; ++r) acc[r][0] = acc[r][1] = vec4(0.0);

  const int pos_first = int(q0) + p.a.q_offset;
  const int pos_last = pos_first + int(q_rows) - 1;
  int j_lo = 0, j_hi = int(p.a.tk);
  if (p.a.causal != 0) j_hi = min(j_hi, pos_last + 1);
  if (p.a.window != 0) j_lo = max(j_lo, pos_first - int(p.a.window) + 1);
  j_lo = (j_lo / (2 * BK)) * (2 * BK);

  for (int j0 = j_lo; j0 < j_hi; j0 += 2 * BK) {
    barrier();  // the previous tile is consumed (and sQ, sDO are written)
    const uint tile_rows = min(uint(2 * BK), p.a.tk - uint(j0));
    const uint kv_base = ((b * p.a.tk + uint(j0)) * p.a.hkv + hk) * D;
    STAGE_ROWS(sK, 2 * BK, ROW4, p.k, kv_base, kv_stride, tile_rows);
    STAGE_ROWS(sV, 2 * BK, ROW4, p.v, kv_base, kv_stride, tile_rows);
    if (t < 2 * BK) {
      bool ok = t < tile_rows;
      if (ok && (p.flags & FLAG_MASK) != 0u) ok = p.mask.v[b * p.a.tk + uint(j0) + t] != 0;
      sKeyOk[t] = ok ? 1u : 0u;
    }
    barrier();

    // This half's keys: tile rows k0h .. k0h + BK - 1, key positions from jh.
    const uint k0h = hf * BK;
    const int jh = j0 + int(k0h);
    const uint k_rows = tile_rows > k0h ? min(uint(BK), tile_rows - k0h) : 0u;

    // dp[r][c] = dO[rg + NRG r] . V[k0h + lane + 8 c], then dot[r][c] = Q[rg + NRG r] . K[...]:
    // two passes over the head dim rather than one, so that only one product's operands are live
    // beside the other's results (fewer registers, the same reads and the same sums).
    float dot[RQ][CK], dp[RQ][CK];
    [[unroll]] for (uint r = 0; r < RQ; ++r)
      [[unroll]] for (uint c = 0; c < CK; ++c) dot[r][c] = dp[r][c] = 0.0;
    for (uint d0 = 0; d0 < DCH; d0 += 4) {
      [[unroll]] for (uint dc = 0; dc < 4; ++dc) {
        vec4 vv[CK];
        [[unroll]] for (uint c = 0; c < CK; ++c)
          vv[c] = sV[(k0h + lane + LANES * c) * ROW4 + d0 + dc];
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          const vec4 oo = sDO[(rg + NRG * r) * ROW4 + d0 + dc];
          [[unroll]] for (uint c = 0; c < CK; ++c) dp[r][c] = fma4(oo, vv[c], dp[r][c]);
        }
      }
    }
    for (uint d0 = 0; d0 < DCH; d0 += 4) {
      [[unroll]] for (uint dc = 0; dc < 4; ++dc) {
        vec4 kk[CK];
        [[unroll]] for (uint c = 0; c < CK; ++c)
          kk[c] = sK[(k0h + lane + LANES * c) * ROW4 + d0 + dc];
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          const vec4 qq = sQ[(rg + NRG * r) * ROW4 + d0 + dc];
          [[unroll]] for (uint c = 0; c < CK; ++c) dot[r][c] = fma4(qq, kk[c], dot[r][c]);
        }
      }
    }

    // ds = p (dp - delta) d(score)/d(dot); without a soft-cap the derivative is the constant
    // scale, applied to dq once at the end. Hidden pairs get 0 (selected, so whatever exp2 made
    // of their scores is dropped); a half-tile every row sees whole skips the tests.
    float g[RQ][CK];
    if (softcap) {
      [[unroll]] for (uint r = 0; r < RQ; ++r)
        [[unroll]] for (uint c = 0; c < CK; ++c) {
          const float th = vtanh(dot[r][c] * p.a.scale / p.a.softcap);
          const float pr = exp2(p.a.softcap * th * LOG2E - lse2[r]);
          g[r][c] = pr * (dp[r][c] - dlt[r]) * (p.a.scale * (1.0 - th * th));
        }
    } else {
      [[unroll]] for (uint r = 0; r < RQ; ++r)
        [[unroll]] for (uint c = 0; c < CK; ++c)
          g[r][c] = exp2(dot[r][c] * to_log2 - lse2[r]) * (dp[r][c] - dlt[r]);
    }
    const bool whole = (p.flags & FLAG_MASK) == 0u && k_rows == BK &&
                       (p.a.causal == 0 || jh + BK - 1 <= pos_first) &&
                       (p.a.window == 0 || pos_last - jh < int(p.a.window));
    if (!whole) {
      [[unroll]] for (uint c = 0; c < CK; ++c) {
        const uint jj = lane + LANES * c;
        const bool key_ok = sKeyOk[k0h + jj] != 0u;
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          const uint i = rg + NRG * r;
          if (!key_ok || i >= q_rows || !position_visible(p.a, pos_first + int(i), jh + int(jj)))
            g[r][c] = 0.0;
        }
      }
    }
    [[unroll]] for (uint r = 0; r < RQ; ++r)
      [[unroll]] for (uint c = 0; c < CK; ++c) {
        const uint at = 4u * (xg + r * XP4) + lane + LANES * c;
        sG[at / 4u][at % 4u] = g[r][c];
      }
    ROW_SYNC();

    // acc[r] += sum_j ds[r][j] K[j] over the half's keys, in order.
    [[unroll]] for (uint j4 = 0; j4 < BK / 4; ++j4) {
      vec4 g[RQ];
      [[unroll]] for (uint r = 0; r < RQ; ++r) g[r] = sG[xg + r * XP4 + j4];
      [[unroll]] for (uint u = 0; u < 4; ++u) {
        const uint j = k0h + 4 * j4 + u;
        const vec4 k0 = sK[j * ROW4 + lane], k1 = sK[j * ROW4 + LANES + lane];
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          acc[r][0] = fma(vec4(g[r][u]), k0, acc[r][0]);
          acc[r][1] = fma(vec4(g[r][u]), k1, acc[r][1]);
        }
      }
    }
  }

  // The second half hands its sums to the first through the (now free) K tile: for row
  // rg + NRG r, chunk s (0: dims 4 lane.., 1: 32 + 4 lane..) at ((rg RQ + r) 2 + s) 8 + lane,
  // BQ 16 vec4 in all, within the tile's 2 BK ROW4.
  barrier();  // every half is done with the last tile
  if (hf == 1u) {
    [[unroll]] for (uint r = 0; r < RQ; ++r)
      [[unroll]] for (uint s2 = 0; s2 < 2; ++s2)
        sK[((rg * RQ + r) * 2 + s2) * LANES + lane] = acc[r][s2];
  }
  barrier();
  if (hf == 1u) return;
  const vec4 grad_scale = vec4(softcap ? 1.0 : p.a.scale);
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    const uint i = rg + NRG * r;
    if (i >= q_rows) continue;
    const uint row = q_base + i * p.a.hq * D;
    const uint at = (rg * RQ + r) * 2 * LANES + lane;
    store_chunk(p.dq, row, lane, D, vec4_rows, (acc[r][0] + sK[at]) * grad_scale);
    store_chunk(p.dq, row, LANES + lane, D, vec4_rows, (acc[r][1] + sK[at + LANES]) * grad_scale);
  }
}
