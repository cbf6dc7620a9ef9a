// Shared by the fused attention kernels (attention_fwd, attention_bwd_dq, attention_bwd_dkv): the
// scalar parameters every one of them receives, which keys a query may see, and the score
// transform (scale, then optional tanh soft-capping). Keeping these in one place guarantees that
// the backward kernels recompute exactly the scores the forward used.
//
// Layouts (all contiguous f32 unless noted):
//   q, o, dq, do : [B, Tq, Hq, D]       k, v, dk, dv : [B, Tk, Hkv, D]
//   lse, delta   : [B, Hq, Tq]          mask (I32)   : [B, Tk], nonzero = real token

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
