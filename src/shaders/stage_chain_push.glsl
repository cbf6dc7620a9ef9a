// Stage chaining (vk::Stream's chained dispatches, see vk/stream.h): inside a captured graph a
// dependent stage can start without a pipeline barrier. Its workgroups issue the loads that need
// nothing from the stage before (weights), then wait on a device counter until every workgroup of
// that stage has counted itself done, and only then read its outputs; each workgroup of a chained
// dispatch counts itself done after its last store. The host decides per dispatch (it fills the
// push fields below; zero counters means no chaining at all), so one build serves both ways; a
// kernel's plain build (neither VKF_VMM nor VKF_CHAIN_COHERENT) never waits or counts.
//
// The includer includes this file before its push block `p`, ends that block with
// STAGE_CHAIN_PUSH_FIELDS (16 bytes, 8-byte aligned), includes stage_chain.glsl after it, and
// calls stage_chain_wait() before its first read of another stage's output and
// stage_chain_signal() after its last store: both in uniform control flow, by every invocation.
//
// Memory, in the kernels' "_vmm" builds (VKF_VMM, the Vulkan memory model; what chained
// dispatches run where the device has it at device scope): the waiting invocation polls the
// counter with relaxed atomic loads, and two device-scope workgroup barriers acquire what the
// waited-on stages released (for the polling invocation, then for the rest), so the plain loads
// after the wait see their stores; the signal's barrier and release add make the workgroup's
// stores available before its count. In the "_coherent" builds (VKF_CHAIN_COHERENT, the legacy
// model; where the device lacks the memory model) the waiting invocation polls with
// coherent volatile loads, a device-scope memory barrier and the workgroup barrier order the
// workgroup's reads after the count it saw, and what the waited-on stages wrote is read coherently
// (chained_f32 / chained_vec4 in stage_chain.glsl: that model's barriers order only coherent
// accesses, and without them stale cached lines were read on the H200).
//
// Forward progress: a waiting workgroup holds its multiprocessor slot, which is safe where every
// workgroup of a dispatch starts before any of the next one's (in-order launch, as on NVIDIA);
// chaining is off unless asked for, and every wait gives up after a bounded number of polls,
// counting the fault in slot 0 (a wrong result, never a hang; vk::Graph::check_chain_counters()
// reports it).
//
// The fields: the u32 counters' address (0: not chained), the slot waited on (bits 0-15) and the
// slot signalled (bits 16-31), and the count waited for (0: no wait).
#define STAGE_CHAIN_PUSH_FIELDS \
  uint64_t chain_counters;      \
  uint chain_slots;             \
  uint chain_wait_count;

#define STAGE_CHAIN_NO_SLOT 0xFFFFu
#define STAGE_CHAIN_FAULT_SLOT 0u  // where a wait that gave up is counted (no stage uses it)
#define STAGE_CHAIN_MAX_POLLS (1u << 24)
