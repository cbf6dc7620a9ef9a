// Fused attention backward, query side, on tensor cores (F16 matmul precision, Fast math mode,
// head_dim <= 64): dq for BQ queries of one head, walking the visible keys in tiles of BKV (in
// ascending order, so sums are deterministic). Same arithmetic as attention_fast_bwd_dq.comp, in
// mixed precision: q, k, v and do rounded to f16; s = q.k and dp = do.v accumulated in f32 by
// f16 fragments; p = exp(score(s) - lse) and ds = p (dp - delta) d(score)/d(dot) in f32, ds
// rounded to f16 for dq += ds k (f32 accumulators), and the scale applied to dq at the end (so
// that ds keeps its magnitude in f16).
//
// A workgroup of NUM_SG subgroups takes BQ = NUM_SG * 16 queries; each subgroup holds its 16
// rows of q and do as f16 fragments and of dq as f32 accumulators in registers. Keys (k and v)
// are staged per tile (32 keys) as f16 rows in shared memory from f16 copies the host makes
// (stage_tile). The masks and the softmax gradient run on the accumulators' components, whose
// rows and columns come from the lane or the index matrix (flash_frag.glsl's COMP_ROW). A
// subgroup whose rows see no key of the tile skips it.
//
// Shared memory (uvec4 units): [0, KV_VEC) k tile, [KV_VEC, 2 KV_VEC) v tile; the q and do staging
// and the index matrix (after the q staging) alias them at the start (the emulated build adds per-subgroup conversion
// scratch and keeps q and do after the tiles). The host mirrors BQ (src/ops/attention_coopmat.cpp).
//!requires GL_NV_cooperative_matrix
//!requires GL_EXT_spirv_intrinsics
//!novariant_base
//!variant d64 -DDMAX=64
//!variant d64_hwcvt -DDMAX=64 -DVKF_HW_CONVERT=1
//!variant d64_emulated -DDMAX=64 -DVKF_EMULATE_COOPMAT=1
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"

#if VKF_EMULATE_COOPMAT
#define NUM_SG 2  // with q and do kept in shared memory, 4 would pass 32 KiB (flash_frag.glsl)
#else
#define NUM_SG 4
#endif
#define LOCAL_SIZE (NUM_SG * 32)
#define BQ (NUM_SG * 16)  // queries per workgroup, 16 per subgroup
#define BKV 32            // keys per tile
#define KF (BKV / 16)
#define DF (DMAX / 16)
#define PITCH (DMAX + 8)  // halves per staged row (16 bytes of padding spread the banks)
#define KV_VEC (BKV * PITCH / 8)
#define Q_VEC (BQ * PITCH / 8)
#if VKF_EMULATE_COOPMAT
// Per subgroup: the f16 ds of a tile, 16 rows of BKV halves (TO_H's scratch); then q and do,
// which emulated fragments refer to.
#define CONV_VEC (16 * BKV / 8)
#define Q_OFF (2 * KV_VEC + NUM_SG * CONV_VEC)
#define DO_OFF (Q_OFF + Q_VEC)
#define SMEM_VEC (DO_OFF + Q_VEC)
#define INDEX_OFF KV_VEC  // the index matrix: in the tiles, free until the first tile
#else
// q's and do's fragments live in registers: their staging aliases the tiles.
#define CONV_VEC 0
#define Q_OFF 0
#define DO_OFF 0
// The index matrix (64 uvec4) after the q staging, which it must not overlap.
#define INDEX_OFF Q_VEC
#define SMEM_VEC (2 * KV_VEC > Q_VEC + 64 ? 2 * KV_VEC : Q_VEC + 64)
#endif
layout(local_size_x = LOCAL_SIZE) in;
// The accumulators have the quad layout: components' rows and columns from the lane (COMP_ROW).
layout(constant_id = 0) const bool QUAD_LAYOUT = false;

shared uvec4 smem[SMEM_VEC];
shared float sLse[BQ];
shared float sDelta[BQ];
shared uint sKeyOk[BKV];  // key of the tile exists and is not padding

#define TILE_ROWS BKV  // stage_tile's tiles
#include "flash_frag.glsl"

layout(push_constant, std430) uniform Push {
  F32Buf q;      // [B, Tq, Hq, D]
  uint64_t k;    // f16 copy (stage_tile) [B, Tk, Hkv, D]
  uint64_t v;    // f16 copy [B, Tk, Hkv, D]
  I32Buf mask;   // [B, Tk], read when flags has FLAG_MASK
  F32Buf dout;   // [B, Tq, Hq, D]
  F32Buf lse;    // [B, Hq, Tq]
  F32Buf delta;  // [B, Hq, Tq]
  F32Buf dq;     // [B, Tq, Hq, D]
  AttnDropoutBuf dropout;  // unused: these kernels run without dropout
  AttnParams a;
  uint flags;
} p;

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint sg = SUBGROUP_ID;
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
  const uint q_base = ((b * p.a.tq + q0) * p.a.hq + h) * D;

  if (!QUAD_LAYOUT) write_index_matrix(INDEX_OFF);
  stage_rows_f16(uint64_t(p.q), vec4_ok, q_base, p.a.hq * D, q_rows, D, Q_OFF, BQ);
  for (uint r = tid; r < BQ; r += LOCAL_SIZE) {
    const uint row = (b * p.a.hq + h) * p.a.tq + q0 + r;
    sLse[r] = r < q_rows ? p.lse.v[row] : 0.0;
    sDelta[r] = r < q_rows ? p.delta.v[row] : 0.0;
  }
  barrier();
  FRAG_F row_of, col_of;  // row and column of each accumulator component
  if (!QUAD_LAYOUT) {
    LOAD_F(row_of, INDEX_OFF, 4u, false);
    LOAD_F(col_of, INDEX_OFF, 4u, true);
  }
  FRAG_H qa[DF], oa[DF];
  UNROLL for (uint f = 0; f < DF; ++f)
    LOAD_H(qa[f], Q_OFF + (sg * 16u * PITCH + f * 16u) / 8u, PITCH / 8u, false);
  barrier();
  stage_rows_f16(uint64_t(p.dout), vec4_ok, q_base, p.a.hq * D, q_rows, D, DO_OFF, BQ);
  barrier();
  UNROLL for (uint f = 0; f < DF; ++f)
    LOAD_H(oa[f], DO_OFF + (sg * 16u * PITCH + f * 16u) / 8u, PITCH / 8u, false);
  FRAG_F acc[DF];
  UNROLL for (uint f = 0; f < DF; ++f) acc[f] = FRAG_F_ZERO;

  // Keys any row of the workgroup may see, in whole tiles.
  const int pos_first = int(q0) + p.a.q_offset;
  const int pos_last = int(q0 + q_rows) - 1 + p.a.q_offset;
  int j_lo = 0, j_hi = int(p.a.tk);
  if (p.a.causal != 0) j_hi = min(j_hi, pos_last + 1);
  if (p.a.window != 0) j_lo = max(j_lo, pos_first - int(p.a.window) + 1);
  j_lo = (j_lo / BKV) * BKV;
  const uint sg_row0 = sg * 16u;
  const int sg_rows = clamp(int(q_rows) - int(sg_row0), 0, 16);
  const int sg_pos_first = pos_first + int(sg_row0);
  const uint conv = 2 * KV_VEC + sg * CONV_VEC;

  for (int j0 = j_lo; j0 < j_hi; j0 += BKV) {
    barrier();  // the previous tile (and, the first time, the do staging) is consumed
    const uint kv_rows = min(uint(BKV), p.a.tk - uint(j0));
    const uint kv_base = ((b * p.a.tk + uint(j0)) * p.a.hkv + hk) * D;
    stage_tile(uint64_t(p.k), tiles_vec8, kv_base, p.a.hkv * D, kv_rows, D, 0u);
    stage_tile(uint64_t(p.v), tiles_vec8, kv_base, p.a.hkv * D, kv_rows, D, KV_VEC);
    for (uint c = tid; c < BKV; c += LOCAL_SIZE) {
      bool ok = c < kv_rows;
      if (ok && (p.flags & FLAG_MASK) != 0u) ok = p.mask.v[b * p.a.tk + uint(j0) + c] != 0;
      sKeyOk[c] = ok ? 1u : 0u;
    }
    barrier();
    const bool sees_tile =
        sg_rows > 0 && block_visible(p.a, sg_pos_first, sg_pos_first + sg_rows - 1, j0, j0 + BKV - 1);
    // Every key of the tile visible to every row of the subgroup (away from the causal diagonal
    // and a window's edge, no padding, a whole tile): the common case skips the per-score tests.
    const bool tile_full = kv_rows == uint(BKV) && (p.flags & FLAG_MASK) == 0u && sg_rows == 16 &&
                           block_fully_visible(p.a, sg_pos_first, sg_pos_first + 15, j0,
                                               j0 + BKV - 1);

    FRAG_H ds_h[KF];
    UNROLL for (uint kf = 0; kf < KF; ++kf) {
      FRAG_F s = FRAG_F_ZERO, dp = FRAG_F_ZERO;
      if (sees_tile) {
        UNROLL for (uint f = 0; f < DF; ++f) {
          FRAG_H kb, vb;  // k^T and v^T: (d, key) at key * PITCH + d
          LOAD_H(kb, (kf * 16u * PITCH + f * 16u) / 8u, PITCH / 8u, true);
          LOAD_H(vb, KV_VEC + (kf * 16u * PITCH + f * 16u) / 8u, PITCH / 8u, true);
          s = MMA(qa[f], kb, s);
          dp = MMA(oa[f], vb, dp);
        }
        UNROLL for (int t = 0; t < FRAG_LEN(s); ++t) {
          const uint r = sg_row0 + COMP_ROW(QUAD_LAYOUT, row_of, t);
          const uint c = kf * 16u + COMP_COL(QUAD_LAYOUT, col_of, t);
          float g = 0.0;
          if (tile_full || (r < q_rows && sKeyOk[c] != 0u &&
                            position_visible(p.a, pos_first + int(r), j0 + int(c)))) {
            const float x = COMP(s, t);
            const float pr = exp(transform_score(p.a, x) - sLse[r]);
            g = pr * (COMP(dp, t) - sDelta[r]) * softcap_grad(p.a, x);
          }
          COMP(s, t) = g;
        }
      }
      TO_H(ds_h[kf], s, sees_tile, conv + kf * 2u, BKV / 8u);
    }
    EMU_SYNC();
    if (sees_tile) {
      UNROLL for (uint kf = 0; kf < KF; ++kf)
        UNROLL for (uint f = 0; f < DF; ++f) {
          FRAG_H kb;  // k: (key, d) at key * PITCH + d
          LOAD_H(kb, (kf * 16u * PITCH + f * 16u) / 8u, PITCH / 8u, false);
          acc[f] = MMA(ds_h[kf], kb, acc[f]);
        }
    }
  }

  UNROLL for (int t = 0; t < FRAG_LEN(row_of); ++t) {
    const uint r = sg_row0 + COMP_ROW(QUAD_LAYOUT, row_of, t);
    if (r >= q_rows) continue;
    const uint row = ((b * p.a.tq + q0 + r) * p.a.hq + h) * D;
    UNROLL for (uint f = 0; f < DF; ++f) {
      const uint d = f * 16u + COMP_COL(QUAD_LAYOUT, col_of, t);
      if (d < D) p.dq.v[row + d] = COMP(acc[f], t) * p.a.scale;
    }
  }
}
