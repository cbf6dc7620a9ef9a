// Fused attention forward, register-tiled fp32 (Fast math mode, head_dim <= 64), in the manner of
// FlashAttention-2: same contract as attention_fwd.comp (o and the row logsumexp; online softmax;
// no [Tq, Tk] tensor in memory). A workgroup owns BQ query rows of one head and walks the visible
// keys in tiles of BK = 32. In the layout of attention_fast.glsl, each lane keeps a 4 x 4 block
// of the tile's scores (rows rg + NRG r, keys lane + 8 c) and a 4 x 8 block of the output in
// registers. Per tile:
//   1. the workgroup stages K and V (16-byte reads) and the keys' padding flags;
//   2. each lane forms its scores from vec4 reads of Q and K (4 + 4 reads feed 64 multiply-adds);
//   3. the row maximum is reduced over the 8 lanes of the row group (subgroup shuffles), each
//      lane rescales its output block and its running partial row sum, and writes its
//      probabilities to the group's exchange region;
//   4. each lane adds P V for its rows and dims (4 reads of P and 8 of V feed 128 multiply-adds).
// Two workgroup barriers per tile; the partial row sums are reduced over the group once, at the
// end, in a fixed order (deterministic). Scores are kept in the log2 domain (scale * log2 e
// folded into one multiply, exp2), the logsumexp is written in natural units.
//
// Variants: q64 (64 rows, 128 invocations, 43.1 KiB of shared memory: NVIDIA's 48 KiB), q32 (32
// rows, 64 invocations, 29.9 KiB: lavapipe's 32 KiB), both with subgroup shuffles, and q32_shared
// (30.9 KiB; row reductions through shared memory, for devices without the subgroups ROW_SHUFFLE
// needs). The host mirrors BQ and the sizes (src/ops/attention_coopmat.cpp).
//!novariant_base
//!variant q64 -DBQ=64 -DROW_SHUFFLE=1
//!variant q32 -DBQ=32 -DROW_SHUFFLE=1
//!variant q32_shared -DBQ=32 -DROW_SHUFFLE=0
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"
#define BK 32             // keys per tile
#define CK (BK / 8)       // keys per lane (LANES = 8)
#define NRG (BQ / 4)      // row groups (RQ = 4 rows each)
#define NT (NRG * 8)      // invocations
#define XW BK             // columns of the exchange regions
#include "attention_fast.glsl"
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

shared vec4 sQ[BQ * ROW4];   // Q row i (of the block) at i * ROW4
shared vec4 sK[BK * ROW4];   // K row j (of the tile) at j * ROW4
shared vec4 sV[BK * DCH];    // V row j at j * DCH (read along the row: no padding needed)
shared vec4 sP[NRG * XG4];   // row group g's probabilities: row r, key j at float
                             // 4 (g XG4 + r XP4) + j
shared uint sKeyOk[BK];      // key j of the tile exists and is not padding
#if !ROW_SHUFFLE
shared float sRed[BQ * LANES];  // row reductions: row i, lane at i * LANES + lane
#endif

// Maximum (sum) of x over the 8 lanes of the row group, the same value in every lane. The sum
// adds in a fixed pattern, so the result does not depend on timing.
void row_max(inout float x[RQ], uint rg, uint lane) {
#if ROW_SHUFFLE
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    x[r] = max(x[r], subgroupShuffleXor(x[r], 1u));
    x[r] = max(x[r], subgroupShuffleXor(x[r], 2u));
    x[r] = max(x[r], subgroupShuffleXor(x[r], 4u));
  }
#else
  [[unroll]] for (uint r = 0; r < RQ; ++r) sRed[(rg * RQ + r) * LANES + lane] = x[r];
  barrier();
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    float m = sRed[(rg * RQ + r) * LANES];
    [[unroll]] for (uint u = 1; u < LANES; ++u) m = max(m, sRed[(rg * RQ + r) * LANES + u]);
    x[r] = m;
  }
  barrier();  // sRed is free again
#endif
}

void row_sum(inout float x[RQ], uint rg, uint lane) {
#if ROW_SHUFFLE
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    x[r] += subgroupShuffleXor(x[r], 1u);
    x[r] += subgroupShuffleXor(x[r], 2u);
    x[r] += subgroupShuffleXor(x[r], 4u);
  }
#else
  [[unroll]] for (uint r = 0; r < RQ; ++r) sRed[(rg * RQ + r) * LANES + lane] = x[r];
  barrier();
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    float s = sRed[(rg * RQ + r) * LANES];
    [[unroll]] for (uint u = 1; u < LANES; ++u) s += sRed[(rg * RQ + r) * LANES + u];
    x[r] = s;
  }
  barrier();
#endif
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint rg = t / LANES, lane = t % LANES;
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
  const float to_log2 = p.a.scale * LOG2E;  // dot -> score in log2 units (no soft-cap)
  const uint kv_stride = p.a.hkv * D;

  STAGE_ROWS(sQ, BQ, ROW4, p.q, ((b * p.a.tq + q0) * p.a.hq + h) * D, p.a.hq * D, q_rows);

  float m[RQ], l[RQ];  // running row max (log2 units) and this lane's partial row sum
  vec4 acc[RQ][2];     // output rows, dims 4 lane + (0..3) and 32 + 4 lane + (0..3)
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    m[r] = MASKED;
    l[r] = 0.0;
    acc[r][0] = acc[r][1] = vec4(0.0);
  }

  const int pos_first = int(q0) + p.a.q_offset;
  const int pos_last = pos_first + int(q_rows) - 1;
  int j_lo = 0, j_hi = int(p.a.tk);
  if (p.a.causal != 0) j_hi = min(j_hi, pos_last + 1);
  if (p.a.window != 0) j_lo = max(j_lo, pos_first - int(p.a.window) + 1);
  j_lo = (j_lo / BK) * BK;  // tiles aligned to BK keys

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
    barrier();  // the previous tile's K, V and key flags are consumed (and sQ is written)
    const uint k_rows = min(uint(BK), p.a.tk - uint(j0));
    const uint kv_base = ((b * p.a.tk + uint(j0)) * p.a.hkv + hk) * D;
    if (vec4_rows) {
      STORE_ROWS(sK, k_next, BK, ROW4)
      STORE_ROWS(sV, v_next, BK, DCH)
      if (j0 + BK < j_hi) {
        const uint rows = min(uint(BK), p.a.tk - uint(j0 + BK));
        const uint base = kv_base + BK * kv_stride;
        FETCH_ROWS(k_next, BK, p.k, base, kv_stride, rows)
        FETCH_ROWS(v_next, BK, p.v, base, kv_stride, rows)
      }
    } else {
      STAGE_ROWS(sK, BK, ROW4, p.k, kv_base, kv_stride, k_rows);
      STAGE_ROWS(sV, BK, DCH, p.v, kv_base, kv_stride, k_rows);
    }
    if (t < BK) {
      bool ok = t < k_rows;
      if (ok && (p.flags & FLAG_MASK) != 0u) ok = p.mask.v[b * p.a.tk + uint(j0) + t] != 0;
      sKeyOk[t] = ok ? 1u : 0u;
    }
    barrier();

    // s[r][c] = Q[rg + NRG r] . K[lane + 8 c], summed over d in order.
    float s[RQ][CK];
    [[unroll]] for (uint r = 0; r < RQ; ++r)
      [[unroll]] for (uint c = 0; c < CK; ++c) s[r][c] = 0.0;
    for (uint d0 = 0; d0 < DCH; d0 += 4) {
      [[unroll]] for (uint dc = 0; dc < 4; ++dc) {
        vec4 kk[CK];
        [[unroll]] for (uint c = 0; c < CK; ++c) kk[c] = sK[(lane + LANES * c) * ROW4 + d0 + dc];
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          const vec4 qq = sQ[(rg + NRG * r) * ROW4 + d0 + dc];
          [[unroll]] for (uint c = 0; c < CK; ++c)
            s[r][c] = fma4(qq, kk[c], s[r][c]);
        }
      }
    }

    // Scores in log2 units; hidden ones become MASKED. A tile every row sees whole (inside the
    // causal triangle and the window, no padding, no key past the end) skips the tests.
    if (softcap) {
      [[unroll]] for (uint r = 0; r < RQ; ++r)
        [[unroll]] for (uint c = 0; c < CK; ++c) s[r][c] = transform_score(p.a, s[r][c]) * LOG2E;
    } else {
      [[unroll]] for (uint r = 0; r < RQ; ++r)
        [[unroll]] for (uint c = 0; c < CK; ++c) s[r][c] *= to_log2;
    }
    const bool whole = (p.flags & FLAG_MASK) == 0u && k_rows == BK &&
                       (p.a.causal == 0 || j0 + BK - 1 <= pos_first) &&
                       (p.a.window == 0 || pos_last - j0 < int(p.a.window));
    if (!whole) {
      [[unroll]] for (uint c = 0; c < CK; ++c) {
        const uint jj = lane + LANES * c;
        const bool key_ok = sKeyOk[jj] != 0u;
        [[unroll]] for (uint r = 0; r < RQ; ++r)
          if (!key_ok || !position_visible(p.a, pos_first + int(rg + NRG * r), j0 + int(jj)))
            s[r][c] = MASKED;
      }
    }

    // Online softmax: the new row max over the group, then this lane's probabilities.
    float mt[RQ];
    [[unroll]] for (uint r = 0; r < RQ; ++r) {
      mt[r] = s[r][0];
      [[unroll]] for (uint c = 1; c < CK; ++c) mt[r] = max(mt[r], s[r][c]);
    }
    row_max(mt, rg, lane);
    [[unroll]] for (uint r = 0; r < RQ; ++r) {
      const float m_new = max(m[r], mt[r]);
      // MASKED is finite: hidden scores and a row that has seen no key yet are tested, never
      // passed through exp2.
      const float alpha = m[r] == MASKED ? 0.0 : exp2(m[r] - m_new);
      m[r] = m_new;
      float sum = 0.0;
      [[unroll]] for (uint c = 0; c < CK; ++c) {
        const float pr = s[r][c] == MASKED ? 0.0 : exp2(s[r][c] - m_new);
        const uint at = 4u * (rg * XG4 + r * XP4) + lane + LANES * c;
        sP[at / 4u][at % 4u] = pr;
        sum += pr;
      }
      l[r] = l[r] * alpha + sum;
      acc[r][0] *= alpha;
      acc[r][1] *= alpha;
    }
    ROW_SYNC();

    // acc[r] += sum_j p[r][j] V[j] over the tile's keys, in order.
    [[unroll]] for (uint j4 = 0; j4 < BK / 4; ++j4) {
      vec4 pr[RQ];
      [[unroll]] for (uint r = 0; r < RQ; ++r) pr[r] = sP[rg * XG4 + r * XP4 + j4];
      [[unroll]] for (uint u = 0; u < 4; ++u) {
        const vec4 v0 = sV[(4 * j4 + u) * DCH + lane];
        const vec4 v1 = sV[(4 * j4 + u) * DCH + LANES + lane];
        [[unroll]] for (uint r = 0; r < RQ; ++r) {
          acc[r][0] = fma(vec4(pr[r][u]), v0, acc[r][0]);
          acc[r][1] = fma(vec4(pr[r][u]), v1, acc[r][1]);
        }
      }
    }
  }

  row_sum(l, rg, lane);
  [[unroll]] for (uint r = 0; r < RQ; ++r) {
    const uint i = rg + NRG * r;
    if (i >= q_rows) continue;
    const uint row = ((b * p.a.tq + q0 + i) * p.a.hq + h) * D;
    // A row that saw no key outputs zeros and a logsumexp of +inf (as the plain kernel).
    const vec4 inv = vec4(l[r] > 0.0 ? 1.0 / l[r] : 0.0);
    store_chunk(p.o, row, lane, D, vec4_rows, acc[r][0] * inv);
    store_chunk(p.o, row, LANES + lane, D, vec4_rows, acc[r][1] * inv);
    if (lane == 0)
      p.lse.v[(b * p.a.hq + h) * p.a.tq + q0 + i] =
          l[r] > 0.0 ? m[r] * LN2 + log(l[r]) : uintBitsToFloat(0x7f800000u);
  }
}
