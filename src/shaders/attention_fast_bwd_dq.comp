// Fused attention backward, query side, register-tiled fp32 (Fast math mode, head_dim <= 64): dq
// for a block of BQ = 32 queries of one head, walking the visible keys in tiles of BK. Same
// arithmetic as attention_bwd_dq.comp: probabilities recomputed from the saved logsumexp,
// ds = p (do.v - delta) d(score)/d(dot), dq = sum_j ds_ij k_j. The workgroup is made of two
// halves of 64 invocations, so that it holds twice the invocations for the shared memory of one
// set of tiles (more warps to hide latency behind): each half scores half of a tile's keys (q.k
// and do.v for them, then p d(score)/d(dot) (hidden pairs 0) and ds) and stores ds in its row
// group's exchange region; after one workgroup barrier both add ds K into dq, half 0 for dims
// 0..31, half 1 for 32..63. (Until the fourteenth session half 0 formed every q.k and half 1
// every do.v, and ds took two barriers where one now serves: half 0's values to half 1, then
// half 1's ds back to both.)
// In the layout of attention_fast.glsl the row groups own query rows (rg + NRG r) and the lanes
// the tile's keys lane + 8 c, the same in both halves, half 0 taking c < CK / 2 and half 1 the
// rest. Each lane forms its two products for 4 rows and its keys from vec4 reads (12 reads feed
// 64 multiply-adds), and adds ds K into its 4 x 4 block of dq through its row group's exchange
// region (4 reads of ds and 4 of K feed 64 multiply-adds). Three workgroup barriers per key tile
// (staging K, V and the key flags; handing ds to both halves); sums in a fixed order
// (deterministic, no atomics; the same values and sums as before the split). Scores in log2
// units as in the forward.
//
// Variants by keys per tile: k32 (38.9 KiB of shared memory, NVIDIA's 48 KiB) and k16 (28.3
// KiB, lavapipe's 32 KiB). The kernel synchronises through workgroup barriers only, so it needs
// no subgroup operations (ROW_SHUFFLE 0) and one build of each serves every device, the
// family's barrier builds included. 128 invocations. The host mirrors BQ = 32 and the sizes
// (src/ops/attention_coopmat.cpp).
//!novariant_base
//!variant k32 -DBK=32
//!variant k16 -DBK=16
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"
#define ROW_SHUFFLE 0     // no subgroup operations (see above)
#define BQ 32             // queries per workgroup
#define CK (BK / 8)       // keys per lane (LANES = 8)
#define CH (CK / 2)       // of which each half scores
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
shared vec4 sK[BK * ROW4];   // K row j of the tile at j * ROW4
shared vec4 sV[BK * ROW4];   // V row j
// Row group g's exchange region: row r, key j at float 4 (g XG4 + r XP4) + j: ds, written by
// the half that scored key j.
shared vec4 sG[NRG * XG4];
shared uint sKeyOk[BK];      // key j of the tile exists and is not padding

void main() {
  const uint t = gl_LocalInvocationID.x;
  const bool first_half = t < HALF;   // adds dq dims 0..31; else 32..63
  const uint rg = (t % HALF) / LANES, lane = t % LANES;
  const uint xg = rg * XG4;           // this row group's exchange region
  const uint c0 = first_half ? 0u : CH;  // this half's keys: lane + 8 (c0 + c), c < CH
  const uint dim_chunk = first_half ? lane : LANES + lane;  // the dq dims this lane adds
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
  // This lane's rows: their logsumexp in log2 units and their delta. A row that saw no key has
  // lse = +inf; none of its scores is visible, so it is never used.
  float row_lse[RQ], row_delta[RQ];
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    const uint i = rg + NRG * r;
    const uint at = (b * p.a.hq + h) * p.a.tq + q0 + i;
    row_lse[r] = i >= q_rows ? 0.0 : p.lse.v[at] * LOG2E;
    row_delta[r] = i >= q_rows ? 0.0 : p.delta.v[at];
  }
  vec4 acc[RQ];  // dq rows, dims 4 dim_chunk + (0..3)
  [[unroll]] for (uint r = 0; r < RQ; ++r) acc[r] = vec4(0.0);

  const int pos_first = int(q0) + p.a.q_offset;
  const int pos_last = pos_first + int(q_rows) - 1;
  int j_lo = 0, j_hi = int(p.a.tk);
  if (p.a.causal != 0) j_hi = min(j_hi, pos_last + 1);
  if (p.a.window != 0) j_lo = max(j_lo, pos_first - int(p.a.window) + 1);
  j_lo = (j_lo / BK) * BK;

  // With vec4 rows the next tile's K and V are read into registers before the current tile's
  // work (FETCH_ROWS), so that their loads overlap it.
  vec4 k_next[BK * DCH / NT], v_next[BK * DCH / NT];
  if (vec4_rows && j_lo < j_hi) {
    const uint rows = min(uint(BK), p.a.tk - uint(j_lo));
    const uint base = ((b * p.a.tk + uint(j_lo)) * p.a.hkv + hk) * D;
    FETCH_ROWS(k_next, BK, p.k, base, kv_stride, rows)
    FETCH_ROWS(v_next, BK, p.v, base, kv_stride, rows)
  }
  for (int j0 = j_lo; j0 < j_hi; j0 += BK) {
    barrier();  // the previous tile is consumed (and sQ, sDO are written)
    const uint k_rows = min(uint(BK), p.a.tk - uint(j0));
    const uint kv_base = ((b * p.a.tk + uint(j0)) * p.a.hkv + hk) * D;
    if (vec4_rows) {
      STORE_ROWS(sK, k_next, BK, ROW4)
      STORE_ROWS(sV, v_next, BK, ROW4)
      if (j0 + BK < j_hi) {
        const uint rows = min(uint(BK), p.a.tk - uint(j0 + BK));
        const uint base = kv_base + BK * kv_stride;
        FETCH_ROWS(k_next, BK, p.k, base, kv_stride, rows)
        FETCH_ROWS(v_next, BK, p.v, base, kv_stride, rows)
      }
    } else {
      STAGE_ROWS(sK, BK, ROW4, p.k, kv_base, kv_stride, k_rows);
      STAGE_ROWS(sV, BK, ROW4, p.v, kv_base, kv_stride, k_rows);
    }
    if (t < BK) {
      bool ok = t < k_rows;
      if (ok && (p.flags & FLAG_MASK) != 0u) ok = p.mask.v[b * p.a.tk + uint(j0) + t] != 0;
      sKeyOk[t] = ok ? 1u : 0u;
    }
    barrier();

    // Both halves, for this lane's rows (rg + NRG r) and its half's keys (lane + 8 (c0 + c)):
    // sc = Q . K and dp = dO . V.
    float sc[RQ][CH], dp[RQ][CH];
    [[unroll]] for (uint r = 0; r < RQ; ++r)
      [[unroll]] for (uint c = 0; c < CH; ++c) sc[r][c] = dp[r][c] = 0.0;
    for (uint d0 = 0; d0 < DCH; d0 += 4) {
      [[unroll]] for (uint dc = 0; dc < 4; ++dc) {
        vec4 kk[CH], vv[CH];
        [[unroll]] for (uint c = 0; c < CH; ++c) {
          kk[c] = sK[(lane + LANES * (c0 + c)) * ROW4 + d0 + dc];
          vv[c] = sV[(lane + LANES * (c0 + c)) * ROW4 + d0 + dc];
        }
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          const vec4 qq = sQ[(rg + NRG * r) * ROW4 + d0 + dc];
          const vec4 oo = sDO[(rg + NRG * r) * ROW4 + d0 + dc];
          [[unroll]] for (uint c = 0; c < CH; ++c) {
            sc[r][c] = fma4(qq, kk[c], sc[r][c]);
            dp[r][c] = fma4(oo, vv[c], dp[r][c]);
          }
        }
      }
    }
    // ds = p d(score)/d(dot) (dp - delta) (without a soft-cap the derivative is the constant
    // scale, applied to dq once at the end). Hidden pairs get p = 0 (selected, so whatever exp2
    // made of their scores is dropped); a tile every row sees whole skips the tests.
    {
      const bool whole = (p.flags & FLAG_MASK) == 0u && k_rows == BK &&
                         (p.a.causal == 0 || j0 + BK - 1 <= pos_first) &&
                         (p.a.window == 0 || pos_last - j0 < int(p.a.window));
      [[unroll]] for (uint c = 0; c < CH; ++c) {
        const uint jj = lane + LANES * (c0 + c);
        const bool key_ok = whole || sKeyOk[jj] != 0u;
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          float pd;
          if (softcap) {
            const float th = vtanh(sc[r][c] * p.a.scale / p.a.softcap);
            pd = exp2(p.a.softcap * th * LOG2E - row_lse[r]) * (p.a.scale * (1.0 - th * th));
          } else {
            pd = exp2(sc[r][c] * to_log2 - row_lse[r]);
          }
          const uint i = rg + NRG * r;
          if (!whole &&
              (!key_ok || i >= q_rows || !position_visible(p.a, pos_first + int(i), j0 + int(jj))))
            pd = 0.0;
          const uint at = 4u * (xg + r * XP4) + jj;
          sG[at / 4u][at % 4u] = pd * (dp[r][c] - row_delta[r]);
        }
      }
    }
    barrier();  // both halves' ds reach every row group

    // acc[r] += sum_j ds[r][j] K[j] over the tile's keys, in order, for this lane's dims.
    [[unroll]] for (uint j4 = 0; j4 < BK / 4; ++j4) {
      vec4 g[RQ];
      [[unroll]] for (uint r = 0; r < RQ; ++r) g[r] = sG[xg + r * XP4 + j4];
      [[unroll]] for (uint u = 0; u < 4; ++u) {
        const vec4 kk = sK[(4 * j4 + u) * ROW4 + dim_chunk];
        [[unroll]] for (uint r = 0; r < RQ; ++r) acc[r] = fma(vec4(g[r][u]), kk, acc[r]);
      }
    }
  }

  const vec4 grad_scale = vec4(softcap ? 1.0 : p.a.scale);
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    const uint i = rg + NRG * r;
    if (i >= q_rows) continue;
    store_chunk(p.dq, q_base + i * p.a.hq * D, dim_chunk, D, vec4_rows, acc[r] * grad_scale);
  }
}
