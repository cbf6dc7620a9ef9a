// Mixed-precision GEMM on tensor cores (VK_NV_cooperative_matrix): the F16 path of
// ops::detail::gemm() on devices with f16 x f16 -> f32 cooperative matrices. Same problem and push
// constants as matmul_tiled (matmul_push.glsl). Each operand is f32 in memory, rounded to f16 as it
// is staged, or already f16 (F16_A / F16_B: copied as stored, half the bytes and no conversion;
// the host converts large f32 operands once per product this way); products are accumulated in
// f32 and the epilogue (alpha, beta, bias, any C strides) runs in f32.
//
// A workgroup of NUM_SG subgroups (32 invocations each) computes a BM x BN tile of C; subgroup s
// owns a WM x WN block of it as FM x FN accumulator fragments of MMA_M x MMA_N (a shape the device
// lists, chosen on the host). K advances in BK-deep slices: each invocation reads its share of
// the next slice from global memory into registers (two vec4 per 8 contiguous elements where the
// host found them 16-byte aligned, scalars with bounds checks otherwise; out-of-range elements are
// zero), the current slice is multiplied from shared memory, then the registers are converted to
// f16 and written to the other of two shared buffers -- one barrier per slice. Shared slices keep
// each operand's contiguous dimension contiguous ([line][element], lines padded by 8 halves =
// 16 bytes, so the 8 rows of a fragment load fall in distinct banks) and fragments are loaded
// row- or column-major to match. The epilogue passes each row of fragments through shared memory
// (aliasing the staging buffers) so that C may have any strides. Workgroups are rasterized in
// bands of GROUP_M tile rows so that concurrently running tiles share operands in L2. The order
// of every sum is fixed, so results are deterministic.
//
// Conversion to f16: by default exactly as f32_to_f16_bits (integer operations, f16_round.glsl).
// The `hwcvt` build converts with the hardware instead and declares round-to-nearest-even and
// preserved subnormals for 16-bit floats; the host uses it only where the device supports both
// (shaderRoundingModeRTEFloat16, shaderDenormPreserveFloat16).
//
// The `emulated` build replaces the four cooperative-matrix operations with plain code on the
// same shared-memory layout (each 32-invocation group standing in for a subgroup), so that every
// other part of the kernel -- staging, fragment offsets and layouts, epilogue, rasterization --
// runs and is tested on devices without tensor cores (lavapipe in CI). It is slow; tests only.
//
// Grid: x = tiles along N, y = tiles along M, z = batch entries. Local size: NUM_SG * 32 (the host
// requires a subgroup size of 32, except for the emulation).
//!requires GL_NV_cooperative_matrix
//!requires GL_EXT_spirv_intrinsics
//!variant hwcvt -DVKF_HW_CONVERT=1
//!variant emulated -DVKF_EMULATE_COOPMAT=1
#version 460
#extension GL_EXT_control_flow_attributes : require
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
#include "common.glsl"
#include "precise_math.glsl"
#include "f16_round.glsl"

// Loops over fragments and chunks are unrolled (arrays of fragments must live in registers);
// the emulation keeps them rolled, which lavapipe compiles in a fraction of the time.
#if VKF_EMULATE_COOPMAT
#define UNROLL [[dont_unroll]]
#else
#define UNROLL [[unroll]]
#endif

layout(constant_id = 0) const uint MMA_M = 16;  // fragment shape: A is MMA_M x MMA_K,
layout(constant_id = 1) const uint MMA_N = 16;  // B is MMA_K x MMA_N; all multiples of 8
layout(constant_id = 2) const uint MMA_K = 16;
layout(constant_id = 3) const uint BM = 128;  // workgroup tile
layout(constant_id = 4) const uint BN = 128;
layout(constant_id = 5) const uint BK = 32;
layout(constant_id = 6) const uint WM = 64;  // subgroup tile
layout(constant_id = 7) const uint WN = 32;
layout(local_size_x_id = 8) in;  // must equal LOCAL_SIZE below
layout(constant_id = 9) const bool TRANS_A = false;
layout(constant_id = 10) const bool TRANS_B = false;
layout(constant_id = 11) const bool VEC4_A = false;  // A's lines start 16-byte aligned
layout(constant_id = 12) const bool VEC4_B = false;
layout(constant_id = 13) const bool F16_A = false;  // A holds f16 bits (VEC4_A: 16-byte lines)
layout(constant_id = 14) const bool F16_B = false;

const uint SG_COLS = BN / WN;
const uint NUM_SG = (BM / WM) * SG_COLS;
const uint LOCAL_SIZE = NUM_SG * 32u;
const uint FM = WM / MMA_M;  // accumulator fragments per subgroup
const uint FN = WN / MMA_N;
const uint GROUP_M = 8;  // tile rows per rasterization band

// A staged operand is ROWS lines of LEN contiguous elements, PITCH halves apart (shapes in halves):
//   A: [BM m][BK k], or [BK k][BM m] with TRANS_A;  B: [BK k][BN n], or [BN n][BK k] with TRANS_B.
const uint PAD = 8;
const uint A_ROWS = TRANS_A ? BK : BM;
const uint A_LEN = TRANS_A ? BM : BK;
const uint B_ROWS = TRANS_B ? BN : BK;
const uint B_LEN = TRANS_B ? BK : BN;
const uint A_PITCH = A_LEN + PAD;
const uint B_PITCH = B_LEN + PAD;
const uint A_VEC = A_ROWS * A_PITCH / 8;  // uvec4 (8 halves) per staged slice of A
const uint B_VEC = B_ROWS * B_PITCH / 8;
const uint STAGE_VEC = A_VEC + B_VEC;
const uint A_CHUNKS = BM * BK / 8 / LOCAL_SIZE;  // 8-element chunks each invocation stages
const uint B_CHUNKS = BN * BK / 8 / LOCAL_SIZE;
// Epilogue scratch: per subgroup, one row of fragments, MMA_M x WN floats, rows SCRATCH_PITCH
// floats apart.
const uint SCRATCH_PITCH = WN + 4;
const uint SCRATCH_VEC = MMA_M * SCRATCH_PITCH / 4;  // uvec4 per subgroup
const uint SMEM_VEC = 2 * STAGE_VEC > NUM_SG * SCRATCH_VEC ? 2 * STAGE_VEC : NUM_SG * SCRATCH_VEC;

shared uvec4 smem[SMEM_VEC];

#include "matmul_push.glsl"

#if !VKF_EMULATE_COOPMAT
#define FRAG_A fcoopmatNV<16, gl_ScopeSubgroup, MMA_M, MMA_K>
#define FRAG_B fcoopmatNV<16, gl_ScopeSubgroup, MMA_K, MMA_N>
#define FRAG_C fcoopmatNV<32, gl_ScopeSubgroup, MMA_M, MMA_N>
#define FRAG_C_ZERO FRAG_C(0.0)
#define SUBGROUP_ID gl_SubgroupID
#define SUBGROUP_LANE gl_SubgroupInvocationID
#define LOAD_FRAG(frag, element, stride, col_major) \
  coopMatLoadNV(frag, smem, element, stride, col_major)
#define MUL_ADD(a, b, c) coopMatMulAddNV(a, b, c)
#define STORE_FRAG_C(frag, element, stride) coopMatStoreNV(frag, smem, element, stride, false)
#else
// A loaded fragment is where it lies in shared memory (element and stride in uvec4 units, as
// coopMatLoadNV takes them); an accumulator is EPL values per invocation, element
// lane + 32 t (row-major in MMA_M x MMA_N) in v[t].
const uint EPL = MMA_M * MMA_N / 32u;  // at most 8: the host emulates 16 x 16 fragments
struct FragRef {
  uint element, stride;
  bool col_major;
};
struct FragAcc {
  float v[8];
};
#define FRAG_A FragRef
#define FRAG_B FragRef
#define FRAG_C FragAcc
#define FRAG_C_ZERO FragAcc(float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
#define SUBGROUP_ID (gl_LocalInvocationIndex / 32u)
#define SUBGROUP_LANE (gl_LocalInvocationIndex % 32u)
#define LOAD_FRAG(frag, element_, stride_, col_major_) frag = FragRef(element_, stride_, col_major_)
#define MUL_ADD(a, b, c) emulated_mul_add(a, b, c)
#define STORE_FRAG_C(frag, element, stride) emulated_store(frag, element, stride)

// Element (r, c) of a loaded f16 fragment, as coopMatLoadNV reads it: row r starts at
// buf[element + r*stride] (column c at buf[element + c*stride] when column-major).
float frag_at(FragRef f, uint r, uint c) {
  const uint h = f.element * 8u + (f.col_major ? c * f.stride * 8u + r : r * f.stride * 8u + c);
  return f16_bits_to_float((smem[h / 8u][(h % 8u) / 2u] >> (16u * (h % 2u))) & 0xffffu);
}
FragAcc emulated_mul_add(FragRef a, FragRef b, FragAcc acc) {
  // The lane's elements share one column (MMA_N divides 32): decode it once.
  const uint c = SUBGROUP_LANE % MMA_N;
  float column[32];
  [[dont_unroll]] for (uint k = 0; k < MMA_K; ++k) column[k] = frag_at(b, k, c);
  [[dont_unroll]] for (uint t = 0; t < EPL; ++t) {
    const uint r = (SUBGROUP_LANE + 32u * t) / MMA_N;
    float sum = acc.v[t];
    [[dont_unroll]] for (uint k = 0; k < MMA_K; ++k) sum += frag_at(a, r, k) * column[k];
    acc.v[t] = sum;
  }
  return acc;
}
void emulated_store(FragAcc f, uint element, uint stride) {
  [[dont_unroll]] for (uint t = 0; t < EPL; ++t) {
    const uint e = SUBGROUP_LANE + 32u * t, r = e / MMA_N, c = e % MMA_N;
    const uint w = element * 4u + r * stride * 4u + c;
    smem[w / 4u][w % 4u] = floatBitsToUint(f.v[t]);
  }
}
#endif

layout(buffer_reference, std430, buffer_reference_align = 16) buffer Half8Buf { uvec4 v[]; };

// Elements i..i+7 of line o of an operand whose element (o, i) is at buf[base + o*ld + i], for
// lines below o_end and elements below i_end; the rest read as zero.
void load8(uint64_t addr, bool vec4_ok, uint base, uint ld, uint o, uint o_end, uint i,
           uint i_end, out vec4 lo, out vec4 hi) {
  if (vec4_ok && o < o_end && i + 8u <= i_end) {
    const uint q = (base + o * ld + i) / 4u;
    lo = Vec4Buf(addr).v[q];
    hi = Vec4Buf(addr).v[q + 1u];
    return;
  }
  float v[8];
  UNROLL for (uint e = 0; e < 8u; ++e) {
    v[e] = 0.0;
    if (o < o_end && i + e < i_end) v[e] = F32Buf(addr).v[base + o * ld + i + e];
  }
  lo = vec4(v[0], v[1], v[2], v[3]);
  hi = vec4(v[4], v[5], v[6], v[7]);
}

// The same for an operand stored as f16: eight halves, the first in the low bits of x.
uvec4 load8_f16(uint64_t addr, bool vec_ok, uint base, uint ld, uint o, uint o_end, uint i,
                uint i_end) {
  if (vec_ok && o < o_end && i + 8u <= i_end) return Half8Buf(addr).v[(base + o * ld + i) / 8u];
  uint h[8];
  UNROLL for (uint e = 0; e < 8u; ++e) {
    h[e] = 0u;
    if (o < o_end && i + e < i_end) h[e] = uint(U16Buf(addr).v[base + o * ld + i + e]);
  }
  return uvec4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16), h[6] | (h[7] << 16));
}

// Two f32 values as two f16 in one word, the first in the low half (its place in shared memory);
// eight as a uvec4.
uint pack2(float x, float y) {
#if VKF_HW_CONVERT
  return packFloat2x16(f16vec2(x, y));
#else
  return f16_bits(x) | (f16_bits(y) << 16);
#endif
}
uvec4 to_f16x8(vec4 lo, vec4 hi) {
  return uvec4(pack2(lo.x, lo.y), pack2(lo.z, lo.w), pack2(hi.x, hi.y), pack2(hi.z, hi.w));
}

void main() {
  const uint tid = gl_LocalInvocationIndex;
  const uint sg = SUBGROUP_ID;
  const uint lane = SUBGROUP_LANE;

  // Tile of this workgroup: in bands of GROUP_M tile rows (common.glsl).
  const uvec2 tile = banded_tile(GROUP_M);
  const uint m0 = tile.x * BM, n0 = tile.y * BN;
  const uint z = gl_WorkGroupID.z;
  const uint abase = z * p.sa, bbase = z * p.sb;
  const uint64_t a_addr = uint64_t(p.a), b_addr = uint64_t(p.b);

  // The subgroup's block within the tile.
  const uint wm0 = (sg / SG_COLS) * WM;
  const uint wn0 = (sg % SG_COLS) * WN;

  FRAG_C acc[FM][FN];
  UNROLL for (uint i = 0; i < FM; ++i)
    UNROLL for (uint j = 0; j < FN; ++j) acc[i][j] = FRAG_C_ZERO;

  vec4 ra[2 * A_CHUNKS], rb[2 * B_CHUNKS];  // the next slice, as read from f32 memory
  uvec4 ha[A_CHUNKS], hb[B_CHUNKS];          // or from f16 memory (F16_A / F16_B)

// Reads the slice starting at k = k0 into ra / rb. Chunk c of an operand is elements
// 8*(c % (LEN/8)) .. +7 of line c / (LEN/8).
#define FETCH(k0)                                                                           \
  UNROLL for (uint l = 0; l < A_CHUNKS; ++l) {                                              \
    const uint c = l * LOCAL_SIZE + tid;                                                    \
    const uint line = c / (A_LEN / 8u), elem = (c % (A_LEN / 8u)) * 8u;                     \
    const uint ao = TRANS_A ? (k0) + line : m0 + line, ao_end = TRANS_A ? p.K : p.M;         \
    const uint ai = TRANS_A ? m0 + elem : (k0) + elem, ai_end = TRANS_A ? p.M : p.K;         \
    if (F16_A)                                                                              \
      ha[l] = load8_f16(a_addr, VEC4_A, abase, p.lda, ao, ao_end, ai, ai_end);              \
    else                                                                                    \
      load8(a_addr, VEC4_A, abase, p.lda, ao, ao_end, ai, ai_end, ra[2 * l], ra[2 * l + 1]); \
  }                                                                                         \
  UNROLL for (uint l = 0; l < B_CHUNKS; ++l) {                                              \
    const uint c = l * LOCAL_SIZE + tid;                                                    \
    const uint line = c / (B_LEN / 8u), elem = (c % (B_LEN / 8u)) * 8u;                     \
    const uint bo = TRANS_B ? n0 + line : (k0) + line, bo_end = TRANS_B ? p.N : p.K;         \
    const uint bi = TRANS_B ? (k0) + elem : n0 + elem, bi_end = TRANS_B ? p.K : p.N;         \
    if (F16_B)                                                                              \
      hb[l] = load8_f16(b_addr, VEC4_B, bbase, p.ldb, bo, bo_end, bi, bi_end);              \
    else                                                                                    \
      load8(b_addr, VEC4_B, bbase, p.ldb, bo, bo_end, bi, bi_end, rb[2 * l], rb[2 * l + 1]); \
  }

// Converts ra / rb to f16 (or takes ha / hb as they are) and writes them to shared buffer `stage`.
#define STASH(stage)                                                                        \
  UNROLL for (uint l = 0; l < A_CHUNKS; ++l) {                                              \
    const uint c = l * LOCAL_SIZE + tid;                                                    \
    const uint line = c / (A_LEN / 8u), elem = (c % (A_LEN / 8u)) * 8u;                     \
    smem[(stage) * STAGE_VEC + (line * A_PITCH + elem) / 8u] =                              \
        F16_A ? ha[l] : to_f16x8(ra[2 * l], ra[2 * l + 1]);                                 \
  }                                                                                         \
  UNROLL for (uint l = 0; l < B_CHUNKS; ++l) {                                              \
    const uint c = l * LOCAL_SIZE + tid;                                                    \
    const uint line = c / (B_LEN / 8u), elem = (c % (B_LEN / 8u)) * 8u;                     \
    smem[(stage) * STAGE_VEC + A_VEC + (line * B_PITCH + elem) / 8u] =                      \
        F16_B ? hb[l] : to_f16x8(rb[2 * l], rb[2 * l + 1]);                                 \
  }

  const uint slices = (p.K + BK - 1u) / BK;
  FETCH(0u)
  STASH(0u)
  barrier();
  for (uint s = 0; s < slices; ++s) {
    const uint stage = s & 1u;
    const bool more = s + 1u < slices;
    if (more) {
      FETCH((s + 1u) * BK)
    }
    const uint a_stage = stage * STAGE_VEC, b_stage = a_stage + A_VEC;
    UNROLL for (uint kk = 0; kk < BK; kk += MMA_K) {
      FRAG_A fa[FM];
      FRAG_B fb[FN];
      UNROLL for (uint i = 0; i < FM; ++i) {
        const uint r = wm0 + i * MMA_M;  // (r, kk) is at r*A_PITCH + kk, or kk*A_PITCH + r
        LOAD_FRAG(fa[i], a_stage + (TRANS_A ? kk * A_PITCH + r : r * A_PITCH + kk) / 8u,
                  A_PITCH / 8u, TRANS_A);
      }
      UNROLL for (uint j = 0; j < FN; ++j) {
        const uint c = wn0 + j * MMA_N;  // (kk, c) is at kk*B_PITCH + c, or c*B_PITCH + kk
        LOAD_FRAG(fb[j], b_stage + (TRANS_B ? c * B_PITCH + kk : kk * B_PITCH + c) / 8u,
                  B_PITCH / 8u, TRANS_B);
      }
      UNROLL for (uint i = 0; i < FM; ++i)
        UNROLL for (uint j = 0; j < FN; ++j) acc[i][j] = MUL_ADD(fa[i], fb[j], acc[i][j]);
    }
    if (more) {
      STASH(stage ^ 1u)
    }
    barrier();  // the slice just written is complete; the one just read is free
  }

  // Epilogue, one row of fragments at a time: store to this subgroup's scratch (row-major,
  // MMA_M x WN), then each lane finishes elements. Lanes walk C's contiguous dimension.
  const uint scratch = sg * SCRATCH_VEC;
  const bool by_column = p.c_rs == 1u && p.c_cs != 1u;
  UNROLL for (uint i = 0; i < FM; ++i) {
    UNROLL for (uint j = 0; j < FN; ++j)
      STORE_FRAG_C(acc[i][j], scratch + j * MMA_N / 4u, SCRATCH_PITCH / 4u);
    barrier();
    const uint mrow = m0 + wm0 + i * MMA_M, ncol = n0 + wn0;
    for (uint e = lane; e < MMA_M * WN; e += 32u) {
      const uint r = by_column ? e % MMA_M : e / WN;
      const uint col = by_column ? e / MMA_M : e % WN;
      const uint m = mrow + r, n = ncol + col;
      if (m < p.M && n < p.N) {
        const uint w = scratch * 4u + r * SCRATCH_PITCH + col;
        store_output(z, m, n, uintBitsToFloat(smem[w / 4u][w % 4u]));
      }
    }
    barrier();
  }
}
