// Shared by the fp32 register-tiled attention kernels (attention_fast_fwd, attention_fast_bwd_dq,
// attention_fast_bwd_dkv): the thread layout they all use, the staging of rows into shared
// memory with 16-byte reads, and the synchronisation inside a row group.
//
// Thread layout. Every workgroup is split into row groups of LANES = 8 consecutive invocations.
// A row group owns RQ = 4 rows of the workgroup's block (query rows in the forward and dq, key
// rows in dk/dv), interleaved as rows rg + NRG * r, r < RQ, so that the row groups of one
// subgroup read different shared-memory banks. Lane `lane` of the group owns the tile's columns
// lane + LANES * c (keys in the forward and dq, queries in dk/dv) of those rows, and the output
// dims 4 lane .. 4 lane + 3 and 32 + 4 lane .. 32 + 4 lane + 3 (two vec4 chunks) of them. So a
// lane's scores and its output block are both register tiles, and the probabilities (or score
// gradients) that one lane produces are consumed only by lanes of its own row group: they pass
// through a small per-group region of shared memory, and the group synchronises on its own.
//
// Row-group synchronisation (ROW_SHUFFLE). With ROW_SHUFFLE=1 a row group is a slice of one
// subgroup: subgroups hold whole groups of 8 consecutive invocations when their size is a
// multiple of 8 (the host requires a minimum subgroup size of 8 and subgroup shuffles; NVIDIA has
// 32, lavapipe 8) and invocations are numbered consecutively within subgroups (as every driver
// we target does for a 1-D workgroup). Row reductions then use subgroupShuffleXor over lane bits
// 1, 2, 4, and the exchange region is synchronised with a subgroup barrier. With ROW_SHUFFLE=0
// (any other device) both go through shared memory and workgroup barriers.
//
// Shared rows are ROW4 = 17 vec4 (64 floats + 4 of padding): the 8 lanes of a group read 8
// consecutive rows at the same column, which the padding spreads over all 32 banks.
//
// Exchange regions: per row group, RQ rows of XW values (XW = the tile's columns, defined by the
// includer) padded to XW + 4 floats, and the region padded by 8 floats, so that the 4 row groups
// of a subgroup of 32 start 0, 24, 16 and 8 banks apart (XW = 16 or 32) and neither their scalar
// writes nor their vec4 reads collide.
//
// The includer defines NT (invocations), XW and ROW_SHUFFLE, and includes attention_common.glsl
// first.
#extension GL_EXT_control_flow_attributes : require
#if ROW_SHUFFLE
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif

#define DMAX 64        // largest head dim; shorter heads are zero-padded
#define DCH 16         // vec4 chunks of a row (DMAX / 4)
#define ROW4 17        // vec4 per padded shared row
#define LANES 8        // invocations per row group
#define RQ 4           // rows per row group
#define XP4 ((XW + 4) / 4)   // vec4 per exchange row
#define XG4 (RQ * XP4 + 2)   // vec4 per row group's exchange region

const float LOG2E = 1.4426950408889634;
const float LN2 = 0.6931471805599453;

// Bit of the kernels' `flags` beyond FLAG_MASK and FLAG_DROPOUT: head_dim is a multiple of 4 and
// every operand starts 16-byte aligned, so rows are read and written as vec4 (kFlashFlagVec4 on
// the host, the same bit the tensor-core kernels use).
const uint FLAG_ROWS_VEC4 = 4u;
// And: Tq is a multiple of 4, so rows of the score-gradient buffer ds^T ([B, Hq, Tk, Tq], written by
// attention_fast_bwd_dkv, read by attention_fast_bwd_dq_ds) are written and read as vec4 where a
// chunk starts at a multiple of 4 (kFastFlagDsVec4 on the host).
const uint FLAG_DS_VEC4 = 32u;

// acc + a . b, summed in order x, y, z, w (each step one fused multiply-add).
float fma4(vec4 a, vec4 b, float acc) {
  return fma(a.w, b.w, fma(a.z, b.z, fma(a.y, b.y, fma(a.x, b.x, acc))));
}

// Chunk c (floats 4c .. 4c + 3) of the row starting at float `row` of buf, zero past head_dim d.
vec4 load_chunk(F32Buf buf, uint row, uint c, uint d, bool vec4_rows) {
  if (vec4_rows) return 4u * c < d ? Vec4Buf(uint64_t(buf)).v[row / 4u + c] : vec4(0.0);
  vec4 x = vec4(0.0);
  [[unroll]] for (uint u = 0; u < 4u; ++u)
    if (4u * c + u < d) x[u] = buf.v[row + 4u * c + u];
  return x;
}

// Stores chunk c of the row starting at float `row`, dropping floats past head_dim d.
void store_chunk(F32Buf buf, uint row, uint c, uint d, bool vec4_rows, vec4 x) {
  if (vec4_rows) {
    if (4u * c < d) Vec4Buf(uint64_t(buf)).v[row / 4u + c] = x;
    return;
  }
  [[unroll]] for (uint u = 0; u < 4u; ++u)
    if (4u * c + u < d) buf.v[row + 4u * c + u] = x[u];
}

// Copies ROWS rows of a [.., rows, heads, D] tensor into the shared vec4 array dst (row i at
// i * PITCH4): source row i starts at float base + i * stride; rows >= valid and dims >= D are
// zero. The whole workgroup takes part (invocation t of NT; ROWS * DCH must be a multiple of NT).
// With vec4 rows, one 16-byte read per chunk and all of an invocation's reads issued before its
// stores; otherwise (head dims that are no multiple of 4, rare) a plain loop of scalar reads.
#define STAGE_ROWS(dst, ROWS, PITCH4, buf, base, stride, valid)                                 \
  if (vec4_rows) {                                                                            \
    vec4 x_[uint(ROWS) * DCH / NT];                                                           \
    FETCH_ROWS(x_, ROWS, buf, base, stride, valid)                                            \
    STORE_ROWS(dst, x_, ROWS, PITCH4)                                                         \
  } else {                                                                                    \
    [[dont_unroll]] for (uint e_ = t; e_ < uint(ROWS) * DCH; e_ += NT) {                      \
      const uint i_ = e_ / DCH, c_ = e_ % DCH;                                                \
      dst[i_ * uint(PITCH4) + c_] =                                                           \
          i_ < (valid) ? load_chunk(buf, (base) + i_ * (stride), c_, D, false) : vec4(0.0);   \
    }                                                                                         \
  }

// The two halves of STAGE_ROWS with vec4 rows: FETCH_ROWS reads this invocation's chunks into
// x (an array of ROWS * DCH / NT vec4), STORE_ROWS writes them to shared memory. A tile loop
// fetches the next tile before working on the current one, so that the loads are in flight
// during the work (the register cost: ROWS * DCH / NT vec4 per staged operand).
#define FETCH_ROWS(x, ROWS, buf, base, stride, valid)                                           \
  [[unroll]] for (uint n_ = 0; n_ < uint(ROWS) * DCH / NT; ++n_) {                            \
    const uint i_ = (t + n_ * NT) / DCH, c_ = (t + n_ * NT) % DCH;                            \
    x[n_] = i_ < (valid) && 4u * c_ < D                                                       \
                ? Vec4Buf(uint64_t(buf)).v[((base) + i_ * (stride)) / 4u + c_]                \
                : vec4(0.0);                                                                  \
  }
#define STORE_ROWS(dst, x, ROWS, PITCH4)                                                        \
  [[unroll]] for (uint n_ = 0; n_ < uint(ROWS) * DCH / NT; ++n_)                              \
    dst[((t + n_ * NT) / DCH) * uint(PITCH4) + (t + n_ * NT) % DCH] = x[n_];

// Makes a row group's shared-memory writes visible to the rest of the group. Must be reached by
// the whole workgroup (it is a workgroup barrier with ROW_SHUFFLE=0).
#if ROW_SHUFFLE
#define ROW_SYNC()              \
  subgroupMemoryBarrierShared(); \
  subgroupBarrier()
#else
#define ROW_SYNC()     \
  memoryBarrierShared(); \
  barrier()
#endif
