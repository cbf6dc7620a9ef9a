// Fused attention backward, key side, register-tiled (Fast math mode, head_dim <= 64): dk and dv
// for a block of BK keys of one key/value head, walking every query head of the GQA group
// (ascending) and the visible queries in tiles of BQ (ascending). Same arithmetic as
// attention_bwd_dkv.comp:
//   dv_j = sum_{h, i} p_ij do_i        dk_j = sum_{h, i} ds_ij q_i
// but each thread owns a 4x4 block of (key, query) pairs and a 4 x OD block of dk and of dv.
// Gradients are summed in a fixed order (deterministic, no atomics).
//
// Shared layouts: K and V d-major (four keys = one vec4), Q and dO row-major padded to DMAX + 1
// floats, p and ds query-major (four keys of one query = one vec4).
// Variants by queries per tile: q32 needs ~41 KiB of shared memory (NVIDIA), q16 ~29 KiB
// (lavapipe). Threads = BK * BQ / 16. The host mirrors BK = 32.
//!novariant_base
//!variant q32 -DBQ=32
//!variant q16 -DBQ=16
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"
#define DMAX 64
#define BK 32
#define NT (BQ * BK / 16)
#define TI (BQ / 4)       // pair blocks across a tile's queries
#define OD (DMAX / TI)    // dk/dv dims per thread
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
  F32Buf dk;     // [B, Tk, Hkv, D]
  F32Buf dv;     // [B, Tk, Hkv, D]
  AttnDropoutBuf dropout;  // unused: the fast kernels run without dropout
  AttnParams a;
  uint flags;
} p;

shared vec4 sKt[DMAX * BK / 4];  // K[j][d] at d * BK + j
shared vec4 sVt[DMAX * BK / 4];
shared float sQ[BQ * RS];        // Q[i][d] at i * RS + d
shared float sDO[BQ * RS];
shared vec4 sP[BQ * BK / 4];     // p[i][j] at i * BK + j
shared vec4 sG[BQ * BK / 4];     // ds[i][j] at i * BK + j
shared uint sKeyOk[BK];
shared float sLse[BQ];
shared float sDelta[BQ];

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint k0 = gl_WorkGroupID.x * BK;
  const uint hk = gl_WorkGroupID.y;
  const uint b = gl_WorkGroupID.z;
  const uint D = p.a.d;
  const uint group = p.a.hq / p.a.hkv;
  const uint k_rows = min(uint(BK), p.a.tk - k0);
  // Keys sj..sj+3 and queries si..si+3 of a tile; dk/dv rows sj..sj+3, dims od..od+OD-1.
  const uint sj = (t / TI) * 4, si = (t % TI) * 4, od = (t % TI) * OD;

  for (uint e = t; e < BK * DMAX; e += NT) {
    uint jj = e / DMAX, d = e % DMAX;
    bool in_range = jj < k_rows && d < D;
    uint src = ((b * p.a.tk + k0 + jj) * p.a.hkv + hk) * D + d;
    sKt[(d * BK + jj) / 4][jj % 4] = in_range ? p.k.v[src] : 0.0;
    sVt[(d * BK + jj) / 4][jj % 4] = in_range ? p.v.v[src] : 0.0;
  }
  if (t < BK) {
    bool ok = t < k_rows;
    if (ok && (p.flags & FLAG_MASK) != 0u) ok = p.mask.v[b * p.a.tk + k0 + t] != 0;
    sKeyOk[t] = ok ? 1u : 0u;
  }
  vec4 acc_k[4][OD / 4], acc_v[4][OD / 4];
  [[unroll]] for (uint r = 0; r < 4; ++r)
    [[unroll]] for (uint c = 0; c < OD / 4; ++c) acc_k[r][c] = acc_v[r][c] = vec4(0.0);

  int i_lo = 0, i_hi = int(p.a.tq);
  if (p.a.causal != 0) i_lo = max(i_lo, int(k0) - p.a.q_offset);
  if (p.a.window != 0) i_hi = min(i_hi, int(k0 + k_rows) - 1 + int(p.a.window) - p.a.q_offset);

  for (uint hg = 0; hg < group; ++hg) {
    const uint h = hk * group + hg;
    for (int i0 = i_lo; i0 < i_hi; i0 += BQ) {
      barrier();  // the previous tile is consumed (and sKt, sVt, sKeyOk are written)
      const uint q_rows = min(uint(BQ), p.a.tq - uint(i0));
      for (uint e = t; e < BQ * DMAX; e += NT) {
        uint i = e / DMAX, d = e % DMAX;
        bool in_range = i < q_rows && d < D;
        uint src = ((b * p.a.tq + uint(i0) + i) * p.a.hq + h) * D + d;
        sQ[i * RS + d] = in_range ? p.q.v[src] : 0.0;
        sDO[i * RS + d] = in_range ? p.dout.v[src] : 0.0;
      }
      if (t < BQ) {
        uint row = (b * p.a.hq + h) * p.a.tq + uint(i0) + t;
        sLse[t] = t < q_rows ? p.lse.v[row] : 0.0;
        sDelta[t] = t < q_rows ? p.delta.v[row] : 0.0;
      }
      barrier();

      // dot[r][c] = Q[si + r] . K[sj + c], dp[r][c] = dO[si + r] . V[sj + c]
      vec4 dot[4], dp[4];
      [[unroll]] for (uint r = 0; r < 4; ++r) dot[r] = dp[r] = vec4(0.0);
      [[dont_unroll]] for (uint d = 0; d < D; ++d) {
        const vec4 kb = sKt[(d * BK + sj) / 4];
        const vec4 vb = sVt[(d * BK + sj) / 4];
        [[unroll]] for (uint r = 0; r < 4; ++r) {
          dot[r] += sQ[(si + r) * RS + d] * kb;
          dp[r] += sDO[(si + r) * RS + d] * vb;
        }
      }
      [[unroll]] for (uint r = 0; r < 4; ++r) {
        const uint i = si + r;
        vec4 pr = vec4(0.0), g = vec4(0.0);
        [[unroll]] for (uint c = 0; c < 4; ++c) {
          const uint jj = sj + c;
          if (i < q_rows && sKeyOk[jj] != 0 &&
              position_visible(p.a, i0 + int(i) + p.a.q_offset, int(k0 + jj))) {
            pr[c] = exp(transform_score(p.a, dot[r][c]) - sLse[i]);
            g[c] = pr[c] * (dp[r][c] - sDelta[i]) * transform_score_grad(p.a, dot[r][c]);
          }
        }
        sP[(i * BK + sj) / 4] = pr;
        sG[(i * BK + sj) / 4] = g;
      }
      barrier();

      // dv[sj + r][od + c] += sum_i p[i][sj + r] dO[i][od + c]; dk likewise with ds and Q.
      [[dont_unroll]] for (uint i = 0; i < BQ; ++i) {
        const vec4 pr = sP[(i * BK + sj) / 4];
        const vec4 g = sG[(i * BK + sj) / 4];
        [[unroll]] for (uint c = 0; c < OD / 4; ++c) {
          const uint base = i * RS + od + 4 * c;
          const vec4 ov = vec4(sDO[base], sDO[base + 1], sDO[base + 2], sDO[base + 3]);
          const vec4 qv = vec4(sQ[base], sQ[base + 1], sQ[base + 2], sQ[base + 3]);
          [[unroll]] for (uint r = 0; r < 4; ++r) {
            acc_v[r][c] += pr[r] * ov;
            acc_k[r][c] += g[r] * qv;
          }
        }
      }
    }
  }

  [[unroll]] for (uint r = 0; r < 4; ++r) {
    const uint jj = sj + r;
    if (jj >= k_rows) continue;
    const uint row = ((b * p.a.tk + k0 + jj) * p.a.hkv + hk) * D;
    [[unroll]] for (uint c = 0; c < OD; ++c) {
      const uint d = od + c;
      if (d < D) {
        p.dk.v[row + d] = acc_k[r][c / 4][c % 4];
        p.dv.v[row + d] = acc_v[r][c / 4][c % 4];
      }
    }
  }
}
