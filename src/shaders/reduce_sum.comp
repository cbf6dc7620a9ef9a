// out[o] = sum over r of in[kept(o) + reduced(r)]: sums a strided f32 tensor over some of its
// dimensions (sum over a dim, and the gradient of a broadcast, which sums over broadcast
// dimensions). The host merges dimensions and passes kept dims first (shape[0..nk)) then reduced
// dims (shape[nk..nk+nr)), each with the input's strides; out is contiguous over the kept dims.
// Every variant sums in a fixed order that depends only on the shapes, so results are bitwise
// reproducible:
//   rows, rows_short: ROW_THREADS (256 or 32) invocations per output, LOCAL_SIZE / ROW_THREADS
//           outputs per workgroup; lane l sums r = l, l+ROW_THREADS, ... in order, then the fixed
//           tree of row_reduce.glsl. For long reductions (rows), short ones several to a group.
//   thread: one invocation per output sums r = 0..R-1 in order. For very short reductions.
//   cols:   16 neighbouring outputs x 16 lanes per workgroup; lane l sums r = l, l+16, ... then a
//           tree over lanes. For column sums (kept innermost dim with unit stride), where the 16
//           outputs of one r are adjacent in memory.
// The precise build accumulates in double and rounds each output once.
//!precise
//!novariant_base
//!variant rows -DMODE=0 -DROW_THREADS=256
//!variant rows_short -DMODE=0 -DROW_THREADS=32
//!variant thread -DMODE=1
//!variant cols -DMODE=2
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf in_;
  F32Buf out_;
  uint n_out;
  uint n_red;
  uint nk;
  uint nr;
  uint shape[6];
  int strides[6];
} p;

// Element offset of index `idx` over dims [first, first + count), row-major.
int offset_of(uint idx, uint first, uint count) {
  int off = 0;
  for (int d = int(first + count) - 1; d >= int(first); --d) {
    uint extent = p.shape[d];
    off += int(idx % extent) * p.strides[d];
    idx /= extent;
  }
  return off;
}

#if MODE == 0
#define ROW_SUM_ACC
#include "row_reduce.glsl"
void main() {
  uint first = flat_group() * (LOCAL_SIZE / ROW_THREADS);
  if (first >= p.n_out) return;  // uniform across the workgroup
  uint lane = gl_LocalInvocationID.x % ROW_THREADS;
  uint o = first + gl_LocalInvocationID.x / ROW_THREADS;
  bool in_range = o < p.n_out;  // outputs past the end still take part in the barriers
  VACC acc = VACC(0.0);
  if (in_range) {
    int base = offset_of(o, 0u, p.nk);
    for (uint r = lane; r < p.n_red; r += ROW_THREADS)
      acc += VACC(p.in_.v[base + offset_of(r, p.nk, p.nr)]);
  }
  acc = row_sum_acc(acc);
  if (in_range && lane == 0) p.out_.v[o] = float(acc);
}
#elif MODE == 1
void main() {
  uint o = flat_invocation(LOCAL_SIZE);
  if (o >= p.n_out) return;
  int base = offset_of(o, 0u, p.nk);
  VACC acc = VACC(0.0);
  for (uint r = 0; r < p.n_red; ++r) acc += VACC(p.in_.v[base + offset_of(r, p.nk, p.nr)]);
  p.out_.v[o] = float(acc);
}
#else
#define COLS 16
#define LANES 16
shared VACC partial[LOCAL_SIZE];
void main() {
  uint t = gl_LocalInvocationID.x;
  uint col = t % COLS, lane = t / COLS;
  uint first = flat_group() * COLS;
  if (first >= p.n_out) return;  // uniform across the workgroup
  uint o = first + col;
  VACC acc = VACC(0.0);
  if (o < p.n_out) {
    int base = offset_of(o, 0u, p.nk);
    for (uint r = lane; r < p.n_red; r += LANES) acc += VACC(p.in_.v[base + offset_of(r, p.nk, p.nr)]);
  }
  partial[t] = acc;
  barrier();
  for (uint s = LANES / 2; s > 0; s >>= 1) {
    if (lane < s) partial[t] += partial[t + s * COLS];
    barrier();
  }
  if (lane == 0 && o < p.n_out) p.out_.v[o] = float(partial[t]);
}
#endif
