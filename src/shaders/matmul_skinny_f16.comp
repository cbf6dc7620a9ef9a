// Skinny GEMM (M <= 8 rows of fp32 activations) against a weight stored in f16 with its rows
// contiguous (TRANS_B: B is [N, K], the Hugging Face layout, converted to half on load). Decode's
// projections are this product, and it is memory-bound: every weight byte is read once and the
// whole cost is how many bytes are in flight. Each workgroup owns blocks of ROWS * RPT weight
// rows (output columns); KS = 32 consecutive threads walk the contiguous k of RPT rows with
// 16-byte loads of 8 halves (VEC8), UNROLL independent loads issued before any is used (a row of
// K = 2048 is one round at RPT = 1). RPT > 1 (VEC8 only) reads each activation once for RPT
// weight rows: with 8 activation rows the activation reads, not the weight bytes, are what limits
// a thread that owns one weight row; with one (a decode step at batch 1) RPT = 2 puts twice the
// loads in flight per thread and halves the activation reads of long split rows.
// opA is small and read by every workgroup, so it is read straight from global memory (it stays
// in cache), except that one row with a folded norm is staged in shared memory once (STAGED);
// either way there is no barrier in the main loop. A workgroup may take several blocks of rows
// (see main()), overlapping one block's epilogue with the next one's loads.
// Accumulators, epilogue and output are fp32 (fp64 in the precise build). Each thread sums its k
// in increasing order and a row's KS partial sums meet in a fixed tree (its last levels by
// subgroup shuffles where SHUFFLE_TREE), so results are deterministic; with K_SPLIT, K_SPLIT
// groups of KS threads share a row, each summing a contiguous slice of k, and the slices' totals
// are added in order. Grid: x = blocks of ROWS * RPT weight rows (ROWS = COLS / K_SPLIT; or fewer
// workgroups, BLOCK_LOOP), z = batch entries. Push constants and epilogue are the fp32 GEMMs'
// (matmul_push.glsl); p.b addresses halves and its strides (ldb, sb) count halves.
//
// The `gated` variant computes a gated MLP's first half in one pass: out = act(opA Wg^T) *
// (opA Wu^T) for a gate and an up weight of one shape (SwiGLU, GeGLU), each activation loaded once
// for both: the same sums in the same order and the same final formula as two products followed
// by gated_act.comp. Its push block is its own (one batch entry, no bias), and the spec constant
// ACT (id 3) picks the activation of activation.glsl.
//
// ARGMAX (plain variant, one activation row) also keeps, in each workgroup, the best (value,
// index) of the outputs it stores under torch.argmax's order (argmax_order.glsl), and writes that
// pair to slot gl_WorkGroupID.x of argmax_out: argmax_rows.comp's final pass folds the slots into
// the row's argmax, with no pass over the stored row (a decode step's greedy choice from its LM
// head). Exact comparisons, so the result is the argmax of the stored values whatever the grouping.
// The `fold` builds (ARGMAX_FOLD; 64-bit buffer atomics) instead fold the pairs inside the dispatch
// and advance a decode step as argmax_rows.comp's final_advance does, one dispatch and one
// dependent stage fewer: argmax_out is then a record (ArgmaxFoldRecord) that each workgroup's
// thread 0 raises to its pair's key, a 64-bit integer ordered as argmax_order.glsl orders pairs,
// by atomicMax, before it counts itself arrived; the last to arrive reads the best key (and clears
// the record for the next step), writes the token into the step's state and the ring, and
// advances the position and the cache length. Only thread 0 touches the record (no flag shared
// through memory: lavapipe miscompiled an arrival that the workgroup learnt from shared memory,
// attention_decode_fast.comp).
//
// The `embed` build (EMBED_A; plain variant, one staged row: NORM, 16-byte loads) reads opA's
// row from an f16 embedding table instead (p.a: [V, K] halves), at the row of a token id read on
// the device, as embed_forward.comp widens it (an id outside [0, V) gives zeros); where the push
// constants name a destination, workgroup 0 also stores the widened row there for the layers
// after the product. A decode step's first products then need no embedding
// dispatch before them: one dependent stage fewer. A build of its own, not a specialization
// constant: with the constant in every build, the other products ran slower on the H200
// (bench/RESULTS.md, twenty-ninth and thirtieth sessions); this way their SPIR-V is unchanged.
// Not chained (no chained form).
//
// Both variants can be chained (stage_chain_push.glsl): the first weight loads go out before the
// wait for the stage that writes opA and C.
//
// NORM (both variants) folds an RMSNorm of opA's rows into the product (decode's input norms,
// ops::normed_linear): every workgroup first takes each row's sum of squares exactly as
// norm_fwd.comp does (the same threads per row, element order and tree as norm_rows.glsl, all
// rows' trees at once), then reads opA(m, k) as norm_fwd would have stored it,
// (opA(m, k) * rstd(m)) * w'(k) rounded to fp32, w' = w (NORM 1) or 1 + w (NORM 2). The first
// weight loads are issued before that prologue, so its latency hides behind theirs. One dispatch
// and one dependent stage fewer than the norm followed by the product.
//!variant gated -DGATED=1
//!variant vmm -DVKF_VMM=1
//!variant gated_vmm -DGATED=1 -DVKF_VMM=1
//!variant coherent -DVKF_CHAIN_COHERENT=1
//!variant gated_coherent -DGATED=1 -DVKF_CHAIN_COHERENT=1
//!variant fold -DARGMAX_FOLD=1
//!variant fold_vmm -DARGMAX_FOLD=1 -DVKF_VMM=1
//!variant fold_coherent -DARGMAX_FOLD=1 -DVKF_CHAIN_COHERENT=1
//!variant embed -DEMBED_A=1
//!precise
#version 460
#ifndef ARGMAX_FOLD
#define ARGMAX_FOLD 0
#endif
#if ARGMAX_FOLD
#extension GL_EXT_shader_atomic_int64 : require
#endif
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#ifndef GATED
#define GATED 0
#endif
#ifndef EMBED_A
#define EMBED_A 0
#endif
#include "common.glsl"
#include "precise_math.glsl"
#include "argmax_order.glsl"
#include "stage_chain_push.glsl"
#define LOCAL_SIZE 256
#define KS 32                     // threads sharing one weight row
#define COLS (LOCAL_SIZE / KS)    // weight rows per workgroup
#define MMAX 8                    // largest MROWS
// 16-byte weight loads in flight per thread (per weight). 16 in the plain variant measured slower
// on the H200: batch 1 1.39 against 1.32-1.36 ms per decode step, batch 8 3.16 against 2.69-2.75.
#define UNROLL 8
#define RMAX 4                    // largest RPT
layout(local_size_x = LOCAL_SIZE) in;

layout(constant_id = 0) const uint MROWS = 1;  // M, 1..MMAX
layout(constant_id = 1) const bool TRANS_A = false;
// 16-byte loads of the weight (8 halves) and of opA (two vec4): the host sets it when K % 8 == 0,
// opA is row-major and every row start of both operands is 16-byte aligned.
layout(constant_id = 2) const bool VEC8 = false;
// Weight rows per thread, 1..RMAX (VEC8 only; UNROLL a multiple of it). Id 4: id 3 is the gated
// variant's activation.
layout(constant_id = 4) const uint RPT = 1;
// RMSNorm of opA's rows first: 0 none, 1 weight w, 2 weight 1 + w (push: norm_w, norm_eps, and
// norm_tpr_log2, norm_fwd's threads per row for K).
layout(constant_id = 5) const uint NORM = 0;
// Set when the grid has fewer workgroups than blocks of rows (see main()); unset, the block loop
// folds away and the kernel is the one-block-per-workgroup form.
layout(constant_id = 6) const bool BLOCK_LOOP = false;
// Set where subgroups hold 32 consecutive invocations (the host checks the size; NVIDIA): the
// last five levels of each fixed tree (partial t += partial t + s, s = 16 .. 1) run as subgroup
// shuffles instead of shared memory and barriers -- the same additions in the same order.
layout(constant_id = 7) const bool SHUFFLE_TREE = false;
// Groups of KS threads sharing each weight row, each summing a contiguous slice of its k (plain
// variant, 16-byte loads, one weight row per thread or one activation row; else 1): a long row
// (the down projection's K = 8192) then takes one round of loads per thread instead of several.
// The slices' sums are added in slice order.
layout(constant_id = 8) const uint K_SPLIT_SPEC = 1;
// Every loop that touches shared memory runs the same number of times in every invocation, the
// rows and elements an invocation does not own skipped inside it (the same loads and additions in
// the same order, so the same bits): the host sets it where lavapipe (Mesa 22.3) runs the
// Vulkan-memory-model builds, which it miscompiles for loops whose count differs between
// invocations (StageChain.MemoryModelBuildsGiveTheLegacyBits), and for one activation row, which
// the H200 ran faster with them (with more rows slower: ops/matmul_skinny_f16.cpp).
layout(constant_id = 12) const bool UNIFORM_LOOPS = false;
// (RPT - 1) (MROWS - 1): nonzero where both exceed one (as a product: this glslc mis-optimizes the
// nested logical form of spec constants).
const uint SEVERAL_BOTH = (RPT - 1u) * (MROWS - 1u);
const uint K_SPLIT = GATED != 0 || SEVERAL_BOTH != 0u || !VEC8 ? 1u : K_SPLIT_SPEC;
// The workgroup's best stored output (see ARGMAX above; push argmax_out): plain variant, MROWS 1.
layout(constant_id = 10) const bool ARGMAX_SPEC = false;
const bool ARGMAX = ARGMAX_SPEC && GATED == 0 && MROWS == 1;
// K / 4 where the one activation row is staged in shared memory once per workgroup (NORM, MROWS
// 1, 16-byte loads; the host checks that it fits), else 1: read from memory once for the norm's
// sums and the products, and normalized in place, so that each group of 8 values is two shared
// reads instead of two activation and two norm-weight loads and 8 normalizations per weight row
// and block. The same values, so the same sums.
layout(constant_id = 9) const uint STAGED_LEN4 = 1;
const bool STAGED = STAGED_LEN4 > 1 && NORM != 0 && MROWS == 1 && VEC8;
const uint STAGED_PER_THREAD = (STAGED_LEN4 + LOCAL_SIZE - 1) / LOCAL_SIZE;  // vec4s staged each
const uint ROWS = COLS / K_SPLIT;    // weight rows per block (times RPT)
const uint UNROLL_R = UNROLL / RPT;  // loads in flight per weight row

layout(buffer_reference, std430, buffer_reference_align = 16) buffer UVec4Buf { uvec4 v[]; };

// The `embed` build (see above; a build of its own, so that the other builds' code is not
// touched): opA is a table row, chosen by the id at argmax_out. That build is never chained (its
// stage_chain.glsl is the plain form, which reads no chain field), so the push block's last 16
// bytes carry the lookup's other inputs instead (ops::detail::SkinnyEmbed): every input the
// prologue needs before the row is then in the push constants, one dependent read (the id) ahead
// of the row's.
#if EMBED_A
#if GATED
#error "the embed build is of the plain variant"
#endif
// The host runs it only where the row is staged (ops::embedding_folds), so the staged prologue
// below is the only place that reads opA.
layout(buffer_reference, std430, buffer_reference_align = 8) buffer UVec2Buf { uvec2 v[]; };
#define SKINNY_PUSH_TAIL                                              \
  uint64_t embed_store; /* F32 [K]: where workgroup 0 stores the row, or 0 */ \
  uint embed_vocab;     /* V */                                       \
  uint embed_unused;
#else
#define SKINNY_PUSH_TAIL STAGE_CHAIN_PUSH_FIELDS
#endif

shared VACC red[MMAX * LOCAL_SIZE];

#if GATED
#define ACT_SPEC_ID 3
#include "activation.glsl"
layout(push_constant, std430) uniform Push {
  F32Buf a;       // [M, K] (row stride lda)
  uint64_t b;     // gate weight [N, K] halves (row stride ldb)
  uint64_t b2;    // up weight, same layout
  F32Buf c;       // [M, N] (row stride c_rs)
  uint M, N, K;
  uint lda, ldb;
  uint c_rs;
  uint sa, sb;    // 0: one batch entry
  uint64_t norm_w;  // NORM: the norm's weight, f32 [K]
  float norm_eps;
  uint norm_tpr_log2;
  STAGE_CHAIN_PUSH_FIELDS
} p;
#else
#define MATMUL_PUSH_EXTRA                                                                  \
  uint64_t norm_w;                                                                         \
  float norm_eps;                                                                          \
  uint norm_tpr_log2;                                                                      \
  uint64_t argmax_out; /* ARGMAX: f32 values [workgroups], then u32 indices [workgroups]; */ \
                       /* ARGMAX_FOLD: an ArgmaxFoldRecord; embed: the token id, I32 [1] */   \
  SKINNY_PUSH_TAIL
#include "matmul_push.glsl"
#endif
#include "stage_chain.glsl"
shared VACC norm_rstd[MMAX];  // NORM: each opA row's rsqrt(mean(x^2) + eps)
shared vec4 staged_row[STAGED_LEN4];  // STAGED: opA's row as stored, then as normed() makes it

// ARGMAX: the best (value, index) this thread has stored, and each group of KS threads' best.
float arg_value = 0.0;
uint arg_index = ARGMAX_NONE;
shared float arg_group_value[COLS];
shared uint arg_group_index[COLS];

void note_stored(float v, uint n) {
  if (ARGMAX && argmax_better(v, n, arg_value, arg_index)) {
    arg_value = v;
    arg_index = n;
  }
}

VACC acc[RMAX][MMAX];
VACC acc2[RMAX][MMAX];  // the up product (gated)

// EARLY_EPILOGUE (plain variant, one activation row; the host's set_skinny_f16_early_epilogue,
// off by default until measured): the storing thread of each weight row reads that output's old
// C value (a residual the product adds into) and its bias before the main loop instead of in the
// epilogue, where the read is one more memory latency after the tree. Nothing else in the
// dispatch writes those elements, so the values are the same, and store_output_with computes
// what store_output would have: the same bits either way.
layout(constant_id = 11) const bool EARLY_EPILOGUE_SPEC = false;
const bool EARLY_EPILOGUE = EARLY_EPILOGUE_SPEC && GATED == 0 && MROWS == 1;
float early_old[RMAX], early_bias[RMAX];

#if !GATED
// C's old value at output (m, n) of batch entry z, as output_old reads it, but coherently where
// the dispatch waited on the stage that wrote it (stage_chain.glsl).
float chained_output_old(uint z, uint m, uint n) {
  return p.beta != 0.0 ? chained_f32(uint64_t(p.c), output_index(z, m, n)) : 0.0;
}
#endif

// Reads them for the thread's rows n0 + r * ROWS (storer: the thread that stores them).
void read_epilogue_early(uint z, uint n0, bool storer) {
#if !GATED
  if (!EARLY_EPILOGUE) return;
  [[unroll]] for (uint r = 0; r < RPT; ++r) {
    const uint n = n0 + r * ROWS;
    const bool mine = storer && n < p.N;
    early_old[r] = mine ? chained_output_old(z, 0, n) : 0.0;
    early_bias[r] = mine ? output_bias(0, n) : 0.0;
  }
#endif
}

// The tree's last five levels over 32 consecutive invocations, by shuffles (SHUFFLE_TREE): each
// level adds the value s lanes up, so the first lane ends with the tree's total.
VACC subgroup_tree(VACC v) {
  [[unroll]] for (uint s = 16u; s > 0u; s >>= 1)
    v += subgroupShuffle(v, gl_SubgroupInvocationID + s);
  return v;
}

float load_a_raw(uint abase, uint m, uint k) {
  return chained_f32(uint64_t(p.a), abase + (TRANS_A ? k * p.lda + m : m * p.lda + k));
}

// What norm_fwd.comp stores for x of row m with norm weight w: (x * rstd) * w', rounded to fp32.
float normed(float x, uint m, float w) {
  VACC v = VACC(x) * norm_rstd[m];
  v *= NORM == 2 ? VACC(1.0) + VACC(w) : VACC(w);
  return float(v);
}

float load_a(uint abase, uint m, uint k) {
  const float x = load_a_raw(abase, m, k);
  return NORM != 0 ? normed(x, m, F32Buf(p.norm_w).v[k]) : x;
}

// norm_rstd[m] for every row m < MROWS with norm_fwd.comp's sums: TPR threads per row, each
// summing its strided elements in index order, then a tree of the same shape as norm_rows.glsl's
// (partial i += partial i + s), every row's tree at once in `red` (free until the epilogue).
// STAGED: the one row is read from staged_row, where main() has put it as stored. All threads
// call it. With UNIFORM_LOOPS every loop here runs the same number of times in every invocation.
void compute_norm_rstd(uint tid, uint abase) {
  const uint tpr_log2 = p.norm_tpr_log2, tpr = 1u << tpr_log2;
  const uint lane = tid & (tpr - 1u), slot = tid >> tpr_log2, slots = LOCAL_SIZE >> tpr_log2;
  // The row loops: from 0 (UNIFORM_LOOPS: row m0 + slot, skipped past MROWS) or from slot.
  const uint m_first = UNIFORM_LOOPS ? 0u : slot, m_off = UNIFORM_LOOPS ? slot : 0u;
  const uint i_first = UNIFORM_LOOPS ? 0u : lane, i_off = UNIFORM_LOOPS ? lane : 0u;
  for (uint m0 = m_first; m0 < MROWS; m0 += slots) {
    const uint m = m0 + m_off;
    VACC q = VACC(0.0);
    for (uint i0 = i_first; i0 < p.K; i0 += tpr) {
      const uint i = i0 + i_off;
      if (m < MROWS && i < p.K) {
        const VACC v = VACC(STAGED ? staged_row[i / 4][i % 4] : load_a_raw(abase, m, i));
        q += v * v;
      }
    }
    if (m < MROWS) red[m * tpr + lane] = q;
  }
  barrier();
  // With SHUFFLE_TREE and rows of 32+ threads, the levels below 32 run in the row's first subgroup.
  const uint last_shared = SHUFFLE_TREE && tpr >= 32u ? 32u : 1u;
  for (uint s = tpr >> 1; s >= last_shared; s >>= 1) {
    for (uint m0 = m_first; m0 < MROWS; m0 += slots) {
      const uint m = m0 + m_off;
      if (m < MROWS && lane < s) red[m * tpr + lane] += red[m * tpr + lane + s];
    }
    barrier();
  }
  if (last_shared == 32u) {
    for (uint m0 = m_first; m0 < MROWS; m0 += slots) {
      const uint m = m0 + m_off;
      if (m < MROWS && lane < 32u) {
        const VACC total = subgroup_tree(red[m * tpr + lane]);
        if (lane == 0u) red[m * tpr] = total;
      }
    }
    barrier();
  }
  if (tid < MROWS) {
    const VACC var = red[tid * tpr] / VACC(p.K);
#if VKF_PRECISE
    norm_rstd[tid] = 1.0LF / sqrt(var + double(p.norm_eps));
#else
    norm_rstd[tid] = inversesqrt(var + p.norm_eps);
#endif
  }
  barrier();
}

// Adds the products of k = 8g..8g+7 (w: the weight row's 8 halves there) to s[m].
#define DOT8(s, wq, a0, a1)                                                \
  {                                                                        \
    const vec2 h0 = unpackHalf2x16(wq.x), h1 = unpackHalf2x16(wq.y);       \
    const vec2 h2 = unpackHalf2x16(wq.z), h3 = unpackHalf2x16(wq.w);       \
    VACC t = s;                                                            \
    t += VACC(a0.x) * VACC(h0.x);                                          \
    t += VACC(a0.y) * VACC(h0.y);                                          \
    t += VACC(a0.z) * VACC(h1.x);                                          \
    t += VACC(a0.w) * VACC(h1.y);                                          \
    t += VACC(a1.x) * VACC(h2.x);                                          \
    t += VACC(a1.y) * VACC(h2.y);                                          \
    t += VACC(a1.z) * VACC(h3.x);                                          \
    t += VACC(a1.w) * VACC(h3.y);                                          \
    s = t;                                                                 \
  }

// Adds the products of k = 8g..8g+7 for the thread's RPT weight rows (wg[r], wu[r]: row r's 8
// halves there), each activation read once for all of them.
void accumulate8(uvec4 wg[RMAX], uvec4 wu[RMAX], uint abase, uint g) {
  if (STAGED) {
    const vec4 a0 = staged_row[2 * g], a1 = staged_row[2 * g + 1];
    [[unroll]] for (uint r = 0; r < RPT; ++r) {
      DOT8(acc[r][0], wg[r], a0, a1);
#if GATED
      DOT8(acc2[r][0], wu[r], a0, a1);
#endif
    }
    return;
  }
  // NORM: the norm weights of k = 8g..8g+7 (the host checks their 16-byte alignment).
  vec4 nw0 = vec4(0.0), nw1 = vec4(0.0);
  if (NORM != 0) {
    nw0 = Vec4Buf(p.norm_w).v[2 * g];
    nw1 = Vec4Buf(p.norm_w).v[2 * g + 1];
  }
  [[unroll]] for (uint m = 0; m < MROWS; ++m) {
    const uint ai = (abase + m * p.lda) / 4 + 2 * g;
    vec4 a0 = chained_vec4(uint64_t(p.a), ai), a1 = chained_vec4(uint64_t(p.a), ai + 1);
    if (NORM != 0) {
      [[unroll]] for (uint e = 0; e < 4u; ++e) {
        a0[e] = normed(a0[e], m, nw0[e]);
        a1[e] = normed(a1[e], m, nw1[e]);
      }
    }
    [[unroll]] for (uint r = 0; r < RPT; ++r) {
      DOT8(acc[r][m], wg[r], a0, a1);
#if GATED
      DOT8(acc2[r][m], wu[r], a0, a1);
#endif
    }
  }
}

// Sums the KS partial sums of each row (lanes tid - lane .. tid - lane + KS - 1) in
// red[m * LOCAL_SIZE + tid], m < rows (MROWS, or RPT * MROWS with the K split), by a fixed tree;
// the totals land in lane 0's entries.
void reduce_lanes(uint tid, uint lane, uint rows) {
  barrier();
  for (uint s = KS / 2; s > 0; s /= 2) {
    if (lane < s) {
      [[unroll]] for (uint m = 0; m < rows; ++m)
        red[m * LOCAL_SIZE + tid] += red[m * LOCAL_SIZE + tid + s];
    }
    barrier();
  }
}

// Output (m, n), the thread's weight row r, from its trees' totals: the product, or (gated)
// gated_act.comp's formula on the values the gate and up products would have stored.
void store_row(uint z, uint m, uint r, uint n, VACC total, VACC up_total) {
#if GATED
  p.c.v[m * p.c_rs + n] = float(act_value_acc(float(total)) * VACC(float(up_total)));
#else
  const float stored = EARLY_EPILOGUE
                           ? store_output_with(z, m, n, total, early_old[r], early_bias[r])
                           : store_output_with(z, m, n, total, chained_output_old(z, m, n),
                                               output_bias(m, n));
  note_stored(stored, n);
#endif
}

#if ARGMAX_FOLD
// The in-dispatch fold's record (ops::ArgmaxAdvance::fold_record, written by the host once): the
// best key so far and the workgroups arrived (both zero between steps), the ring's rows, and the
// addresses of the step's state (I32 [3]: id, position, positions cached) and of the ring (I32
// [ring_rows]).
layout(buffer_reference, std430, buffer_reference_align = 8) buffer ArgmaxFoldRecord {
  uint64_t key;
  uint arrived;
  uint ring_rows;
  uint64_t state;
  uint64_t ring;
};

// (value, index) as an integer that orders as argmax_better does: the value's bits made
// monotonic (NaN above +inf, -0.0 as +0.0) above the complemented index (the lower index wins a
// tie); 0 below every pair (no element).
uint64_t argmax_key(float v, uint i) {
  if (i == ARGMAX_NONE) return 0ul;
  uint b = floatBitsToUint(v);
  if ((b & 0x7fffffffu) == 0u) b = 0u;
  const uint o = isnan(v) ? 0xffffffffu : (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
  return (uint64_t(o) << 32) | uint64_t(~i);
}

// Thread 0: the workgroup's best pair into the record; the last workgroup to arrive advances the
// step.
void fold_in_dispatch(float v, uint i) {
  ArgmaxFoldRecord r = ArgmaxFoldRecord(p.argmax_out);
  atomicMax(r.key, argmax_key(v, i));
  memoryBarrierBuffer();  // the key is raised before the arrival is counted
  if (atomicAdd(r.arrived, 1u) != gl_NumWorkGroups.x - 1u) return;
  memoryBarrierBuffer();  // every workgroup's key was raised before its arrival
  const uint64_t best = atomicExchange(r.key, 0ul);
  atomicExchange(r.arrived, 0u);
  const int token = int(~uint(best & 0xfffffffful));
  I32Buf state = I32Buf(r.state);
  const int cached = state.v[2];
  I32Buf(r.ring).v[uint(cached) % r.ring_rows] = token;
  state.v[0] = token;
  state.v[1] += 1;
  state.v[2] = cached + 1;
}
#endif

// ARGMAX: the workgroup's best pair from its groups' storing threads (lane 0 of each), folded by
// thread 0 in group order, to the workgroup's slot (or, ARGMAX_FOLD, into the record). All
// threads call it.
void finish_argmax(uint tid, uint lane) {
#if !GATED
  if (!ARGMAX) return;
  if (lane == 0) {
    arg_group_value[tid / KS] = arg_value;
    arg_group_index[tid / KS] = arg_index;
  }
  barrier();
  if (tid == 0) {
    float v = arg_group_value[0];
    uint i = arg_group_index[0];
    [[unroll]] for (uint g = 1; g < COLS; ++g) {  // unrolled: no loop in one invocation only
      if (argmax_better(arg_group_value[g], arg_group_index[g], v, i)) {
        v = arg_group_value[g];
        i = arg_group_index[g];
      }
    }
#if ARGMAX_FOLD
    fold_in_dispatch(v, i);
#else
    F32Buf(p.argmax_out).v[gl_WorkGroupID.x] = v;
    U32Buf(p.argmax_out + uint64_t(4u * gl_NumWorkGroups.x)).v[gl_WorkGroupID.x] = i;
#endif
  }
#endif
}

// The outputs of the thread's RPT weight rows n0 + r * ROWS from the accumulators: each row's KS
// partial sums meet in a fixed tree (by shuffles, or in `red`), lane 0 stores. Leaves `red` free
// for reuse.
void finish_rows(uint tid, uint lane, uint z, uint n0) {
  if (K_SPLIT > 1) {  // each group of KS threads sums a slice of its RPT rows (RPT * MROWS <= 8)
    const uint group = tid / KS;
    if (SHUFFLE_TREE) {
      [[unroll]] for (uint r = 0; r < RPT; ++r) {
        [[unroll]] for (uint m = 0; m < MROWS; ++m) {
          const VACC total = subgroup_tree(acc[r][m]);
          if (lane == 0) red[(r * MROWS + m) * LOCAL_SIZE + tid] = total;
        }
      }
      barrier();
    } else {
      [[unroll]] for (uint r = 0; r < RPT; ++r)
        [[unroll]] for (uint m = 0; m < MROWS; ++m)
          red[(r * MROWS + m) * LOCAL_SIZE + tid] = acc[r][m];
      reduce_lanes(tid, lane, RPT * MROWS);  // each group's totals in its lane 0's entries
    }
    if (lane == 0 && group % K_SPLIT == 0) {
      [[unroll]] for (uint r = 0; r < RPT; ++r) {
        if (n0 + r * ROWS >= p.N) continue;
        [[unroll]] for (uint m = 0; m < MROWS; ++m) {
          const uint at = (r * MROWS + m) * LOCAL_SIZE + tid;
          VACC total = red[at];
          for (uint s = 1; s < K_SPLIT; ++s) total += red[at + s * KS];
          store_row(z, m, r, n0 + r * ROWS, total, VACC(0.0));
        }
      }
    }
    barrier();  // red is read before the next block's rows write it
    return;
  }
  if (SHUFFLE_TREE) {  // a row's KS = 32 lanes are one subgroup: no shared memory, no barrier
    [[unroll]] for (uint r = 0; r < RPT; ++r) {
      const uint n = n0 + r * ROWS;
      [[unroll]] for (uint m = 0; m < MROWS; ++m) {
        const VACC total = subgroup_tree(acc[r][m]);
        const VACC up_total = GATED != 0 ? subgroup_tree(acc2[r][m]) : VACC(0.0);
        if (lane == 0 && n < p.N) store_row(z, m, r, n, total, up_total);
      }
    }
    return;
  }
  [[unroll]] for (uint r = 0; r < RPT; ++r) {
    const uint n = n0 + r * ROWS;
    if (r > 0) barrier();  // red is read before it is reused
    [[unroll]] for (uint m = 0; m < MROWS; ++m) red[m * LOCAL_SIZE + tid] = acc[r][m];
    reduce_lanes(tid, lane, MROWS);
    VACC total[MMAX];
    [[unroll]] for (uint m = 0; m < MROWS; ++m) total[m] = red[m * LOCAL_SIZE + tid];
#if GATED
    barrier();  // red is read before it is reused
    [[unroll]] for (uint m = 0; m < MROWS; ++m) red[m * LOCAL_SIZE + tid] = acc2[r][m];
    reduce_lanes(tid, lane, MROWS);
#endif
    if (lane == 0 && n < p.N) {
      [[unroll]] for (uint m = 0; m < MROWS; ++m)
        store_row(z, m, r, n, total[m], GATED != 0 ? red[m * LOCAL_SIZE + tid] : VACC(0.0));
    }
  }
  barrier();  // the next block's rows write red only after every lane 0 has read it
}

void clear_accumulators() {
  [[unroll]] for (uint r = 0; r < RMAX; ++r) {
    [[unroll]] for (uint m = 0; m < MMAX; ++m) {
      acc[r][m] = 0.0;
      acc2[r][m] = 0.0;
    }
  }
}

// Workgroup x takes blocks of ROWS * RPT weight rows x, x + gl_NumWorkGroups.x, ... (one block
// each when the grid has as many workgroups as blocks): with fewer workgroups than blocks, the
// first loads of a workgroup's next block are in flight while it reduces and stores the current
// one, and a NORM prologue runs once for all its blocks. Each row's sums are the same either way.
void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint lane = tid % KS, col = tid / KS / K_SPLIT, slice = tid / KS % K_SPLIT;
  const uint z = gl_WorkGroupID.z;
  const uint blocks = (p.N + ROWS * RPT - 1) / (ROWS * RPT);
  const uint abase = z * p.sa, bbase = z * p.sb;
  uint blk = gl_WorkGroupID.x;
  // The thread's weight rows in block blk: n0 + r * ROWS, r < RPT (consecutive rows in
  // consecutive groups of KS threads, as with RPT = 1; ROWS = COLS without the K split).
  uint n0 = blk * ROWS * RPT + col;
  clear_accumulators();

#if GATED
  const uint64_t b2 = p.b2;
#else
  const uint64_t b2 = uint64_t(p.b);
#endif
  if (VEC8) {
    UVec4Buf w = UVec4Buf(uint64_t(p.b)), wu = UVec4Buf(b2);
    // This thread's slice of its rows: groups of 8 halves g_begin .. g_end - 1 (all of them
    // without K_SPLIT).
    const uint slice_groups = (p.K / 8 + K_SPLIT - 1) / K_SPLIT;
    const uint g_begin = slice * slice_groups, g_end = min(p.K / 8, g_begin + slice_groups);
    // UNROLL_R loads per row issued together (those past the row, or of rows past N, are skipped,
    // not issued). Each row's k is walked in increasing order, as with RPT = 1. The first batch
    // is issued before the NORM prologue.
    uvec4 wv[UNROLL_R][RMAX], uv[UNROLL_R][RMAX];
#define LOAD_BATCH(g)                                                    \
  [[unroll]] for (uint u = 0; u < UNROLL_R; ++u) {                       \
    [[unroll]] for (uint r = 0; r < RPT; ++r) {                          \
      const uint n = n0 + r * ROWS;                                      \
      const uint row = (bbase + n * p.ldb) / 8; /* in 8-half groups */   \
      const bool ok = n < p.N && (g) + u * KS < g_end;                   \
      wv[u][r] = ok ? w.v[row + (g) + u * KS] : uvec4(0);                \
      uv[u][r] = GATED != 0 && ok ? wu.v[row + (g) + u * KS] : uvec4(0); \
    }                                                                    \
  }
    LOAD_BATCH(g_begin + lane)
    stage_chain_wait();  // the weights need nothing from the stage before; opA and C do
    const bool storer = lane == 0 && slice == 0;  // who stores each of the thread's rows
    read_epilogue_early(z, n0, storer);
    // STAGED: the norm weights this thread applies below, loaded with the row so that their
    // latency overlaps its instead of following the norm's tree.
    vec4 norm_w_ahead[STAGED_PER_THREAD];
    if (STAGED) {  // the row as stored, read from memory once for the norm and the products
#if EMBED_A
      // The row's first group of 4 halves, if the id is in the table (else zeros).
      const uint id = uint(I32Buf(p.argmax_out).v[0]);
      const bool embed_valid = id < p.embed_vocab;
      const uint embed_first = embed_valid ? id * (p.K / 4) : 0u;
      const uint64_t embed_store =
          gl_WorkGroupID.x == 0 && gl_WorkGroupID.z == 0 ? p.embed_store : 0ul;
#endif
      [[unroll]] for (uint j = 0; j < STAGED_PER_THREAD; ++j) {
        const uint i = tid + j * LOCAL_SIZE;
        if (i < p.K / 4) {
#if EMBED_A
          const uvec2 h = UVec2Buf(uint64_t(p.a)).v[embed_first + i];
          const vec4 x = embed_valid ? vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y)) : vec4(0.0);
          staged_row[i] = x;
          if (embed_store != 0) Vec4Buf(embed_store).v[i] = x;
#else
          staged_row[i] = chained_vec4(uint64_t(p.a), abase / 4 + i);
#endif
          norm_w_ahead[j] = Vec4Buf(p.norm_w).v[i];
        }
      }
      barrier();
    }
    if (NORM != 0) compute_norm_rstd(tid, abase);  // ends with a barrier
    if (STAGED) {  // normalized in place: each thread rewrites the entries it reads
      [[unroll]] for (uint j = 0; j < STAGED_PER_THREAD; ++j) {
        const uint i = tid + j * LOCAL_SIZE;
        if (i < p.K / 4) {
          const vec4 x = staged_row[i], w = norm_w_ahead[j];
          staged_row[i] = vec4(normed(x.x, 0, w.x), normed(x.y, 0, w.y), normed(x.z, 0, w.z),
                               normed(x.w, 0, w.w));
        }
      }
      barrier();
    }
    // Rounds of UNROLL_R loads per row; with UNIFORM_LOOPS as many in every invocation, a lane's
    // groups past its slice skipped. Each round sums the loads in flight and issues the next ones.
    const uint round = UNROLL_R * KS, rounds = (slice_groups + round - 1) / round;
#define SUM_ROUND(g, issue_next)                                          \
  [[unroll]] for (uint u = 0; u < UNROLL_R; ++u)                          \
    if ((g) + u * KS < g_end) accumulate8(wv[u], uv[u], abase, (g) + u * KS); \
  if (issue_next) {                                                       \
    LOAD_BATCH((g) + round)                                               \
  }
    while (true) {
      if (UNIFORM_LOOPS) {
        for (uint t = 0; t < rounds; ++t) {
          const uint g = g_begin + lane + t * round;
          SUM_ROUND(g, t + 1 < rounds)
        }
      } else {
        for (uint g = g_begin + lane; g < g_end; g += round) {
          SUM_ROUND(g, g + round < g_end)
        }
      }
      const uint rows_done = n0, next = BLOCK_LOOP ? blk + gl_NumWorkGroups.x : blocks;
      if (next < blocks) {  // uniform: the next block's first loads go out before the epilogue
        blk = next;
        n0 = blk * ROWS * RPT + col;
        LOAD_BATCH(g_begin + lane)
      }
      finish_rows(tid, lane, z, rows_done);
      if (next < blocks) read_epilogue_early(z, n0, storer);  // after the stores that used them
      if (next >= blocks) break;
      clear_accumulators();
    }
  } else {
    stage_chain_wait();
    if (NORM != 0) compute_norm_rstd(tid, abase);
    U16Buf w = U16Buf(uint64_t(p.b)), wu = U16Buf(b2);
    for (; blk < blocks; blk += BLOCK_LOOP ? gl_NumWorkGroups.x : blocks) {  // RPT = 1
      n0 = blk * ROWS + col;
      read_epilogue_early(z, n0, lane == 0);
      const uint row = bbase + n0 * p.ldb;
      // UNIFORM_LOOPS: as often in every invocation (see compute_norm_rstd).
      for (uint k0 = UNIFORM_LOOPS ? 0u : lane; k0 < p.K; k0 += KS) {
        const uint k = k0 + (UNIFORM_LOOPS ? lane : 0u);
        if (n0 >= p.N || k >= p.K) continue;
        const float wk = unpackHalf2x16(uint(w.v[row + k])).x;
        const float uk = GATED != 0 ? unpackHalf2x16(uint(wu.v[row + k])).x : 0.0;
        [[unroll]] for (uint m = 0; m < MROWS; ++m) {
          const VACC ak = VACC(load_a(abase, m, k));
          acc[0][m] += ak * VACC(wk);
#if GATED
          acc2[0][m] += ak * VACC(uk);
#endif
        }
      }
      finish_rows(tid, lane, z, n0);
      clear_accumulators();
    }
  }
  finish_argmax(tid, lane);
  stage_chain_signal();
}
