// Turns a decode step's state into the next step's on the device, so that greedy decoding can run
// ahead of the host (infer::DecodeStepRunner::run_ahead): state holds I32 [ids (B), positions (B),
// positions cached (1)] as DecodeStepRunner lays them out; afterwards ids[b] = chosen[b] (the
// step's greedy token), positions[b] + 1 and cached + 1. One invocation per row; row 0 also moves
// the cache count. Each value is read and written by one invocation only, so no ordering is needed.
#version 460
#include "common.glsl"
#define LOCAL_SIZE 64
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  I32Buf state;   // [2B + 1]
  I32Buf chosen;  // [B]
  uint batch;     // B
} p;

void main() {
  const uint b = flat_invocation(LOCAL_SIZE);
  if (b >= p.batch) return;
  p.state.v[b] = p.chosen.v[b];
  p.state.v[p.batch + b] += 1;
  if (b == 0u) p.state.v[2u * p.batch] += 1;
}
