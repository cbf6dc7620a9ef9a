// Counter-based random numbers for dropout: Philox4x32-10 (Salmon et al., "Parallel Random
// Numbers: As Easy as 1, 2, 3", SC 2011). The random word of element i is a pure function of
// (seed, counter = offset + i), so a backward pass regenerates a forward pass's dropout mask from
// two integers instead of storing it, and any kernel (plain dropout, fused attention) can produce
// the mask of any element on its own. src/ops/dropout_ref.cpp computes the same words on the CPU.
//
// Only 32-bit integer arithmetic: 64-bit counters are carried as (low, high) halves, since
// lavapipe miscompiles some 64-bit integer comparisons (see token_ids.glsl).

const uint PHILOX_M0 = 0xD2511F53u;
const uint PHILOX_M1 = 0xCD9E8D57u;
const uint PHILOX_W0 = 0x9E3779B9u;  // key schedule (golden ratio)
const uint PHILOX_W1 = 0xBB67AE85u;  // key schedule (sqrt(3) - 1)

uvec4 philox4x32_10(uvec4 ctr, uvec2 key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) key += uvec2(PHILOX_W0, PHILOX_W1);
    uint hi0, lo0, hi1, lo1;
    umulExtended(PHILOX_M0, ctr.x, hi0, lo0);
    umulExtended(PHILOX_M1, ctr.z, hi1, lo1);
    ctr = uvec4(hi1 ^ ctr.y ^ key.x, lo1, hi0 ^ ctr.w ^ key.y, lo0);
  }
  return ctr;
}

// a + b for 64-bit values held as (low, high) halves.
uvec2 add64(uvec2 a, uvec2 b) {
  uint carry;
  const uint lo = uaddCarry(a.x, b.x, carry);
  return uvec2(lo, a.y + b.y + carry);
}

// The random word of 64-bit counter `ctr` under 64-bit `seed` (both as halves).
uint dropout_word(uvec2 seed, uvec2 ctr) { return philox4x32_10(uvec4(ctr, 0u, 0u), seed).x; }

// Keep decision: the word's top 24 bits as a uniform u = bits / 2^24 in [0, 1), kept iff u >= p.
// The host passes threshold = ceil(p * 2^24) (ops::dropout_threshold), so the test is exact in
// integers: bits >= threshold.
bool dropout_keep(uvec2 seed, uvec2 ctr, uint threshold) {
  return (dropout_word(seed, ctr) >> 8) >= threshold;
}
