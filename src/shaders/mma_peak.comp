// bench/mma_peak: how fast the tensor cores multiply when nothing else runs, as Vulkan's
// subgroup-scope NV cooperative matrices reach them on this device and driver. Every subgroup
// loads NA f16 A fragments and NB f16 B fragments (16 x 16) once, then repeats `iters` rounds of
// the NA x NB multiply-adds into f32 accumulators held in registers: no memory traffic and no
// barrier inside the loop, so the rate is the ceiling of any GEMM or attention kernel built on
// these instructions (the GEMM's own rate against it says how much its staging costs). The
// accumulators are summed and stored at the end so that the work stays live.
//
// Variants by accumulators per subgroup: a1b1 (one dependent chain: the instruction's latency),
// a2b2, a2b4 and a4b4 (independent chains, as a GEMM's register tile). `feed` (NA = 1, NB = 4)
// runs the flash attention's pattern instead: per round and chain j, s = a b_j from zero, then
// c_j += f16(s) b_j -- an accumulator converted to an f16 operand, which the attention does for
// its probabilities -- so its rate against a2b2's (the same four chains, no conversion) shows
// what the conversion costs.
//!requires GL_NV_cooperative_matrix
//!novariant_base
//!variant a1b1 -DNA=1 -DNB=1
//!variant a2b2 -DNA=2 -DNB=2
//!variant a2b4 -DNA=2 -DNB=4
//!variant a4b4 -DNA=4 -DNB=4
//!variant feed -DNA=1 -DNB=4 -DFEED=1
#version 460
#extension GL_EXT_control_flow_attributes : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

#define NUM_SG 4
layout(local_size_x = NUM_SG * 32) in;

layout(push_constant, std430) uniform Push {
  F32Buf src;  // [(NA + NB) * 256] operand values (rounded to f16 here)
  F32Buf dst;  // [invocations]: each invocation's sum of its accumulator components
  uint iters;
} p;

shared float16_t operands[(NA + NB) * 256];
shared float spill[NUM_SG * 256];

void main() {
  const uint tid = gl_LocalInvocationIndex, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  for (uint i = tid; i < (NA + NB) * 256u; i += NUM_SG * 32u) operands[i] = float16_t(p.src.v[i]);
  barrier();
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[NA], b[NB];
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> c[NA][NB];
  [[unroll]] for (uint i = 0; i < NA; ++i) coopMatLoadNV(a[i], operands, i * 256u, 16u, false);
  [[unroll]] for (uint j = 0; j < NB; ++j)
    coopMatLoadNV(b[j], operands, (NA + j) * 256u, 16u, false);
  [[unroll]] for (uint i = 0; i < NA; ++i)
    [[unroll]] for (uint j = 0; j < NB; ++j) c[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);

  for (uint it = 0; it < p.iters; ++it) {
#ifdef FEED
    [[unroll]] for (uint j = 0; j < NB; ++j) {
      const fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> s =
          coopMatMulAddNV(a[0], b[j], fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0));
      c[0][j] = coopMatMulAddNV(fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(s), b[j], c[0][j]);
    }
#else
    [[unroll]] for (uint i = 0; i < NA; ++i)
      [[unroll]] for (uint j = 0; j < NB; ++j) c[i][j] = coopMatMulAddNV(a[i], b[j], c[i][j]);
#endif
  }

  float sum = 0.0;
  [[unroll]] for (uint i = 0; i < NA; ++i) {
    [[unroll]] for (uint j = 0; j < NB; ++j) {
      coopMatStoreNV(c[i][j], spill, sg * 256u, 16u, false);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      for (uint e = lane; e < 256u; e += 32u) sum += spill[sg * 256u + e];
      subgroupBarrier();
    }
  }
  p.dst.v[gl_WorkGroupID.x * NUM_SG * 32u + tid] = sum;
}
