// The wait and the signal of a chained dispatch (see stage_chain_push.glsl, included before the
// push block `p` whose fields these read).
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
