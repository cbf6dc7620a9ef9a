// Fused attention backward, key side: dk and dv for one (block of BK keys, key/value head, batch)
// per workgroup. The key and value tiles stay in shared memory while the kernel walks, in a fixed
// order, every query head of the GQA group (ascending) and the visible query range in tiles of BQ
// queries (ascending), recomputing probabilities from the saved logsumexp:
//   dv_j = sum_{h, i} p_ij do_i        dk_j = sum_{h, i} p_ij (do_i . v_j - delta_i) ds/d(dot) q_i
// With dropout factors f_ij (0 or 1 / (1 - p), the forward's mask), dv takes p_ij f_ij and the
// term do_i . v_j becomes f_ij (do_i . v_j).
// Each gradient element is owned by one thread and summed in that fixed order: no atomics, the
// same bits every run.
//
// Variants by the padded head dim DMAX (tiles keep shared memory under 32 KiB); the host mirrors
// this table (kDkvTiles in src/ops/attention.cpp).
//!novariant_base
//!variant d32 -DDMAX=32 -DBK=32 -DBQ=32
//!variant d64 -DDMAX=64 -DBK=32 -DBQ=16
//!variant d128 -DDMAX=128 -DBK=16 -DBQ=8
//!variant d256 -DDMAX=256 -DBK=8 -DBQ=4
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
  F32Buf dk;     // [B, Tk, Hkv, D]
  F32Buf dv;     // [B, Tk, Hkv, D]
  AttnDropoutBuf dropout;  // read when flags has FLAG_DROPOUT
  AttnParams a;
  uint flags;
} p;

#define RS (DMAX + 1)  // padded rows: column reads across rows avoid bank conflicts
#define PS (BQ + 1)
#define ACC (BK * DMAX / NT)

shared float sK[BK * RS];
shared float sV[BK * RS];
shared float sQ[BQ * RS];
shared float sDO[BQ * RS];
shared float sP[BK * PS];  // probabilities p_ij (times the dropout factor) of the tile, by key row
shared float sG[BK * PS];  // d(loss)/d(dot) of the tile, by key row
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
  const AttnDropout dr = load_dropout(p.flags, p.dropout);

  for (uint e = t; e < BK * D; e += NT) {
    uint jj = e / D, d = e % D;
    bool in_range = jj < k_rows;
    uint src = ((b * p.a.tk + k0 + jj) * p.a.hkv + hk) * D + d;
    sK[jj * RS + d] = in_range ? p.k.v[src] : 0.0;
    sV[jj * RS + d] = in_range ? p.v.v[src] : 0.0;
  }
  if (t < BK) {
    bool ok = t < k_rows;
    if (ok && (p.flags & FLAG_MASK) != 0u) ok = p.mask.v[b * p.a.tk + k0 + t] != 0;
    sKeyOk[t] = ok ? 1u : 0u;
  }
  VACC acc_k[ACC], acc_v[ACC];
  for (uint r = 0; r < ACC; ++r) {
    acc_k[r] = VACC(0.0);
    acc_v[r] = VACC(0.0);
  }

  // Only queries that can see some key of this block: causal bounds the start (position >= k0),
  // the window the end (position < last key + window).
  int i_lo = 0, i_hi = int(p.a.tq);
  if (p.a.causal != 0) i_lo = max(i_lo, int(k0) - p.a.q_offset);
  if (p.a.window != 0) i_hi = min(i_hi, int(k0 + k_rows) - 1 + int(p.a.window) - p.a.q_offset);

  for (uint hg = 0; hg < group; ++hg) {
    const uint h = hk * group + hg;
    for (int i0 = i_lo; i0 < i_hi; i0 += BQ) {
      barrier();  // the previous tile is consumed (and sK, sV, sKeyOk are written on the first pass)
      const uint q_rows = min(uint(BQ), p.a.tq - uint(i0));
      for (uint e = t; e < BQ * D; e += NT) {
        uint i = e / D, d = e % D;
        bool in_range = i < q_rows;
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

      [[dont_unroll]] for (uint r = 0; r < (BQ * BK + NT - 1) / NT; ++r) {
        uint e = t + r * NT;
        if (e >= BQ * BK) break;
        uint jj = e / BQ, i = e % BQ;
        float pr = 0.0, g = 0.0;
        if (i < q_rows && sKeyOk[jj] != 0 &&
            position_visible(p.a, i0 + int(i) + p.a.q_offset, int(k0 + jj))) {
          VACC dot = VACC(0.0), dp = VACC(0.0);
          for (uint d = 0; d < D; ++d) {
            dot += VACC(sQ[i * RS + d]) * VACC(sK[jj * RS + d]);
            dp += VACC(sDO[i * RS + d]) * VACC(sV[jj * RS + d]);
          }
          const float dotf = float(dot);
          const float p_ij = vexp(transform_score(p.a, dotf) - sLse[i]);
          const float f = dropout_factor(dr, p.a, b, h, uint(i0) + i, k0 + jj);
          pr = p_ij * f;  // what the forward multiplied v_j by
          g = float(VACC(p_ij) * (dp * VACC(f) - VACC(sDelta[i])) * VACC(transform_score_grad(p.a, dotf)));
        }
        sP[jj * PS + i] = pr;
        sG[jj * PS + i] = g;
      }
      barrier();

      // Query loop rolled, accumulator loop unrolled (acc_k/acc_v in registers; see attention_fwd).
      [[dont_unroll]] for (uint i = 0; i < BQ; ++i) {
        for (uint r = 0; r < ACC; ++r) {
          uint e = t + r * NT;
          uint jj = e / DMAX, d = e % DMAX;
          if (d < D) {
            acc_k[r] += VACC(sG[jj * PS + i]) * VACC(sQ[i * RS + d]);
            acc_v[r] += VACC(sP[jj * PS + i]) * VACC(sDO[i * RS + d]);
          }
        }
      }
    }
  }

  for (uint r = 0; r < ACC; ++r) {
    uint e = t + r * NT;
    uint jj = e / DMAX, d = e % DMAX;
    if (jj >= k_rows || d >= D) continue;
    uint dst = ((b * p.a.tk + k0 + jj) * p.a.hkv + hk) * D + d;
    p.dk.v[dst] = float(acc_k[r]);
    p.dv.v[dst] = float(acc_v[r]);
  }
}
