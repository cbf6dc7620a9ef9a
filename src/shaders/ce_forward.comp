// Cross-entropy forward, one workgroup per row of logits [N, V]: lse[n] = logsumexp(row) (max,
// then the sum of exp(x - max)), and row_loss[n] = lse[n] - row[label[n]], 0 when the label is
// ignore_index, NaN when it lies outside [0, V) (so a bad label shows in the loss instead of
// being skipped silently). Each thread reduces a strided slice in increasing order, then a
// fixed-shape shared-memory tree combines the threads: the result is bitwise reproducible.
//!novariant_base
//!variant i32 -DID_I64=0
//!variant i64 -DID_I64=1
//!precise
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#include "token_ids.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf logits;    // [N, V]
  IdBuf labels;     // [N]
  F32Buf lse;       // [N] out
  F32Buf row_loss;  // [N] out
  uint rows;
  uint vocab;
  int ignore_lo;  // ignore_index as 32-bit halves
  int ignore_hi;
} p;

shared float s_red[LOCAL_SIZE];
shared VACC s_sum[LOCAL_SIZE];

void main() {
  uint row = flat_group();
  if (row >= p.rows) return;  // uniform across the workgroup
  uint t = gl_LocalInvocationID.x;
  uint base = row * p.vocab;

  float m = uintBitsToFloat(0xff800000u);  // -inf
  for (uint c = t; c < p.vocab; c += LOCAL_SIZE) m = max(m, p.logits.v[base + c]);
  s_red[t] = m;
  barrier();
  for (uint s = LOCAL_SIZE / 2u; s > 0u; s >>= 1) {
    if (t < s) s_red[t] = max(s_red[t], s_red[t + s]);
    barrier();
  }
  float row_max = s_red[0];
  barrier();

  VACC sum = VACC(0.0);
  for (uint c = t; c < p.vocab; c += LOCAL_SIZE) sum += VACC(vexp(p.logits.v[base + c] - row_max));
  s_sum[t] = sum;
  barrier();
  for (uint s = LOCAL_SIZE / 2u; s > 0u; s >>= 1) {
    if (t < s) s_sum[t] += s_sum[t + s];
    barrier();
  }
  if (t != 0u) return;
#if VKF_PRECISE
  const double lse = double(row_max) + dlog(s_sum[0]);
#else
  const float lse = row_max + log(s_sum[0]);
#endif
  p.lse.v[row] = float(lse);
  VACC loss;
  if (id_equals(p.labels, row, ivec2(p.ignore_lo, p.ignore_hi))) {
    loss = VACC(0.0);
  } else {
    uint label = row_of_id(p.labels, row, p.vocab);
    loss = label == kInvalidRow ? VACC(uintBitsToFloat(0x7fc00000u))
                                : lse - VACC(p.logits.v[base + label]);
  }
  // hi/lo: the f32 row loss and what its rounding dropped (0 unless precise).
  const float hi = float(loss);
  p.row_loss.v[row] = hi;
  p.row_loss.v[p.rows + row] = float(loss - VACC(hi));
}
