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
