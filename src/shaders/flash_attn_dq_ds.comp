// Fused attention backward, query side, on tensor cores, from the score gradients the tensor-core
// dk/dv kernel stored (F16 matmul precision, Fast math mode, head_dim <= 64): dq = scale * sum_j
// ds_ij k_j. flash_attn_dkv.comp forms every visible ds (rounded to f16 for its own dk product);
// where the host gives it a buffer it also writes them, as f16 ds^T: [B, Hq, Tk, Tq] halves, row
// (b, h, key j) holding the queries in order. So this kernel does one product where
// flash_attn_dq.comp does three (q.k and do.v again, then ds k). The products are f16 x f16 with
// f32 accumulation, as there; the sums of the two kernels differ only in how the tensor cores
// order them (the stored ds comes from dk/dv's transposed products, k q^T).
//
// A workgroup of NUM_SG subgroups takes BQ = NUM_SG * 16 queries of one head; each subgroup holds
// its 16 rows of dq as f32 accumulators. Per tile of BKV = 32 keys the workgroup stages k (from
// the host's f16 copy, stage_tile) and the tile's ds^T rows (BKV keys x BQ queries) as f16 rows in
// shared memory; each subgroup loads its ds fragments from the ds^T rows column-major. Entries of
// ds^T that no dk/dv workgroup wrote belong to pairs hidden by the causal rule or a window: they
// are read (the buffer is not cleared) but replaced by zero as they are staged, on tiles that
// some pair of which is hidden. Padding keys and absent queries were stored as zeros.
//
// Shared memory (uvec4 units): [0, KV_VEC) the k tile, [KV_VEC, KV_VEC + DS_VEC) the ds^T tile.
// The host mirrors BQ (src/ops/attention_coopmat.cpp).
//!requires GL_NV_cooperative_matrix
//!requires GL_EXT_spirv_intrinsics
//!novariant_base
//!variant d64 -DDMAX=64
//!variant d64_emulated -DDMAX=64 -DVKF_EMULATE_COOPMAT=1
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#include "attention_common.glsl"

#if VKF_EMULATE_COOPMAT
#define NUM_SG 2  // as the other emulated builds (flash_frag.glsl)
#else
#define NUM_SG 4
#endif
#define LOCAL_SIZE (NUM_SG * 32)
#define BQ (NUM_SG * 16)  // queries per workgroup, 16 per subgroup
#define BKV 32            // keys per tile
#define KF (BKV / 16)
#define DF (DMAX / 16)
#define PITCH (DMAX + 8)  // halves per staged k row (16 bytes of padding spread the banks)
#define DSP (BQ + 8)      // halves per staged ds^T row
#define KV_VEC (BKV * PITCH / 8)
#define DS_OFF KV_VEC
#define DS_VEC (BKV * DSP / 8)
#define SMEM_VEC (KV_VEC + DS_VEC)
layout(local_size_x = LOCAL_SIZE) in;
// The accumulators have the quad layout: components' rows and columns from the lane (COMP_ROW).
layout(constant_id = 0) const bool QUAD_LAYOUT = false;

shared uvec4 smem[SMEM_VEC];

#define TILE_ROWS BKV  // stage_tile's tiles
#include "flash_frag.glsl"

layout(push_constant, std430) uniform Push {
  uint64_t k;   // f16 copy (stage_tile) [B, Tk, Hkv, D]
  uint64_t ds;  // f16 ds^T [B, Hq, Tk, Tq], as flash_attn_dkv.comp wrote it
  F32Buf dq;    // [B, Tq, Hq, D]
  AttnParams a;
  uint flags;
} p;

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint sg = SUBGROUP_ID;
  // Grid (heads, batch, blocks), the block with the most keys first (block_grid in
  // ops/attention.cpp).
  const uint blocks = (p.a.tq + BQ - 1) / BQ;
  const uint q0 = (blocks - 1 - gl_WorkGroupID.z) * BQ;
  const uint h = gl_WorkGroupID.x;
  const uint b = gl_WorkGroupID.y;
  const uint D = p.a.d;
  const uint hk = h / (p.a.hq / p.a.hkv);
  const uint q_rows = min(uint(BQ), p.a.tq - q0);
  const bool tiles_vec8 = (p.flags & FLAG_TILES_VEC8) != 0u;
  const bool ds_vec8 = (p.flags & FLAG_DS_VEC8) != 0u;
  const uint ds_head = (b * p.a.hq + h) * p.a.tk;  // ds^T row of key 0 of this head

  if (!QUAD_LAYOUT) {
    write_index_matrix(0u);
    barrier();
  }
  FRAG_F row_of, col_of;  // row and column of each accumulator component
  if (!QUAD_LAYOUT) {
    LOAD_F(row_of, 0u, 4u, false);
    LOAD_F(col_of, 0u, 4u, true);
  }
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

  for (int j0 = j_lo; j0 < j_hi; j0 += BKV) {
    barrier();  // the previous tile (and, the first time, the index matrix) is consumed
    const uint kv_rows = min(uint(BKV), p.a.tk - uint(j0));
    stage_tile(uint64_t(p.k), tiles_vec8, ((b * p.a.tk + uint(j0)) * p.a.hkv + hk) * D,
               p.a.hkv * D, kv_rows, D, 0u);
    // The ds^T tile: key rows of BQ queries, chunks of 8; zero past the keys and queries, and at
    // hidden pairs where some pair of the tile is hidden (whole: none is).
    const bool whole = kv_rows == uint(BKV) && q_rows == uint(BQ) &&
                       block_fully_visible(p.a, pos_first, pos_last, j0, j0 + BKV - 1);
    for (uint chunk = tid; chunk < BKV * (BQ / 8u); chunk += LOCAL_SIZE) {
      const uint r = chunk / (BQ / 8u), c = (chunk % (BQ / 8u)) * 8u;
      const uint at = (ds_head + uint(j0) + r) * p.a.tq + q0 + c;
      uvec4 x = uvec4(0u);
      if (r < kv_rows && c < q_rows) {
        x = read_chunk8_f16(p.ds, ds_vec8, at, c, q_rows);  // queries past q_rows read as zero
        if (!whole) {
          [[unroll]] for (uint u = 0; u < 8u; ++u)
            if (!position_visible(p.a, pos_first + int(c + u), j0 + int(r)))
              x[u / 2u] &= (u % 2u) == 0u ? 0xffff0000u : 0x0000ffffu;
        }
      }
      smem[DS_OFF + (r * DSP + c) / 8u] = x;
    }
    barrier();
    const bool sees_tile =
        sg_rows > 0 && block_visible(p.a, sg_pos_first, sg_pos_first + sg_rows - 1, j0, j0 + BKV - 1);
    if (sees_tile) {
      UNROLL for (uint kf = 0; kf < KF; ++kf) {
        FRAG_H da;  // ds: (query, key) at key * DSP + query, column-major
        LOAD_H(da, DS_OFF + (kf * 16u * DSP + sg_row0) / 8u, DSP / 8u, true);
        UNROLL for (uint f = 0; f < DF; ++f) {
          FRAG_H kb;  // k: (key, d) at key * PITCH + d
          LOAD_H(kb, (kf * 16u * PITCH + f * 16u) / 8u, PITCH / 8u, false);
          acc[f] = MMA(da, kb, acc[f]);
        }
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
