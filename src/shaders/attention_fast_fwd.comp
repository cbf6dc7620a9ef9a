// Fused attention forward, register-tiled (Fast math mode, head_dim <= 64). Same contract as
// attention_fwd.comp (o and the row logsumexp; online softmax; no [Tq, Tk] tensor in memory), but
// built for throughput: each thread computes a 4x4 block of scores and a 4x8 block of the output,
// reading shared memory as vec4s, so a shared-memory load feeds several multiply-adds instead of
// one (the plain kernel is bound by shared-memory bandwidth at about 1/8 of the FMA rate).
//
// Shared layouts: Q and K are stored d-major (sQt[d][i], sKt[d][j]) so the four rows of a score
// block are one vec4; probabilities are stored key-major (sPt[j][i]) for the same reason in P·V;
// V stays row-major (eight consecutive d of one key are two vec4s).
//
// Variants by the query rows per workgroup: q64 needs 41 KiB of shared memory (NVIDIA's 48 KiB),
// q32 fits lavapipe's 32 KiB. Threads = BQ * BK / 16. The host mirrors BQ (src/ops/attention.cpp).
//!novariant_base
//!variant q64 -DBQ=64
//!variant q32 -DBQ=32
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"
#define DMAX 64
#define BK 32
#define NT (BQ * BK / 16)
#define TJ (BK / 4)  // score blocks across a tile's keys
layout(local_size_x = NT) in;

layout(push_constant, std430) uniform Push {
  F32Buf q;     // [B, Tq, Hq, D]
  F32Buf k;     // [B, Tk, Hkv, D]
  F32Buf v;     // [B, Tk, Hkv, D]
  I32Buf mask;  // [B, Tk], read when flags has FLAG_MASK
  F32Buf o;     // [B, Tq, Hq, D]
  F32Buf lse;   // [B, Hq, Tq]
  AttnDropoutBuf dropout;  // unused: the fast kernels run without dropout
  AttnParams a;
  uint flags;
} p;

shared vec4 sQt[DMAX * BQ / 4];  // Q[i][d] at float index d * BQ + i
shared vec4 sKt[DMAX * BK / 4];  // K[j][d] at d * BK + j
shared vec4 sV[BK * DMAX / 4];   // V[j][d] at j * DMAX + d
shared vec4 sPt[BK * BQ / 4];    // scores, then probabilities, at j * BQ + i
shared uint sKeyOk[BK];
shared float sM[BQ];
shared float sL[BQ];
shared float sAlpha[BQ];

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint q0 = gl_WorkGroupID.x * BQ;
  const uint h = gl_WorkGroupID.y;
  const uint b = gl_WorkGroupID.z;
  const uint D = p.a.d;
  const uint hk = h / (p.a.hq / p.a.hkv);
  const uint q_rows = min(uint(BQ), p.a.tq - q0);
  // This thread's 4x4 score block (rows si..si+3, keys sj..sj+3 of the tile) and 4x8 output
  // block (rows si..si+3, dims od..od+7).
  const uint si = (t / TJ) * 4, sj = (t % TJ) * 4;
  const uint od = (t % TJ) * 8;

  for (uint e = t; e < BQ * DMAX; e += NT) {
    uint i = e / DMAX, d = e % DMAX;
    float x = i < q_rows && d < D ? p.q.v[((b * p.a.tq + q0 + i) * p.a.hq + h) * D + d] : 0.0;
    sQt[(d * BQ + i) / 4][i % 4] = x;
  }
  if (t < BQ) {
    sM[t] = MASKED;
    sL[t] = 0.0;
  }
  vec4 acc[4][2];
  [[unroll]] for (uint r = 0; r < 4; ++r) acc[r][0] = acc[r][1] = vec4(0.0);

  const int pos_first = int(q0) + p.a.q_offset;
  const int pos_last = int(q0 + q_rows) - 1 + p.a.q_offset;
  int j_lo = 0, j_hi = int(p.a.tk);
  if (p.a.causal != 0) j_hi = min(j_hi, pos_last + 1);
  if (p.a.window != 0) j_lo = max(j_lo, pos_first - int(p.a.window) + 1);
  j_lo = (j_lo / BK) * BK;  // tiles aligned to BK keys

  for (int j0 = j_lo; j0 < j_hi; j0 += BK) {
    barrier();  // the previous tile is consumed
    for (uint e = t; e < BK * DMAX; e += NT) {
      uint jj = e / DMAX, d = e % DMAX;
      uint j = uint(j0) + jj;
      bool in_range = j < p.a.tk && d < D;
      uint src = ((b * p.a.tk + j) * p.a.hkv + hk) * D + d;
      sKt[(d * BK + jj) / 4][jj % 4] = in_range ? p.k.v[src] : 0.0;
      sV[(jj * DMAX + d) / 4][d % 4] = in_range ? p.v.v[src] : 0.0;
    }
    if (t < BK) {
      uint j = uint(j0) + t;
      bool ok = j < p.a.tk;
      if (ok && (p.flags & FLAG_MASK) != 0u) ok = p.mask.v[b * p.a.tk + j] != 0;
      sKeyOk[t] = ok ? 1u : 0u;
    }
    barrier();

    // Scores: s[r][c] = Q[si + r] . K[sj + c].
    vec4 s[4];
    [[unroll]] for (uint r = 0; r < 4; ++r) s[r] = vec4(0.0);
    [[dont_unroll]] for (uint d = 0; d < D; ++d) {
      const vec4 qa = sQt[(d * BQ + si) / 4];
      const vec4 kb = sKt[(d * BK + sj) / 4];
      s[0] += qa.x * kb;
      s[1] += qa.y * kb;
      s[2] += qa.z * kb;
      s[3] += qa.w * kb;
    }
    [[unroll]] for (uint c = 0; c < 4; ++c) {
      const uint jj = sj + c;
      vec4 col;
      [[unroll]] for (uint r = 0; r < 4; ++r) {
        const uint i = si + r;
        float x = MASKED;
        if (i < q_rows && sKeyOk[jj] != 0 && position_visible(p.a, pos_first + int(i), j0 + int(jj)))
          x = transform_score(p.a, s[r][c]);
        col[r] = x;
      }
      sPt[(jj * BQ + si) / 4] = col;
    }
    barrier();

    // Online softmax, one thread per query row.
    if (t < BQ) {
      float m_old = sM[t];
      float m_new = m_old;
      [[dont_unroll]] for (uint jj = 0; jj < BK; ++jj) m_new = max(m_new, sPt[(jj * BQ + t) / 4][t % 4]);
      float alpha = 1.0, sum = 0.0;
      if (m_new != MASKED) {
        alpha = m_old == MASKED ? 0.0 : exp(m_old - m_new);
        [[dont_unroll]] for (uint jj = 0; jj < BK; ++jj) {
          const float x = sPt[(jj * BQ + t) / 4][t % 4];
          const float pr = x == MASKED ? 0.0 : exp(x - m_new);
          sPt[(jj * BQ + t) / 4][t % 4] = pr;
          sum += pr;
        }
      } else {
        [[dont_unroll]] for (uint jj = 0; jj < BK; ++jj) sPt[(jj * BQ + t) / 4][t % 4] = 0.0;
      }
      sM[t] = m_new;
      sL[t] = sL[t] * alpha + sum;
      sAlpha[t] = alpha;
    }
    barrier();

    // acc = acc * alpha + P V for rows si..si+3, dims od..od+7.
    [[unroll]] for (uint r = 0; r < 4; ++r) {
      const float al = sAlpha[si + r];
      acc[r][0] *= al;
      acc[r][1] *= al;
    }
    [[dont_unroll]] for (uint jj = 0; jj < BK; ++jj) {
      const vec4 pa = sPt[(jj * BQ + si) / 4];
      const vec4 v0 = sV[(jj * DMAX + od) / 4];
      const vec4 v1 = sV[(jj * DMAX + od) / 4 + 1];
      [[unroll]] for (uint r = 0; r < 4; ++r) {
        acc[r][0] += pa[r] * v0;
        acc[r][1] += pa[r] * v1;
      }
    }
  }
  barrier();  // sL, sM final

  [[unroll]] for (uint r = 0; r < 4; ++r) {
    const uint i = si + r;
    if (i >= q_rows) continue;
    const float l = sL[i];
    const uint row = ((b * p.a.tq + q0 + i) * p.a.hq + h) * D;
    [[unroll]] for (uint c = 0; c < 8; ++c) {
      const uint d = od + c;
      if (d < D) p.o.v[row + d] = l > 0.0 ? acc[r][c / 4][c % 4] / l : 0.0;
    }
  }
  if (t < q_rows) {
    const float l = sL[t];
    p.lse.v[(b * p.a.hq + h) * p.a.tq + q0 + t] = l > 0.0 ? sM[t] + log(l) : uintBitsToFloat(0x7f800000u);
  }
}
