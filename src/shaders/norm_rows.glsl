// Row layout shared by the normalization kernels. A 256-thread workgroup covers 256 / TPR rows
// with TPR threads per row (TPR a power of two the host picks from the row length), so short rows
// (per-head q/k norm, H = 64..256) keep every thread busy and long rows (16K+) still spread over
// the whole group. Each thread sums its strided elements in index order, then the TPR partial
// sums meet in a fixed-shape shared-memory tree: the result depends on H only, never on timing.
// Needs LOCAL_SIZE defined and common.glsl and precise_math.glsl included first. Sums are VACC
// (double in precise builds).

shared VACC norm_red[LOCAL_SIZE];  // double in precise builds
shared VACC2 norm_red2[LOCAL_SIZE];

// Sum of v over the TPR threads of this thread's row; every thread of the row gets the total.
// Must be reached by all threads of the workgroup (it holds barriers).
VACC row_sum(VACC v, uint lane, uint tpr) {
  const uint t = gl_LocalInvocationID.x;
  norm_red[t] = v;
  barrier();
  for (uint s = tpr >> 1; s > 0; s >>= 1) {
    if (lane < s) norm_red[t] += norm_red[t + s];
    barrier();
  }
  const VACC total = norm_red[t - lane];
  barrier();
  return total;
}

// Two sums at once (LayerNorm backward needs sum(g*w) and sum(g*w*xhat)).
VACC2 row_sum2(VACC2 v, uint lane, uint tpr) {
  const uint t = gl_LocalInvocationID.x;
  norm_red2[t] = v;
  barrier();
  for (uint s = tpr >> 1; s > 0; s >>= 1) {
    if (lane < s) norm_red2[t] += norm_red2[t + s];
    barrier();
  }
  const VACC2 total = norm_red2[t - lane];
  barrier();
  return total;
}
