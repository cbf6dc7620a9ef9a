// Cross-entropy, final reduction in one workgroup: loss_sum = sum of row_loss over the rows whose
// label is not ignore_index, count = the number of those rows (exact integer count, stored as
// f32), and, when `mean` is set, mean = loss_sum / count (NaN when count is 0, as torch gives).
// Rows are summed per thread in increasing order, then by a fixed tree: reproducible.
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
  F32Buf row_loss;  // [2N]: hi values, then the rounding residuals
  IdBuf labels;     // [N]
  F32Buf loss_sum;  // [] out
  F32Buf count;     // [] out
  F32Buf mean;      // [] out, or 0 when not wanted
  uint rows;
  int ignore_lo;
  int ignore_hi;
} p;

shared VACC s_sum[LOCAL_SIZE];
shared uint s_count[LOCAL_SIZE];

void main() {
  uint t = gl_LocalInvocationID.x;
  ivec2 ignore = ivec2(p.ignore_lo, p.ignore_hi);
  VACC sum = VACC(0.0);
  uint n = 0u;
  for (uint r = t; r < p.rows; r += LOCAL_SIZE) {
    if (id_equals(p.labels, r, ignore)) continue;
    sum += VACC(p.row_loss.v[r]) + VACC(p.row_loss.v[p.rows + r]);
    n += 1u;
  }
  s_sum[t] = sum;
  s_count[t] = n;
  barrier();
  for (uint s = LOCAL_SIZE / 2u; s > 0u; s >>= 1) {
    if (t < s) {
      s_sum[t] += s_sum[t + s];
      s_count[t] += s_count[t + s];
    }
    barrier();
  }
  if (t != 0u) return;
  p.loss_sum.v[0] = float(s_sum[0]);
  p.count.v[0] = float(s_count[0]);
  if (uint64_t(p.mean) != 0ul) {
    p.mean.v[0] = s_count[0] == 0u ? uintBitsToFloat(0x7fc00000u) : float(s_sum[0] / VACC(s_count[0]));
  }
}
