// Fused attention forward (flash-attention style): one workgroup per (block of BQ queries, query
// head, batch). It walks the visible key range in tiles of BK keys staged through shared memory,
// keeps a running row max and row sum (online softmax, fp32) and rescales its output accumulator,
// so the [Tq, Tk] score matrix never reaches global memory. Writes o and the row logsumexp that the
// backward kernels use to recompute probabilities. Rows that see no key output zeros (lse = +inf).
// With dropout, the running sum (the softmax denominator) takes every probability, and only the
// products with v see the dropout mask: o = sum_j drop(p_j) v_j.
//
// Variants by the padded head dim DMAX; tiles chosen so shared memory stays under lavapipe's
// 32 KiB and every thread owns BQ * DMAX / NT = 16 output accumulators. The host mirrors this
// table (kForwardTiles in src/ops/attention.cpp).
//!novariant_base
//!variant d32 -DDMAX=32 -DBQ=64 -DBK=32
//!variant d64 -DDMAX=64 -DBQ=32 -DBK=32
//!variant d128 -DDMAX=128 -DBQ=16 -DBK=16
//!variant d256 -DDMAX=256 -DBQ=8 -DBK=8
//!precise
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"
#define NT 128
layout(local_size_x = NT) in;

layout(push_constant, std430) uniform Push {
  F32Buf q;     // [B, Tq, Hq, D]
  F32Buf k;     // [B, Tk, Hkv, D]
  F32Buf v;     // [B, Tk, Hkv, D]
  I32Buf mask;  // [B, Tk], read when flags has FLAG_MASK
  F32Buf o;     // [B, Tq, Hq, D]
  F32Buf lse;   // [B, Hq, Tq]
  AttnDropoutBuf dropout;  // read when flags has FLAG_DROPOUT
  AttnParams a;
  uint flags;
} p;

// Row strides padded by one float so that threads reading one column of different rows hit
// different shared-memory banks.
#define RS (DMAX + 1)
#define SS (BK + 1)
#define ACC (BQ * DMAX / NT)

shared float sQ[BQ * RS];     // query tile
shared float sK[BK * RS];     // key tile
shared float sV[BK * DMAX];   // value tile (read along rows only: no padding needed)
shared float sS[BQ * SS];     // scores, then probabilities, of the current tile
shared uint sKeyOk[BK];       // key exists and is not padding
shared float sM[BQ];          // running row max (MASKED until a visible key is seen)
shared VACC sL[BQ];           // running row sum of exp(score - max) (double in precise builds)
shared float sAlpha[BQ];      // rescale factor of the accumulators for this tile

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint q0 = gl_WorkGroupID.x * BQ;
  const uint h = gl_WorkGroupID.y;
  const uint b = gl_WorkGroupID.z;
  const uint D = p.a.d;
  const uint hk = h / (p.a.hq / p.a.hkv);
  const uint q_rows = min(uint(BQ), p.a.tq - q0);
  const AttnDropout dr = load_dropout(p.flags, p.dropout);

  for (uint e = t; e < BQ * D; e += NT) {
    uint i = e / D, d = e % D;
    sQ[i * RS + d] = i < q_rows ? p.q.v[((b * p.a.tq + q0 + i) * p.a.hq + h) * D + d] : 0.0;
  }
  if (t < BQ) {
    sM[t] = MASKED;
    sL[t] = VACC(0.0);
  }
  VACC acc[ACC];
  for (uint r = 0; r < ACC; ++r) acc[r] = VACC(0.0);

  // Only keys some query of this block can see: causal bounds the end, the window the start.
  const int pos_first = int(q0) + p.a.q_offset;
  const int pos_last = int(q0 + q_rows) - 1 + p.a.q_offset;
  int j_lo = 0, j_hi = int(p.a.tk);
  if (p.a.causal != 0) j_hi = min(j_hi, pos_last + 1);
  if (p.a.window != 0) j_lo = max(j_lo, pos_first - int(p.a.window) + 1);

  for (int j0 = j_lo; j0 < j_hi; j0 += BK) {
    barrier();  // the previous tile is consumed (and sQ, sM, sL are written on the first pass)
    for (uint e = t; e < BK * D; e += NT) {
      uint jj = e / D, d = e % D;
      uint j = uint(j0) + jj;
      bool in_range = j < p.a.tk;
      uint src = ((b * p.a.tk + j) * p.a.hkv + hk) * D + d;
      sK[jj * RS + d] = in_range ? p.k.v[src] : 0.0;
      sV[jj * DMAX + d] = in_range ? p.v.v[src] : 0.0;  // finite: p = 0 times it must stay 0
    }
    if (t < BK) {
      uint j = uint(j0) + t;
      bool ok = j < p.a.tk;
      if (ok && (p.flags & FLAG_MASK) != 0u) ok = p.mask.v[b * p.a.tk + j] != 0;
      sKeyOk[t] = ok ? 1u : 0u;
    }
    barrier();

    // Scores of the tile, MASKED where the key is invisible.
    [[dont_unroll]] for (uint r = 0; r < (BQ * BK + NT - 1) / NT; ++r) {
      uint e = t + r * NT;
      if (e >= BQ * BK) break;
      uint i = e / BK, jj = e % BK;
      float s = MASKED;
      if (i < q_rows && sKeyOk[jj] != 0 &&
          position_visible(p.a, pos_first + int(i), j0 + int(jj))) {
        VACC dot = VACC(0.0);
        for (uint d = 0; d < D; ++d) dot += VACC(sQ[i * RS + d]) * VACC(sK[jj * RS + d]);
        s = transform_score(p.a, float(dot));
      }
      sS[i * SS + jj] = s;
    }
    barrier();

    // Online softmax: one thread per row folds the tile into the running max and sum.
    if (t < BQ) {
      float m_old = sM[t];
      float m_new = m_old;
      [[dont_unroll]] for (uint jj = 0; jj < BK; ++jj) m_new = max(m_new, sS[t * SS + jj]);
      float alpha = 1.0;
      VACC sum = VACC(0.0);
      if (m_new != MASKED) {
        alpha = m_old == MASKED ? 0.0 : vexp(m_old - m_new);
        [[dont_unroll]] for (uint jj = 0; jj < BK; ++jj) {
          float s = sS[t * SS + jj];
          float pr = s == MASKED ? 0.0 : vexp(s - m_new);
          sS[t * SS + jj] = pr;
          sum += VACC(pr);
        }
      } else {
        [[dont_unroll]] for (uint jj = 0; jj < BK; ++jj) sS[t * SS + jj] = 0.0;
      }
      sM[t] = m_new;
      sL[t] = sL[t] * VACC(alpha) + sum;
      sAlpha[t] = alpha;
    }
    barrier();

    // Dropout acts on the products with v only (the running sum above has every probability).
    if (dr.on) {
      [[dont_unroll]] for (uint r = 0; r < (BQ * BK + NT - 1) / NT; ++r) {
        uint e = t + r * NT;
        if (e >= BQ * BK) break;
        uint i = e / BK, jj = e % BK;
        if (i < q_rows && uint(j0) + jj < p.a.tk)
          sS[i * SS + jj] *= dropout_factor(dr, p.a, b, h, q0 + i, uint(j0) + jj);
      }
      barrier();
    }

    // acc = acc * alpha + P V over thread-owned elements (i, d) of the output tile. The key loop
    // stays rolled (lavapipe's compile time grows with unrolled code); the accumulator loop is
    // unrolled so acc[] stays in registers.
    for (uint r = 0; r < ACC; ++r) acc[r] *= VACC(sAlpha[(t + r * NT) / DMAX]);
    [[dont_unroll]] for (uint jj = 0; jj < BK; ++jj) {
      for (uint r = 0; r < ACC; ++r) {
        uint e = t + r * NT;
        uint i = e / DMAX, d = e % DMAX;
        if (d < D) acc[r] += VACC(sS[i * SS + jj]) * VACC(sV[jj * DMAX + d]);
      }
    }
  }
  barrier();  // sL, sM final

  for (uint r = 0; r < ACC; ++r) {
    uint e = t + r * NT;
    uint i = e / DMAX, d = e % DMAX;
    if (i >= q_rows || d >= D) continue;
    VACC l = sL[i];
    p.o.v[((b * p.a.tq + q0 + i) * p.a.hq + h) * D + d] = l > 0.0 ? float(acc[r] / l) : 0.0;
  }
  if (t < q_rows) {
    VACC l = sL[t];
#if VKF_PRECISE
    const float lse = l > 0.0 ? float(double(sM[t]) + dlog(l)) : 0.0;
#else
    const float lse = l > 0.0 ? sM[t] + log(l) : 0.0;
#endif
    p.lse.v[(b * p.a.hq + h) * p.a.tq + q0 + t] = l > 0.0 ? lse : uintBitsToFloat(0x7f800000u);
  }
}
