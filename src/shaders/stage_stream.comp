// decode_bench --stage-stream: one stage of a chain of dependent weight-streaming dispatches, the
// shape of a decode step's products without their arithmetic. Each workgroup reads its own 32 KiB
// slice of a weight buffer (8 16-byte loads in flight per invocation, as the skinny f16 products),
// then the previous stage's 256-value output, and workgroup 0 writes that output plus one, so
// after n stages every value is n (the host checks it). The weight loads stay live through a store
// that happens only when they fold to a sentinel.
// The `atomics` variant then adds one to each of 2048 64-bit integers shared by every workgroup
// (what a split-K product with fixed-point atomic sums issues per workgroup).
//!variant atomics -DATOMICS=1
#version 460
#extension GL_EXT_control_flow_attributes : require
#ifndef ATOMICS
#define ATOMICS 0
#endif
#if ATOMICS
#extension GL_EXT_shader_atomic_int64 : require
#endif
#include "common.glsl"
#define LOCAL_SIZE 256
#define LOADS 8
layout(local_size_x = LOCAL_SIZE) in;

layout(buffer_reference, std430, buffer_reference_align = 16) buffer UVec4Buf { uvec4 v[]; };

layout(push_constant, std430) uniform Push {
  uint64_t weights;  // uvec4 [workgroups * LOADS * LOCAL_SIZE]
  F32Buf act_in;     // [256], the previous stage's output
  F32Buf act_out;    // [256]
  U32Buf sink;       // [256]
  uint64_t sums;     // atomics: int64 [2048]
} p;

void main() {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupID.x;
  UVec4Buf w = UVec4Buf(p.weights);
  uvec4 v[LOADS];
  [[unroll]] for (uint u = 0; u < LOADS; ++u) v[u] = w.v[(wg * LOADS + u) * LOCAL_SIZE + tid];
  uint fold = 0;
  [[unroll]] for (uint u = 0; u < LOADS; ++u) fold ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  if (fold == 0x7fc00001u) p.sink.v[tid] = wg;
#if ATOMICS
  [[unroll]] for (uint j = 0; j < 8u; ++j) atomicAdd(I64Buf(p.sums).v[j * LOCAL_SIZE + tid], 1l);
#endif
  if (wg == 0u) p.act_out.v[tid] = p.act_in.v[tid] + 1.0;
}
