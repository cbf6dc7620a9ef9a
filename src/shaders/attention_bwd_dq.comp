// Fused attention backward, query side: dq for one (block of BQ queries, query head, batch) per
// workgroup. Walks the same key range as the forward in tiles of BK keys, recomputes the
// probabilities from the saved logsumexp (p = exp(s - lse)), and accumulates
//   dq_i = sum_j p_ij (do_i . v_j - delta_i) * ds_ij/d(dot) * k_j
// in a fixed order (key tiles ascending, keys within a tile ascending), so the result is
// deterministic. delta_i = do_i . o_i comes from attention_bwd_delta. With dropout factors f_ij
// (0 or 1 / (1 - p), the forward's mask) the term do_i . v_j becomes f_ij (do_i . v_j); delta is
// unchanged, since sum_j p_ij f_ij (do_i . v_j) = do_i . o_i.
//
// Variants by the padded head dim DMAX (tiles keep shared memory under 32 KiB); the host mirrors
// this table (kDqTiles in src/ops/attention.cpp).
//!novariant_base
//!variant d32 -DDMAX=32 -DBQ=32 -DBK=32
//!variant d64 -DDMAX=64 -DBQ=32 -DBK=16
//!variant d128 -DDMAX=128 -DBQ=16 -DBK=8
//!variant d256 -DDMAX=256 -DBQ=8 -DBK=4
//!precise
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"
#define NT 128
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
  AttnDropoutBuf dropout;  // read when flags has FLAG_DROPOUT
  AttnParams a;
  uint flags;
} p;

#define RS (DMAX + 1)  // padded rows: column reads across rows avoid bank conflicts
#define SS (BK + 1)
#define ACC (BQ * DMAX / NT)

shared float sQ[BQ * RS];
shared float sDO[BQ * RS];
shared float sK[BK * RS];
shared float sV[BK * RS];
shared float sG[BQ * SS];  // d(loss)/d(dot) of the tile
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
  const AttnDropout dr = load_dropout(p.flags, p.dropout);

  for (uint e = t; e < BQ * D; e += NT) {
    uint i = e / D, d = e % D;
    bool in_range = i < q_rows;
    uint src = ((b * p.a.tq + q0 + i) * p.a.hq + h) * D + d;
    sQ[i * RS + d] = in_range ? p.q.v[src] : 0.0;
    sDO[i * RS + d] = in_range ? p.dout.v[src] : 0.0;
  }
  if (t < BQ) {
    uint row = (b * p.a.hq + h) * p.a.tq + q0 + t;
    sLse[t] = t < q_rows ? p.lse.v[row] : 0.0;
    sDelta[t] = t < q_rows ? p.delta.v[row] : 0.0;
  }
  VACC acc[ACC];
  for (uint r = 0; r < ACC; ++r) acc[r] = VACC(0.0);

  const int pos_first = int(q0) + p.a.q_offset;
  const int pos_last = int(q0 + q_rows) - 1 + p.a.q_offset;
  int j_lo = 0, j_hi = int(p.a.tk);
  if (p.a.causal != 0) j_hi = min(j_hi, pos_last + 1);
  if (p.a.window != 0) j_lo = max(j_lo, pos_first - int(p.a.window) + 1);

  for (int j0 = j_lo; j0 < j_hi; j0 += BK) {
    barrier();
    for (uint e = t; e < BK * D; e += NT) {
      uint jj = e / D, d = e % D;
      uint j = uint(j0) + jj;
      bool in_range = j < p.a.tk;
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

    [[dont_unroll]] for (uint r = 0; r < (BQ * BK + NT - 1) / NT; ++r) {
      uint e = t + r * NT;
      if (e >= BQ * BK) break;
      uint i = e / BK, jj = e % BK;
      float g = 0.0;
      if (i < q_rows && sKeyOk[jj] != 0 &&
          position_visible(p.a, pos_first + int(i), j0 + int(jj))) {
        VACC dot = VACC(0.0), dp = VACC(0.0);
        for (uint d = 0; d < D; ++d) {
          dot += VACC(sQ[i * RS + d]) * VACC(sK[jj * RS + d]);
          dp += VACC(sDO[i * RS + d]) * VACC(sV[jj * RS + d]);
        }
        const float dotf = float(dot);
        const float pr = vexp(transform_score(p.a, dotf) - sLse[i]);
        const float f = dropout_factor(dr, p.a, b, h, q0 + i, uint(j0) + jj);
        g = float(VACC(pr) * (dp * VACC(f) - VACC(sDelta[i])) * VACC(transform_score_grad(p.a, dotf)));
      }
      sG[i * SS + jj] = g;
    }
    barrier();

    // Key loop rolled, accumulator loop unrolled (acc[] in registers; see attention_fwd).
    [[dont_unroll]] for (uint jj = 0; jj < BK; ++jj) {
      for (uint r = 0; r < ACC; ++r) {
        uint e = t + r * NT;
        uint i = e / DMAX, d = e % DMAX;
        if (d < D) acc[r] += VACC(sG[i * SS + jj]) * VACC(sK[jj * RS + d]);
      }
    }
  }

  for (uint r = 0; r < ACC; ++r) {
    uint e = t + r * NT;
    uint i = e / DMAX, d = e % DMAX;
    if (i >= q_rows || d >= D) continue;
    p.dq.v[((b * p.a.tq + q0 + i) * p.a.hq + h) * D + d] = float(acc[r]);
  }
}
