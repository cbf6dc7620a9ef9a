// Command recording and submission. Ops append dispatches, copies and fills to the current command
// buffer; the stream inserts a memory barrier only when a command touches a buffer range that an
// earlier command wrote (or, for writes, read) since the last barrier. Work is submitted in batches
// and the host waits only when it must read a result (download) or on synchronize().
// With profiling on, every dispatch is bracketed by GPU timestamps and aggregated per label.
//
// Capture: the commands recorded between begin_capture() and end_capture() go into a command
// buffer of their own, returned as a Graph that replay() submits again and again with no
// recording, allocation or push-constant change (a decode step: infer/decode_step.h). What a
// replay must vary, its kernels read from device memory (the caller refreshes it, typically with
// a copy from host-visible memory recorded first in the graph). A graph keeps every allocation its
// commands touch: one whose owner releases it is freed only when the graph is destroyed, so the
// addresses baked into the recording stay valid. Device memory released while the capture records
// is its arena: it goes back to the allocator at once, so the recording's later allocations reuse
// it as an eager run's would (a captured training step needs no more memory than an eager one),
// and at end_capture() the graph claims the free parts of every range its commands touched. Host
// transfers (upload, download) cannot be captured; read_back() records a copy into host-visible
// memory that can, and write_constants() bakes a small table into the recording. Profiling does
// not time the dispatches of a graph; stage timing (set_stage_timing) times a graph's stages
// instead: a timestamp at each of its barriers, so a replay's time is split into the dependent
// stages it really runs, concurrency within a stage included.
//
// Stage chaining (set_stage_chaining; a capture only): where a dispatch of a kernel built for it
// (dispatch_chained, stage_chain_push.glsl) depends on a stage whose commands were all chained
// dispatches, no pipeline barrier is recorded: the kernel waits on a device counter that each
// workgroup of the stage before adds to when done, after issuing its own loads of what no stage
// writes (a decode step's weights), so one stage's tail overlaps the next one's loads and launch.
// Any other command, or a chained one that depends on a stage with other commands in it, gets
// the barrier as before. The counters are the graph's, zeroed at the start of every replay.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vk/device_info.h"
#include "vk/memory.h"
#include "vk/pipeline.h"

namespace vkf::vk {

class Context;

struct BufferRange {
  uint32_t block = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  bool overlaps(const BufferRange& o) const {
    return block == o.block && offset < o.offset + o.size && o.offset < offset + size;
  }
};

inline BufferRange range_of(const Allocation& a) {
  return {a.block_id(), a.offset, a.size};
}

struct KernelProfile {
  std::string label;
  uint64_t calls = 0;
  double total_ms = 0;
  double flops = 0;  // total floating-point operations, where the op declared them
  double bytes = 0;  // total bytes moved, where the op declared them
};

struct DispatchCost {
  double flops = 0;
  double bytes = 0;
  // What distinguishes this call within its kernel (a product's shape and layout), appended to
  // the profile label when profiling by detail; ops fill it only then (Stream::profiling_detail).
  std::string detail = {};
};

// The push fields of a chained dispatch (stage_chain_push.glsl's STAGE_CHAIN_PUSH_FIELDS), which
// the stream writes: zero counters, not chained.
struct ChainSync {
  static constexpr uint32_t kNoSlot = 0xFFFF;
  uint64_t counters = 0;
  uint32_t slots = kNoSlot | (kNoSlot << 16);  // the slot waited on | the slot signalled << 16
  uint32_t wait_count = 0;                     // 0: no wait
};

class Stream;

// A captured command buffer (see the header comment); destroy it before its Stream.
class Graph {
 public:
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  uint64_t dispatch_count() const { return dispatches_; }
  // Device bytes the graph claimed at the end of its capture (its arena).
  uint64_t arena_bytes() const;
  // Stage chaining: the barriers the capture left out, and after a replay (waited for), whether
  // every chained stage's counter reached its workgroup count and no wait gave up (a chained
  // kernel's bounded wait): "" if so, else what differed. Downloads the counters.
  uint64_t chain_links() const { return chain_links_; }
  std::string check_chain_counters();
  // What each chained dispatch of the capture was given, in recording order (tests).
  const std::vector<ChainSync>& chain_log() const { return chain_log_; }

 private:
  friend class Stream;
  explicit Graph(Stream& stream) : stream_(stream) {}
  bool touches(const BufferRange& r) const;

  Stream& stream_;
  // Stage timing: timestamp 0 at the start, timestamp i + 1 when stage i ends; stages_[i] names
  // stage i's commands (labels joined) and sums their declared cost.
  VkQueryPool stage_queries_ = VK_NULL_HANDLE;
  std::vector<std::pair<std::string, DispatchCost>> stages_;
  bool stage_open_ = false;  // commands recorded since the last timestamp
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  std::vector<VkFence> fences_;  // every fence it owns: idle_fences_ and pending_
  std::vector<VkFence> idle_fences_;
  std::deque<VkFence> pending_;       // its submissions not yet waited for, oldest first
  bool simultaneous_use_ = false;     // Stream::set_graph_simultaneous_use at its capture
  std::vector<BufferRange> touched_;  // every range its commands read or write
  std::vector<Allocation> owned_;     // released by their owners while the graph lives
  std::vector<Allocation> arena_;     // claimed at end_capture: freed inside the capture
  uint64_t dispatches_ = 0;
  // Stage chaining: the u32 counters (slot 0 counts waits that gave up), and each used slot's
  // workgroup count, from slot 1.
  Allocation chain_counters_;
  std::vector<uint32_t> chain_expected_;
  std::vector<ChainSync> chain_log_;
  uint64_t chain_links_ = 0;
};

// Whether a device chains stages unless VKF_STAGE_CHAIN says otherwise: none, since the
// twenty-sixth session. Chaining (the chained kernels' memory-model builds, in-order launch) was
// the default on NVIDIA from the twenty-fourth session, when it made a batch-1 decode step 3-6%
// faster than barriers; once the barrier builds' regressions were removed (the read select in the
// twenty-fifth, the one-query attention's form in the twenty-sixth), barriers were the faster:
// 0.999-1.005 ms against 1.022-1.027 chained on the H200 (bench/RESULTS.md, twenty-sixth
// session). Stays on the signature so that a device where chaining wins can opt in here.
bool stage_chaining_by_default(const DeviceInfo& info);

class Stream {
 public:
  explicit Stream(Context& ctx);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Records one dispatch. `push` is copied into the push-constant block (at most 128 bytes).
  void dispatch(const Kernel& kernel, const void* push, uint32_t push_bytes, uint32_t groups_x,
                uint32_t groups_y, uint32_t groups_z, std::span<const BufferRange> reads,
                std::span<const BufferRange> writes, const DispatchCost& cost = {});
  // The same for a kernel that can be chained (see the header comment): `push` holds a ChainSync
  // at byte `sync_offset`, which the stream fills in.
  void dispatch_chained(const Kernel& kernel, const void* push, uint32_t push_bytes,
                        uint32_t sync_offset, uint32_t groups_x, uint32_t groups_y,
                        uint32_t groups_z, std::span<const BufferRange> reads,
                        std::span<const BufferRange> writes, const DispatchCost& cost = {});
  // Whether captures begun from now on chain stages (default: VKF_STAGE_CHAIN=1|0, else
  // stage_chaining_by_default()).
  void set_stage_chaining(bool on) { stage_chaining_ = on; }
  bool stage_chaining() const { return stage_chaining_; }
  void copy(const Allocation& src, uint64_t src_offset, const Allocation& dst, uint64_t dst_offset,
            uint64_t bytes);
  void fill(const Allocation& dst, uint64_t offset, uint64_t bytes, uint32_t pattern);
  // Copies host data into device memory through a staging buffer; returns without waiting.
  void upload(const void* data, const Allocation& dst, uint64_t dst_offset, uint64_t bytes);
  // Writes `bytes` of host data (a multiple of 4, at a 4-byte aligned offset) into device memory
  // through the command buffer itself (vkCmdUpdateBuffer, 64 KiB per command): the bytes become
  // part of the recording, like push constants, so it can be captured and every replay writes
  // the same bytes again. For small per-call tables (a multi-tensor kernel's tensor list).
  void write_constants(const void* data, const Allocation& dst, uint64_t dst_offset,
                       uint64_t bytes);
  // Copies device memory to the host; submits and waits (the one place a host wait is needed).
  void download(const Allocation& src, uint64_t src_offset, void* data, uint64_t bytes);

  // Records a copy into host-visible (staging) memory and makes it visible to the host once the
  // work completes (after synchronize(), or Graph wait()). Unlike download(), it can be captured.
  void read_back(const Allocation& src, uint64_t src_offset, const Allocation& host,
                 uint64_t host_offset, uint64_t bytes);

  void submit();       // sends what is recorded, without waiting
  void synchronize();  // sends what is recorded and waits for all work (replays included)

  // Capture (see the header comment). While capturing, dispatch/copy/fill/read_back record into
  // the graph only; upload and download are refused.
  void begin_capture();
  std::unique_ptr<Graph> end_capture();
  bool capturing() const { return capture_ != nullptr; }
  // Submits the graph after what was recorded before it; returns without waiting. A graph's
  // previous replay is waited for first, unless it was captured with
  // set_graph_simultaneous_use(true) and without stage timing: then submissions queue behind one
  // another (each with its own fence; wait_oldest). `times` > 1 submits it that many times back
  // to back in one submission (such a graph only): steps that feed one another on the device
  // (infer::DecodeStepRunner), with no host between them.
  void replay(Graph& graph, uint32_t times = 1);
  // Whether graphs captured from now on may be pending several times at once (replay's `times`).
  void set_graph_simultaneous_use(bool on) { graph_simultaneous_use_ = on; }
  void wait(Graph& graph);         // waits for the graph's last submission (so for all of them)
  void wait_oldest(Graph& graph);  // waits for its oldest submission not yet waited for
  size_t pending(const Graph& graph) const { return graph.pending_.size(); }
  // Frees `a` once every command recorded so far has completed.
  void release(const Allocation& a);

  // `by_detail`: calls are aggregated per kernel and DispatchCost::detail (e.g. per product
  // shape) instead of per kernel.
  void set_profiling(bool on, bool by_detail = false);
  bool profiling() const { return profiling_; }
  bool profiling_detail() const {
    return (profiling_ && profile_detail_) || (stage_timing_ && stage_detail_);
  }
  // Per-label totals since profiling was turned on (synchronizes first).
  std::vector<KernelProfile> profile();
  uint64_t dispatch_count() const { return dispatches_total_; }
  uint64_t barrier_count() const { return barriers_total_; }

  // Stage timing of graphs captured while it is on (see the header comment): every wait() for
  // their replays adds each stage's time to stage_profile(), one entry per distinct stage (its
  // commands' labels joined by " + "; `by_detail` as for set_profiling). Turning it on clears
  // what was collected. `whole_graph`: one stage per graph instead, from its start to its end,
  // named "whole graph": a replay's GPU time with two timestamps instead of one per stage.
  void set_stage_timing(bool on, bool by_detail = false, bool whole_graph = false);
  std::vector<KernelProfile> stage_profile() const;
  uint64_t stage_timed_replays() const { return stage_replays_; }  // that stage_profile() sums

 private:
  struct Batch {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    VkQueryPool queries = VK_NULL_HANDLE;
    std::vector<Allocation> to_free;
    std::vector<std::pair<std::string, DispatchCost>> timed;  // label per timestamp pair
    uint32_t commands = 0;
    uint32_t limit = 0;  // submitted once it holds this many commands
    bool recording = false;
  };
  Batch& current();
  void new_command_buffer(VkCommandBuffer& cmd, VkFence& fence);  // and its fence
  VkFence new_fence();                                            // unsignaled
  void await_fence(VkFence fence);  // waits (polling first on a GPU), then resets it
  void begin(Batch& b);
  void hazard(std::span<const BufferRange> reads, std::span<const BufferRange> writes);
  bool hits_stage(std::span<const BufferRange> reads, std::span<const BufferRange> writes) const;
  bool hits_chained(std::span<const BufferRange> reads, std::span<const BufferRange> writes) const;
  void note_access(std::span<const BufferRange> reads, std::span<const BufferRange> writes);
  ChainSync chain_sync(std::span<const BufferRange> reads, std::span<const BufferRange> writes,
                       uint64_t workgroups);
  // Checks a dispatch's push size and grid against the device; false for an empty grid.
  bool dispatch_allowed(const Kernel& kernel, uint32_t push_bytes, uint32_t groups_x,
                        uint32_t groups_y, uint32_t groups_z) const;
  void record_dispatch(const Kernel& kernel, const void* push, uint32_t push_bytes,
                       uint32_t groups_x, uint32_t groups_y, uint32_t groups_z,
                       const DispatchCost& cost);
  void full_barrier();
  void retire(Batch& b);
  void wait_all();
  void collect_timestamps(Batch& b);
  // Device memory: to a live graph that touches it (freed with the graph), else free at once
  // (stream order protects it); staging memory: freed once the queued work is done.
  void free_after_use(const Allocation& a);
  void host_read_barrier();  // transfer writes recorded so far become visible to host reads
  void destroy(Graph& graph);
  void stage_label(const std::string& label, const DispatchCost& cost);  // capture, stage timing
  void collect_stage_times(Graph& graph);
  // One timed command or stage, from timestamp `begin` to `end`, added to `into[label]`.
  void add_timing(std::map<std::string, KernelProfile>& into, const std::string& label,
                  const DispatchCost& cost, uint64_t begin, uint64_t end) const;
  friend class Graph;

  Context& ctx_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::vector<Batch> free_batches_;
  std::vector<Batch> in_flight_;
  Batch recording_;
  bool has_recording_ = false;
  std::vector<BufferRange> written_since_barrier_;  // by the current stage
  std::vector<BufferRange> read_since_barrier_;
  // Stage chaining within the capture (see the header comment).
  static constexpr uint32_t kChainSlots = 1024;  // per graph; slot 0 counts faults
  bool stage_chaining_ = false;
  struct ChainState {
    bool ready = false;  // the graph's counters were zeroed before the current stage
    uint32_t stage_slot = ChainSync::kNoSlot;  // the current stage's counter
    uint32_t stage_count = 0;                  // its workgroups so far
    bool stage_chained = true;                 // every command in it signals stage_slot
    uint32_t link_slot = ChainSync::kNoSlot, link_count = 0;  // what the current stage waits on
    // What the stages since the last barrier before the current one read and wrote: a command
    // that touches them must wait on the link (or a barrier is recorded).
    std::vector<BufferRange> written_before, read_before;
  } chain_;
  Graph* capture_ = nullptr;  // the graph being recorded
  Batch capture_batch_;       // its command buffer while recording
  std::unique_ptr<Graph> capture_owner_;
  std::vector<BufferRange> saved_written_, saved_read_;  // the stream's hazards across a capture
  std::vector<Graph*> graphs_;                           // every live graph
  bool profiling_ = false;
  bool profile_detail_ = false;
  std::map<std::string, KernelProfile> profile_;
  bool stage_timing_ = false;
  bool stage_detail_ = false;
  bool stage_whole_graph_ = false;
  bool graph_simultaneous_use_ = false;
  std::map<std::string, KernelProfile> stage_profile_;
  uint64_t stage_replays_ = 0;
  // Timestamps a stage-timed graph holds at most; stages past it are not timed apart.
  static constexpr uint32_t kMaxStageQueries = 4096;
  uint64_t dispatches_total_ = 0;
  uint64_t barriers_total_ = 0;
  // Batch sizes: a batch begun while the GPU is idle (after a synchronize, e.g. the per-step loss
  // read) is submitted after kFirstBatchCommands so the GPU starts at once; each following batch
  // doubles, up to kCommandsPerBatch, which keeps submissions rare once the GPU is busy.
  static constexpr uint32_t kFirstBatchCommands = 16;
  static constexpr uint32_t kCommandsPerBatch = 512;
  uint32_t last_batch_limit_ = kFirstBatchCommands;
};

}  // namespace vkf::vk
