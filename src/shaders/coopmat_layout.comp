// Which element of a 16 x 16 f32 cooperative-matrix accumulator (VK_NV_cooperative_matrix, one
// subgroup of 32) each invocation's component holds: the implementation decides, and kernels that
// reduce along rows with subgroup shuffles need to know (ops/coopmat_layout.h). The matrix whose
// element (r, c) is 16 r + c is loaded from shared memory and each invocation writes its
// components: out[lane * len + t] = 16 r + c of component t, and out[32 * len] = len (at most 32
// components, so the host reserves 32 * 32 + 1 words).
//!requires GL_NV_cooperative_matrix
#version 460
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#include "common.glsl"
layout(local_size_x = 32) in;

layout(push_constant, std430) uniform Push { U32Buf out_; } p;

shared float index_matrix[256];

void main() {
  const uint lane = gl_SubgroupInvocationID;
  for (uint i = lane; i < 256u; i += 32u) index_matrix[i] = float(i);
  barrier();
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> m;
  coopMatLoadNV(m, index_matrix, 0, 16, false);
  const uint len = uint(m.length());
  for (uint t = 0; t < len && t < 32u; ++t) p.out_.v[1u + lane * len + t] = uint(m[t]);
  if (lane == 0u) p.out_.v[0] = len;
}
