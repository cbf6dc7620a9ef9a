// Command recording, hazard tracking, batched submission, GPU timestamps and captured graphs
// (see stream.h).
#include "vk/stream.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>

#include "vk/context.h"
#include "vk/error.h"

namespace vkf::vk {
namespace {
constexpr uint32_t kQueriesPerBatch = 2 * 512 + 8;
}

bool stage_chaining_by_default(const DeviceInfo& /*info*/) {
  return false;
}

Stream::Stream(Context& ctx) : ctx_(ctx) {
  const char* chain = std::getenv("VKF_STAGE_CHAIN");
  stage_chaining_ = chain ? std::string(chain) == "1" : stage_chaining_by_default(ctx_.info());
  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = ctx_.queue_family();
  VKF_VK_CHECK(vkCreateCommandPool(ctx_.device(), &pci, nullptr, &pool_));
}

Stream::~Stream() {
  // Best effort at teardown: wait, free what is pending, destroy the batches.
  if (capture_) {
    capture_ = nullptr;
    capture_batch_ = Batch{};
    capture_owner_.reset();
  }
  try {
    synchronize();
  } catch (...) {
  }
  VkDevice dev = ctx_.device();
  auto destroy = [&](Batch& b) {
    if (b.fence) vkDestroyFence(dev, b.fence, nullptr);
    if (b.queries) vkDestroyQueryPool(dev, b.queries, nullptr);
    for (auto& a : b.to_free) ctx_.allocator().free(a);
  };
  for (auto& b : free_batches_) destroy(b);
  for (auto& b : in_flight_) destroy(b);
  if (has_recording_) destroy(recording_);
  vkDestroyCommandPool(dev, pool_, nullptr);
}

void Stream::new_command_buffer(VkCommandBuffer& cmd, VkFence& fence) {
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VKF_VK_CHECK(vkAllocateCommandBuffers(ctx_.device(), &ai, &cmd));
  fence = new_fence();
}

VkFence Stream::new_fence() {
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VkFence fence = VK_NULL_HANDLE;
  VKF_VK_CHECK(vkCreateFence(ctx_.device(), &fci, nullptr, &fence));
  return fence;
}

void Stream::begin(Batch& b) {
  VkDevice dev = ctx_.device();
  if (!b.cmd) new_command_buffer(b.cmd, b.fence);
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  VKF_VK_CHECK(vkBeginCommandBuffer(b.cmd, &bi));
  if (profiling_ && ctx_.info().timestamps) {
    if (!b.queries) {
      VkQueryPoolCreateInfo qci{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
      qci.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qci.queryCount = kQueriesPerBatch;
      VKF_VK_CHECK(vkCreateQueryPool(dev, &qci, nullptr, &b.queries));
    }
    vkCmdResetQueryPool(b.cmd, b.queries, 0, kQueriesPerBatch);
  }
  b.commands = 0;
  // The GPU is idle when no batch and no graph replay is in flight.
  const bool gpu_idle =
      in_flight_.empty() && std::all_of(graphs_.begin(), graphs_.end(),
                                        [](const Graph* g) { return g->pending_.empty(); });
  b.limit = gpu_idle ? kFirstBatchCommands : std::min(last_batch_limit_ * 2, kCommandsPerBatch);
  last_batch_limit_ = b.limit;
  b.timed.clear();
  b.recording = true;
}

Stream::Batch& Stream::current() {
  if (capture_) return capture_batch_;
  if (!has_recording_) {
    if (!free_batches_.empty()) {
      recording_ = std::move(free_batches_.back());
      free_batches_.pop_back();
    } else {
      recording_ = Batch{};
    }
    begin(recording_);
    has_recording_ = true;
  }
  return recording_;
}

void Stream::full_barrier() {
  if (capture_ && capture_->stage_queries_ && capture_->stage_open_ && !stage_whole_graph_ &&
      capture_->stages_.size() + 1 < kMaxStageQueries) {
    // Latched once every earlier command has completed: the end of the stage. The last stage a
    // pool has room for stays open through its barriers and takes the rest of the graph; its end
    // is written once, by end_capture() (a query is written at most once per reset).
    vkCmdWriteTimestamp(capture_->cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                        capture_->stage_queries_, static_cast<uint32_t>(capture_->stages_.size()));
    capture_->stage_open_ = false;
  }
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags stages =
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  vkCmdPipelineBarrier(current().cmd, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
  written_since_barrier_.clear();
  read_since_barrier_.clear();
  chain_ = ChainState{};
  chain_.ready = capture_ && capture_->chain_counters_;  // the zeroing fill is behind this barrier
  ++barriers_total_;
}

namespace {

// Whether a command with these reads and writes depends on one that read `read` and wrote
// `written`: read after write, write after write, write after read.
bool depends(std::span<const BufferRange> reads, std::span<const BufferRange> writes,
             const std::vector<BufferRange>& written, const std::vector<BufferRange>& read) {
  auto hits = [](const std::vector<BufferRange>& set, const BufferRange& r) {
    return std::any_of(set.begin(), set.end(), [&](const BufferRange& s) { return s.overlaps(r); });
  };
  for (const auto& r : reads)
    if (hits(written, r)) return true;
  for (const auto& w : writes)
    if (hits(written, w) || hits(read, w)) return true;
  return false;
}

}  // namespace

bool Stream::hits_stage(std::span<const BufferRange> reads,
                        std::span<const BufferRange> writes) const {
  return depends(reads, writes, written_since_barrier_, read_since_barrier_);
}

bool Stream::hits_chained(std::span<const BufferRange> reads,
                          std::span<const BufferRange> writes) const {
  return depends(reads, writes, chain_.written_before, chain_.read_before);
}

void Stream::note_access(std::span<const BufferRange> reads, std::span<const BufferRange> writes) {
  read_since_barrier_.insert(read_since_barrier_.end(), reads.begin(), reads.end());
  written_since_barrier_.insert(written_since_barrier_.end(), writes.begin(), writes.end());
  if (capture_) {
    capture_->touched_.insert(capture_->touched_.end(), reads.begin(), reads.end());
    capture_->touched_.insert(capture_->touched_.end(), writes.begin(), writes.end());
  }
}

void Stream::hazard(std::span<const BufferRange> reads, std::span<const BufferRange> writes) {
  // A command that cannot wait on a counter: a barrier for anything since the last one, chained
  // stages included.
  if (hits_stage(reads, writes) || hits_chained(reads, writes)) full_barrier();
  note_access(reads, writes);
  chain_.stage_chained = false;  // the stage now holds a command that signals nothing
}

bool Stream::dispatch_allowed(const Kernel& kernel, uint32_t push_bytes, uint32_t groups_x,
                              uint32_t groups_y, uint32_t groups_z) const {
  VKF_REQUIRE(push_bytes <= kPushConstantBytes, "kernel {} pushes {} bytes (limit {})", kernel.name,
              push_bytes, kPushConstantBytes);
  const auto& lim = ctx_.info().max_workgroup_count;
  VKF_REQUIRE(groups_x <= lim[0] && groups_y <= lim[1] && groups_z <= lim[2],
              "kernel {} needs {}x{}x{} workgroups; the device allows {}x{}x{}", kernel.name,
              groups_x, groups_y, groups_z, lim[0], lim[1], lim[2]);
  return groups_x != 0 && groups_y != 0 && groups_z != 0;  // else nothing to do (empty tensor)
}

void Stream::dispatch(const Kernel& kernel, const void* push, uint32_t push_bytes,
                      uint32_t groups_x, uint32_t groups_y, uint32_t groups_z,
                      std::span<const BufferRange> reads, std::span<const BufferRange> writes,
                      const DispatchCost& cost) {
  if (!dispatch_allowed(kernel, push_bytes, groups_x, groups_y, groups_z)) return;
  hazard(reads, writes);
  record_dispatch(kernel, push, push_bytes, groups_x, groups_y, groups_z, cost);
}

void Stream::record_dispatch(const Kernel& kernel, const void* push, uint32_t push_bytes,
                             uint32_t groups_x, uint32_t groups_y, uint32_t groups_z,
                             const DispatchCost& cost) {
  Batch& b = current();
  vkCmdBindPipeline(b.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, kernel.pipeline);
  if (push_bytes)
    vkCmdPushConstants(b.cmd, ctx_.pipelines().layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes,
                       push);
  const bool timed = profiling_ && b.queries && b.timed.size() * 2 + 2 <= kQueriesPerBatch;
  if (timed) {
    vkCmdWriteTimestamp(b.cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, b.queries,
                        static_cast<uint32_t>(b.timed.size() * 2));
  }
  vkCmdDispatch(b.cmd, groups_x, groups_y, groups_z);
  if (timed) {
    vkCmdWriteTimestamp(b.cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, b.queries,
                        static_cast<uint32_t>(b.timed.size() * 2 + 1));
    b.timed.emplace_back(
        profile_detail_ && !cost.detail.empty() ? kernel.name + " " + cost.detail : kernel.name,
        cost);
    // Timestamps measure one kernel only if kernels do not overlap: serialize while profiling.
    full_barrier();
  }
  if (capture_) {
    // A graph is one command buffer: the batch limit never splits or submits it.
    ++capture_->dispatches_;  // counted in dispatch_count() when replayed
    if (capture_->stage_queries_)
      stage_label(
          stage_detail_ && !cost.detail.empty() ? kernel.name + " " + cost.detail : kernel.name,
          cost);
    return;
  }
  ++dispatches_total_;
  if (++b.commands >= b.limit) submit();
}

void Stream::copy(const Allocation& src, uint64_t src_offset, const Allocation& dst,
                  uint64_t dst_offset, uint64_t bytes) {
  if (bytes == 0) return;
  Batch& b = current();
  BufferRange r{src.block_id(), src.offset + src_offset, bytes};
  BufferRange w{dst.block_id(), dst.offset + dst_offset, bytes};
  hazard({&r, 1}, {&w, 1});
  VkBufferCopy region{src.offset + src_offset, dst.offset + dst_offset, bytes};
  vkCmdCopyBuffer(b.cmd, src.buffer(), dst.buffer(), 1, &region);
  if (capture_) stage_label("copy", {0, 2.0 * static_cast<double>(bytes)});
  if (!capture_ && ++b.commands >= b.limit) submit();
}

void Stream::fill(const Allocation& dst, uint64_t offset, uint64_t bytes, uint32_t pattern) {
  if (bytes == 0) return;
  VKF_REQUIRE(offset % 4 == 0 && bytes % 4 == 0, "fill needs 4-byte aligned ranges");
  Batch& b = current();
  BufferRange w{dst.block_id(), dst.offset + offset, bytes};
  hazard({}, {&w, 1});
  vkCmdFillBuffer(b.cmd, dst.buffer(), dst.offset + offset, bytes, pattern);
  if (capture_) stage_label("fill", {0, static_cast<double>(bytes)});
  if (!capture_ && ++b.commands >= b.limit) submit();
}

void Stream::upload(const void* data, const Allocation& dst, uint64_t dst_offset, uint64_t bytes) {
  if (bytes == 0) return;
  VKF_REQUIRE(
      !capture_,
      "a captured graph cannot upload host data (every replay would copy the same "
      "bytes); create its inputs before the capture and refresh them through device memory");
  Allocation staging = ctx_.allocator().allocate(bytes, MemoryKind::Staging);
  std::memcpy(staging.mapped(), data, bytes);
  copy(staging, 0, dst, dst_offset, bytes);
  release(staging);
}

void Stream::write_constants(const void* data, const Allocation& dst, uint64_t dst_offset,
                             uint64_t bytes) {
  if (bytes == 0) return;
  VKF_REQUIRE(dst_offset % 4 == 0 && bytes % 4 == 0,
              "write_constants needs 4-byte aligned ranges (offset {}, {} bytes)", dst_offset,
              bytes);
  constexpr uint64_t kMaxUpdate = 65536;  // vkCmdUpdateBuffer's limit per command
  const auto* bytes_in = static_cast<const uint8_t*>(data);
  for (uint64_t done = 0; done < bytes; done += kMaxUpdate) {
    const uint64_t part = std::min(kMaxUpdate, bytes - done);
    Batch& b = current();
    BufferRange w{dst.block_id(), dst.offset + dst_offset + done, part};
    hazard({}, {&w, 1});
    vkCmdUpdateBuffer(b.cmd, dst.buffer(), dst.offset + dst_offset + done, part, bytes_in + done);
    if (!capture_ && ++b.commands >= b.limit) submit();
  }
}

void Stream::download(const Allocation& src, uint64_t src_offset, void* data, uint64_t bytes) {
  if (bytes == 0) return;
  VKF_REQUIRE(!capture_,
              "a captured graph cannot wait for a download; record read_back() into "
              "host-visible memory and read it after the replay");
  Allocation staging = ctx_.allocator().allocate(bytes, MemoryKind::Staging);
  copy(src, src_offset, staging, 0, bytes);
  host_read_barrier();
  synchronize();
  std::memcpy(data, staging.mapped(), bytes);
  ctx_.allocator().free(staging);
}

void Stream::read_back(const Allocation& src, uint64_t src_offset, const Allocation& host,
                       uint64_t host_offset, uint64_t bytes) {
  if (bytes == 0) return;
  VKF_REQUIRE(host.mapped() != nullptr, "read_back: the destination is not host-visible memory");
  copy(src, src_offset, host, host_offset, bytes);
  host_read_barrier();
}

void Stream::host_read_barrier() {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(current().cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0,
                       1, &mb, 0, nullptr, 0, nullptr);
}

void Stream::submit() {
  if (!has_recording_) return;
  Batch b = std::move(recording_);
  has_recording_ = false;
  VKF_VK_CHECK(vkEndCommandBuffer(b.cmd));
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &b.cmd;
  VKF_VK_CHECK(vkQueueSubmit(ctx_.queue(), 1, &si, b.fence));
  b.recording = false;
  in_flight_.push_back(std::move(b));
  // Keep a bounded number of batches in flight; retire finished ones without blocking.
  while (!in_flight_.empty() &&
         vkGetFenceStatus(ctx_.device(), in_flight_.front().fence) == VK_SUCCESS) {
    retire(in_flight_.front());
    free_batches_.push_back(std::move(in_flight_.front()));
    in_flight_.erase(in_flight_.begin());
  }
}

void Stream::add_timing(std::map<std::string, KernelProfile>& into, const std::string& label,
                        const DispatchCost& cost, uint64_t begin, uint64_t end) const {
  KernelProfile& p = into[label];
  p.label = label;
  p.calls += 1;
  p.total_ms += static_cast<double>(end - begin) * ctx_.info().timestamp_period_ns * 1e-6;
  p.flops += cost.flops;
  p.bytes += cost.bytes;
}

void Stream::collect_timestamps(Batch& b) {
  if (b.timed.empty() || !b.queries) return;
  std::vector<uint64_t> ts(b.timed.size() * 2);
  VKF_VK_CHECK(vkGetQueryPoolResults(ctx_.device(), b.queries, 0, static_cast<uint32_t>(ts.size()),
                                     ts.size() * sizeof(uint64_t), ts.data(), sizeof(uint64_t),
                                     VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  for (size_t i = 0; i < b.timed.size(); ++i)
    add_timing(profile_, b.timed[i].first, b.timed[i].second, ts[2 * i], ts[2 * i + 1]);
  b.timed.clear();
}

void Stream::retire(Batch& b) {
  VkResult r = vkGetFenceStatus(ctx_.device(), b.fence);
  if (r != VK_SUCCESS) {
    VKF_VK_CHECK(vkWaitForFences(ctx_.device(), 1, &b.fence, VK_TRUE, UINT64_MAX));
  }
  collect_timestamps(b);
  VKF_VK_CHECK(vkResetFences(ctx_.device(), 1, &b.fence));
  VKF_VK_CHECK(vkResetCommandBuffer(b.cmd, 0));
  for (auto& a : b.to_free) ctx_.allocator().free(a);
  b.to_free.clear();
}

void Stream::wait_all() {
  for (auto& b : in_flight_) {
    retire(b);
    free_batches_.push_back(std::move(b));
  }
  in_flight_.clear();
  for (Graph* g : graphs_) wait(*g);
}

void Stream::synchronize() {
  submit();
  wait_all();
  ctx_.check_validation();
}

void Stream::release(const Allocation& a) {
  if (!a) return;
  ctx_.allocator().released(a);  // no longer live for the accounting
  free_after_use(a);
}

void Stream::free_after_use(const Allocation& a) {
  // A live graph's commands may use it at every replay: the graph frees it when destroyed.
  const BufferRange r = range_of(a);
  for (Graph* g : graphs_) {
    // Device memory released during a capture is the capture's arena (end_capture claims it).
    if (g == capture_ && a.block->kind == MemoryKind::Device) continue;
    if (g->touches(r)) {
      g->owned_.push_back(a);
      return;
    }
  }
  // Device memory is free for the next allocation at once, as in PyTorch's caching allocator on
  // one stream: every later command that touches it is ordered after the earlier ones by the
  // barrier hazard() inserts (ranges are compared by block and offset, and a pipeline barrier
  // covers everything submitted before it on the queue; a replayed graph ends with a full
  // barrier). Staging memory waits for the queued work instead: the host writes it directly.
  if (a.block->kind == MemoryKind::Device) {
    ctx_.allocator().free(a);
    return;
  }
  if (has_recording_) {
    recording_.to_free.push_back(a);
  } else if (!in_flight_.empty()) {
    in_flight_.back().to_free.push_back(a);
  } else {
    ctx_.allocator().free(a);
  }
}

void Stream::set_profiling(bool on, bool by_detail) {
  profile_detail_ = on && by_detail;
  if (on == profiling_) return;
  synchronize();
  profiling_ = on;
  if (on) profile_.clear();
}

bool Graph::touches(const BufferRange& r) const {
  return std::any_of(touched_.begin(), touched_.end(),
                     [&](const BufferRange& t) { return t.overlaps(r); });
}

Graph::~Graph() {
  try {
    stream_.destroy(*this);
  } catch (...) {
  }
}

void Stream::begin_capture() {
  VKF_REQUIRE(!capture_, "begin_capture: a capture is already in progress");
  capture_owner_.reset(new Graph(*this));
  Graph& g = *capture_owner_;
  VkFence fence = VK_NULL_HANDLE;
  new_command_buffer(g.cmd_, fence);
  g.fences_.push_back(fence);  // its first submission's
  g.idle_fences_.push_back(fence);
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};  // submitted many times
  if (graph_simultaneous_use_) bi.flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT;
  g.simultaneous_use_ = graph_simultaneous_use_;
  VKF_VK_CHECK(vkBeginCommandBuffer(g.cmd_, &bi));
  capture_batch_ = Batch{};
  capture_batch_.cmd = g.cmd_;
  capture_batch_.recording = true;
  // The stream's own hazards stay pending for its next command; the graph tracks its own.
  saved_written_ = std::move(written_since_barrier_);
  saved_read_ = std::move(read_since_barrier_);
  written_since_barrier_.clear();
  read_since_barrier_.clear();
  capture_ = &g;
  graphs_.push_back(&g);
  ctx_.allocator().hold_cached_blocks(true);  // kept blocks may become part of the recording
  full_barrier();  // a replay starts after everything submitted before it
  if (stage_chaining_) {
    // Zeroed at the start of every replay; chained dispatches wait and signal only after the
    // next barrier (full_barrier() sets chain_.ready).
    g.chain_counters_ = ctx_.allocator().allocate(kChainSlots * 4, MemoryKind::Device);
    vkCmdFillBuffer(g.cmd_, g.chain_counters_.buffer(), g.chain_counters_.offset, kChainSlots * 4,
                    0);
    g.chain_expected_.assign(1, 0);  // slot 0: no faults
    chain_ = ChainState{};
  }
  if (stage_timing_ && ctx_.info().timestamps) {
    VkQueryPoolCreateInfo qci{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qci.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qci.queryCount = kMaxStageQueries;
    VKF_VK_CHECK(vkCreateQueryPool(ctx_.device(), &qci, nullptr, &g.stage_queries_));
    vkCmdResetQueryPool(g.cmd_, g.stage_queries_, 0, kMaxStageQueries);
    // The start: once what was submitted before the replay has completed.
    vkCmdWriteTimestamp(g.cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, g.stage_queries_, 0);
  }
}

void Stream::stage_label(const std::string& label, const DispatchCost& cost) {
  Graph& g = *capture_;
  if (!g.stage_queries_) return;
  if (!g.stage_open_) {
    g.stages_.emplace_back(stage_whole_graph_ ? "whole graph" : label, cost);
    g.stage_open_ = true;
    return;
  }
  auto& [name, total] = g.stages_.back();
  if (!stage_whole_graph_) name += " + " + label;
  total.flops += cost.flops;
  total.bytes += cost.bytes;
}

void Stream::set_stage_timing(bool on, bool by_detail, bool whole_graph) {
  stage_timing_ = on;
  stage_detail_ = on && by_detail && !whole_graph;
  stage_whole_graph_ = on && whole_graph;
  if (on) {
    stage_profile_.clear();
    stage_replays_ = 0;
  }
}

std::vector<KernelProfile> Stream::stage_profile() const {
  std::vector<KernelProfile> out;
  for (const auto& [k, v] : stage_profile_) out.push_back(v);
  return out;
}

void Stream::collect_stage_times(Graph& g) {
  if (!g.stage_queries_ || g.stages_.empty() || !stage_timing_) return;
  const size_t n = g.stages_.size();
  std::vector<uint64_t> ts(n + 1);
  VKF_VK_CHECK(vkGetQueryPoolResults(ctx_.device(), g.stage_queries_, 0,
                                     static_cast<uint32_t>(ts.size()), ts.size() * sizeof(uint64_t),
                                     ts.data(), sizeof(uint64_t),
                                     VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  ++stage_replays_;
  for (size_t i = 0; i < n; ++i)
    add_timing(stage_profile_, g.stages_[i].first, g.stages_[i].second, ts[i], ts[i + 1]);
}

std::unique_ptr<Graph> Stream::end_capture() {
  VKF_REQUIRE(capture_, "end_capture: no capture is in progress");
  full_barrier();  // and whatever is submitted after a replay sees all that it wrote
  Graph& g = *capture_;
  if (g.stage_queries_ && g.stage_open_) {  // the last stage the pool has room for (full_barrier)
    vkCmdWriteTimestamp(g.cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, g.stage_queries_,
                        static_cast<uint32_t>(g.stages_.size()));
    g.stage_open_ = false;
  }
  capture_ = nullptr;
  capture_batch_ = Batch{};
  chain_ = ChainState{};
  written_since_barrier_ = std::move(saved_written_);
  read_since_barrier_ = std::move(saved_read_);
  saved_written_.clear();
  saved_read_.clear();
  VKF_VK_CHECK(vkEndCommandBuffer(g.cmd_));
  auto key = [](const BufferRange& r) { return std::tuple(r.block, r.offset, r.size); };
  std::sort(g.touched_.begin(), g.touched_.end(),
            [&](const auto& x, const auto& y) { return key(x) < key(y); });
  g.touched_.erase(std::unique(g.touched_.begin(), g.touched_.end(),
                               [&](const auto& x, const auto& y) { return key(x) == key(y); }),
                   g.touched_.end());
  // The arena: what the recording touched and is free now was released inside it; nothing else
  // may be given that memory while the graph can still be replayed.
  for (const BufferRange& r : g.touched_) {
    for (const Allocation& a : ctx_.allocator().claim_free(r.block, r.offset, r.size))
      g.arena_.push_back(a);
  }
  ctx_.allocator().hold_cached_blocks(false);
  return std::move(capture_owner_);
}

void Stream::replay(Graph& g, uint32_t times) {
  VKF_REQUIRE(!capture_, "replay: a capture is in progress; end it first");
  VKF_REQUIRE(&g.stream_ == this, "replay: the graph belongs to another stream");
  VKF_REQUIRE(times >= 1 && (times == 1 || g.simultaneous_use_),
              "replay: {} replays in one submission need a graph captured with "
              "set_graph_simultaneous_use(true)",
              times);
  submit();  // what was recorded before the replay runs before it
  // Otherwise a command buffer is pending at most once; and stage timestamps belong to one replay.
  if (!g.simultaneous_use_ || g.stage_queries_) wait(g);
  if (g.idle_fences_.empty()) {  // a fence per submission pending at once, made when first needed
    g.fences_.push_back(new_fence());
    g.idle_fences_.push_back(g.fences_.back());
  }
  const VkFence fence = g.idle_fences_.back();
  const std::vector<VkCommandBuffer> cmds(times, g.cmd_);
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = times;
  si.pCommandBuffers = cmds.data();
  VKF_VK_CHECK(vkQueueSubmit(ctx_.queue(), 1, &si, fence));
  g.idle_fences_.pop_back();
  g.pending_.push_back(fence);
  // The graph ends with a full barrier: nothing recorded after it needs another for what came
  // before.
  written_since_barrier_.clear();
  read_since_barrier_.clear();
  dispatches_total_ += g.dispatches_ * times;
}

void Stream::await_fence(VkFence fence) {
  // A replay's result is usually wanted at once (a decode step needs its token to go on), and a
  // driver's wake-up from a fence wait can take tens of microseconds: on a GPU, poll for a while
  // first. (Not on a CPU device, whose own worker threads need the cores.)
  VkResult status = VK_NOT_READY;
  if (ctx_.info().type != VK_PHYSICAL_DEVICE_TYPE_CPU) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    while ((status = vkGetFenceStatus(ctx_.device(), fence)) == VK_NOT_READY &&
           std::chrono::steady_clock::now() < until) {
    }
  }
  if (status == VK_NOT_READY) {
    VKF_VK_CHECK(vkWaitForFences(ctx_.device(), 1, &fence, VK_TRUE, UINT64_MAX));
  } else {
    VKF_VK_CHECK(status);
  }
  VKF_VK_CHECK(vkResetFences(ctx_.device(), 1, &fence));
}

void Stream::wait(Graph& g) {
  if (g.pending_.empty()) return;
  for (const VkFence f : g.pending_) await_fence(f);  // oldest first: the later ones follow
  g.idle_fences_.insert(g.idle_fences_.end(), g.pending_.begin(), g.pending_.end());
  g.pending_.clear();
  collect_stage_times(g);
  ctx_.check_validation();
}

void Stream::wait_oldest(Graph& g) {
  if (g.pending_.empty()) return;
  const VkFence f = g.pending_.front();
  await_fence(f);
  g.pending_.pop_front();
  g.idle_fences_.push_back(f);
  if (g.pending_.empty()) collect_stage_times(g);
  ctx_.check_validation();
}

void Stream::destroy(Graph& g) {
  VkDevice dev = ctx_.device();
  if (!g.pending_.empty()) {
    vkWaitForFences(dev, 1, &g.pending_.back(), VK_TRUE, UINT64_MAX);
    g.pending_.clear();
  }
  graphs_.erase(std::remove(graphs_.begin(), graphs_.end(), &g), graphs_.end());
  if (g.cmd_) vkFreeCommandBuffers(dev, pool_, 1, &g.cmd_);
  for (const VkFence f : g.fences_) vkDestroyFence(dev, f, nullptr);
  g.fences_.clear();
  g.idle_fences_.clear();
  if (g.stage_queries_) vkDestroyQueryPool(dev, g.stage_queries_, nullptr);
  g.stage_queries_ = VK_NULL_HANDLE;
  g.cmd_ = VK_NULL_HANDLE;
  // Normal deferral now (another graph may still use some of them).
  for (const Allocation& a : g.owned_) free_after_use(a);
  g.owned_.clear();
  for (const Allocation& a : g.arena_) free_after_use(a);
  g.arena_.clear();
  if (g.chain_counters_) free_after_use(g.chain_counters_);
  g.chain_counters_ = {};
}

uint64_t Graph::arena_bytes() const {
  uint64_t bytes = 0;
  for (const Allocation& a : arena_) bytes += a.size;
  return bytes;
}

std::vector<KernelProfile> Stream::profile() {
  synchronize();
  std::vector<KernelProfile> out;
  for (auto& [k, v] : profile_) out.push_back(v);
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.total_ms > b.total_ms; });
  return out;
}

}  // namespace vkf::vk
