// Captured command buffers (vk::Stream::begin_capture / end_capture / replay): a graph replays
// with values it reads from device memory refreshed by a copy from host-visible memory recorded
// at its head; its results come back through read_back(); tensors its commands use stay valid
// after their owners drop them (and are freed with the graph); synchronize() waits for replays;
// work recorded before and after a replay is ordered with it; memory released inside a capture is
// reused by it and then claimed by the graph (its arena); host transfers cannot be captured;
// stage timing splits a replay into its dependent stages, concurrent dispatches together, or times
// it whole; replays of one graph run back to back in one submission; kernels write host-visible
// tensors.
#include <cstring>
#include <vector>

#include "ops/decode.h"
#include "ops/elementwise.h"
#include "test_util.h"
#include "vk/context.h"

namespace vkf {
namespace {

using test::Rng;

// A host-visible buffer of n int32/float words, freed through the stream.
struct HostWords {
  vk::Allocation alloc;
  explicit HostWords(size_t n) {
    alloc = vk::Context::get().allocator().allocate(n * 4, vk::MemoryKind::Staging);
  }
  ~HostWords() { vk::Context::get().stream().release(alloc); }
  int32_t* ints() const { return static_cast<int32_t*>(alloc.mapped()); }
  float* floats() const { return static_cast<float*>(alloc.mapped()); }
};

TEST(Graph, ReplaysWithDeviceInputs) {
  Rng rng(31);
  auto& stream = vk::Context::get().stream();
  const int64_t B = 2, cap = 6, row = 5;
  const auto k = test::as_f32(rng.uniform(static_cast<size_t>(B * row)));
  const Tensor cache_k = Tensor::zeros({B, cap, 1, row}), cache_v = Tensor::zeros({B, cap, 1, row});
  Tensor slot = Tensor::zeros({1}, DType::I32);
  HostWords slot_in(1), out(static_cast<size_t>(B * cap * row));
  stream.synchronize();
  const uint64_t held_before = vk::memory_stats().held_bytes;
  std::unique_ptr<vk::Graph> graph;
  {
    Tensor kt = test::to_gpu(k, {B, 1, 1, row});  // dropped after the capture: the graph keeps it
    stream.synchronize();
    stream.begin_capture();
    stream.copy(slot_in.alloc, 0, slot.allocation(), 0, 4);
    const Tensor doubled = ops::scale(kt, 2.0f);  // a temporary made inside the capture
    ops::kv_cache_write(doubled, kt, cache_k, cache_v, slot);
    stream.read_back(cache_k.allocation(), 0, out.alloc, 0,
                     static_cast<uint64_t>(B * cap * row) * 4);
    graph = stream.end_capture();
  }
  stream.synchronize();
  EXPECT_GT(vk::memory_stats().held_bytes, held_before)
      << "the graph keeps the tensors its commands use";
  EXPECT_EQ(graph->dispatch_count(), 2u);
  std::vector<double> want(static_cast<size_t>(B * cap * row), 0.0);
  for (const int32_t s : {4, 0, 2}) {
    slot_in.ints()[0] = s;
    const uint64_t d0 = stream.dispatch_count();
    stream.replay(*graph);
    stream.wait(*graph);
    EXPECT_EQ(stream.dispatch_count() - d0, 2u);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < row; ++c)
        want[static_cast<size_t>((b * cap + s) * row + c)] =
            2 * k[static_cast<size_t>(b * row + c)];
    std::vector<double> got(want.size());
    for (size_t i = 0; i < got.size(); ++i) got[i] = out.floats()[i];
    test::expect_close(got, want, 0, 0, "read back after replay at slot " + std::to_string(s));
    test::expect_close(cache_v.slice(1, s, s + 1).contiguous().reshape({B * row}), test::as_f32(k),
                       0, 0, "values at slot " + std::to_string(s));
  }
  // Ordered with the stream's own work: a fill before, a read after, synchronize() in between.
  cache_k.fill_(0.0f);
  slot_in.ints()[0] = 1;
  stream.replay(*graph);
  const auto after = cache_k.to_double();  // download: synchronize() waits for the replay
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < cap; ++j)
      for (int64_t c = 0; c < row; ++c) {
        const double w = j == 1 ? 2 * k[static_cast<size_t>(b * row + c)] : 0.0;
        EXPECT_EQ(after[static_cast<size_t>((b * cap + j) * row + c)], w)
            << b << " " << j << " " << c;
      }
  graph.reset();
  stream.synchronize();
  EXPECT_EQ(vk::memory_stats().held_bytes, held_before)
      << "destroying the graph frees what it kept";
}

TEST(Graph, StageTimingSplitsReplaysAtBarriers) {
  if (!vk::Context::get().info().timestamps) GTEST_SKIP() << "the device has no timestamps";
  auto& stream = vk::Context::get().stream();
  const Tensor a = Tensor::zeros({4096}), b = Tensor::zeros({4096}), c = Tensor::zeros({4096});
  const Tensor one = Tensor::full({4096}, 1.0f);
  ops::add_(a, one);  // pipelines outside the capture
  stream.synchronize();
  stream.set_stage_timing(true);
  stream.begin_capture();
  ops::add_(a, one);  // stage 1: a and b are independent, so they share it
  ops::add_(b, one);
  ops::add_(c, a);  // stage 2: reads a
  ops::add_(c, b);  // stage 3: writes c again
  const auto graph = stream.end_capture();
  for (int r = 0; r < 3; ++r) {
    stream.replay(*graph);
    stream.wait(*graph);
  }
  stream.set_stage_timing(false);
  EXPECT_EQ(stream.stage_timed_replays(), 3u);
  const auto stages = stream.stage_profile();
  // Distinct stages: "elementwise_flat4 + elementwise_flat4" (stage 1) and "elementwise_flat4"
  // (stages 2 and 3, the same label, so one entry of 6 calls).
  ASSERT_EQ(stages.size(), 2u);
  uint64_t calls = 0;
  for (const auto& s : stages) {
    const bool pair = s.label.find(" + ") != std::string::npos;
    EXPECT_EQ(s.calls, pair ? 3u : 6u) << s.label;
    EXPECT_GT(s.total_ms, 0.0) << s.label;
    calls += s.calls;
  }
  EXPECT_EQ(calls, 9u);
  // Replays of graphs captured without stage timing add nothing.
  stream.set_stage_timing(true);
  stream.set_stage_timing(false);
  stream.replay(*graph);
  stream.wait(*graph);
  EXPECT_TRUE(stream.stage_profile().empty());
  const auto values = c.to_double();
  // After replay r, a = 1 + r and b = r, and c has summed a + b over the replays: 3 + 5 + 7 + 9.
  EXPECT_EQ(values[0], 24.0);
}

TEST(Graph, StageTimingOfMoreStagesThanTimestamps) {
  if (!vk::Context::get().info().timestamps) GTEST_SKIP() << "the device has no timestamps";
  // More dependent stages than a graph has timestamps for (4,096, so 4,095 stages): the last timed
  // stage takes the rest, and the replay's times still come back (a timestamp left unwritten would
  // never be ready; one written twice is invalid).
  auto& stream = vk::Context::get().stream();
  const Tensor a = Tensor::zeros({4}), one = Tensor::full({4}, 1.0f);
  constexpr int kStages = 4200;
  stream.set_stage_timing(true);
  stream.begin_capture();
  for (int i = 0; i < kStages; ++i) ops::add_(a, one);
  const auto graph = stream.end_capture();
  stream.replay(*graph);
  stream.wait(*graph);
  stream.set_stage_timing(false);
  const auto stages = stream.stage_profile();
  ASSERT_EQ(stages.size(), 2u) << "one label for the timed stages, one for the last, merged one";
  uint64_t calls = 0;
  for (const auto& s : stages) calls += s.calls;
  EXPECT_EQ(calls, 4095u);
  EXPECT_EQ(a.to_double()[0], kStages);
}

TEST(Graph, MemoryFreedInsideACaptureIsItsArena) {
  Rng rng(32);
  auto& stream = vk::Context::get().stream();
  const int64_t n = 1000;
  const auto x = test::as_f32(rng.uniform(static_cast<size_t>(n)));
  const Tensor xt = test::to_gpu(x, {n});
  const Tensor out = Tensor::zeros({n});
  stream.synchronize();
  const uint64_t live_before = vk::memory_stats().live_bytes;
  stream.begin_capture();
  {
    Tensor a = ops::scale(xt, 2.0f);
    const Tensor b = ops::scale(a, 3.0f);
    a = Tensor();  // released inside: the next temporary may take its memory
    const Tensor c = ops::scale(b, 5.0f);
    out.copy_(c);
  }
  const uint64_t live_inside = vk::memory_stats().live_bytes;
  const uint64_t held_inside = vk::memory_stats().held_bytes;
  auto graph = stream.end_capture();
  EXPECT_EQ(live_inside, live_before) << "every temporary was released inside the capture";
  EXPECT_GE(graph->arena_bytes(), 2 * static_cast<uint64_t>(n) * 4) << "at least two of them";
  EXPECT_EQ(vk::memory_stats().live_bytes, live_before) << "the arena is the graph's, not live";
  EXPECT_EQ(vk::memory_stats().held_bytes, held_inside + graph->arena_bytes())
      << "the arena is held while the graph can replay";
  // Tensors made now get other memory (first fit would hand them the temporaries' addresses
  // if the graph had not claimed them): a replay leaves them alone.
  std::vector<Tensor> later;
  for (int i = 0; i < 4; ++i) later.push_back(Tensor::full({n}, 7.0f));
  for (int r = 0; r < 2; ++r) {
    stream.replay(*graph);
    std::vector<double> want(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      want[i] =
          static_cast<double>(static_cast<float>(static_cast<float>(x[i] * 2.0f) * 3.0f) * 5.0f);
    test::expect_close(out.to_double(), want, 0, 0, "the graph's result");
    for (const Tensor& t : later)
      test::expect_close(t.to_double(), std::vector<double>(static_cast<size_t>(n), 7.0), 0, 0,
                         "a tensor made after the capture");
  }
  later.clear();
  graph.reset();
  stream.synchronize();
  EXPECT_EQ(vk::memory_stats().live_bytes, live_before);
  EXPECT_EQ(vk::memory_stats().held_bytes, held_inside) << "destroying the graph frees its arena";
}

// The same for a tensor large enough for a device block of its own (kept for reuse when freed):
// released inside the capture, the graph claims the whole block, and a tensor of the same size
// made afterwards gets another.
TEST(Graph, ArenaClaimsDedicatedBlocks) {
  auto& stream = vk::Context::get().stream();
  const int64_t n = static_cast<int64_t>(vk::kSharedAllocationMax / 4) + 1024;  // > 64 MiB
  const Tensor x = Tensor::full({n}, 1.5f);
  const Tensor out = Tensor::zeros({1});
  stream.synchronize();
  const uint64_t live_before = vk::memory_stats().live_bytes;
  stream.begin_capture();
  {
    const Tensor doubled = ops::scale(x, 2.0f);  // a dedicated block, released inside
    out.copy_(doubled.slice(0, n - 1, n));
  }
  auto graph = stream.end_capture();
  EXPECT_GE(graph->arena_bytes(), static_cast<uint64_t>(n) * 4);
  EXPECT_EQ(vk::memory_stats().live_bytes, live_before);
  const Tensor later = Tensor::full({n}, 7.0f);  // would reuse the kept block if unclaimed
  stream.replay(*graph);
  EXPECT_EQ(out.to_double()[0], 3.0);
  const std::vector<float> tail = later.slice(0, n - 4, n).to_float();
  EXPECT_EQ(tail, std::vector<float>(4, 7.0f)) << "a replay wrote into a tensor made after it";
  graph.reset();
  stream.synchronize();
  EXPECT_EQ(vk::memory_stats().live_bytes, live_before + later.allocation().size);
}

TEST(Graph, HostTransfersAreRefused) {
  auto& stream = vk::Context::get().stream();
  const Tensor t = Tensor::zeros({4});
  stream.begin_capture();
  const std::string upload = test::error_message([] {
    Tensor::from_host(std::vector<float>{1, 2}, {2});
  });
  const std::string download = test::error_message([&] { t.to_float(); });
  EXPECT_TRUE(stream.capturing());
  auto graph = stream.end_capture();
  EXPECT_FALSE(stream.capturing());
  EXPECT_NE(upload.find("cannot upload"), std::string::npos) << upload;
  EXPECT_NE(download.find("read_back"), std::string::npos) << download;
  test::expect_error([&] { stream.end_capture(); }, {"no capture"});
  stream.begin_capture();
  test::expect_error([&] { stream.begin_capture(); }, {"already"});
  test::expect_error([&] { stream.replay(*graph); }, {"capture is in progress"});
  stream.end_capture();
}

// Replays of one graph back to back in one submission (decode steps that feed one another): each
// runs, in order; a graph captured without simultaneous use refuses them. Whole-graph timing
// gives one stage per replay. A kernel writes a host-visible tensor that the host then reads.
TEST(Graph, ReplaysBackToBackInOneSubmission) {
  auto& stream = vk::Context::get().stream();
  const Tensor a = Tensor::zeros({256}), one = Tensor::full({256}, 1.0f);
  const Tensor seen = Tensor::empty_host_visible({256}, DType::F32);
  ops::add_(a, one);  // pipelines outside the capture
  stream.synchronize();
  const bool timestamps = vk::Context::get().info().timestamps;
  stream.set_graph_simultaneous_use(true);
  stream.set_stage_timing(timestamps, false, /*whole_graph=*/true);
  stream.begin_capture();
  ops::add_(a, one);
  ops::add_(a, a);  // a = 2 (a + 1): each replay depends on the one before
  seen.copy_(a);    // a kernel writing host-visible memory
  const auto graph = stream.end_capture();
  stream.set_graph_simultaneous_use(false);
  stream.replay(*graph, 3);
  stream.wait(*graph);
  stream.set_stage_timing(false);
  // a: 1 -> 4 -> 10 -> 22.
  EXPECT_EQ(a.to_double()[0], 22.0);
  EXPECT_EQ(static_cast<const float*>(seen.host_data())[255], 22.0f);
  if (timestamps) {
    const auto stages = stream.stage_profile();
    ASSERT_EQ(stages.size(), 1u);
    EXPECT_EQ(stages[0].label, "whole graph");
    EXPECT_EQ(stages[0].calls, 1u) << "one wait, the last replay's timestamps";
  }
  stream.begin_capture();
  ops::add_(a, one);
  const auto single = stream.end_capture();
  test::expect_error([&] { stream.replay(*single, 2); }, {"simultaneous"});
  EXPECT_EQ(Tensor::zeros({4}).host_data(), nullptr) << "device memory has no host view";
}

// Submissions of a graph captured for simultaneous use queue behind one another, each waited for
// in turn (wait_oldest), and each sees what the one before it wrote; a graph captured without it,
// or with stage timing, is waited for before it is submitted again.
TEST(Graph, SubmissionsQueueBehindOneAnother) {
  auto& stream = vk::Context::get().stream();
  const Tensor a = Tensor::zeros({256}), one = Tensor::full({256}, 1.0f);
  const Tensor seen = Tensor::empty_host_visible({3, 256}, DType::F32);
  const Tensor slot = Tensor::empty_host_visible({1}, DType::F32);
  ops::add_(a, one);  // pipelines outside the capture
  stream.synchronize();
  stream.set_graph_simultaneous_use(true);
  stream.begin_capture();
  ops::add_(a, a);  // a = 2a: each submission depends on the one before
  seen.slice(0, 0, 1).reshape({256}).copy_(a);
  const auto graph = stream.end_capture();
  stream.set_graph_simultaneous_use(false);
  stream.replay(*graph, 2);  // a: 1 -> 2 -> 4
  stream.replay(*graph);     // 8
  stream.replay(*graph, 3);  // 16, 32, 64
  EXPECT_EQ(stream.pending(*graph), 3u);
  stream.wait_oldest(*graph);
  EXPECT_EQ(stream.pending(*graph), 2u);
  stream.wait_oldest(*graph);
  const float after_two = static_cast<const float*>(seen.host_data())[0];
  EXPECT_GE(after_two, 8.0f) << "the second submission has run";
  stream.wait(*graph);
  EXPECT_EQ(stream.pending(*graph), 0u);
  EXPECT_EQ(static_cast<const float*>(seen.host_data())[255], 64.0f);
  EXPECT_EQ(a.to_double()[0], 64.0);
  stream.wait_oldest(*graph);  // nothing pending: returns
  stream.begin_capture();
  ops::add_(a, one);
  slot.copy_(a.slice(0, 0, 1));
  const auto single = stream.end_capture();
  stream.replay(*single);
  stream.replay(*single);
  EXPECT_EQ(stream.pending(*single), 1u) << "waited for before its second submission";
  stream.wait(*single);
  EXPECT_EQ(static_cast<const float*>(slot.host_data())[0], 66.0f);
}

}  // namespace
}  // namespace vkf
