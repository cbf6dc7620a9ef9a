// Fragment operations and operand staging shared by the tensor-core attention kernels
// (flash_attn_fwd.comp, flash_attn_dq.comp, flash_attn_dkv.comp): 16 x 16 f16 operand fragments
// and 16 x 16 f32 accumulators of VK_NV_cooperative_matrix on subgroups of 32 invocations,
// loaded from and stored to the includer's `shared uvec4 smem[]` (offsets and strides in uvec4
// units, as coopMatLoadNV takes them for that array), and the f32 -> f16 rounding of everything
// the fragments multiply.
//
// Beyond load, store, multiply-add and fill, the kernels read and write the components of
// accumulators. Which element of a fragment each component holds is up to the implementation,
// but it is fixed per fragment type (component-wise arithmetic between fragments depends on it),
// so loading a 16 x 16 matrix whose element (r, c) is r -- row-major for rows, column-major for
// columns -- tells every invocation the row and column of each of its components. Per-row
// rescaling, masking and the softmax gradient then run on registers. An f32 accumulator becomes an
// f16 operand through the conversion constructor (TO_H).
//
// Rounding to f16 is that of the tensor-core GEMM (matmul_coopmat.comp): by default the integer
// f16_bits / round_to_f16 of f16_round.glsl; the `hwcvt` builds (VKF_HW_CONVERT) convert with the
// hardware and declare round-to-nearest-even and preserved subnormals for 16-bit floats, used only
// where the device guarantees both. In the default build TO_H rounds each component exactly and
// then converts, which is exact for f16 normals; an f16 subnormal (magnitude below 2^-14) may be
// flushed to zero by a device that does not preserve them -- such devices never run the hwcvt
// build, and the difference is below 2^-14 times the operand it multiplies.
//
// The emulated builds (VKF_EMULATE_COOPMAT) replace the fragment operations with plain code on the
// same shared-memory layout, each 32-invocation group of the workgroup standing in for a subgroup,
// so that every other part of the kernels runs on devices without tensor cores (lavapipe in CI).
// Emulated, a loaded f16 operand is a reference to where it lies in shared memory (copies of whole
// fragments in every invocation take lavapipe minutes to compile), so the kernels keep operands
// that real subgroups hold in registers for the whole kernel in shared memory of their own there,
// and run 2 subgroups per workgroup instead of 4 to stay within lavapipe's 32 KiB. An accumulator
// holds, in component t, the element the tensor cores' layout puts there (ops/coopmat_layout.h):
// row lane / 4 + 8 (t / 4), column 2 (lane % 4) + t % 2 + 8 ((t / 2) % 2). TO_H(dst, src, cond,
// element, stride) converts where `cond` holds; emulated, it writes the f16 matrix at `element`
// (16 rows, `stride` uvec4 apart: scratch the kernel reserves per subgroup) and makes dst refer
// to it, and the kernel calls EMU_SYNC() -- a workgroup barrier there, nothing on real subgroups
// -- between the conversions and the first use of their results, in control flow uniform across
// the workgroup.
//
// The includer defines DMAX (padded head dim), PITCH (halves per staged row), LOCAL_SIZE and
// declares smem before including this file.

#if !VKF_EMULATE_COOPMAT
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#if VKF_HW_CONVERT
#extension GL_EXT_spirv_intrinsics : require
spirv_execution_mode(capabilities = [4467], 4462, 16);  // RoundingModeRTE, 16-bit floats
spirv_execution_mode(capabilities = [4464], 4459, 16);  // DenormPreserve, 16-bit floats
#endif
#include "f16_round.glsl"

// Loops over fragments are unrolled on real subgroups (arrays of fragments must live in
// registers); the emulation keeps them rolled, which lavapipe compiles far faster. That includes
// the loops over an accumulator's components (bounded by FRAG_LEN, which is not a constant in
// SPIR-V): left rolled, NVIDIA's compiler indexed the fragments through local memory (288 bytes
// per invocation in the forward kernel) and the forward ran at half speed (H200, bench/RESULTS.md).
#if VKF_EMULATE_COOPMAT
#define UNROLL [[dont_unroll]]
#else
#define UNROLL [[unroll]]
#endif

// Two f32 values as two f16 in one word, the first in the low half.
uint pack2(float x, float y) {
#if VKF_HW_CONVERT
  return packFloat2x16(f16vec2(x, y));
#else
  return f16_bits(x) | (f16_bits(y) << 16);
#endif
}

#if !VKF_EMULATE_COOPMAT
#define FRAG_H fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define FRAG_F fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define FRAG_F_ZERO FRAG_F(0.0)
#define FRAG_LEN(f) (f).length()
#define COMP(f, t) (f)[t]
#define SUBGROUP_ID gl_SubgroupID
#define LANE gl_SubgroupInvocationID
#define LOAD_H(frag, element, stride, col_major) coopMatLoadNV(frag, smem, element, stride, col_major)
#define LOAD_F(frag, element, stride, col_major) coopMatLoadNV(frag, smem, element, stride, col_major)
#define STORE_F(frag, element, stride) coopMatStoreNV(frag, smem, element, stride, false)
#define MMA(a, b, c) coopMatMulAddNV(a, b, c)
#define SG_SYNC()                  \
  {                                \
    subgroupMemoryBarrierShared(); \
    subgroupBarrier();             \
  }
#define EMU_SYNC()
#if VKF_HW_CONVERT
#define TO_H(dst, src, cond, element, stride) \
  if (cond) dst = FRAG_H(src)
#else
#define TO_H(dst, src, cond, element, stride)                                          \
  if (cond) {                                                                          \
    FRAG_F rounded_ = src;                                                             \
    UNROLL for (int t_ = 0; t_ < rounded_.length(); ++t_)                              \
      rounded_[t_] = round_to_f16(rounded_[t_]);                                       \
    dst = FRAG_H(rounded_);                                                            \
  }
#endif

#else  // VKF_EMULATE_COOPMAT

struct FragH {  // an f16 operand: where it lies in smem, as coopMatLoadNV would read it
  uint element, stride;
  bool col_major;
};
struct FragF {  // an f32 accumulator: 8 components per invocation
  float v[8];
};
#define FRAG_H FragH
#define FRAG_F FragF
#define FRAG_F_ZERO FragF(float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
#define FRAG_LEN(f) 8
#define COMP(f, t) (f).v[t]
#define SUBGROUP_ID (gl_LocalInvocationIndex / 32u)
#define LANE (gl_LocalInvocationIndex % 32u)
#define LOAD_H(frag, element_, stride_, col_major_) frag = FragH(element_, stride_, col_major_)
#define LOAD_F(frag, element_, stride_, col_major_) frag = emu_load_f(element_, stride_, col_major_)
#define STORE_F(frag, element_, stride_) emu_store_f(frag, element_, stride_)
#define MMA(a, b, c) emu_mma(a, b, c)
#define SG_SYNC() barrier()
#define EMU_SYNC() barrier()
#define TO_H(dst, src, cond, element_, stride_)     \
  {                                                 \
    if (cond) emu_store_h(src, element_, stride_);  \
    dst = FragH(element_, stride_, false);          \
  }
#endif  // VKF_EMULATE_COOPMAT

// Row and column, within its 16 x 16 fragment, of accumulator component t of this invocation in
// the quad layout (the tensor cores' 16x8-tile layout, ops/coopmat_layout.h; the emulation's by
// construction): row lane / 4 + 8 (t / 4), column 2 (lane % 4) + t % 2 + 8 ((t / 2) % 2).
uint quad_row(uint t) {
  return (LANE >> 2) + 8u * (t >> 2);
}
uint quad_col(uint t) {
  return 2u * (LANE & 3u) + (t & 1u) + 8u * ((t >> 1) & 1u);
}

#if VKF_EMULATE_COOPMAT
// Row-major element of component t of this invocation.
uint emu_element(uint t) {
  return 16u * quad_row(t) + quad_col(t);
}

// Element (r, c) of an f16 operand, as coopMatLoadNV reads it: half element * 8 + r * stride * 8
// + c, or + c * stride * 8 + r when column-major.
float emu_at(FragH f, uint r, uint c) {
  const uint h = f.element * 8u + (f.col_major ? c * f.stride * 8u + r : r * f.stride * 8u + c);
  return f16_bits_to_float((smem[h / 8u][(h % 8u) / 2u] >> (16u * (h % 2u))) & 0xffffu);
}

// The 16-term loops below are unrolled: lavapipe (llvmpipe) ends every loop of an invocation once
// the invocation has run 65535 loop iterations in all (a guard against endless loops), which the
// kernels' tile loops would reach after a few hundred keys with 8 x 16 rolled multiply-adds per
// fragment. Unrolled, a workgroup can walk about 150 tiles; unrolling everything would make
// lavapipe's compile take half a minute.
FragF emu_mma(FragH a, FragH b, FragF acc) {
  [[dont_unroll]] for (uint t = 0; t < 8u; ++t) {
    const uint e = emu_element(t), r = e / 16u, c = e % 16u;
    float sum = acc.v[t];
    [[unroll]] for (uint k = 0; k < 16u; ++k) sum += emu_at(a, r, k) * emu_at(b, k, c);
    acc.v[t] = sum;
  }
  return acc;
}

// Word (32-bit) index of f32 element (r, c) of a matrix at `element`, `stride` uvec4 per line.
uint emu_word(uint element, uint stride, bool col_major, uint r, uint c) {
  return element * 4u + (col_major ? c * stride * 4u + r : r * stride * 4u + c);
}

FragF emu_load_f(uint element, uint stride, bool col_major) {
  FragF f;
  [[unroll]] for (uint t = 0; t < 8u; ++t) {
    const uint e = emu_element(t), w = emu_word(element, stride, col_major, e / 16u, e % 16u);
    f.v[t] = uintBitsToFloat(smem[w / 4u][w % 4u]);
  }
  return f;
}

void emu_store_f(FragF f, uint element, uint stride) {
  [[unroll]] for (uint t = 0; t < 8u; ++t) {
    const uint e = emu_element(t), w = emu_word(element, stride, false, e / 16u, e % 16u);
    smem[w / 4u][w % 4u] = floatBitsToUint(f.v[t]);
  }
}

// The fragment rounded to f16, row-major at `element` with `stride` uvec4 (8 halves) per row;
// components 2s and 2s + 1 are adjacent elements, one word.
void emu_store_h(FragF f, uint element, uint stride) {
  [[unroll]] for (uint t = 0; t < 8u; t += 2u) {
    const uint e = emu_element(t), r = e / 16u, c = e % 16u;
    const uint w = element * 4u + r * stride * 4u + c / 2u;
    smem[w / 4u][w % 4u] = pack2(f.v[t], f.v[t + 1u]);
  }
}
#endif  // VKF_EMULATE_COOPMAT

// Bit of each kernel's `flags` beyond attention_common.glsl's (kFlagVec4 in
// src/ops/attention_coopmat.cpp): q, k, v and dout start 16-byte aligned and D is a multiple of 4,
// so rows may be read as vec4.
const uint FLAG_VEC4 = 4u;
// And (kFastFlagDsVec4 on the host): Tq is a multiple of 8, so rows of the stored f16 score
// gradients ds^T ([B, Hq, Tk, Tq], written by flash_attn_dkv, read by flash_attn_dq_ds) start
// 16-byte aligned wherever a chunk of 8 queries does.
const uint FLAG_DS_VEC8 = 32u;

// Elements d..d+7 of the f32 row at addr[at - d ..] (zeros from D on): two 16-byte reads where
// vec4_ok and the chunk lies whole inside the row, else eight scalar reads.
void read_chunk8(uint64_t addr, bool vec4_ok, uint at, uint d, uint D, out vec4 lo, out vec4 hi) {
  if (vec4_ok && d + 8u <= D) {
    lo = Vec4Buf(addr).v[at / 4u];
    hi = Vec4Buf(addr).v[at / 4u + 1u];
    return;
  }
  float x[8];
  [[unroll]] for (uint e = 0; e < 8u; ++e) x[e] = d + e < D ? F32Buf(addr).v[at + e] : 0.0;
  lo = vec4(x[0], x[1], x[2], x[3]);
  hi = vec4(x[4], x[5], x[6], x[7]);
}

// Eight values as f16, the first in the low bits of x (their order in shared memory).
uvec4 pack8(vec4 lo, vec4 hi) {
  return uvec4(pack2(lo.x, lo.y), pack2(lo.z, lo.w), pack2(hi.x, hi.y), pack2(hi.z, hi.w));
}

// Stages `nrows` rows of DMAX halves, PITCH halves apart, at smem `element`: row r holds
// elements [0, D) of row r of an f32 operand (at base + r * ld of the buffer at addr) rounded to
// f16, for r < rows; everything else is zero. One uvec4 (8 halves) per invocation per step.
void stage_rows_f16(uint64_t addr, bool vec4_ok, uint base, uint ld, uint rows, uint D,
                    uint element, uint nrows) {
  for (uint chunk = gl_LocalInvocationIndex; chunk < nrows * (DMAX / 8u); chunk += LOCAL_SIZE) {
    const uint r = chunk / (DMAX / 8u), d = (chunk % (DMAX / 8u)) * 8u;
    vec4 lo = vec4(0.0), hi = vec4(0.0);
    if (r < rows) read_chunk8(addr, vec4_ok, base + r * ld + d, d, D, lo, hi);
    smem[element + (r * PITCH + d) / 8u] = pack8(lo, hi);
  }
}

#ifdef TILE_ROWS
// Bit of the kernels' `flags` (kFlashFlagTilesVec8 on the host): the f16 copies stage_tile reads
// start 16-byte aligned and D is a multiple of 8, so each 8-element chunk is one 16-byte read.
const uint FLAG_TILES_VEC8 = 16u;

layout(buffer_reference, std430, buffer_reference_align = 16) buffer TileVec8Buf { uvec4 v[]; };

// The operands a kernel stages tile by tile (TILE_ROWS rows of keys, or of queries) are read from
// f16 copies that the host makes once per call (Tensor::to, which rounds as pack2 does), not from
// the f32 tensors: every workgroup of a head stages the same rows, so converting once halves the
// bytes each workgroup reads and leaves the tile loop no conversion to do. TILE_CHUNKS: 8-element
// chunks (one uvec4 of halves) of a tile per invocation.
#define TILE_CHUNKS ((TILE_ROWS * (DMAX / 8u) + LOCAL_SIZE - 1u) / LOCAL_SIZE)

// Halves d..d+7 of the f16 row at addr[at - d ..] (zeros from D on), the first in the low bits:
// one 16-byte read where vec8_ok and the chunk lies whole inside the row, else eight 16-bit reads.
uvec4 read_chunk8_f16(uint64_t addr, bool vec8_ok, uint at, uint d, uint D) {
  if (vec8_ok && d + 8u <= D) return TileVec8Buf(addr).v[at / 8u];
  uint x[8];
  [[unroll]] for (uint e = 0; e < 8u; ++e) x[e] = d + e < D ? uint(U16Buf(addr).v[at + e]) : 0u;
  return uvec4(x[0] | (x[1] << 16), x[2] | (x[3] << 16), x[4] | (x[5] << 16), x[6] | (x[7] << 16));
}

// Staging a tile: rows 0..rows-1 of the f16 copy at addr (row r at half base + r * ld, D
// elements) as f16 rows PITCH halves apart at smem `element`, zeros past D and past `rows`. The
// whole workgroup takes part. fetch_tile reads this invocation's chunks into registers and
// store_tile writes them to shared memory; stage_tile does both, each invocation issuing all its
// reads before its stores. The dq and dk/dv loops stage each tile after the barrier that frees the
// previous one and wait for it: holding the next tiles in registers through the current one's
// work (the kernels' earlier prefetch) took 13-46 registers per invocation, which cost a workgroup
// per multiprocessor, and that cost more time than the hidden load latency saved (H200,
// seventeenth session). The forward fetches early but holds one operand's TILE_CHUNKS at a time,
// which keeps its workgroups per multiprocessor (H100, thirty-fourth session; bench/RESULTS.md).
void fetch_tile(uint64_t addr, bool vec8_ok, uint base, uint ld, uint rows, uint D,
                out uvec4 h[TILE_CHUNKS]) {
  UNROLL for (uint l = 0; l < TILE_CHUNKS; ++l) {
    const uint chunk = l * LOCAL_SIZE + gl_LocalInvocationIndex;
    const uint r = chunk / (DMAX / 8u), d = (chunk % (DMAX / 8u)) * 8u;
    h[l] = uvec4(0);
    if (chunk < TILE_ROWS * (DMAX / 8u) && r < rows)
      h[l] = read_chunk8_f16(addr, vec8_ok, base + r * ld + d, d, D);
  }
}

void store_tile(uvec4 h[TILE_CHUNKS], uint element) {
  UNROLL for (uint l = 0; l < TILE_CHUNKS; ++l) {
    const uint chunk = l * LOCAL_SIZE + gl_LocalInvocationIndex;
    const uint r = chunk / (DMAX / 8u), d = (chunk % (DMAX / 8u)) * 8u;
    if (chunk < TILE_ROWS * (DMAX / 8u)) smem[element + (r * PITCH + d) / 8u] = h[l];
  }
}

void stage_tile(uint64_t addr, bool vec8_ok, uint base, uint ld, uint rows, uint D, uint element) {
  uvec4 h[TILE_CHUNKS];
  fetch_tile(addr, vec8_ok, base, ld, rows, D, h);
  store_tile(h, element);
}
#endif

// Row and column, within its 16 x 16 fragment, of accumulator component t of this invocation.
// Where the accumulators have the quad layout (`quad`: the kernels' QUAD_LAYOUT constant, set by
// the host where its probe found that layout, and always in the emulation) they follow from the
// lane (quad_row, quad_col), and the index matrices below are neither written nor loaded, which
// saves the 16 registers per invocation they take. Elsewhere they are read from those matrices.
#define COMP_ROW(quad, row_of, t) ((quad) ? quad_row(uint(t)) : uint(COMP(row_of, t)))
#define COMP_COL(quad, col_of, t) ((quad) ? quad_col(uint(t)) : uint(COMP(col_of, t)))

// Writes the 16 x 16 matrix whose element (r, c) is r (as f32) at smem `element` (rows 4 uvec4
// apart). Loaded row-major it gives each component's row, column-major its column.
void write_index_matrix(uint element) {
  for (uint e = gl_LocalInvocationIndex; e < 256u; e += LOCAL_SIZE)
    smem[element + e / 4u][e % 4u] = floatBitsToUint(float(e / 16u));
}

// d(score)/d(dot) without the scale: the soft-cap's 1 - tanh^2 (1 without soft-capping). The
// kernels apply the scale to the accumulated gradients, so that the f16 ds keeps its magnitude.
float softcap_grad(AttnParams a, float dot) {
  if (a.softcap <= 0.0) return 1.0;
  const float t = vtanh(dot * a.scale / a.softcap);
  return 1.0 - t * t;
}

// Whether some key in [j_first, j_last] is visible from some query position in
// [pos_first, pos_last] under the causal and window rules (padding aside): the set of keys
// visible from the positions is [pos_first - window + 1, pos_last] (unbounded where a rule is off).
bool block_visible(AttnParams a, int pos_first, int pos_last, int j_first, int j_last) {
  if (a.causal != 0 && j_first > pos_last) return false;
  if (a.window != 0 && j_last < pos_first - int(a.window) + 1) return false;
  return true;
}

// Whether every key in [j_first, j_last] is visible from every query position in
// [pos_first, pos_last] under the causal and window rules (padding aside): the earliest position
// sees the last key, and the latest the first. Tiles for which it holds skip the per-score tests.
bool block_fully_visible(AttnParams a, int pos_first, int pos_last, int j_first, int j_last) {
  return position_visible(a, pos_first, j_last) && position_visible(a, pos_last, j_first);
}
