// Cross-entropy backward over a flat [N * V] index: dlogits[n, v] = (exp(x - lse[n]) - [v ==
// label]) * scale, scale = dloss (the sum form) or dloss / count (the mean form); rows whose
// label is ignore_index get 0, rows with a label outside [0, V) get NaN (their loss is NaN too).
// dloss and count are read from GPU memory, so nothing waits on the host. With `accumulate` the
// result is added to dlogits instead of written.
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
  F32Buf logits;   // [N, V]
  IdBuf labels;    // [N]
  F32Buf lse;      // [N]
  F32Buf dloss;    // [] incoming gradient
  F32Buf count;    // [] counted rows (read only when divide != 0)
  F32Buf dlogits;  // [N, V] out
  uint total;      // N * V
  uint vocab;
  int ignore_lo;
  int ignore_hi;
  uint divide;
  uint accumulate;
} p;

void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.total) return;
  uint row = i / p.vocab;
  uint col = i - row * p.vocab;
  float g;
  if (id_equals(p.labels, row, ivec2(p.ignore_lo, p.ignore_hi))) {
    g = 0.0;
  } else {
    uint label = row_of_id(p.labels, row, p.vocab);
    float scale = p.dloss.v[0];
    if (p.divide != 0u) scale = scale / p.count.v[0];
    float prob = vexp(p.logits.v[i] - p.lse.v[row]);
    g = label == kInvalidRow ? uintBitsToFloat(0x7fc00000u)
                             : (prob - (col == label ? 1.0 : 0.0)) * scale;
  }
  if (p.accumulate != 0u) {
    p.dlogits.v[i] += g;
  } else {
    p.dlogits.v[i] = g;
  }
}
