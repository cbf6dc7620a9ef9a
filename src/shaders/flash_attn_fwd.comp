// Fused attention forward on tensor cores (F16 matmul precision, Fast math mode, head_dim <= 64):
// o and the row logsumexp as attention_fast_fwd.comp computes them, with q, k and v rounded to
// f16, scores accumulated in f32 by f16 x f16 fragments, the online softmax in f32 and the
// probabilities rounded to f16 for P V (accumulated in f32). No [Tq, Tk] tensor is stored.
//
// A workgroup of NUM_SG subgroups takes BQ = NUM_SG * ROWS_SG query rows of one head; subgroup s
// owns rows s * ROWS_SG .. + ROWS_SG - 1, holding their q as f16 fragments and their output as
// f32 accumulators in registers. Keys advance in tiles of BKV, staged as f16 rows in shared
// memory by the whole workgroup from f16 copies of k and v that the host makes (fetch_tile and
// store_tile, pipelined: see the tile loop). Per
// tile each subgroup, on registers (each component's row and column known from the lane or the
// index matrix, see flash_frag.glsl's COMP_ROW):
//   1. S = q k^T into accumulators; each component masked and transformed;
//   2. the tile's row maxima: the maximum over the tile's fragments of each component, then over
//      the row: with ROW_SHUFFLE (where the accumulators have the quad layout, ops/coopmat_layout.h)
//      over the invocation's components of each of its two rows and two subgroup shuffles, every
//      invocation keeping its rows' running max and alpha = exp(old max - new max) in registers;
//      otherwise stored as one 16 x 16 matrix per 16 rows, one invocation per row taking the
//      maximum of its 16 and updating the running max and alpha in shared memory;
//   3. the output components and the per-component partial row sums rescaled by their row's
//      alpha, the probabilities exp(s - max) computed over the scores, added to the partial sums,
//      converted to f16 operands and multiplied by V into the output.
// A subgroup whose rows see no key of the tile (causal or window) skips its work on it. At the end
// each row's sum is its 16 partial sums added in column order (deterministic), and the output is
// divided by it, written from the accumulators' components.
//
// Shared memory (uvec4 units): [0, KV_VEC) K tile, [KV_VEC, 2 KV_VEC) V tile, then NUM_SG scratch
// blocks of ROWS_SG x SP floats (the row maxima and sums; emulated, also the f16 probabilities). The index matrix and the q staging alias them at the start (the
// emulated build keeps q after them instead). The host mirrors BQ (src/ops/attention_coopmat.cpp).
//!requires GL_NV_cooperative_matrix
//!requires GL_EXT_spirv_intrinsics
//!novariant_base
//!variant d64 -DDMAX=64
//!variant d64_hwcvt -DDMAX=64 -DVKF_HW_CONVERT=1
//!variant d64_emulated -DDMAX=64 -DVKF_EMULATE_COOPMAT=1
//!variant d64_hwcvt_q2 -DDMAX=64 -DVKF_HW_CONVERT=1 -DQF_SET=2
#version 460
#extension GL_EXT_control_flow_attributes : require
#if !VKF_EMULATE_COOPMAT
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"

#if VKF_EMULATE_COOPMAT
#define NUM_SG 2  // with q kept in shared memory, 4 would pass lavapipe's 32 KiB (flash_frag.glsl)
#else
#define NUM_SG 4
#endif
#define LOCAL_SIZE (NUM_SG * 32)
// 16-row fragments of queries per subgroup: 1, or 2 in the q2 variant (the earlier default, kept
// for A/B timing: VKF_FLASH_FWD=q2). On the H200 one fragment needs 196 registers per invocation
// against 243 for two, and the training steps ran 1.5-3.5% faster (bench/RESULTS.md). The host
// mirrors it (attention_coopmat.cpp, flash_fwd_fragments).
#ifdef QF_SET
#define QF QF_SET
#else
#define QF 1
#endif
#define ROWS_SG (QF * 16)      // query rows per subgroup: one softmax invocation each
#define BQ (NUM_SG * ROWS_SG)  // query rows per workgroup
#define BKV 32                 // keys per tile
#define KF (BKV / 16)
#define DF (DMAX / 16)
#define PITCH (DMAX + 8)  // halves per staged row (16 bytes of padding spread the banks)
#define SP (BKV + 4)      // floats per scratch row (a multiple of 4: P rows are 2 SP halves)
#define KV_VEC (BKV * PITCH / 8)
#define SCRATCH_VEC (ROWS_SG * SP / 4)  // per subgroup
#define S_OFF (2 * KV_VEC)
#define TILES_VEC (S_OFF + NUM_SG * SCRATCH_VEC)
#define Q_VEC (BQ * PITCH / 8)
#if VKF_EMULATE_COOPMAT
#define Q_OFF TILES_VEC  // emulated fragments refer to where q lies: it stays
#define SMEM_VEC (TILES_VEC + Q_VEC)
#else
#define Q_OFF 0  // q's fragments live in registers: its staging aliases the tiles
#define SMEM_VEC (TILES_VEC > Q_VEC ? TILES_VEC : Q_VEC)
#endif
layout(local_size_x = LOCAL_SIZE) in;
// Row maxima by subgroup shuffles: only where the accumulators have the quad layout (the host
// probes it; the emulation has it by construction).
layout(constant_id = 0) const bool ROW_SHUFFLE = false;
// The accumulators have the quad layout: components' rows and columns from the lane (COMP_ROW).
layout(constant_id = 1) const bool QUAD_LAYOUT = false;

shared uvec4 smem[SMEM_VEC];
shared float sM[BQ];      // running max of each row (MASKED while it has seen no key)
shared float sL[BQ];      // the row sum, at the end
shared float sAlpha[BQ];  // exp(old max - new max) of the last tile
shared uint sKeyOk[BKV];  // key of the tile exists and is not padding
#if VKF_EMULATE_COOPMAT
shared float sXor[LOCAL_SIZE];  // the emulated subgroup shuffle
#endif

#define TILE_ROWS BKV  // stage_tile's tiles
#include "flash_frag.glsl"

layout(push_constant, std430) uniform Push {
  F32Buf q;     // [B, Tq, Hq, D]
  uint64_t k;   // f16 copy (stage_tile) [B, Tk, Hkv, D]
  uint64_t v;   // f16 copy [B, Tk, Hkv, D]
  I32Buf mask;  // [B, Tk], read when flags has FLAG_MASK
  F32Buf o;     // [B, Tq, Hq, D]
  F32Buf lse;   // [B, Hq, Tq]
  AttnDropoutBuf dropout;  // unused: these kernels run without dropout
  AttnParams a;
  uint flags;
} p;

// Score s of the tile's key c for the row at position `pos`, transformed, or MASKED where the key
// is padding, past the end, hidden by the causal or window rule, or the row is past the end of the
// queries. `full`: every key of the tile is visible to every row (no test needed).
float masked_score(bool full, bool row_ok, int pos, int j0, uint c, float s) {
  if (!full && (!row_ok || sKeyOk[c] == 0u || !position_visible(p.a, pos, j0 + int(c))))
    return MASKED;
  return transform_score(p.a, s);
}

// The maximum (or the sum) of the 16 values of row `row` of the 16 x 16 f32 matrix at smem
// `element`, rows SP floats apart, in column order.
float row_reduce16(uint element, uint row, bool take_max) {
  float r = take_max ? MASKED : 0.0;
  UNROLL for (uint c = 0; c < 16u; ++c) {
    const uint w = element * 4u + row * SP + c;
    const float x = uintBitsToFloat(smem[w / 4u][w % 4u]);
    r = take_max ? max(r, x) : r + x;
  }
  return r;
}

// x of the invocation whose lane index is this one's xor `mask` (1 or 2: the four invocations of a
// quad-layout row). Emulated through shared memory, so called in workgroup-uniform control flow.
float row_xor(float x, uint mask) {
#if VKF_EMULATE_COOPMAT
  sXor[gl_LocalInvocationIndex] = x;
  barrier();
  const float y = sXor[gl_LocalInvocationIndex ^ mask];
  barrier();
  return y;
#else
  return subgroupShuffleXor(x, mask);
#endif
}

// The maximum of x over the four invocations sharing a quad-layout row.
float quad_row_max(float x) {
  x = max(x, row_xor(x, 1u));
  return max(x, row_xor(x, 2u));
}

// exp(old max - new max) by which a row's output and sum are rescaled; MASKED marks "no key yet".
float rescale(float m_old, float m_new) {
  return m_new == MASKED ? 1.0 : m_old == MASKED ? 0.0 : exp(m_old - m_new);
}

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint sg = SUBGROUP_ID, lane = LANE;
  // Grid (heads, batch, blocks), the block with the most keys to see first (block_grid in
  // ops/attention.cpp).
  const uint blocks = (p.a.tq + BQ - 1) / BQ;
  const uint q0 = (blocks - 1 - gl_WorkGroupID.z) * BQ;
  const uint h = gl_WorkGroupID.x;
  const uint b = gl_WorkGroupID.y;
  const uint D = p.a.d;
  const uint hk = h / (p.a.hq / p.a.hkv);
  const uint q_rows = min(uint(BQ), p.a.tq - q0);
  const bool vec4_ok = (p.flags & FLAG_VEC4) != 0u;
  const bool tiles_vec8 = (p.flags & FLAG_TILES_VEC8) != 0u;

  // Row and column of each accumulator component.
  if (!QUAD_LAYOUT) write_index_matrix(S_OFF);
  barrier();
  FRAG_F row_of, col_of;
  if (!QUAD_LAYOUT) {
    LOAD_F(row_of, S_OFF, 4u, false);
    LOAD_F(col_of, S_OFF, 4u, true);
  }
  barrier();

  stage_rows_f16(uint64_t(p.q), vec4_ok, ((b * p.a.tq + q0) * p.a.hq + h) * D, p.a.hq * D, q_rows,
                 D, Q_OFF, BQ);
  for (uint r = tid; r < BQ; r += LOCAL_SIZE) sM[r] = MASKED;
  barrier();
  FRAG_H qa[QF][DF];
  UNROLL for (uint i = 0; i < QF; ++i)
    UNROLL for (uint f = 0; f < DF; ++f)
      LOAD_H(qa[i][f], Q_OFF + ((sg * ROWS_SG + i * 16u) * PITCH + f * 16u) / 8u, PITCH / 8u,
             false);
  FRAG_F acc[QF][DF];
  FRAG_F lsum[QF];  // per component: the partial sum of exp(score - max) of its row and column
  UNROLL for (uint i = 0; i < QF; ++i) {
    lsum[i] = FRAG_F_ZERO;
    UNROLL for (uint f = 0; f < DF; ++f) acc[i][f] = FRAG_F_ZERO;
  }

  // Keys any row of the workgroup may see, in whole tiles.
  const int pos_first = int(q0) + p.a.q_offset;
  const int pos_last = int(q0 + q_rows) - 1 + p.a.q_offset;
  int j_lo = 0, j_hi = int(p.a.tk);
  if (p.a.causal != 0) j_hi = min(j_hi, pos_last + 1);
  if (p.a.window != 0) j_lo = max(j_lo, pos_first - int(p.a.window) + 1);
  j_lo = (j_lo / BKV) * BKV;
  // This subgroup's rows (none past the end of the queries).
  const uint sg_row0 = sg * ROWS_SG;
  const int sg_rows = clamp(int(q_rows) - int(sg_row0), 0, ROWS_SG);
  const int sg_pos_first = pos_first + int(sg_row0);
  const uint scratch = S_OFF + sg * SCRATCH_VEC;

  // ROW_SHUFFLE: the running max and the last tile's alpha of this invocation's two rows of each
  // fragment (quad layout: lane / 4 for components t < 4, lane / 4 + 8 for the others).
  float run_max[QF][2], alpha[QF][2];
  UNROLL for (uint i = 0; i < QF; ++i) {
    run_max[i][0] = run_max[i][1] = MASKED;
    alpha[i][0] = alpha[i][1] = 1.0;
  }

  // The tiles are software-pipelined in registers, one operand at a time: a tile's V is fetched
  // when its K is stored and written to shared memory after the scores and probabilities; the next
  // tile's K is fetched after that and stored at the start of the next iteration. So both loads
  // are in flight during work, while at most one operand's TILE_CHUNKS are held, and two
  // barriers per tile still suffice: every subgroup is done with K and the key flags when it
  // reaches the second (after its scores), and with V when it reaches the first of the next tile
  // (after its P V).
  const uint kv_ld = p.a.hkv * D;
  barrier();  // the q staging (which the tiles alias) is consumed
  uvec4 k_regs[TILE_CHUNKS];
  if (j_lo < j_hi)
    fetch_tile(uint64_t(p.k), tiles_vec8, ((b * p.a.tk + uint(j_lo)) * p.a.hkv + hk) * D, kv_ld,
               min(uint(BKV), p.a.tk - uint(j_lo)), D, k_regs);
  for (int j0 = j_lo; j0 < j_hi; j0 += BKV) {
    const uint kv_rows = min(uint(BKV), p.a.tk - uint(j0));
    const uint kv_base = ((b * p.a.tk + uint(j0)) * p.a.hkv + hk) * D;
    store_tile(k_regs, 0u);
    uvec4 v_regs[TILE_CHUNKS];
    fetch_tile(uint64_t(p.v), tiles_vec8, kv_base, kv_ld, kv_rows, D, v_regs);
    for (uint c = tid; c < BKV; c += LOCAL_SIZE) {
      bool ok = c < kv_rows;
      if (ok && (p.flags & FLAG_MASK) != 0u) ok = p.mask.v[b * p.a.tk + uint(j0) + c] != 0;
      sKeyOk[c] = ok ? 1u : 0u;
    }
    barrier();  // K and the key flags are staged; every subgroup is done with the previous V
    const bool sees_tile =
        sg_rows > 0 && block_visible(p.a, sg_pos_first, sg_pos_first + sg_rows - 1, j0, j0 + BKV - 1);

    // Away from the causal diagonal and a window's edge, with no padding mask and a whole tile
    // of keys, every score of the tile is visible to every row of the subgroup: the common case,
    // which skips the per-score tests (the arithmetic is the same).
    const bool tile_full = kv_rows == uint(BKV) && (p.flags & FLAG_MASK) == 0u &&
                           sg_rows == ROWS_SG &&
                           block_fully_visible(p.a, sg_pos_first, sg_pos_first + ROWS_SG - 1, j0,
                                               j0 + BKV - 1);

    // 1. Scores of this subgroup's rows against the tile's keys, masked and transformed, and
    // 2a. their maximum over the tile's fragments per component (then, with ROW_SHUFFLE, over
    // each of the invocation's two rows; otherwise stored per 16 rows).
    FRAG_F s[QF][KF];
    float tile_max[QF][2];  // ROW_SHUFFLE: this invocation's part of its rows' maxima
    if (sees_tile) {
      UNROLL for (uint i = 0; i < QF; ++i) {
        UNROLL for (uint kf = 0; kf < KF; ++kf) {
          s[i][kf] = FRAG_F_ZERO;
          UNROLL for (uint f = 0; f < DF; ++f) {
            FRAG_H kb;  // k^T: (d, key) at key * PITCH + d
            LOAD_H(kb, (kf * 16u * PITCH + f * 16u) / 8u, PITCH / 8u, true);
            s[i][kf] = MMA(qa[i][f], kb, s[i][kf]);
          }
        }
        FRAG_F m = FRAG_F_ZERO;
        UNROLL for (int t = 0; t < FRAG_LEN(row_of); ++t) {
          const uint r = sg_row0 + i * 16u + COMP_ROW(QUAD_LAYOUT, row_of, t);
          const int pos = pos_first + int(r);
          float mt = MASKED;
          UNROLL for (uint kf = 0; kf < KF; ++kf) {
            const float x = masked_score(tile_full, r < q_rows, pos, j0,
                                         kf * 16u + COMP_COL(QUAD_LAYOUT, col_of, t),
                                         COMP(s[i][kf], t));
            COMP(s[i][kf], t) = x;
            mt = max(mt, x);
          }
          COMP(m, t) = mt;
        }
        if (ROW_SHUFFLE) {
          tile_max[i][0] = tile_max[i][1] = MASKED;
          UNROLL for (int t = 0; t < FRAG_LEN(m); ++t) {
            const uint half_ = uint(t) >> 2;
            tile_max[i][half_] = max(tile_max[i][half_], COMP(m, t));
          }
        } else {
          STORE_F(m, scratch + i * 16u * SP / 4u, SP / 4u);
        }
      }
    }
    if (ROW_SHUFFLE) {
      // 2b. Each invocation: its rows' maxima over the quad, the running max and alpha. The
      // shuffles run whether or not the subgroup sees the tile (the emulation's need uniform flow).
      UNROLL for (uint i = 0; i < QF; ++i) {
        UNROLL for (uint half_ = 0; half_ < 2u; ++half_) {
          const float row_max = quad_row_max(sees_tile ? tile_max[i][half_] : MASKED);
          if (sees_tile) {
            const float m_new = max(run_max[i][half_], row_max);
            alpha[i][half_] = rescale(run_max[i][half_], m_new);
            run_max[i][half_] = m_new;
          }
        }
      }
    } else {
      SG_SYNC();
      // 2b. One invocation per row: the running max and this tile's alpha.
      if (sees_tile && lane < ROWS_SG) {
        const uint r = sg_row0 + lane;
        const float m_old = sM[r];
        const float m_new = max(m_old, row_reduce16(scratch + (lane / 16u) * 16u * SP / 4u,
                                                    lane % 16u, true));
        sM[r] = m_new;
        sAlpha[r] = rescale(m_old, m_new);
      }
      SG_SYNC();
    }

    // 3. Rescale by alpha, probabilities over the scores, partial sums, and acc += P V.
    if (sees_tile) {
      UNROLL for (uint i = 0; i < QF; ++i) {
        UNROLL for (int t = 0; t < FRAG_LEN(row_of); ++t) {
          const uint r = sg_row0 + i * 16u + COMP_ROW(QUAD_LAYOUT, row_of, t);
          const uint half_ = uint(t) >> 2;
          const float a = ROW_SHUFFLE ? alpha[i][half_] : sAlpha[r];
          const float m = ROW_SHUFFLE ? run_max[i][half_] : sM[r];
          UNROLL for (uint f = 0; f < DF; ++f) COMP(acc[i][f], t) *= a;
          float sum = COMP(lsum[i], t) * a;
          UNROLL for (uint kf = 0; kf < KF; ++kf) {
            const float x = COMP(s[i][kf], t);
            const float pr = x == MASKED ? 0.0 : exp(x - m);
            COMP(s[i][kf], t) = pr;
            sum += pr;
          }
          COMP(lsum[i], t) = sum;
        }
      }
    }
    FRAG_H pa[QF][KF];
    UNROLL for (uint i = 0; i < QF; ++i)
      UNROLL for (uint kf = 0; kf < KF; ++kf)
        TO_H(pa[i][kf], s[i][kf], sees_tile, scratch + (i * 16u * SP + kf * 16u) / 4u, SP / 4u);
    store_tile(v_regs, KV_VEC);
    barrier();  // V is staged (and, emulated, the probabilities); every subgroup is done with K
    if (j0 + BKV < j_hi)
      fetch_tile(uint64_t(p.k), tiles_vec8, kv_base + BKV * kv_ld, kv_ld,
                 min(uint(BKV), p.a.tk - uint(j0 + BKV)), D, k_regs);
    if (sees_tile) {
      UNROLL for (uint i = 0; i < QF; ++i) {
        UNROLL for (uint kf = 0; kf < KF; ++kf) {
          UNROLL for (uint f = 0; f < DF; ++f) {
            FRAG_H vb;  // v: (key, d) at key * PITCH + d
            LOAD_H(vb, KV_VEC + (kf * 16u * PITCH + f * 16u) / 8u, PITCH / 8u, false);
            acc[i][f] = MMA(pa[i][kf], vb, acc[i][f]);
          }
        }
      }
    }
    EMU_SYNC();  // emulated: the probabilities in scratch are read before the next tile's maxima
  }

  // ROW_SHUFFLE: the running maxima to shared memory (for the logsumexp), one invocation per quad.
  if (ROW_SHUFFLE && (lane & 3u) == 0u) {
    UNROLL for (uint i = 0; i < QF; ++i) {
      sM[sg_row0 + i * 16u + (lane >> 2)] = run_max[i][0];
      sM[sg_row0 + i * 16u + (lane >> 2) + 8u] = run_max[i][1];
    }
  }
  // Each row's sum: its 16 partial sums, in column order.
  SG_SYNC();
  UNROLL for (uint i = 0; i < QF; ++i) STORE_F(lsum[i], scratch + i * 16u * SP / 4u, SP / 4u);
  SG_SYNC();
  if (lane < ROWS_SG)
    sL[sg_row0 + lane] = row_reduce16(scratch + (lane / 16u) * 16u * SP / 4u, lane % 16u, false);
  SG_SYNC();  // the row sums written by this subgroup's invocations are visible to all of them

  UNROLL for (uint i = 0; i < QF; ++i) {
    UNROLL for (int t = 0; t < FRAG_LEN(row_of); ++t) {
      const uint r = sg_row0 + i * 16u + COMP_ROW(QUAD_LAYOUT, row_of, t);
      if (r >= q_rows) continue;
      const float l = sL[r];
      const uint row = ((b * p.a.tq + q0 + r) * p.a.hq + h) * D;
      UNROLL for (uint f = 0; f < DF; ++f) {
        const uint d = f * 16u + COMP_COL(QUAD_LAYOUT, col_of, t);
        if (d < D) p.o.v[row + d] = l > 0.0 ? COMP(acc[i][f], t) / l : 0.0;
      }
    }
  }
  if (lane < ROWS_SG && sg_row0 + lane < q_rows) {
    const uint r = sg_row0 + lane;
    const float l = sL[r];
    p.lse.v[(b * p.a.hq + h) * p.a.tq + q0 + r] =
        l > 0.0 ? sM[r] + log(l) : uintBitsToFloat(0x7f800000u);
  }
}
