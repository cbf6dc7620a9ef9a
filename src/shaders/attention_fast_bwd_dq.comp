// Fused attention backward, query side, register-tiled (Fast math mode, head_dim <= 64): dq for a
// block of BQ queries of one head, walking the visible keys in tiles of BK. Same arithmetic as
// attention_bwd_dq.comp (probabilities recomputed from the saved logsumexp;
// ds = p (do.v - delta) d(score)/d(dot); dq = sum_j ds_ij k_j), but each thread owns a 4x4 block of
// scores and a 4 x OD block of dq, so shared-memory loads are shared by several multiply-adds.
// Gradients are summed in a fixed order (deterministic, no atomics).
//
// Shared layouts: Q and dO d-major (four query rows = one vec4), K and V row-major with rows
// padded to DMAX + 1 floats (threads of different key blocks hit different banks), ds key-major.
// Variants by keys per tile: k32 needs ~37 KiB of shared memory (NVIDIA), k16 ~27 KiB (lavapipe).
// Threads = BQ * BK / 16. The host mirrors BQ = 32.
//!novariant_base
//!variant k32 -DBK=32
//!variant k16 -DBK=16
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"
#define DMAX 64
#define BQ 32
#define NT (BQ * BK / 16)
#define TJ (BK / 4)       // score blocks across a tile's keys
#define OD (DMAX / TJ)    // dq dims per thread
#define RS (DMAX + 1)
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

shared vec4 sQt[DMAX * BQ / 4];   // Q[i][d] at d * BQ + i
shared vec4 sDOt[DMAX * BQ / 4];  // dO[i][d] at d * BQ + i
shared float sK[BK * RS];         // K[j][d] at j * RS + d
shared float sV[BK * RS];
shared vec4 sGt[BK * BQ / 4];     // ds[i][j] at j * BQ + i
shared uint sKeyOk[BK];
shared float sLse[BQ];
shared float sDelta[BQ];

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint q0 = gl_WorkGroupID.x * BQ;
  const uint h = gl_WorkGroupID.y;
  const uint b = gl_WorkGroupID.z;
  const uint D = p.a.d;
  const uint hk = h / (p.a.hq / p.a.hkv);
  const uint q_rows = min(uint(BQ), p.a.tq - q0);
  const uint si = (t / TJ) * 4, sj = (t % TJ) * 4, od = (t % TJ) * OD;

  for (uint e = t; e < BQ * DMAX; e += NT) {
    uint i = e / DMAX, d = e % DMAX;
    bool in_range = i < q_rows && d < D;
    uint src = ((b * p.a.tq + q0 + i) * p.a.hq + h) * D + d;
    sQt[(d * BQ + i) / 4][i % 4] = in_range ? p.q.v[src] : 0.0;
    sDOt[(d * BQ + i) / 4][i % 4] = in_range ? p.dout.v[src] : 0.0;
  }
  if (t < BQ) {
    uint row = (b * p.a.hq + h) * p.a.tq + q0 + t;
    sLse[t] = t < q_rows ? p.lse.v[row] : 0.0;
    sDelta[t] = t < q_rows ? p.delta.v[row] : 0.0;
  }
  vec4 acc[4][OD / 4];
  [[unroll]] for (uint r = 0; r < 4; ++r)
    [[unroll]] for (uint c = 0; c < OD / 4; ++c) acc[r][c] = vec4(0.0);

  const int pos_first = int(q0) + p.a.q_offset;
  const int pos_last = int(q0 + q_rows) - 1 + p.a.q_offset;
  int j_lo = 0, j_hi = int(p.a.tk);
  if (p.a.causal != 0) j_hi = min(j_hi, pos_last + 1);
  if (p.a.window != 0) j_lo = max(j_lo, pos_first - int(p.a.window) + 1);
  j_lo = (j_lo / BK) * BK;

  for (int j0 = j_lo; j0 < j_hi; j0 += BK) {
    barrier();  // the previous tile is consumed (and sQt, sDOt, sLse, sDelta are written)
    for (uint e = t; e < BK * DMAX; e += NT) {
      uint jj = e / DMAX, d = e % DMAX;
      uint j = uint(j0) + jj;
      bool in_range = j < p.a.tk && d < D;
      uint src = ((b * p.a.tk + j) * p.a.hkv + hk) * D + d;
      sK[jj * RS + d] = in_range ? p.k.v[src] : 0.0;
      sV[jj * RS + d] = in_range ? p.v.v[src] : 0.0;
    }
    if (t < BK) {
      uint j = uint(j0) + t;
      bool ok = j < p.a.tk;
      if (ok && (p.flags & FLAG_MASK) != 0u) ok = p.mask.v[b * p.a.tk + j] != 0;
      sKeyOk[t] = ok ? 1u : 0u;
    }
    barrier();

    // dot[r][c] = Q[si + r] . K[sj + c] and dp[r][c] = dO[si + r] . V[sj + c].
    vec4 dot[4], dp[4];
    [[unroll]] for (uint r = 0; r < 4; ++r) dot[r] = dp[r] = vec4(0.0);
    [[dont_unroll]] for (uint d = 0; d < D; ++d) {
      const vec4 qa = sQt[(d * BQ + si) / 4];
      const vec4 oa = sDOt[(d * BQ + si) / 4];
      const vec4 kb = vec4(sK[sj * RS + d], sK[(sj + 1) * RS + d], sK[(sj + 2) * RS + d], sK[(sj + 3) * RS + d]);
      const vec4 vb = vec4(sV[sj * RS + d], sV[(sj + 1) * RS + d], sV[(sj + 2) * RS + d], sV[(sj + 3) * RS + d]);
      [[unroll]] for (uint r = 0; r < 4; ++r) {
        dot[r] += qa[r] * kb;
        dp[r] += oa[r] * vb;
      }
    }
    [[unroll]] for (uint c = 0; c < 4; ++c) {
      const uint jj = sj + c;
      vec4 col;
      [[unroll]] for (uint r = 0; r < 4; ++r) {
        const uint i = si + r;
        float g = 0.0;
        if (i < q_rows && sKeyOk[jj] != 0 && position_visible(p.a, pos_first + int(i), j0 + int(jj))) {
          const float pr = exp(transform_score(p.a, dot[r][c]) - sLse[i]);
          g = pr * (dp[r][c] - sDelta[i]) * transform_score_grad(p.a, dot[r][c]);
        }
        col[r] = g;
      }
      sGt[(jj * BQ + si) / 4] = col;
    }
    barrier();

    // dq[si + r][od + c] += sum_j ds[si + r][j] K[j][od + c]
    [[dont_unroll]] for (uint jj = 0; jj < BK; ++jj) {
      const vec4 g = sGt[(jj * BQ + si) / 4];
      [[unroll]] for (uint c = 0; c < OD / 4; ++c) {
        const uint base = jj * RS + od + 4 * c;
        const vec4 kv = vec4(sK[base], sK[base + 1], sK[base + 2], sK[base + 3]);
        [[unroll]] for (uint r = 0; r < 4; ++r) acc[r][c] += g[r] * kv;
      }
    }
  }

  [[unroll]] for (uint r = 0; r < 4; ++r) {
    const uint i = si + r;
    if (i >= q_rows) continue;
    const uint row = ((b * p.a.tq + q0 + i) * p.a.hq + h) * D;
    [[unroll]] for (uint c = 0; c < OD; ++c) {
      const uint d = od + c;
      if (d < D) p.dq.v[row + d] = acc[r][c / 4][c % 4];
    }
  }
}
