// Tiled fp32 GEMM, pipelined: the default implementation of the tiled kernel. It computes exactly
// what matmul_tiled.comp computes, bit for bit -- same problem, push constants, grid, tile shapes,
// micro-tiles (4x4 blocks strided by 64, rows 64*g + 4*ty + r, columns 64*h + 4*tx + c) and the
// same multiply-adds, every output one thread's sum over k in increasing order -- and differs only
// in how operand slices reach shared memory and which workgroup takes which tile:
// - Two shared buffers (DOUBLE_BUFFER): the next BK-deep slice is read into registers before the
//   current one is multiplied and written to the other buffer after it, so a slice costs one
//   barrier instead of two.
// - 16-byte global loads (VEC4_A / VEC4_B, set by the host where every line of the operand starts
//   16-byte aligned -- 8-byte for the f16 B of the f16b variant -- and each thread's share of a
//   slice is whole chunks): each thread reads chunks of 4 consecutive elements along the operand's
//   contiguous dimension, fewer load instructions and address computations per slice, and stores
//   a chunk along a shared row as one vec4. A chunk that crosses the edge of the matrix is read
//   element by element with bounds checks, as is every element of an operand that is not aligned
//   (chunks of 1: the thread order of matmul_tiled). Elements outside the matrix are zero, so the
//   k tail adds exact zeros.
// - The 32 invocations of a warp cover a block of 8 x 4 threads of the 16 x 16 grid (WARP_BLOCKS)
//   instead of two rows of 16: a k step reads 4 distinct vec4 of A and 8 of B per warp (each
//   broadcast, free of bank conflicts) instead of 2 and 16, so each of B's reads is one 128-byte
//   wavefront instead of two.
// - Workgroups are rasterized in bands of GROUP_M tile rows (as matmul_coopmat.comp) so that tiles
//   running at the same time share their operands' slices in L2.
// - Unchecked interior loads (INTERIOR_LOADS): a slice of a 16-byte-loaded operand that lies
//   wholly inside the matrix (every slice but the k tail of a tile away from the M / N edges) is
//   read at indices computed once per tile plus one offset per slice, without the per-chunk
//   coordinates, bounds tests and address products of the checked path: integer instructions
//   that take issue slots from the multiply-adds. The same elements are read, so the same sums.
// Each option can be turned off (for A/B timing: ops::detail::set_tiled_variant, VKF_TILED_GEMM).
// With ROUND_F16 every f32 operand element is rounded to f16 as it is loaded (see f16_round.glsl).
// Grid: x = N tiles, y = M tiles (re-mapped by the rasterization), z = batch entries.
//
// With STREAM_K (one product, batch 1; ops/matmul_tiling.h) the grid is instead a line of
// sk_workers workgroups, each a worker that walks tiles by index (stream_k.glsl): whole tiles
// first, stored as above, then its contiguous range of (tile, slice) iterations of the stream-K
// region, where a tile it sums only part of goes to the workspace as a partial tile (fp32, row
// r column c of the tile at r * BN + c) for matmul_streamk_fixup.comp to add up. Every segment
// runs the same slice loop, so each partial is one thread's sum over its slices in increasing k.
//!precise
//!variant f16b -DB_F16=1
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#include "f16_round.glsl"
#define LOCAL_SIZE 256
#define TX 16  // threads along N
#define TY 16  // threads along M
layout(local_size_x = LOCAL_SIZE) in;

// constant_ids 0-5 are those of matmul_tiled.comp.
layout(constant_id = 0) const uint TM = 4;   // micro-tile rows per thread, a multiple of 4
layout(constant_id = 1) const uint TN = 4;   // micro-tile columns per thread, a multiple of 4
layout(constant_id = 2) const uint BK = 16;  // k-depth of a slice, a multiple of 4; BM*BK and
                                             // BN*BK multiples of 256
layout(constant_id = 3) const bool TRANS_A = false;
layout(constant_id = 4) const bool TRANS_B = false;
layout(constant_id = 5) const bool ROUND_F16 = false;  // round each f32 operand element to f16
layout(constant_id = 6) const bool VEC4_A = false;     // A's lines start 16-byte aligned
layout(constant_id = 7) const bool VEC4_B = false;     // B's lines start 16 (f16: 8)-byte aligned
layout(constant_id = 8) const bool DOUBLE_BUFFER = true;
layout(constant_id = 9) const uint GROUP_M = 8;  // tile rows per rasterization band; 1: row-major
layout(constant_id = 10) const bool WARP_BLOCKS = true;
layout(constant_id = 11) const bool STREAM_K = false;
// C's rows are contiguous and start 16-byte aligned, as is the bias (if any): the epilogue stores
// 4 columns at once where they are in range (a warp's store then covers 4 rows of 128 bytes, not
// 32 scattered words per instruction).
layout(constant_id = 12) const bool VEC4_C = false;
layout(constant_id = 13) const bool INTERIOR_LOADS = true;

const uint BM = TY * TM;
const uint BN = TX * TN;
const uint GM = TM / 4;  // 4x4 blocks per thread along M and N
const uint GN = TN / 4;
// Shared slices are k-major, as in matmul_tiled: the row pitch is a multiple of 4 floats (vec4
// reads) and 4 mod 32 words, which spreads the transposing stores over distinct banks.
const uint SA = BM + 4;
const uint SB = BN + 4;
const uint STAGES = DOUBLE_BUFFER ? 2u : 1u;
const uint A_STAGE = BK * SA / 4;  // vec4 per staged slice of A
const uint B_STAGE = BK * SB / 4;
const uint LA = BM * BK / LOCAL_SIZE;  // elements of A each thread loads per slice
const uint LB = BN * BK / LOCAL_SIZE;
// Elements per chunk: 4 with 16-byte loads, else 1. A slice of A is A_LINES lines of A_LEN
// elements contiguous in memory ([BM m][BK k], or [BK k][BM m] with TRANS_A); B likewise.
const uint A_CW = VEC4_A ? 4u : 1u;
const uint B_CW = VEC4_B ? 4u : 1u;
const uint A_LEN = TRANS_A ? BM : BK;
const uint B_LEN = TRANS_B ? BK : BN;
const uint A_CHUNKS = LA / A_CW;  // chunks each thread loads per slice
const uint B_CHUNKS = LB / B_CW;

shared vec4 As[STAGES * A_STAGE];
shared vec4 Bs[STAGES * B_STAGE];

// Stream-K's fields after GemmPush (TiledPush in ops/matmul_kernels.cpp; zero without STREAM_K).
#define MATMUL_PUSH_EXTRA \
  uint64_t sk_partials; /* the workspace: [2 * sk_workers][BM * BN] floats */ \
  uint sk_tiles_n, sk_tiles_m, sk_slices, sk_workers, sk_dp_tiles;
#include "matmul_push.glsl"
#include "stream_k.glsl"

#if defined(B_F16)
// Four halves of the f16 B in 8 bytes.
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Half4Buf { uvec2 v[]; };
#endif

// Per-invocation state shared by the helpers below (private to the invocation).
uint tid, tx, ty, batch_z, m0, n0, abase, bbase;
float ra[LA], rb[LB];  // the next slice of A and B, as read from global memory
// INTERIOR_LOADS: whether the tile's rows of A (columns of B) all lie inside the matrix, and the
// 16-byte (f16b: 8-byte) index of each of this thread's chunks in the slice at k = 0.
bool a_inside, b_inside;
uint a_first[A_CHUNKS], b_first[B_CHUNKS];
VACC4 acc[TM][GN];     // acc[row][h].c is column 64*h + 4*tx + c

// An f32 operand element as multiplied: rounded to f16 with ROUND_F16.
float operand_value(float v) { return ROUND_F16 ? round_to_f16(v) : v; }

// Chunk l of this thread in a slice: line and first element within the slice.
void a_chunk(uint l, out uint line, out uint elem) {
  const uint c = l * LOCAL_SIZE + tid;
  line = c / (A_LEN / A_CW);
  elem = (c % (A_LEN / A_CW)) * A_CW;
}
void b_chunk(uint l, out uint line, out uint elem) {
  const uint c = l * LOCAL_SIZE + tid;
  line = c / (B_LEN / B_CW);
  elem = (c % (B_LEN / B_CW)) * B_CW;
}

// Sets a_inside / b_inside and a_first / b_first for the tile at (m0, n0) (see INTERIOR_LOADS);
// an index of a tile that is not inside is never used.
void plan_interior_loads() {
  a_inside = INTERIOR_LOADS && A_CW == 4 && m0 + BM <= p.M;
  b_inside = INTERIOR_LOADS && B_CW == 4 && n0 + BN <= p.N;
  [[unroll]] for (uint l = 0; l < A_CHUNKS; ++l) {
    uint line, elem;
    a_chunk(l, line, elem);
    const uint o = TRANS_A ? line : m0 + line, i = TRANS_A ? m0 + elem : elem;
    a_first[l] = (abase + o * p.lda + i) / 4;
  }
  [[unroll]] for (uint l = 0; l < B_CHUNKS; ++l) {
    uint line, elem;
    b_chunk(l, line, elem);
    const uint o = TRANS_B ? n0 + line : line, i = TRANS_B ? elem : n0 + elem;
    b_first[l] = (bbase + o * p.ldb + i) / 4;
  }
}

// The checked reads of fetch (below): every chunk's coordinates tested against the matrix;
// elements outside it read as zero.
void fetch_a_checked(uint k0) {
  [[unroll]] for (uint l = 0; l < A_CHUNKS; ++l) {
    uint line, elem;
    a_chunk(l, line, elem);
    // Element e of the chunk is at a[abase + o*lda + i + e] and valid where o < o_end and
    // i + e < i_end.
    const uint o = TRANS_A ? k0 + line : m0 + line, o_end = TRANS_A ? p.K : p.M;
    const uint i = TRANS_A ? m0 + elem : k0 + elem, i_end = TRANS_A ? p.M : p.K;
    if (A_CW == 4 && o < o_end && i + 4 <= i_end) {
      const vec4 v = Vec4Buf(uint64_t(p.a)).v[(abase + o * p.lda + i) / 4];
      [[unroll]] for (uint e = 0; e < 4; ++e) ra[l * 4 + e] = operand_value(v[e]);
    } else {
      [[unroll]] for (uint e = 0; e < A_CW; ++e) {
        ra[l * A_CW + e] = 0.0;
        if (o < o_end && i + e < i_end)
          ra[l * A_CW + e] = operand_value(p.a.v[abase + o * p.lda + i + e]);
      }
    }
  }
}
void fetch_b_checked(uint k0) {
  [[unroll]] for (uint l = 0; l < B_CHUNKS; ++l) {
    uint line, elem;
    b_chunk(l, line, elem);
    const uint o = TRANS_B ? n0 + line : k0 + line, o_end = TRANS_B ? p.N : p.K;
    const uint i = TRANS_B ? k0 + elem : n0 + elem, i_end = TRANS_B ? p.K : p.N;
#if defined(B_F16)
    // The f16b variant: B holds halves (a weight stored in f16), each widened exactly to fp32 as
    // matmul_tiled widens it (no ROUND_F16: an f16 value rounds to itself).
    if (B_CW == 4 && o < o_end && i + 4 <= i_end) {
      const uvec2 w = Half4Buf(uint64_t(p.b)).v[(bbase + o * p.ldb + i) / 4];
      [[unroll]] for (uint e = 0; e < 4; ++e)
        rb[l * 4 + e] = unpackHalf2x16((w[e / 2] >> (16 * (e % 2))) & 0xffffu).x;
    } else {
      [[unroll]] for (uint e = 0; e < B_CW; ++e) {
        rb[l * B_CW + e] = 0.0;
        if (o < o_end && i + e < i_end)
          rb[l * B_CW + e] =
              unpackHalf2x16(uint(U16Buf(uint64_t(p.b)).v[bbase + o * p.ldb + i + e])).x;
      }
    }
#else
    if (B_CW == 4 && o < o_end && i + 4 <= i_end) {
      const vec4 v = Vec4Buf(uint64_t(p.b)).v[(bbase + o * p.ldb + i) / 4];
      [[unroll]] for (uint e = 0; e < 4; ++e) rb[l * 4 + e] = operand_value(v[e]);
    } else {
      [[unroll]] for (uint e = 0; e < B_CW; ++e) {
        rb[l * B_CW + e] = 0.0;
        if (o < o_end && i + e < i_end)
          rb[l * B_CW + e] = operand_value(p.b.v[bbase + o * p.ldb + i + e]);
      }
    }
#endif
  }
}

// Reads the slice starting at k = k0 into ra / rb; elements outside the matrix read as zero.
void fetch(uint k0) {
  const bool k_inside = k0 + BK <= p.K;
  // Offsets of the slice from k = 0, in chunks: k runs along the lines (TRANS_A) or across them
  // (16-byte loads imply lda and ldb multiples of 4, and k0 is a multiple of BK, of 4).
  const uint a_step = TRANS_A ? k0 * (p.lda / 4) : k0 / 4;
  const uint b_step = TRANS_B ? k0 / 4 : k0 * (p.ldb / 4);
  if (a_inside && k_inside) {
    [[unroll]] for (uint l = 0; l < A_CHUNKS; ++l) {
      const vec4 v = Vec4Buf(uint64_t(p.a)).v[a_first[l] + a_step];
      [[unroll]] for (uint e = 0; e < 4; ++e) ra[l * 4 + e] = operand_value(v[e]);
    }
  } else {
    fetch_a_checked(k0);
  }
  if (b_inside && k_inside) {
    [[unroll]] for (uint l = 0; l < B_CHUNKS; ++l) {
#if defined(B_F16)
      const uvec2 w = Half4Buf(uint64_t(p.b)).v[b_first[l] + b_step];
      [[unroll]] for (uint e = 0; e < 4; ++e)
        rb[l * 4 + e] = unpackHalf2x16((w[e / 2] >> (16 * (e % 2))) & 0xffffu).x;
#else
      const vec4 v = Vec4Buf(uint64_t(p.b)).v[b_first[l] + b_step];
      [[unroll]] for (uint e = 0; e < 4; ++e) rb[l * 4 + e] = operand_value(v[e]);
#endif
    }
  } else {
    fetch_b_checked(k0);
  }
}

// Writes ra / rb to shared buffer `stage`: element (mm, kk) of A at As[kk][mm], (kk, nn) of B at
// Bs[kk][nn]. A chunk along the shared rows (A with TRANS_A, B without TRANS_B) is one vec4 store;
// a chunk along k is transposed into 4 scalar stores.
void stash(uint stage) {
  const uint sa0 = stage * A_STAGE, sb0 = stage * B_STAGE;
  [[unroll]] for (uint l = 0; l < A_CHUNKS; ++l) {
    uint line, elem;
    a_chunk(l, line, elem);
    if (TRANS_A && A_CW == 4) {
      As[sa0 + line * (SA / 4) + elem / 4] =
          vec4(ra[l * 4], ra[l * 4 + 1], ra[l * 4 + 2], ra[l * 4 + 3]);
    } else {
      [[unroll]] for (uint e = 0; e < A_CW; ++e) {
        const uint mm = TRANS_A ? elem + e : line, kk = TRANS_A ? line : elem + e;
        As[sa0 + kk * (SA / 4) + mm / 4][mm % 4] = ra[l * A_CW + e];
      }
    }
  }
  [[unroll]] for (uint l = 0; l < B_CHUNKS; ++l) {
    uint line, elem;
    b_chunk(l, line, elem);
    if (!TRANS_B && B_CW == 4) {
      Bs[sb0 + line * (SB / 4) + elem / 4] =
          vec4(rb[l * 4], rb[l * 4 + 1], rb[l * 4 + 2], rb[l * 4 + 3]);
    } else {
      [[unroll]] for (uint e = 0; e < B_CW; ++e) {
        const uint kk = TRANS_B ? elem + e : line, nn = TRANS_B ? line : elem + e;
        Bs[sb0 + kk * (SB / 4) + nn / 4][nn % 4] = rb[l * B_CW + e];
      }
    }
  }
}

// Adds the products of shared buffer `stage` to the accumulators, k in increasing order; the
// expression is matmul_tiled's, so the compiler contracts it the same way.
void multiply(uint stage) {
  const uint sa0 = stage * A_STAGE, sb0 = stage * B_STAGE;
  [[unroll]] for (uint kk = 0; kk < BK; ++kk) {
    vec4 av[GM], bv[GN];
    [[unroll]] for (uint g = 0; g < GM; ++g) av[g] = As[sa0 + kk * (SA / 4) + g * 16 + ty];
    [[unroll]] for (uint h = 0; h < GN; ++h) bv[h] = Bs[sb0 + kk * (SB / 4) + h * 16 + tx];
    [[unroll]] for (uint g = 0; g < GM; ++g)
      [[unroll]] for (uint r = 0; r < 4; ++r)
        [[unroll]] for (uint h = 0; h < GN; ++h) acc[g * 4 + r][h] += VACC4(av[g][r]) * VACC4(bv[h]);
  }
}

// Sums slices [s0, s1) of the tile at (m0, n0) into acc, k in increasing order. Ends with a
// barrier after the last multiply, so the shared buffers are free for the next segment.
void accumulate_slices(uint s0, uint s1) {
  plan_interior_loads();
  [[unroll]] for (uint i = 0; i < TM; ++i)
    [[unroll]] for (uint h = 0; h < GN; ++h) acc[i][h] = VACC4(0.0);
  fetch(s0 * BK);
  if (DOUBLE_BUFFER) {
    stash(0);
    barrier();
    for (uint s = s0; s < s1; ++s) {
      const bool more = s + 1 < s1;
      if (more) fetch((s + 1) * BK);
      multiply((s - s0) % 2);
      if (more) stash((s + 1 - s0) % 2);
      barrier();  // the slice just written is complete; the one just read is free
    }
  } else {
    for (uint s = s0; s < s1; ++s) {
      barrier();  // everyone is done reading the previous slice
      stash(0);
      barrier();
      if (s + 1 < s1) fetch((s + 1) * BK);
      multiply(0);
    }
    barrier();
  }
}

// store_output for the 4 outputs (m, n..n+3) with VEC4_C: one 16-byte load and store each, and
// per element store_output's scalar expressions, so that the compiler contracts them alike (a
// vec4 form of the same sums gave other bits with beta and a bias on the H200).
void store_output4(uint m, uint n, VACC4 a) {
  const uint ci = (batch_z * p.sc + m * p.c_rs + n) / 4;
  const vec4 old = p.beta != 0.0 ? Vec4Buf(uint64_t(p.c)).v[ci] : vec4(0.0);
  const vec4 bias = p.bias != 0 ? Vec4Buf(p.bias).v[n / 4] : vec4(0.0);
  vec4 result;
  [[unroll]] for (uint c = 0; c < 4; ++c) {
    VACC v = VACC(p.alpha) * a[c];
    if (p.beta != 0.0) v += VACC(p.beta) * VACC(old[c]);
    if (p.bias != 0) v += VACC(bias[c]);
    result[c] = float(v);
  }
  Vec4Buf(uint64_t(p.c)).v[ci] = result;
}

// The epilogue of a whole tile: every in-range output of acc through store_output.
void store_tile() {
  [[unroll]] for (uint g = 0; g < GM; ++g)
    [[unroll]] for (uint r = 0; r < 4; ++r) {
      const uint m = m0 + g * 64 + ty * 4 + r;
      if (m >= p.M) continue;
      [[unroll]] for (uint h = 0; h < GN; ++h) {
        const uint n = n0 + h * 64 + tx * 4;
        if (VEC4_C && n + 4 <= p.N) {
          store_output4(m, n, acc[g * 4 + r][h]);
          continue;
        }
        [[unroll]] for (uint c = 0; c < 4; ++c)
          if (n + c < p.N) store_output(batch_z, m, n + c, acc[g * 4 + r][h][c]);
      }
    }
}

// A partial tile into workspace slot `slot`, in-range or not (the fix-up reads only in-range).
void store_partial(uint slot) {
  const uint base = slot * (BM * BN / 4);
  [[unroll]] for (uint g = 0; g < GM; ++g)
    [[unroll]] for (uint r = 0; r < 4; ++r) {
      const uint row = g * 64 + ty * 4 + r;
      [[unroll]] for (uint h = 0; h < GN; ++h)
        Vec4Buf(p.sk_partials).v[base + row * (BN / 4) + h * 16 + tx] = vec4(acc[g * 4 + r][h]);
    }
}

// Tile `id` of the stream-K grid, in the banded order of the plain grid.
void set_tile(uint id) {
  const uvec2 tile = sk_tile_of(id, p.sk_tiles_n, p.sk_tiles_m, GROUP_M);
  m0 = tile.x * BM;
  n0 = tile.y * BN;
}

void main() {
  tid = gl_LocalInvocationID.x;
  if (WARP_BLOCKS) {
    // Warp w (invocations 32w..32w+31) is threads tx 8*(w % 2) + 0..7, ty 4*(w / 2) + 0..3.
    const uint lane = tid % 32, warp = tid / 32;
    tx = 8 * (warp % 2) + lane % 8;
    ty = 4 * (warp / 2) + lane / 8;
  } else {
    tx = tid % TX;
    ty = tid / TX;
  }
  const uint slices = (p.K + BK - 1) / BK;
  if (!STREAM_K) {
    batch_z = gl_WorkGroupID.z;
    // In bands of GROUP_M tile rows (common.glsl), or row-major.
    const uvec2 tile = GROUP_M > 1 ? banded_tile(GROUP_M) : gl_WorkGroupID.yx;
    m0 = tile.x * BM;
    n0 = tile.y * BN;
    abase = batch_z * p.sa;
    bbase = batch_z * p.sb;
    accumulate_slices(0, slices);
    store_tile();
    return;
  }
  batch_z = 0;
  abase = 0;
  bbase = 0;
  const uint w = gl_WorkGroupID.x, workers = p.sk_workers;
  for (uint t = w; t < p.sk_dp_tiles; t += workers) {
    set_tile(t);
    accumulate_slices(0, slices);
    store_tile();
  }
  const uint total = (p.sk_tiles_n * p.sk_tiles_m - p.sk_dp_tiles) * slices;
  const uint begin = sk_range_begin(w, total, workers), end = sk_range_begin(w + 1, total, workers);
  for (uint i = begin; i < end;) {
    const uint t = i / slices, s0 = i % slices, s1 = min(slices, s0 + (end - i));
    set_tile(p.sk_dp_tiles + t);
    accumulate_slices(s0, s1);
    if (s0 == 0 && s1 == slices) {
      store_tile();
    } else {
      store_partial(sk_partial_slot(w, t, total, workers, slices));
    }
    i += s1 - s0;
  }
}
