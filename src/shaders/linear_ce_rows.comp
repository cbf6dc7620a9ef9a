// Cross-entropy fused with the LM head, the per-row part (ops/linear_cross_entropy.cpp runs it on
// each chunk of rows right after the head's product z = h·Wᵀ). One workgroup per row:
//   y = z · scale, then, with cap > 0, y = cap · tanh(y / cap): the same f32 expressions as the
//     unfused head's ops::scale and ops::softcap, so y is what the logits tensor would hold;
//   lse = logsumexp(y) and the row loss lse - y[label] (0 for ignore_index, NaN for a label
//     outside [0, V)), reduced exactly as ce_forward.comp reduces (max, then the sum of
//     exp(y - max) in strided slices and a fixed shared-memory tree), written as hi/lo pairs at
//     the row's place among all N rows for ce_reduce.comp;
//   with write_grad, the chunk row is overwritten in place by d(row loss)/dz =
//     (softmax(y) - onehot) · (1 - tanh²) · scale, the chain of ce_backward, the soft-cap's and the
//     scale's backward with an incoming gradient of 1 (0 for ignored rows, NaN for a bad label);
//     or, with grad16 set, written there as f16 instead (rounded as convert.comp rounds: the f16
//     operand of the gradient products in mixed precision, without a conversion pass).
// Bitwise reproducible: every reduction has a fixed order.
//!novariant_base
//!variant i32 -DID_I64=0
//!variant i64 -DID_I64=1
//!precise
#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "precise_math.glsl"
#include "token_ids.glsl"
#include "f16_round.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf logits;    // [rows, V] this chunk's z; gradient out with write_grad
  IdBuf labels;     // [total_rows] every row's label
  F32Buf row_loss;  // [2 total_rows] out: hi values, then the rounding residuals
  uint64_t grad16;  // 0: the gradient overwrites logits; else [rows, V] f16 out
  uint rows;        // rows in this chunk
  uint first_row;   // the chunk's first row among all rows
  uint total_rows;
  uint vocab;
  int ignore_lo;  // ignore_index as 32-bit halves
  int ignore_hi;
  float scale;
  float cap;        // 0: no soft-cap
  uint write_grad;
} p;

#define UNROLL 4  // strided elements per thread and round
// z[u] = element c0 + u * LOCAL_SIZE of the row (0 past its end).
#define LOAD_ROUND(z, c0)                                           \
  [[unroll]] for (uint u = 0; u < UNROLL; ++u) {                    \
    const uint c_ = (c0) + u * LOCAL_SIZE;                          \
    z[u] = c_ < p.vocab ? p.logits.v[base + c_] : 0.0;              \
  }

shared float s_red[LOCAL_SIZE];
shared VACC s_sum[LOCAL_SIZE];

// The logit the unfused head would produce from z, and d(logit)/d(z / scale) (1 - tanh²).
float logit_of(float z, out float slope) {
  float y = z * p.scale;
  slope = 1.0;
  if (p.cap > 0.0) {
    const float t = vtanh(y / p.cap);
    y = p.cap * t;
    slope = 1.0 - t * t;
  }
  return y;
}

void main() {
  const uint row = flat_group();
  if (row >= p.rows) return;  // uniform across the workgroup
  const uint t = gl_LocalInvocationID.x;
  const uint base = row * p.vocab;
  const uint label_row = p.first_row + row;
  float slope;

  // Each loop takes UNROLL strided elements per round, all loaded before any is used (more
  // bytes in flight), then consumed in the order of a plain strided loop: the same sums.
  float m = uintBitsToFloat(0xff800000u);  // -inf
  for (uint c0 = t; c0 < p.vocab; c0 += UNROLL * LOCAL_SIZE) {
    float z[UNROLL];
    LOAD_ROUND(z, c0)
    [[unroll]] for (uint u = 0; u < UNROLL; ++u)
      if (c0 + u * LOCAL_SIZE < p.vocab) m = max(m, logit_of(z[u], slope));
  }
  s_red[t] = m;
  barrier();
  for (uint s = LOCAL_SIZE / 2u; s > 0u; s >>= 1) {
    if (t < s) s_red[t] = max(s_red[t], s_red[t + s]);
    barrier();
  }
  const float row_max = s_red[0];

  VACC sum = VACC(0.0);
  for (uint c0 = t; c0 < p.vocab; c0 += UNROLL * LOCAL_SIZE) {
    float z[UNROLL];
    LOAD_ROUND(z, c0)
    [[unroll]] for (uint u = 0; u < UNROLL; ++u)
      if (c0 + u * LOCAL_SIZE < p.vocab) sum += VACC(vexp(logit_of(z[u], slope) - row_max));
  }
  s_sum[t] = sum;
  barrier();
  for (uint s = LOCAL_SIZE / 2u; s > 0u; s >>= 1) {
    if (t < s) s_sum[t] += s_sum[t + s];
    barrier();
  }
#if VKF_PRECISE
  const double lse = double(row_max) + dlog(s_sum[0]);
#else
  const float lse = row_max + log(s_sum[0]);
#endif
  const float lse_f = float(lse);
  const bool ignored = id_equals(p.labels, label_row, ivec2(p.ignore_lo, p.ignore_hi));
  const uint label = ignored ? kInvalidRow : row_of_id(p.labels, label_row, p.vocab);
  // Every thread has read the row's label logit before any thread overwrites the row below.
  const float label_logit = label == kInvalidRow ? 0.0 : logit_of(p.logits.v[base + label], slope);
  barrier();
  if (t == 0u) {
    VACC loss;
    if (ignored) {
      loss = VACC(0.0);
    } else {
      loss = label == kInvalidRow ? VACC(uintBitsToFloat(0x7fc00000u)) : lse - VACC(label_logit);
    }
    // hi/lo: the f32 row loss and what its rounding dropped (0 unless precise).
    const float hi = float(loss);
    p.row_loss.v[label_row] = hi;
    p.row_loss.v[p.total_rows + label_row] = float(loss - VACC(hi));
  }
  if (p.write_grad == 0u) return;
  const float nan = uintBitsToFloat(0x7fc00000u);
  for (uint c0 = t; c0 < p.vocab; c0 += UNROLL * LOCAL_SIZE) {
    float z[UNROLL];
    LOAD_ROUND(z, c0)
    [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
      const uint c = c0 + u * LOCAL_SIZE;
      if (c >= p.vocab) break;
      float g;
      if (ignored) {
        g = 0.0;
      } else if (label == kInvalidRow) {
        g = nan;
      } else {
        const float y = logit_of(z[u], slope);
        const float prob = vexp(y - lse_f);
        g = ((prob - (c == label ? 1.0 : 0.0)) * slope) * p.scale;
      }
      if (p.grad16 != 0ul)
        U16Buf(p.grad16).v[base + c] = uint16_t(f16_bits(g));
      else
        p.logits.v[base + c] = g;
    }
  }
}
