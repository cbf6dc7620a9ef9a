// The wait and the signal of a chained dispatch (see stage_chain_push.glsl, included before the
// push block `p` whose fields these read).
#ifdef VKF_VMM
// The Vulkan memory model's form (common.glsl's VKF_VMM): after the waiting invocation has read
// the count, the workgroup's device-scope barriers make what the waited-on stages stored visible
// to every invocation's later loads, which then go through the cache as usual; the signal's
// device-scope barrier and release add make this workgroup's stores available first.
layout(buffer_reference, std430, buffer_reference_align = 4) buffer ChainCounters { uint v[]; };

void stage_chain_wait() {
  if (p.chain_counters == 0 || p.chain_wait_count == 0) return;
  if (all(equal(gl_LocalInvocationID, uvec3(0)))) {
    // Relaxed polls: with acquire loads in this loop, which only one invocation runs, lavapipe
    // (Mesa 22.3) lost the waiting workgroups' own counts (see matmul_skinny_f16.comp's
    // compute_norm_rstd); the barriers below acquire what the count it saw released.
    ChainCounters c = ChainCounters(p.chain_counters);
    const uint slot = p.chain_slots & 0xFFFFu;
    uint polls = 0;
    while (atomicLoad(c.v[slot], gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsRelaxed) <
           p.chain_wait_count) {
      if (++polls == STAGE_CHAIN_MAX_POLLS) {
        atomicAdd(c.v[STAGE_CHAIN_FAULT_SLOT], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                  gl_SemanticsRelaxed);
        break;
      }
    }
  }
  // The first barrier's acquire (after the relaxed read of a released count) makes the waited-on
  // stages' stores visible to the polling invocation; the second passes that on to the others
  // (its release follows the first's acquire in the polling invocation).
  controlBarrier(gl_ScopeWorkgroup, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                 gl_SemanticsAcquireRelease | gl_SemanticsMakeAvailable | gl_SemanticsMakeVisible);
  controlBarrier(gl_ScopeWorkgroup, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                 gl_SemanticsAcquireRelease | gl_SemanticsMakeAvailable | gl_SemanticsMakeVisible);
}

void stage_chain_signal() {
  const uint slot = p.chain_slots >> 16;
  if (p.chain_counters == 0 || slot == STAGE_CHAIN_NO_SLOT) return;
  controlBarrier(gl_ScopeWorkgroup, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                 gl_SemanticsAcquireRelease | gl_SemanticsMakeAvailable | gl_SemanticsMakeVisible);
  if (all(equal(gl_LocalInvocationID, uvec3(0))))
    atomicAdd(ChainCounters(p.chain_counters).v[slot], 1u, gl_ScopeDevice,
              gl_StorageSemanticsBuffer, gl_SemanticsRelease | gl_SemanticsMakeAvailable);
}

// Reads of other stages' outputs: plain (non-private) loads, made visible by the wait.
float chained_f32(uint64_t base, uint i) { return F32Buf(base).v[i]; }
vec4 chained_vec4(uint64_t base, uint i) { return Vec4Buf(base).v[i]; }

#elif defined(VKF_CHAIN_COHERENT)
// The "_coherent" builds (the legacy memory model), which chained dispatches run where the
// memory-model builds cannot.
layout(buffer_reference, std430, buffer_reference_align = 4) coherent volatile buffer
    ChainCounters {
  uint v[];
};

void stage_chain_wait() {
  if (p.chain_counters == 0 || p.chain_wait_count == 0) return;
  if (all(equal(gl_LocalInvocationID, uvec3(0)))) {
    ChainCounters c = ChainCounters(p.chain_counters);
    const uint slot = p.chain_slots & 0xFFFFu;
    uint polls = 0;
    while (c.v[slot] < p.chain_wait_count) {
      if (++polls == STAGE_CHAIN_MAX_POLLS) {
        atomicAdd(c.v[STAGE_CHAIN_FAULT_SLOT], 1u);
        break;
      }
    }
    memoryBarrierBuffer();
  }
  barrier();
  memoryBarrierBuffer();
}

void stage_chain_signal() {
  const uint slot = p.chain_slots >> 16;
  if (p.chain_counters == 0 || slot == STAGE_CHAIN_NO_SLOT) return;
  memoryBarrierBuffer();
  barrier();
  if (all(equal(gl_LocalInvocationID, uvec3(0))))
    atomicAdd(ChainCounters(p.chain_counters).v[slot], 1u);
}

// Whether this dispatch waited on another stage. Then what the stages it waited on wrote is read
// past the multiprocessor's own cache: with no pipeline barrier since, that cache may still hold
// lines an earlier stage on the same multiprocessor read before they were rewritten (seen on the
// H200: a chained decode step's tokens differed from the eager step's until these reads were
// made coherent).
bool stage_chain_waited() { return p.chain_counters != 0 && p.chain_wait_count != 0; }

layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer ChainedF32 {
  float v[];
};
layout(buffer_reference, std430, buffer_reference_align = 16) coherent buffer ChainedVec4 {
  vec4 v[];
};

// Element i of the f32 (vec4) array at `base`, read coherently where the dispatch waited.
float chained_f32(uint64_t base, uint i) {
  return stage_chain_waited() ? ChainedF32(base).v[i] : F32Buf(base).v[i];
}
vec4 chained_vec4(uint64_t base, uint i) {
  return stage_chain_waited() ? ChainedVec4(base).v[i] : Vec4Buf(base).v[i];
}

#else
// The plain build, which never waits or counts: core/launch.cpp's chained_module runs it only
// where the stream does not chain stages (its chain fields are then zero). Plain loads: the
// coherent builds' run-time choice costs every activation read a select (a batch-8 decode step on
// the H200 took 2.74-2.75 ms with it against 2.50 before it, bench/RESULTS.md, twenty-fifth
// session).
void stage_chain_wait() {}
void stage_chain_signal() {}
float chained_f32(uint64_t base, uint i) { return F32Buf(base).v[i]; }
vec4 chained_vec4(uint64_t base, uint i) { return Vec4Buf(base).v[i]; }
#endif
