// Writes one new position's keys and values into a KV cache at the slot a device buffer names:
// cache_k[b, slot] = k[b, 0] and cache_v[b, slot] = v[b, 0] for every row b. A decode step that is
// recorded once and replayed appends at a different slot each time without being re-recorded, so
// the slot is read here rather than baked into an address. A slot outside the cache writes
// nothing. Layouts: k, v [B, 1, Hkv, D]; caches [B, capacity, Hkv, D]; all contiguous f32.
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(push_constant, std430) uniform Push {
  F32Buf k;
  F32Buf v;
  F32Buf cache_k;
  F32Buf cache_v;
  I32Buf slot;    // slot[0]: the cache position written
  uint row;       // Hkv * D: values per position
  uint batch;     // B
  uint capacity;  // positions per row of the cache
} p;

void main() {
  const uint i = flat_invocation(LOCAL_SIZE);
  const uint per_tensor = p.batch * p.row;
  if (i >= 2u * per_tensor) return;
  const int s = p.slot.v[0];
  if (s < 0 || uint(s) >= p.capacity) return;
  const bool is_v = i >= per_tensor;
  const uint e = is_v ? i - per_tensor : i;
  const uint b = e / p.row, c = e - b * p.row;
  const uint dst = (b * p.capacity + uint(s)) * p.row + c;
  if (is_v) {
    p.cache_v.v[dst] = p.v.v[e];
  } else {
    p.cache_k.v[dst] = p.k.v[e];
  }
}
