// Exclusive prefix sum of a u32 array in three launches (integer sums: exact in any order):
//   blocks: each workgroup scans 1024 elements (4 per thread) and writes its block total;
//   sums:   one workgroup scans the block totals in place, in chunks of 256 with a carry, and
//           writes the grand total;
//   add:    adds each block's prefix to its elements.
// Used by the embedding backward to turn per-id counts into bucket offsets.
//!novariant_base
//!variant blocks -DPHASE=0
//!variant sums -DPHASE=1
//!variant add -DPHASE=2
#version 460
#include "common.glsl"
#define LOCAL_SIZE 256
#define PER_THREAD 4
#define BLOCK (LOCAL_SIZE * PER_THREAD)
layout(local_size_x = LOCAL_SIZE) in;

shared uint s_scan[LOCAL_SIZE];

// Exclusive scan of one value per thread across the workgroup (Hillis-Steele); returns this
// thread's prefix and leaves the workgroup total in s_scan[LOCAL_SIZE - 1].
uint workgroup_exclusive_scan(uint value) {
  uint t = gl_LocalInvocationID.x;
  s_scan[t] = value;
  barrier();
  for (uint off = 1u; off < LOCAL_SIZE; off <<= 1) {
    uint add = t >= off ? s_scan[t - off] : 0u;
    barrier();
    s_scan[t] += add;
    barrier();
  }
  return s_scan[t] - value;
}

#if PHASE == 0
layout(push_constant, std430) uniform Push {
  U32Buf in_;
  U32Buf out_;
  U32Buf block_sums;
  uint n;
} p;

void main() {
  uint g = flat_group();
  uint base = g * BLOCK + gl_LocalInvocationID.x * PER_THREAD;
  uint v[PER_THREAD];
  uint total = 0u;
  for (uint k = 0u; k < PER_THREAD; ++k) {
    v[k] = base + k < p.n ? p.in_.v[base + k] : 0u;
    total += v[k];
  }
  uint prefix = workgroup_exclusive_scan(total);
  for (uint k = 0u; k < PER_THREAD; ++k) {
    if (base + k < p.n) p.out_.v[base + k] = prefix;
    prefix += v[k];
  }
  if (gl_LocalInvocationID.x == LOCAL_SIZE - 1u) p.block_sums.v[g] = s_scan[LOCAL_SIZE - 1u];
}

#elif PHASE == 1
layout(push_constant, std430) uniform Push {
  U32Buf block_sums;  // scanned in place
  U32Buf total;       // [1] out
  uint n_blocks;
} p;

void main() {
  uint t = gl_LocalInvocationID.x;
  uint carry = 0u;
  for (uint start = 0u; start < p.n_blocks; start += LOCAL_SIZE) {
    uint i = start + t;
    uint v = i < p.n_blocks ? p.block_sums.v[i] : 0u;
    uint prefix = workgroup_exclusive_scan(v);
    if (i < p.n_blocks) p.block_sums.v[i] = carry + prefix;
    carry += s_scan[LOCAL_SIZE - 1u];
    barrier();  // s_scan is reused by the next chunk
  }
  if (t == 0u) p.total.v[0] = carry;
}

#else
layout(push_constant, std430) uniform Push {
  U32Buf out_;
  U32Buf block_sums;
  uint n;
} p;

void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  p.out_.v[i] += p.block_sums.v[i / BLOCK];
}
#endif
