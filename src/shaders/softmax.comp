// Softmax and log-softmax over the last dimension of a contiguous f32 [rows, len] tensor, forward
// and backward, with fp32 statistics. Each row gets ROW_THREADS invocations (256 for long rows, 32
// for short ones, several rows per workgroup); invocation `lane` visits lane, lane+ROW_THREADS, ...
// in order and row_reduce.glsl combines the lanes in a fixed tree, so results are reproducible.
//   forward:  m = max x;  s = sum exp(x - m);  y = exp(x - m) / s   or   y = (x - m) - log(s)
//   backward: softmax     dx = y * (dy - sum(dy * y))
//             log-softmax dx = dy - exp(y) * sum(dy)      (y is the forward output)
// Spec constant LOG selects log-softmax.
//!novariant_base
//!variant fwd -DBACKWARD=0 -DROW_THREADS=256
//!variant fwd_short -DBACKWARD=0 -DROW_THREADS=32
//!variant bwd -DBACKWARD=1 -DROW_THREADS=256
//!variant bwd_short -DBACKWARD=1 -DROW_THREADS=32
//!precise
#version 460
#include "common.glsl"
#include "precise_math.glsl"
#define LOCAL_SIZE 256
#define ROWS_PER_GROUP (LOCAL_SIZE / ROW_THREADS)
layout(local_size_x = LOCAL_SIZE) in;
#include "row_reduce.glsl"

layout(constant_id = 0) const uint LOG = 0;

layout(push_constant, std430) uniform Push {
  F32Buf x;    // forward: input;  backward: forward output y
  F32Buf dy;   // backward only
  F32Buf out_; // forward: y;  backward: dx
  uint rows;
  uint len;
} p;

void main() {
  uint first_row = flat_group() * ROWS_PER_GROUP;
  if (first_row >= p.rows) return;  // uniform across the workgroup
  uint lane = gl_LocalInvocationID.x % ROW_THREADS;
  uint row = first_row + gl_LocalInvocationID.x / ROW_THREADS;
  bool in_range = row < p.rows;  // rows past the end still take part in the barriers
  uint base = row * p.len;
#if BACKWARD == 0
  float m = uintBitsToFloat(0xff800000u);  // -inf
  if (in_range)
    for (uint i = lane; i < p.len; i += ROW_THREADS) m = max(m, p.x.v[base + i]);
  m = row_max(m);
  float s = 0.0;
  if (in_range)
    for (uint i = lane; i < p.len; i += ROW_THREADS) s += vexp(p.x.v[base + i] - m);
  s = row_sum(s);
  if (!in_range) return;
  if (LOG != 0) {
    float log_s = vlog(s);
    for (uint i = lane; i < p.len; i += ROW_THREADS) p.out_.v[base + i] = (p.x.v[base + i] - m) - log_s;
  } else {
    for (uint i = lane; i < p.len; i += ROW_THREADS) p.out_.v[base + i] = vexp(p.x.v[base + i] - m) / s;
  }
#else
  float acc = 0.0;
  if (in_range) {
    for (uint i = lane; i < p.len; i += ROW_THREADS) {
      float g = p.dy.v[base + i];
      acc += LOG != 0 ? g : g * p.x.v[base + i];
    }
  }
  acc = row_sum(acc);
  if (!in_range) return;
  for (uint i = lane; i < p.len; i += ROW_THREADS) {
    float y = p.x.v[base + i], g = p.dy.v[base + i];
    p.out_.v[base + i] = LOG != 0 ? g - vexp(y) * acc : y * (g - acc);
  }
#endif
}
