// Command recording, hazard tracking, batched submission and GPU timestamps (see stream.h).
#include "vk/stream.h"

#include <algorithm>
#include <cstring>

#include "vk/context.h"
#include "vk/error.h"

namespace vkf::vk {
namespace {
constexpr uint32_t kQueriesPerBatch = 2 * 512 + 8;
}

Stream::Stream(Context& ctx) : ctx_(ctx) {
  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = ctx_.queue_family();
  VKF_VK_CHECK(vkCreateCommandPool(ctx_.device(), &pci, nullptr, &pool_));
}

Stream::~Stream() {
  // Best effort at teardown: wait, free what is pending, destroy the batches.
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

void Stream::begin(Batch& b) {
  VkDevice dev = ctx_.device();
  if (!b.cmd) {
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VKF_VK_CHECK(vkAllocateCommandBuffers(dev, &ai, &b.cmd));
    VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VKF_VK_CHECK(vkCreateFence(dev, &fci, nullptr, &b.fence));
  }
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
  b.limit = in_flight_.empty() ? kFirstBatchCommands
                               : std::min(last_batch_limit_ * 2, kCommandsPerBatch);
  last_batch_limit_ = b.limit;
  b.timed.clear();
  b.recording = true;
}

Stream::Batch& Stream::current() {
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
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags stages =
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  vkCmdPipelineBarrier(current().cmd, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
  written_since_barrier_.clear();
  read_since_barrier_.clear();
  ++barriers_total_;
}

void Stream::hazard(std::span<const BufferRange> reads, std::span<const BufferRange> writes) {
  auto hits = [](const std::vector<BufferRange>& set, const BufferRange& r) {
    return std::any_of(set.begin(), set.end(), [&](const BufferRange& s) { return s.overlaps(r); });
  };
  bool need = false;
  for (const auto& r : reads) need = need || hits(written_since_barrier_, r);  // read after write
  for (const auto& w : writes)  // write after write, write after read
    need = need || hits(written_since_barrier_, w) || hits(read_since_barrier_, w);
  if (need) full_barrier();
  read_since_barrier_.insert(read_since_barrier_.end(), reads.begin(), reads.end());
  written_since_barrier_.insert(written_since_barrier_.end(), writes.begin(), writes.end());
}

void Stream::dispatch(const Kernel& kernel, const void* push, uint32_t push_bytes,
                      uint32_t groups_x, uint32_t groups_y, uint32_t groups_z,
                      std::span<const BufferRange> reads, std::span<const BufferRange> writes,
                      const DispatchCost& cost) {
  VKF_REQUIRE(push_bytes <= kPushConstantBytes, "kernel {} pushes {} bytes (limit {})", kernel.name,
              push_bytes, kPushConstantBytes);
  const auto& lim = ctx_.info().max_workgroup_count;
  VKF_REQUIRE(groups_x <= lim[0] && groups_y <= lim[1] && groups_z <= lim[2],
              "kernel {} needs {}x{}x{} workgroups; the device allows {}x{}x{}", kernel.name,
              groups_x, groups_y, groups_z, lim[0], lim[1], lim[2]);
  if (groups_x == 0 || groups_y == 0 || groups_z == 0) return;  // nothing to do (empty tensor)
  Batch& b = current();
  hazard(reads, writes);
  vkCmdBindPipeline(b.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, kernel.pipeline);
  if (push_bytes)
    vkCmdPushConstants(b.cmd, ctx_.pipelines().layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0,
                       push_bytes, push);
  const bool timed = profiling_ && b.queries && b.timed.size() * 2 + 2 <= kQueriesPerBatch;
  if (timed) {
    vkCmdWriteTimestamp(b.cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, b.queries,
                        static_cast<uint32_t>(b.timed.size() * 2));
  }
  vkCmdDispatch(b.cmd, groups_x, groups_y, groups_z);
  if (timed) {
    vkCmdWriteTimestamp(b.cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, b.queries,
                        static_cast<uint32_t>(b.timed.size() * 2 + 1));
    b.timed.emplace_back(kernel.name, cost);
    // Timestamps measure one kernel only if kernels do not overlap: serialize while profiling.
    full_barrier();
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
  if (++b.commands >= b.limit) submit();
}

void Stream::fill(const Allocation& dst, uint64_t offset, uint64_t bytes, uint32_t pattern) {
  if (bytes == 0) return;
  VKF_REQUIRE(offset % 4 == 0 && bytes % 4 == 0, "fill needs 4-byte aligned ranges");
  Batch& b = current();
  BufferRange w{dst.block_id(), dst.offset + offset, bytes};
  hazard({}, {&w, 1});
  vkCmdFillBuffer(b.cmd, dst.buffer(), dst.offset + offset, bytes, pattern);
  if (++b.commands >= b.limit) submit();
}

void Stream::upload(const void* data, const Allocation& dst, uint64_t dst_offset, uint64_t bytes) {
  if (bytes == 0) return;
  Allocation staging = ctx_.allocator().allocate(bytes, MemoryKind::Staging);
  std::memcpy(staging.mapped(), data, bytes);
  copy(staging, 0, dst, dst_offset, bytes);
  release(staging);
}

void Stream::download(const Allocation& src, uint64_t src_offset, void* data, uint64_t bytes) {
  if (bytes == 0) return;
  Allocation staging = ctx_.allocator().allocate(bytes, MemoryKind::Staging);
  copy(src, src_offset, staging, 0, bytes);
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(current().cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0,
                       1, &mb, 0, nullptr, 0, nullptr);
  synchronize();
  std::memcpy(data, staging.mapped(), bytes);
  ctx_.allocator().free(staging);
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
  while (!in_flight_.empty() && vkGetFenceStatus(ctx_.device(), in_flight_.front().fence) == VK_SUCCESS) {
    retire(in_flight_.front());
    free_batches_.push_back(std::move(in_flight_.front()));
    in_flight_.erase(in_flight_.begin());
  }
}

void Stream::collect_timestamps(Batch& b) {
  if (b.timed.empty() || !b.queries) return;
  std::vector<uint64_t> ts(b.timed.size() * 2);
  VKF_VK_CHECK(vkGetQueryPoolResults(ctx_.device(), b.queries, 0, static_cast<uint32_t>(ts.size()),
                                     ts.size() * sizeof(uint64_t), ts.data(), sizeof(uint64_t),
                                     VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  const double ns = ctx_.info().timestamp_period_ns;
  for (size_t i = 0; i < b.timed.size(); ++i) {
    auto& p = profile_[b.timed[i].first];
    p.label = b.timed[i].first;
    p.calls += 1;
    p.total_ms += static_cast<double>(ts[2 * i + 1] - ts[2 * i]) * ns * 1e-6;
    p.flops += b.timed[i].second.flops;
    p.bytes += b.timed[i].second.bytes;
  }
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
}

void Stream::synchronize() {
  submit();
  wait_all();
  ctx_.check_validation();
}

void Stream::release(const Allocation& a) {
  if (!a) return;
  ctx_.allocator().released(a);  // no longer live for the accounting
  // Device memory is free for the next allocation at once, as in PyTorch's caching allocator on
  // one stream: every later command that touches it is ordered after the earlier ones by the
  // barrier hazard() inserts (ranges are compared by block and offset, and a pipeline barrier
  // covers everything submitted before it on the queue). Staging memory waits for the queued
  // work instead: the host writes it directly, outside any barrier.
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

void Stream::set_profiling(bool on) {
  if (on == profiling_) return;
  synchronize();
  profiling_ = on;
  if (on) profile_.clear();
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
