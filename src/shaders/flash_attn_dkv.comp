// Fused attention backward, key side, on tensor cores (F16 matmul precision, Fast math mode,
// head_dim <= 64): dk and dv for BK keys of one key/value head, walking every query head of the
// GQA group (ascending) and the visible queries in tiles of BQT (ascending), so sums are
// deterministic. Same arithmetic as attention_fast_bwd_dkv.comp, in mixed precision: q, k, v and
// do rounded to f16; s = q.k and dp = do.v accumulated in f32 by f16 fragments;
// p = exp(score(s) - lse) and ds = p (dp - delta) d(score)/d(dot) in f32; p and ds rounded to f16
// for dv += p^T do and dk += ds^T q (f32 accumulators); the scale applied to dk at the end.
//
// With FLAG_HEAD_PARTIALS (GQA; the host's choice) a workgroup takes one query head of the group
// instead (grid y: query heads) and writes that head's contributions to dk and dv as partials,
// [B, Tk, Hq, D], which attention_fast_bwd_dkv_group_sum.comp adds over the group in head order:
// `group` times the workgroups, each `group` times shorter. With few key/value heads (3 in a 135M
// Llama) the grid of one workgroup per key/value head fills less than one wave of the GPU, and
// under a causal mask the workgroups of the first key blocks run long after the others are done.
//
// Where the host passes a ds buffer (f16 ds^T, [B, Hq, Tk, Tq]), every ds the kernel forms on a
// tile its subgroup sees is also stored there, rounded as for dk's product, for
// flash_attn_dq_ds.comp, which then forms dq without recomputing q.k and do.v (hidden pairs and
// padding keys as the zeros used here; pairs of tiles a subgroup skips are not written). Whole
// 16 x 16 blocks with aligned rows go out as fragment stores, the rest component by component.
//
// A workgroup of NUM_SG subgroups takes BK = NUM_SG * 16 keys; each subgroup holds its 16 keys'
// k and v as f16 fragments and dk, dv as f32 accumulators in registers, and computes the
// transposed products s^T = k q^T and dp^T = v do^T, so that p^T and ds^T are ready as left
// operands. Queries (q and do) are staged per tile as f16 rows in shared memory from f16 copies
// the host makes (stage_tile), with their rows' logsumexp and delta. Masks and the softmax
// gradient run on the accumulators' components, whose rows (keys) and columns (queries) come from
// the lane or the index matrix (flash_frag.glsl's COMP_ROW). A subgroup whose keys no query of
// the tile sees skips it.
//
// Shared memory (uvec4 units): [0, QV) q tile, [QV, 2 QV) do tile; the k and v staging and the
// index matrix alias them at the start (the emulated build adds per-subgroup conversion scratch
// and keeps k and v after the tiles). The host mirrors BK (src/ops/attention_coopmat.cpp).
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
#define NUM_SG 2  // with k and v kept in shared memory, 4 would pass 32 KiB (flash_frag.glsl)
#else
#define NUM_SG 4
#endif
#define LOCAL_SIZE (NUM_SG * 32)
#define BK (NUM_SG * 16)  // keys per workgroup, 16 per subgroup
#define BQT 32            // queries per tile
#define QT (BQT / 16)
#define DF (DMAX / 16)
#define PITCH (DMAX + 8)  // halves per staged row (16 bytes of padding spread the banks)
#define QV (BQT * PITCH / 8)
#define KV_VEC (BK * PITCH / 8)
#if VKF_EMULATE_COOPMAT
// Per subgroup: the f16 p^T and ds^T of a tile, 16 rows of BQT halves each (TO_H's scratch);
// then k and v, which emulated fragments refer to.
#define CONV_VEC (2 * 16 * BQT / 8)
#define K_OFF (2 * QV + NUM_SG * CONV_VEC)
#define V_OFF (K_OFF + KV_VEC)
#define SMEM_VEC (V_OFF + KV_VEC)
#else
// k's and v's fragments live in registers: their staging aliases the tiles.
#define CONV_VEC 0
#define K_OFF 0
#define V_OFF 0
#define SMEM_VEC (2 * QV > KV_VEC ? 2 * QV : KV_VEC)
#endif
layout(local_size_x = LOCAL_SIZE) in;
// The accumulators have the quad layout: components' rows and columns from the lane (COMP_ROW).
layout(constant_id = 0) const bool QUAD_LAYOUT = false;

shared uvec4 smem[SMEM_VEC];
shared float sLse[BQT];
shared float sDelta[BQT];
shared uint sKeyOk[BK];  // key exists and is not padding

#define TILE_ROWS BQT  // stage_tile's tiles
#include "flash_frag.glsl"

layout(push_constant, std430) uniform Push {
  uint64_t q;    // f16 copy (stage_tile) [B, Tq, Hq, D]
  F32Buf k;      // [B, Tk, Hkv, D]
  F32Buf v;      // [B, Tk, Hkv, D]
  I32Buf mask;   // [B, Tk], read when flags has FLAG_MASK
  uint64_t dout;  // f16 copy [B, Tq, Hq, D]
  F32Buf lse;    // [B, Hq, Tq]
  F32Buf delta;  // [B, Hq, Tq]
  F32Buf dk;     // [B, Tk, Hkv, D], or [B, Tk, Hq, D] partials (FLAG_HEAD_PARTIALS)
  F32Buf dv;     // [B, Tk, Hkv, D], or [B, Tk, Hq, D] partials
  uint64_t ds;   // 0, or f16 ds^T [B, Hq, Tk, Tq] for flash_attn_dq_ds.comp (see below)
  AttnParams a;
  uint flags;
} p;

// The logsumexp and delta of query i0 + r of batch entry b, head h into sLse[r] and sDelta[r],
// r < BQT (zeros from `rows` on): one query per invocation (BQT <= LOCAL_SIZE), with the tile.
void stage_row_stats(uint b, uint h, uint i0, uint rows) {
  const uint r = gl_LocalInvocationIndex;
  if (r >= BQT) return;
  const uint row = (b * p.a.hq + h) * p.a.tq + i0 + r;
  sLse[r] = r < rows ? p.lse.v[row] : 0.0;
  sDelta[r] = r < rows ? p.delta.v[row] : 0.0;
}

// Bit of flags beyond FLAG_VEC4: the grid's y is a query head, dk / dv are per-head partials.
const uint FLAG_HEAD_PARTIALS = 8u;
#if !VKF_EMULATE_COOPMAT
// The stored ds^T as 8-half units, for whole-fragment stores.
layout(buffer_reference, std430, buffer_reference_align = 16) buffer DsRows { uvec4 v[]; };
#endif

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint sg = SUBGROUP_ID;
  // Grid (heads, batch, blocks): under a causal mask the first key block is seen by the most
  // queries, so it starts first (block_grid in ops/attention.cpp).
  const uint k0 = gl_WorkGroupID.z * BK;
  const uint b = gl_WorkGroupID.y;
  const uint D = p.a.d;
  const uint group = p.a.hq / p.a.hkv;
  const bool per_head = (p.flags & FLAG_HEAD_PARTIALS) != 0u;
  const uint hk = per_head ? gl_WorkGroupID.x / group : gl_WorkGroupID.x;
  // The query heads this workgroup walks, [h_first, h_end), and the output row's head.
  const uint h_first = per_head ? gl_WorkGroupID.x : hk * group;
  const uint h_end = per_head ? h_first + 1u : h_first + group;
  const uint out_heads = per_head ? p.a.hq : p.a.hkv, out_head = per_head ? h_first : hk;
  const uint k_rows = min(uint(BK), p.a.tk - k0);
  const bool vec4_ok = (p.flags & FLAG_VEC4) != 0u;
  const bool tiles_vec8 = (p.flags & FLAG_TILES_VEC8) != 0u;
  const uint kv_base = ((b * p.a.tk + k0) * p.a.hkv + hk) * D;

  if (!QUAD_LAYOUT) write_index_matrix(0u);
  barrier();
  FRAG_F row_of, col_of;  // row and column of each accumulator component
  if (!QUAD_LAYOUT) {
    LOAD_F(row_of, 0u, 4u, false);
    LOAD_F(col_of, 0u, 4u, true);
  }
  barrier();
  stage_rows_f16(uint64_t(p.k), vec4_ok, kv_base, p.a.hkv * D, k_rows, D, K_OFF, BK);
  for (uint c = tid; c < BK; c += LOCAL_SIZE) {
    bool ok = c < k_rows;
    if (ok && (p.flags & FLAG_MASK) != 0u) ok = p.mask.v[b * p.a.tk + k0 + c] != 0;
    sKeyOk[c] = ok ? 1u : 0u;
  }
  barrier();
  FRAG_H ka[DF], va[DF];
  UNROLL for (uint f = 0; f < DF; ++f)
    LOAD_H(ka[f], K_OFF + (sg * 16u * PITCH + f * 16u) / 8u, PITCH / 8u, false);
  barrier();
  stage_rows_f16(uint64_t(p.v), vec4_ok, kv_base, p.a.hkv * D, k_rows, D, V_OFF, BK);
  barrier();
  UNROLL for (uint f = 0; f < DF; ++f)
    LOAD_H(va[f], V_OFF + (sg * 16u * PITCH + f * 16u) / 8u, PITCH / 8u, false);
  FRAG_F acc_k[DF], acc_v[DF];
  UNROLL for (uint f = 0; f < DF; ++f) acc_k[f] = acc_v[f] = FRAG_F_ZERO;

  // Queries that may see a key of the workgroup.
  int i_lo = 0, i_hi = int(p.a.tq);
  if (p.a.causal != 0) i_lo = max(i_lo, int(k0) - p.a.q_offset);
  if (p.a.window != 0) i_hi = min(i_hi, int(k0 + k_rows) - 1 + int(p.a.window) - p.a.q_offset);
  const uint sg_key0 = sg * 16u;
  const int sg_keys = clamp(int(k_rows) - int(sg_key0), 0, 16);
  const int sg_k_first = int(k0 + sg_key0);
  const uint conv = 2 * QV + sg * CONV_VEC;

  // Query tiles run through the heads of the group, each over [i_lo, i_hi).
  for (uint h = h_first; h < h_end; ++h) {
    const uint ds_key0 = (b * p.a.hq + h) * p.a.tk + k0;  // ds^T row of the block's first key
    for (int i0 = i_lo; i0 < i_hi; i0 += BQT) {
      barrier();  // the previous tile (and, the first time, the v staging) is consumed
      const uint q_rows = min(uint(BQT), p.a.tq - uint(i0));
      const uint q_base = ((b * p.a.tq + uint(i0)) * p.a.hq + h) * D;
      stage_tile(uint64_t(p.q), tiles_vec8, q_base, p.a.hq * D, q_rows, D, 0u);
      stage_tile(uint64_t(p.dout), tiles_vec8, q_base, p.a.hq * D, q_rows, D, QV);
      stage_row_stats(b, h, uint(i0), q_rows);
      barrier();
      const int pos_first = i0 + p.a.q_offset;
      const bool sees_tile = sg_keys > 0 && block_visible(p.a, pos_first, pos_first + int(q_rows) - 1,
                                                          sg_k_first, sg_k_first + sg_keys - 1);
      // Every query of the tile sees every key of the subgroup (away from the causal diagonal and
      // a window's edge, no padding, a whole tile): the common case skips the per-score tests.
      const bool tile_full = q_rows == uint(BQT) && (p.flags & FLAG_MASK) == 0u && sg_keys == 16 &&
                             block_fully_visible(p.a, pos_first, pos_first + BQT - 1, sg_k_first,
                                                 sg_k_first + 15);

      FRAG_H p_h[QT], ds_h[QT];
#if VKF_EMULATE_COOPMAT
      const bool ds_whole = false;
#else
      // The subgroup's 16 keys and the tile's queries all exist and the rows are 16-byte
      // aligned: each 16 x 16 block of ds^T goes out as one f16 fragment store (rounded as the
      // stores of single components are, to nearest even), else component by component.
      const bool ds_whole = p.ds != 0ul && sg_keys == 16 && q_rows == uint(BQT) &&
                            (p.flags & FLAG_DS_VEC8) != 0u && i0 % 8 == 0;
#endif
      UNROLL for (uint qt = 0; qt < QT; ++qt) {
        FRAG_F st = FRAG_F_ZERO, dpt = FRAG_F_ZERO;  // s^T and dp^T: (key, query)
        if (sees_tile) {
          UNROLL for (uint f = 0; f < DF; ++f) {
            FRAG_H qb, ob;  // q^T and do^T: (d, query) at query * PITCH + d
            LOAD_H(qb, (qt * 16u * PITCH + f * 16u) / 8u, PITCH / 8u, true);
            LOAD_H(ob, QV + (qt * 16u * PITCH + f * 16u) / 8u, PITCH / 8u, true);
            st = MMA(ka[f], qb, st);
            dpt = MMA(va[f], ob, dpt);
          }
          UNROLL for (int t = 0; t < FRAG_LEN(st); ++t) {
            const uint kr = sg_key0 + COMP_ROW(QUAD_LAYOUT, row_of, t);
            const uint qr = qt * 16u + COMP_COL(QUAD_LAYOUT, col_of, t);
            float pr = 0.0, g = 0.0;
            if (tile_full || (qr < q_rows && sKeyOk[kr] != 0u &&
                              position_visible(p.a, pos_first + int(qr), int(k0 + kr)))) {
              const float x = COMP(st, t);
              pr = exp(transform_score(p.a, x) - sLse[qr]);
              g = pr * (COMP(dpt, t) - sDelta[qr]) * softcap_grad(p.a, x);
            }
            COMP(st, t) = pr;
            COMP(dpt, t) = g;
            if (p.ds != 0ul && !ds_whole && kr < k_rows && qr < q_rows)
              U16Buf(p.ds).v[(ds_key0 + kr) * p.a.tq + uint(i0) + qr] =
                  uint16_t(pack2(g, 0.0) & 0xffffu);
          }
        }
        TO_H(p_h[qt], st, sees_tile, conv + qt * 2u, BQT / 8u);
        TO_H(ds_h[qt], dpt, sees_tile, conv + CONV_VEC / 2u + qt * 2u, BQT / 8u);
#if !VKF_EMULATE_COOPMAT
        if (ds_whole && sees_tile)
          coopMatStoreNV(ds_h[qt], DsRows(p.ds).v,
                         ((ds_key0 + sg_key0) * p.a.tq + uint(i0) + qt * 16u) / 8u, p.a.tq / 8u,
                         false);
#endif
      }
      EMU_SYNC();
      if (sees_tile) {
        UNROLL for (uint qt = 0; qt < QT; ++qt)
          UNROLL for (uint f = 0; f < DF; ++f) {
            FRAG_H qb, ob;  // q and do: (query, d) at query * PITCH + d
            LOAD_H(ob, QV + (qt * 16u * PITCH + f * 16u) / 8u, PITCH / 8u, false);
            LOAD_H(qb, (qt * 16u * PITCH + f * 16u) / 8u, PITCH / 8u, false);
            acc_v[f] = MMA(p_h[qt], ob, acc_v[f]);
            acc_k[f] = MMA(ds_h[qt], qb, acc_k[f]);
          }
      }
    }
  }

  UNROLL for (int t = 0; t < FRAG_LEN(row_of); ++t) {
    const uint kr = sg_key0 + COMP_ROW(QUAD_LAYOUT, row_of, t);
    if (kr >= k_rows) continue;
    const uint row = ((b * p.a.tk + k0 + kr) * out_heads + out_head) * D;
    UNROLL for (uint f = 0; f < DF; ++f) {
      const uint d = f * 16u + COMP_COL(QUAD_LAYOUT, col_of, t);
      if (d < D) {
        p.dk.v[row + d] = COMP(acc_k[f], t) * p.a.scale;
        p.dv.v[row + d] = COMP(acc_v[f], t);
      }
    }
  }
}
