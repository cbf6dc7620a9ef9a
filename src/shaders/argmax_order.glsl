// torch.argmax's order on (value, index) pairs, shared by argmax_rows.comp and the greedy choice
// in matmul_skinny_f16.comp (ARGMAX), so that both pick the same token: NaN above every number,
// then the larger value, then the lower index (-0.0 and +0.0 compare equal). ARGMAX_NONE marks
// "no element seen yet". Exact comparisons, so a fold over any grouping gives the same pair.
#ifndef VKF_ARGMAX_ORDER_GLSL
#define VKF_ARGMAX_ORDER_GLSL

const uint ARGMAX_NONE = 0xffffffffu;

// Whether (a, ia) wins over (b, ib).
bool argmax_better(float a, uint ia, float b, uint ib) {
  if (ib == ARGMAX_NONE) return ia != ARGMAX_NONE;
  if (ia == ARGMAX_NONE) return false;
  const bool an = isnan(a), bn = isnan(b);
  if (an != bn) return an;
  if (!an && a != b) return a > b;
  return ia < ib;
}

#endif
