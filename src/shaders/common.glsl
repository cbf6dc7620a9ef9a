// Shared declarations for every vkformer compute shader: buffer-reference types (tensors are
// reached through 64-bit device addresses carried in push constants), the flat index of a
// workgroup in a grid folded into 2-D by grid_1d() on the host, and the GEMMs' banded tile order.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference2 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_scalar_block_layout : require
// VKF_VMM (the "_vmm" builds of kernels that can be chained, see stage_chain.glsl): the module
// uses the Vulkan memory model, and every tensor access below is non-private, so the device-scope
// barriers of a chained wait make other workgroups' stores visible to the loads that follow (the
// legacy model's barriers order only coherent accesses, and coherent loads bypass the cache).
#ifdef VKF_VMM
#pragma use_vulkan_memory_model
#extension GL_KHR_memory_scope_semantics : require
#define VKF_NP nonprivate
#else
#define VKF_NP
#endif

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32Buf { VKF_NP float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32Buf { VKF_NP uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32Buf { VKF_NP int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U16Buf { VKF_NP uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer I64Buf { VKF_NP int64_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U64Buf { VKF_NP uint64_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4Buf { VKF_NP vec4 v[]; };

// Index of this workgroup, and of this invocation, in a 1-D launch folded as (x, y) groups.
// `local_size` must be the x workgroup size. Never use gl_WorkGroupSize: lavapipe (Mesa 22.3)
// evaluates it wrongly in index arithmetic, so only the first workgroup's items get written.
uint flat_group() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
uint flat_invocation(uint local_size) { return flat_group() * local_size + gl_LocalInvocationID.x; }

// The (row, column) of this workgroup's tile in a grid of gl_NumWorkGroups.x tile columns and .y
// tile rows, rasterized in bands of `group_m` tile rows (the GEMM kernels): consecutive workgroups
// walk down a band, then move one tile column right, so that tiles running at the same time share
// their operands' slices in L2. banded_tile_of gives the same order for tile `id` of a grid of gx
// tile columns and gy tile rows (a stream-K worker walks tiles by index, not by workgroup).
uvec2 banded_tile_of(uint id, uint gx, uint gy, uint group_m) {
  const uint band = group_m * gx;
  const uint first_row = (id / band) * group_m;
  const uint band_rows = min(gy - first_row, group_m);
  return uvec2(first_row + (id % band) % band_rows, (id % band) / band_rows);
}
uvec2 banded_tile(uint group_m) {
  return banded_tile_of(flat_group(), gl_NumWorkGroups.x, gl_NumWorkGroups.y, group_m);
}

// Element offset of flat index i in a view of rank <= 6 with the given shape and strides.
uint strided_offset(uint i, uint rank, uint shape[6], int strides[6]) {
  int off = 0;
  for (int d = int(rank) - 1; d >= 0; --d) {
    uint extent = shape[d];
    off += int(i % extent) * strides[d];
    i /= extent;
  }
  return uint(off);
}
