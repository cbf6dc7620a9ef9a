// Shared by the fused attention kernels (attention_fwd, attention_bwd_dq, attention_bwd_dkv): the
// scalar parameters every one of them receives, which keys a query may see, and the score
// transform (scale, then optional tanh soft-capping). Keeping these in one place guarantees that
// the backward kernels recompute exactly the scores the forward used, and exactly the dropout
// mask the forward applied.
//
// Layouts (all contiguous f32 unless noted):
//   q, o, dq, do : [B, Tq, Hq, D]       k, v, dk, dv : [B, Tk, Hkv, D]
//   lse, delta   : [B, Hq, Tq]          mask (I32)   : [B, Tk], nonzero = real token

#include "philox.glsl"

// Bits of each kernel's `flags` push constant (kFlag* in src/ops/attention.cpp).
const uint FLAG_MASK = 1u;     // the key padding mask is present
const uint FLAG_DROPOUT = 2u;  // dropout of the probabilities is on (AttnDropoutBuf is valid)

// Dropout parameters, written by make_dropout_params in src/ops/attention.cpp.
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer AttnDropoutBuf {
  uint seed_lo, seed_hi;      // Philox key
  uint offset_lo, offset_hi;  // counter of probability (0, 0, 0, 0)
  uint threshold;             // ceil(p * 2^24)
  float scale;                // 1 / (1 - p)
};

// Mirrors struct AttnParams in src/ops/attention.cpp (std430: ten 4-byte scalars).
struct AttnParams {
  uint tq;        // query rows
  uint tk;        // key rows
  uint hq;        // query heads
  uint hkv;       // key/value heads (divides hq)
  uint d;         // head dim
  uint causal;    // 1: key j visible only if j <= query position
  uint window;    // 0: none; else visible only if position - j < window
  int q_offset;   // query i sits at position i + q_offset (= Tk - Tq: aligned to the end)
  float scale;    // applied to q.k before the soft-cap
  float softcap;  // 0: none; else score = softcap * tanh(score / softcap)
};

// Marks a masked score in shared memory. A finite sentinel rather than -inf: Vulkan does not
// promise IEEE infinities through arithmetic, so masked entries are recognised by comparison and
// never fed to exp().
const float MASKED = -3.402823466e38;

// Causal and sliding-window visibility of key j from query position qpos (padding is separate,
// per key, because it does not depend on the query).
bool position_visible(AttnParams a, int qpos, int j) {
  if (a.causal != 0 && j > qpos) return false;
  if (a.window != 0 && qpos - j >= int(a.window)) return false;
  return true;
}

// The score the softmax sees, from the raw dot product q.k.
float transform_score(AttnParams a, float dot) {
  float s = dot * a.scale;
  if (a.softcap > 0.0) s = a.softcap * vtanh(s / a.softcap);
  return s;
}

// d(score)/d(dot): scale times the soft-cap's derivative 1 - tanh^2 at the same point.
float transform_score_grad(AttnParams a, float dot) {
  if (a.softcap <= 0.0) return a.scale;
  float t = vtanh(dot * a.scale / a.softcap);
  return a.scale * (1.0 - t * t);
}

struct AttnDropout {
  bool on;
  uvec2 seed, offset;
  uint threshold;
  float scale;
};

AttnDropout load_dropout(uint flags, AttnDropoutBuf buf) {
  AttnDropout dr;
  dr.on = (flags & FLAG_DROPOUT) != 0u;
  dr.seed = uvec2(0u);
  dr.offset = uvec2(0u);
  dr.threshold = 0u;
  dr.scale = 1.0;
  if (dr.on) {
    dr.seed = uvec2(buf.seed_lo, buf.seed_hi);
    dr.offset = uvec2(buf.offset_lo, buf.offset_hi);
    dr.threshold = buf.threshold;
    dr.scale = buf.scale;
  }
  return dr;
}

// What probability (b, h, i, j) is multiplied by: 1 without dropout, else 0 (dropped) or
// 1 / (1 - p) (kept). Its counter is offset + ((b * Hq + h) * Tq + i) * Tk + j, which can pass
// 2^32, so the product is formed in 64 bits from 32-bit halves.
float dropout_factor(AttnDropout dr, AttnParams a, uint b, uint h, uint i, uint j) {
  if (!dr.on) return 1.0;
  uint hi, lo;
  umulExtended((b * a.hq + h) * a.tq + i, a.tk, hi, lo);
  const uvec2 ctr = add64(dr.offset, add64(uvec2(lo, hi), uvec2(j, 0u)));
  return dropout_keep(dr.seed, ctr, dr.threshold) ? dr.scale : 0.0;
}
