// Reductions across the invocations that share one row, for kernels that give each row a segment
// of ROW_THREADS invocations (LOCAL_SIZE / ROW_THREADS rows per workgroup). A fixed shared-memory
// tree (pairs t, t + s for s = ROW_THREADS/2 ... 1), so the result is bitwise reproducible and the
// same on every device whatever its subgroup size. Every invocation of the workgroup must call
// these in uniform control flow (they contain barriers); each returns the row's total to all of
// the row's invocations. Needs LOCAL_SIZE and ROW_THREADS (a power of two) defined; define
// ROW_SUM_ACC (after including precise_math.glsl) for row_sum_acc.
// One row-sum function over type T and a shared T[LOCAL_SIZE] scratch (row_sum, row_sum_acc).
#define ROW_SUM_FUNCTION(T, name, scratch)              \
  T name(T v) {                                         \
    uint t = gl_LocalInvocationID.x;                    \
    uint lane = t % ROW_THREADS;                        \
    scratch[t] = v;                                     \
    barrier();                                          \
    for (uint s = ROW_THREADS / 2; s > 0; s >>= 1) {    \
      if (lane < s) scratch[t] += scratch[t + s];       \
      barrier();                                        \
    }                                                   \
    T total = scratch[t - lane];                        \
    barrier(); /* all have read it before reuse */      \
    return total;                                       \
  }

shared float row_scratch[LOCAL_SIZE];
ROW_SUM_FUNCTION(float, row_sum, row_scratch)
#ifdef ROW_SUM_ACC
// row_sum with the accumulator type VACC of precise_math.glsl (double in precise builds).
shared VACC row_scratch_acc[LOCAL_SIZE];
ROW_SUM_FUNCTION(VACC, row_sum_acc, row_scratch_acc)
#endif

float row_max(float v) {
  uint t = gl_LocalInvocationID.x;
  uint lane = t % ROW_THREADS;
  row_scratch[t] = v;
  barrier();
  for (uint s = ROW_THREADS / 2; s > 0; s >>= 1) {
    if (lane < s) row_scratch[t] = max(row_scratch[t], row_scratch[t + s]);
    barrier();
  }
  float m = row_scratch[t - lane];
  barrier();
  return m;
}
