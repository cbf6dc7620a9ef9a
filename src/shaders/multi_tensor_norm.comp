// The first level of a norm over a list of gradients in one dispatch (ops::global_l2_norm,
// ops::grad_norm_and_overflow): workgroup g sums the squares of chunk g (4096 elements of one
// tensor, multi_tensor.glsl) in the fixed order of reduce_flat.comp's first level -- invocation t
// takes start+t, start+t+256, ..., then a fixed shared-memory tree -- and writes partial[g], the
// number the per-tensor first level wrote for the same chunk. The second level (reduce_flat.comp
// or grad_overflow_norm.comp over the partials) is unchanged.
//   OVERFLOW 0: sum of x^2 (reduce_flat's SQUARE level).
//   OVERFLOW 1: sum of (x * inv_scale)^2, and partial[flag_offset + g] = 1 if the chunk holds an
//               inf or NaN (grad_overflow_norm.comp's LEVEL 0: GradScaler's check on the scaled
//               values, read from the exponent bits).
#version 460
#include "common.glsl"
#include "multi_tensor.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(constant_id = 0) const uint OVERFLOW = 0;

layout(push_constant, std430) uniform Push {
  TensorRecords table;
  F32Buf out_;       // the partials: [chunks], or [2 * chunks] with OVERFLOW
  uint count;        // records
  uint chunks;       // chunks over all records
  uint flag_offset;  // OVERFLOW: where the flags start (= chunks)
  float inv_scale;   // OVERFLOW: 1 / loss scale
} p;

shared float sums[LOCAL_SIZE];
shared float flags[LOCAL_SIZE];

bool non_finite(float x) { return (floatBitsToUint(x) & 0x7f800000u) == 0x7f800000u; }

void main() {
  const uint g = flat_group();
  if (g >= p.chunks) return;  // uniform across the workgroup
  const TensorRecord rec = p.table.r[record_of_chunk(p.table, p.count, g)];
  F32Buf in_ = F32Buf(rec.grad);
  const uint start = (g - rec.first_chunk) * MULTI_CHUNK;
  const uint end = min(rec.n, start + MULTI_CHUNK);
  const uint t = gl_LocalInvocationID.x;
  float acc = 0.0;
  float bad = 0.0;
  for (uint i = start + t; i < end; i += LOCAL_SIZE) {
    float x = in_.v[i];
    if (OVERFLOW != 0) {
      if (non_finite(x)) bad = 1.0;
      float u = x * p.inv_scale;
      acc += u * u;
    } else {
      acc += x * x;
    }
  }
  sums[t] = acc;
  flags[t] = bad;
  barrier();
  for (uint s = LOCAL_SIZE / 2; s > 0; s >>= 1) {
    if (t < s) {
      sums[t] += sums[t + s];
      if (OVERFLOW != 0) flags[t] = max(flags[t], flags[t + s]);
    }
    barrier();
  }
  if (t == 0) {
    p.out_.v[g] = sums[0];
    if (OVERFLOW != 0) p.out_.v[p.flag_offset + g] = flags[0];
  }
}
