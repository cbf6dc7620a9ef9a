// Decode steps that feed one another on the device (infer::DecodeStepRunner::run, generate's
// steps_per_submission): the argmax's advance (ops::argmax_rows with an ops::ArgmaxAdvance)
// against a host argmax and the inputs it must leave for the next step; a run of several steps
// against as many single steps fed the chosen tokens by the host (replayed and recorded anew, one
// row and two, across the ring's wrap and across runs); generate's groups against one step at a
// time with an EOS inside a group; the step captured during the prefill against the eager first
// step; and the errors for runs the runner cannot take.
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "infer/decode_step.h"
#include "infer/generate.h"
#include "models/decoder.h"
#include "ops/decode.h"
#include "test_util.h"

namespace vkf {
namespace {

models::DecoderModel load(const std::string& c, DType matrices = DType::F32) {
  return models::DecoderModel::load((test::fixtures_dir() / "parity" / c).string(), matrices);
}

// torch.argmax of one row: the first index of the largest value, NaN above everything.
int32_t host_argmax(const std::vector<float>& row) {
  size_t best = 0;
  for (size_t i = 1; i < row.size(); ++i) {
    const bool bn = std::isnan(row[best]), in = std::isnan(row[i]);
    if (bn) break;
    if (in || row[i] > row[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

TEST(DecodeRun, ArgmaxAdvanceFeedsTheNextStep) {
  // Rows of 3 chunks (argmax_rows' chunks are 4,096 values): a tie across chunks (the first
  // wins), a NaN in the last chunk, and a row whose best value is in its first element.
  constexpr int64_t kRows = 3, kCols = 10000, kSlots = 5;
  std::vector<float> x(static_cast<size_t>(kRows * kCols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  x[0 * kCols + 9000] = 7.0f;
  x[0 * kCols + 5000] = 7.0f;  // the same value earlier, in another chunk: this one wins
  x[1 * kCols + 9999] = std::numeric_limits<float>::quiet_NaN();
  x[2 * kCols + 0] = 9.0f;
  std::vector<int32_t> want(kRows);
  for (int64_t r = 0; r < kRows; ++r)
    want[static_cast<size_t>(r)] =
        host_argmax(std::vector<float>(x.begin() + r * kCols, x.begin() + (r + 1) * kCols));
  ASSERT_EQ(want[0], 5000);
  ASSERT_EQ(want[1], kCols - 1);
  ASSERT_EQ(want[2], 0);

  const std::vector<int32_t> state0 = {11, 12, 13, 40, 41, 42, 7};  // ids, positions, cached
  ops::ArgmaxAdvance advance;
  advance.state = Tensor::from_host_i32(state0, {2 * kRows + 1});
  advance.ring = Tensor::empty_host_visible({kSlots, kRows}, DType::I32);
  auto* ring = static_cast<int32_t*>(advance.ring.host_data());
  for (int64_t i = 0; i < kSlots * kRows; ++i) ring[i] = -1;
  const Tensor ids = ops::argmax_rows(Tensor::from_host(x, {kRows, kCols}), &advance);
  const auto got_ids = ids.to_int();  // waits for the GPU
  for (int64_t r = 0; r < kRows; ++r) EXPECT_EQ(got_ids[static_cast<size_t>(r)], want[r]) << r;
  const auto state = advance.state.to_int();
  for (size_t r = 0; r < kRows; ++r) {
    EXPECT_EQ(state[r], want[r]) << "the next step's id of row " << r;
    EXPECT_EQ(state[kRows + r], state0[kRows + r] + 1) << "the next position of row " << r;
  }
  EXPECT_EQ(state[2 * kRows], 8) << "the cache length";
  const int64_t slot = 7 % kSlots;
  for (int64_t s = 0; s < kSlots; ++s)
    for (int64_t r = 0; r < kRows; ++r)
      EXPECT_EQ(ring[s * kRows + r], s == slot ? want[static_cast<size_t>(r)] : -1)
          << "ring slot " << s << " row " << r;
}

// Prompts (left-padded for two rows) through the prefill; returns the cache and each row's first
// decode position.
struct Prefilled {
  models::KVCache cache;
  std::vector<int32_t> mask, next_pos, first_ids;
};
Prefilled prefill(models::DecoderModel& model, const std::vector<std::vector<int32_t>>& prompts,
                  int64_t capacity) {
  const auto rows = prompts.size();
  size_t L = 0;
  for (const auto& p : prompts) L = std::max(L, p.size());
  std::vector<int32_t> ids(rows * L, 0), mask(rows * L, 0), pos(rows * L, 1);
  Prefilled out;
  for (size_t b = 0; b < rows; ++b) {
    const size_t off = L - prompts[b].size();
    for (size_t t = 0; t < prompts[b].size(); ++t) {
      ids[b * L + off + t] = prompts[b][t];
      mask[b * L + off + t] = 1;
      pos[b * L + off + t] = static_cast<int32_t>(t);
    }
    out.next_pos.push_back(static_cast<int32_t>(prompts[b].size()));
    out.first_ids.push_back(prompts[b].back() + 1);  // any token: teacher-forced first step
  }
  const auto B = static_cast<int64_t>(rows), Lc = static_cast<int64_t>(L);
  out.cache = model.make_cache(B, capacity);
  model.forward(Tensor::from_host_i32(ids, {B, Lc}), Tensor::from_host_i32(mask, {B, Lc}), {},
                &out.cache, pos);
  out.mask.assign(rows * static_cast<size_t>(capacity), 1);
  for (size_t b = 0; b < rows; ++b)
    std::copy(mask.begin() + static_cast<std::ptrdiff_t>(b * L),
              mask.begin() + static_cast<std::ptrdiff_t>((b + 1) * L),
              out.mask.begin() + static_cast<std::ptrdiff_t>(b * static_cast<size_t>(capacity)));
  return out;
}

// `total` greedy steps from the prefill, in runs of the given sizes (repeated), the host feeding
// each run's first step the last chosen tokens; the tokens of every step.
std::vector<std::vector<int32_t>> run_steps(models::DecoderModel& model,
                                            const std::vector<std::vector<int32_t>>& prompts,
                                            bool replay, int64_t total, int64_t group) {
  autograd::NoGradScope no_grad;
  Prefilled p = prefill(model, prompts, 8 + total);
  const int64_t start = p.cache.length;
  infer::DecodeStepRunner runner(model, p.cache, p.mask, replay, true);
  std::vector<int32_t> ids = p.first_ids, pos = p.next_pos;
  std::vector<std::vector<int32_t>> out;
  for (int64_t done = 0; done < total;) {
    const int64_t n = std::min(group, total - done);
    runner.run(ids, pos, n);
    for (int64_t i = 0; i < n; ++i) {
      const auto t = runner.chosen(i);
      out.emplace_back(t.begin(), t.end());
    }
    ids = out.back();
    for (auto& q : pos) q += static_cast<int32_t>(n);
    done += n;
  }
  EXPECT_EQ(p.cache.length, start + total) << "the cache length after the runs";
  EXPECT_EQ(runner.replaying(), replay);
  return out;
}

// The same with each run after the first queued behind the one before (submit_next) before the
// host waits for that one, `ahead` runs in flight at most.
std::vector<std::vector<int32_t>> queued_steps(models::DecoderModel& model,
                                               const std::vector<std::vector<int32_t>>& prompts,
                                               int64_t total, int64_t group, int64_t ahead) {
  autograd::NoGradScope no_grad;
  Prefilled p = prefill(model, prompts, 8 + total);
  const int64_t start = p.cache.length;
  infer::DecodeStepRunner runner(model, p.cache, p.mask, true, true);
  std::vector<std::vector<int32_t>> out;
  std::deque<int64_t> in_flight = {std::min(group, total)};  // the steps of each queued run
  int64_t submitted = in_flight.front();
  runner.submit(p.first_ids, p.next_pos, submitted);
  while (!in_flight.empty()) {
    while (static_cast<int64_t>(in_flight.size()) < ahead && submitted < total) {
      const int64_t n = std::min({group, total - submitted, runner.queue_room()});
      runner.submit_next(n);
      in_flight.push_back(n);
      submitted += n;
    }
    runner.wait_next();
    for (int64_t i = 0; i < in_flight.front(); ++i) {
      const auto t = runner.chosen(i);
      out.emplace_back(t.begin(), t.end());
    }
    in_flight.pop_front();
  }
  EXPECT_EQ(p.cache.length, start + total) << "the cache length after the runs";
  return out;
}

const std::vector<std::vector<int32_t>> kPrompts = {{5, 9, 13, 21, 7, 30}, {17, 3, 11}};

// Runs queued behind one another on the device (DecodeStepRunner::submit_next): the tokens of
// single steps, for two and three runs in flight and across the ring's wrap; and the errors for
// queues the runner cannot take.
TEST(DecodeRun, QueuedRunsGiveTheTokensOfSingleSteps) {
  for (const std::string c : {"llama", "qwen3"}) {
    auto model = load(c, DType::F16);
    for (const auto& prompts : {kPrompts, std::vector<std::vector<int32_t>>{kPrompts[0]}}) {
      SCOPED_TRACE(c + " rows " + std::to_string(prompts.size()));
      const int64_t total = 70;
      const auto single = run_steps(model, prompts, true, total, 1);
      EXPECT_EQ(queued_steps(model, prompts, total, 5, 2), single);
      EXPECT_EQ(queued_steps(model, prompts, total, 16, 3), single);
    }
  }
  autograd::NoGradScope no_grad;
  auto model = load("llama", DType::F16);
  Prefilled p = prefill(model, {kPrompts[0]}, 80);
  infer::DecodeStepRunner eager(model, p.cache, p.mask, false, true);
  eager.submit(p.first_ids, p.next_pos, 2);
  test::expect_error([&] { eager.submit_next(2); }, {"queue", "replayed"});
  eager.wait_next();
  test::expect_error([&] { eager.wait_next(); }, {"no run queued"});
  infer::DecodeStepRunner runner(model, p.cache, p.mask, true, true);
  runner.prepare();
  runner.submit(p.first_ids, p.next_pos, 40);
  test::expect_error([&] { runner.submit(p.first_ids, p.next_pos, 1); }, {"were queued"});
  test::expect_error([&] { (void)runner.chosen(0); }, {"step 0 of a run of 0"});
  test::expect_error([&] { runner.submit_next(25); }, {"room for 24"});
  runner.submit_next(24);
  runner.wait_next();
  EXPECT_EQ(runner.queue_room(), 0);
  runner.wait_next();
  EXPECT_EQ(runner.queue_room(), 40);
}

TEST(DecodeRun, RunsGiveTheTokensOfSingleSteps) {
  for (const std::string c : {"llama", "qwen3"}) {
    for (const DType dtype : {DType::F32, DType::F16}) {
      auto model = load(c, dtype);
      for (const auto& prompts : {kPrompts, std::vector<std::vector<int32_t>>{kPrompts[0]}}) {
        for (const bool replay : {true, false}) {
          SCOPED_TRACE(c + (dtype == DType::F16 ? " f16" : " f32") + " rows " +
                       std::to_string(prompts.size()) + (replay ? " replay" : " eager"));
          // 70 steps: runs of 64 wrap the ring of 64 slots.
          const int64_t total = replay ? 70 : 9;
          const auto single = run_steps(model, prompts, replay, total, 1);
          EXPECT_EQ(run_steps(model, prompts, replay, total, 4), single);
          EXPECT_EQ(run_steps(model, prompts, replay, total, infer::DecodeStepRunner::kMaxRunSteps),
                    single);
        }
      }
    }
  }
}

TEST(DecodeRun, GenerateGroupsMatchOneStepAtATime) {
  auto model = load("llama", DType::F16);
  infer::GenerationConfig cfg;
  cfg.max_new_tokens = 12;
  cfg.steps_per_submission = 1;
  const auto free_run = infer::generate(model, kPrompts, cfg);
  // An EOS that row 0 produces at its fourth token: row 0 stops inside a group, row 1 goes on
  // unless it produces the same token.
  cfg.eos_token_ids = {free_run[0][3]};
  for (const infer::DecodeMode mode : {infer::DecodeMode::Replay, infer::DecodeMode::Eager}) {
    cfg.decode_mode = mode;
    cfg.steps_per_submission = 1;
    const auto want = infer::generate(model, kPrompts, cfg);
    ASSERT_EQ(want[0].size(), 4u);
    for (const int64_t group : {3, 5, 16}) {
      cfg.steps_per_submission = group;
      EXPECT_EQ(infer::generate(model, kPrompts, cfg), want)
          << "steps per submission " << group << " mode " << static_cast<int>(mode);
    }
  }
}

// Replay mode with the step captured during the prefill (no eager first step): the same tokens as
// the eager first step followed by the capture, with the device argmax and with host choices over
// logits, and no step run eagerly.
TEST(DecodeRun, CaptureDuringThePrefill) {
  struct Restore {
    ~Restore() { infer::set_decode_capture_during_prefill(true); }
  } restore;
  infer::GenerationConfig cfg;
  // A cache of more than 64 positions: the prefill's rotary tables (64 rows at least) do not
  // cover it, so only the runner's preparation lets the capture go ahead.
  cfg.max_new_tokens = 66;
  for (const std::string c : {"llama", "gemma2", "qwen3", "phi3"}) {
    for (const DType dtype : {DType::F16}) {  // the weights inference runs
      for (const auto& prompts : {kPrompts, std::vector<std::vector<int32_t>>{kPrompts[1]}}) {
        for (const bool device : {true, false}) {
          SCOPED_TRACE(c + (dtype == DType::F16 ? " f16" : " f32") + " rows " +
                       std::to_string(prompts.size()) + (device ? " device" : " host") + " argmax");
          cfg.device_argmax = device;
          // A model fresh from disk, whose rotary tables only the runner's preparation builds.
          auto model = load(c, dtype);
          infer::set_decode_capture_during_prefill(true);
          const double eager_before = infer::decode_host_times().eager_s;
          const auto got = infer::generate(model, prompts, cfg);
          EXPECT_EQ(infer::decode_host_times().eager_s, eager_before) << "a step ran eagerly";
          infer::set_decode_capture_during_prefill(false);
          EXPECT_EQ(got, infer::generate(model, prompts, cfg));
        }
      }
    }
  }
}

TEST(DecodeRun, RunsTheRunnerCannotTake) {
  autograd::NoGradScope no_grad;
  auto model = load("llama");
  Prefilled p = prefill(model, {kPrompts[0]}, 10);  // 4 slots left
  const std::vector<int32_t> ids = {4}, pos = {6};
  {
    infer::DecodeStepRunner runner(model, p.cache, p.mask, true, true);
    test::expect_error([&] { runner.run(ids, pos, 0); }, {"decode step", "0 steps"});
    test::expect_error([&] { runner.run(ids, pos, infer::DecodeStepRunner::kMaxRunSteps + 1); },
                       {"decode step", "steps in one run"});
    test::expect_error([&] { runner.run(ids, pos, 5); }, {"do not fit", "KV cache"});
    runner.run(ids, pos, 2);
    test::expect_error([&] { (void)runner.chosen(2); }, {"step 2 of a run of 2"});
  }
  {
    infer::DecodeStepRunner logits(model, p.cache, p.mask, true, false);
    test::expect_error([&] { logits.run(ids, pos, 2); }, {"more than one only with the device"});
  }
  infer::GenerationConfig cfg;
  cfg.steps_per_submission = 0;
  test::expect_error([&] { infer::generate(model, kPrompts, cfg); }, {"steps_per_submission"});
}

}  // namespace
}  // namespace vkf
