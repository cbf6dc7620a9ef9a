// Row-wise argmax of an fp32 matrix, as torch.argmax: the first index of the largest value, NaN
// counting as larger than any number. Greedy decoding chooses its tokens with it on the device,
// so only one int32 per row comes back to the host instead of the row of logits. Two passes, so
// that a long row (a vocabulary of 128K logits) is read by many workgroups at once rather than as
// one long chain of dependent loads:
//   partial: grid (chunks, rows); each workgroup takes CHUNK consecutive elements of a row, each
//            thread PER_THREAD of them (loads issued together), and a fixed tree keeps the better
//            (value, index) pair: one pair per chunk.
//   final:   grid (rows); one workgroup folds a row's chunk pairs in the same way.
//   final_advance: one workgroup folds every row in turn, then advances a decode step's inputs
//            for the next step (DecodeStepRunner's run-ahead): each row's new token becomes its
//            id, its position grows by one and so does the cache length; the tokens also go to
//            row (cache length before the step) % ring_rows of a ring the host reads.
// Within a thread indices increase, and the tree and the final fold prefer the lower index on
// ties, so the result is exact and deterministic.
//!novariant_base
//!variant partial -DPARTIAL=1
//!variant final -DPARTIAL=0
//!variant final_advance -DPARTIAL=0 -DADVANCE=1
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "argmax_order.glsl"
#define LOCAL_SIZE 256
#define PER_THREAD 16
#define CHUNK (LOCAL_SIZE * PER_THREAD)  // elements per workgroup of the partial pass
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf x;         // partial: row r starts at element r * row_stride
  F32Buf pvalue;    // [rows, chunks]: each chunk's best value
  U32Buf pindex;    // [rows, chunks]: and its index in the row
  I32Buf out_;      // final: out_[r] = the index chosen in row r
  uint cols;        // row length, >= 1
  uint row_stride;
  uint chunks;      // ceil(cols / CHUNK)
  // final_advance: the step's inputs, I32 [2 rows + 1] (ids, positions, positions cached), the
  // row count (<= LOCAL_SIZE) and the ring's rows; out_ is the ring, [ring_rows, rows].
  I32Buf state;
  uint rows;
  uint ring_rows;
} p;
#ifndef ADVANCE
#define ADVANCE 0
#endif

shared float best_value[LOCAL_SIZE];
shared uint best_index[LOCAL_SIZE];

// The workgroup's best pair, by a fixed tree over the threads' pairs (valid in thread 0).
void reduce_workgroup(uint tid, float bv, uint bi) {
  best_value[tid] = bv;
  best_index[tid] = bi;
  barrier();
  for (uint s = LOCAL_SIZE / 2; s > 0; s /= 2) {
    if (tid < s && argmax_better(best_value[tid + s], best_index[tid + s], best_value[tid],
                                 best_index[tid])) {
      best_value[tid] = best_value[tid + s];
      best_index[tid] = best_index[tid + s];
    }
    barrier();
  }
}

shared int chosen[LOCAL_SIZE];  // final_advance: each row's token

// The final passes: the thread's share of row `row`'s chunk pairs, in chunk order.
void fold_chunks(uint tid, uint row, inout float bv, inout uint bi) {
  for (uint c = tid; c < p.chunks; c += LOCAL_SIZE) {
    const float cv = p.pvalue.v[row * p.chunks + c];
    const uint ci = p.pindex.v[row * p.chunks + c];
    if (argmax_better(cv, ci, bv, bi)) {
      bv = cv;
      bi = ci;
    }
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  float bv = 0.0;
  uint bi = ARGMAX_NONE;
#if PARTIAL
  const uint chunk = gl_WorkGroupID.x, row = gl_WorkGroupID.y;
  const uint first = chunk * CHUNK + tid, base = row * p.row_stride;
  float v[PER_THREAD];
  [[unroll]] for (uint j = 0; j < PER_THREAD; ++j) {
    const uint i = first + j * LOCAL_SIZE;
    v[j] = i < p.cols ? p.x.v[base + i] : 0.0;
  }
  [[unroll]] for (uint j = 0; j < PER_THREAD; ++j) {
    const uint i = first + j * LOCAL_SIZE;
    if (i < p.cols && argmax_better(v[j], i, bv, bi)) {
      bv = v[j];
      bi = i;
    }
  }
  reduce_workgroup(tid, bv, bi);
  if (tid == 0) {
    p.pvalue.v[row * p.chunks + chunk] = best_value[0];
    p.pindex.v[row * p.chunks + chunk] = best_index[0];
  }
#elif ADVANCE
  for (uint row = 0; row < p.rows; ++row) {  // the same fold as `final`, row after row
    bv = 0.0;
    bi = ARGMAX_NONE;
    fold_chunks(tid, row, bv, bi);
    reduce_workgroup(tid, bv, bi);
    if (tid == 0) chosen[row] = int(best_index[0]);
    barrier();  // best_* are rewritten by the next row's tree
  }
  const uint rows = p.rows;
  const int cached = p.state.v[2 * rows];
  barrier();  // every invocation has read the cache length before it changes
  if (tid < rows) {
    const int token = chosen[tid];
    p.out_.v[uint(cached) % p.ring_rows * rows + tid] = token;
    p.state.v[tid] = token;
    p.state.v[rows + tid] += 1;
  }
  if (tid == 0) p.state.v[2 * rows] = cached + 1;
#else
  const uint row = gl_WorkGroupID.x;
  fold_chunks(tid, row, bv, bi);
  reduce_workgroup(tid, bv, bi);
  if (tid == 0) p.out_.v[row] = int(best_index[0]);
#endif
}
