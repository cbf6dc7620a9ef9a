// Generation loop and token choice (see generate.h). Greedy tokens are chosen on the device;
// otherwise the logits of the last position are read back each step (one [B, vocab] download) and
// the processors run on the host in double.
#include "infer/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <set>

#include "core/autograd.h"
#include "infer/decode_step.h"
#include "ops/decode.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf::infer {

namespace {

bool g_capture_during_prefill = true;  // set_decode_capture_during_prefill

// splitmix64: a small, seedable generator whose sequence is the same on every platform.
double next_uniform(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace

void set_decode_capture_during_prefill(bool on) {
  g_capture_during_prefill = on;
}

int32_t choose_token(std::vector<float> logits, const std::vector<int32_t>& seen,
                     const GenerationConfig& c, uint64_t& rng_state) {
  const size_t V = logits.size();
  VKF_REQUIRE(V > 0, "generate: empty logits");
  if (c.repetition_penalty != 1.0) {
    // transformers: every token already in the sequence, once: negative scores are multiplied,
    // positive ones divided by the penalty.
    std::set<int32_t> uniq(seen.begin(), seen.end());
    for (int32_t t : uniq) {
      if (t < 0 || static_cast<size_t>(t) >= V) continue;
      float& s = logits[static_cast<size_t>(t)];
      s = s < 0 ? static_cast<float>(s * c.repetition_penalty) : static_cast<float>(s / c.repetition_penalty);
    }
  }
  if (!c.do_sample) {
    // torch.argmax: the first index of the maximum.
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  std::vector<double> s(logits.begin(), logits.end());
  if (c.temperature != 1.0) for (double& x : s) x /= c.temperature;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s[a] > s[b]; });
  if (c.top_k > 0 && static_cast<size_t>(c.top_k) < V) {
    const double kth = s[order[static_cast<size_t>(c.top_k) - 1]];
    for (double& x : s) if (x < kth) x = neg_inf;
  }
  auto softmax = [&] {
    const double m = *std::max_element(s.begin(), s.end());
    std::vector<double> p(V);
    double z = 0;
    for (size_t i = 0; i < V; ++i) z += p[i] = std::exp(s[i] - m);
    for (double& x : p) x /= z;
    return p;
  };
  if (c.top_p < 1.0) {
    // Keep the smallest set of most likely tokens whose mass reaches top_p (at least one).
    const auto p = softmax();
    double mass = 0;
    std::vector<bool> keep(V, false);
    for (size_t r = 0; r < V; ++r) {
      keep[order[r]] = true;
      mass += p[order[r]];
      if (mass >= c.top_p) break;
    }
    for (size_t i = 0; i < V; ++i) if (!keep[i]) s[i] = neg_inf;
  }
  if (c.min_p > 0.0) {
    const auto p = softmax();
    const double top = *std::max_element(p.begin(), p.end());
    for (size_t i = 0; i < V; ++i) if (p[i] < c.min_p * top) s[i] = neg_inf;
  }
  const auto p = softmax();
  double u = next_uniform(rng_state), acc = 0;
  for (size_t i = 0; i < V; ++i) {
    acc += p[i];
    if (u < acc) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(order[0]);
}

DecodeMode effective_decode_mode(const models::DecoderModel& model, DecodeMode wanted) {
  return wanted != DecodeMode::Generic && !model.decode_step_unsupported().empty()
             ? DecodeMode::Generic
             : wanted;
}

std::vector<std::vector<int32_t>> generate(models::DecoderModel& model,
                                           const std::vector<std::vector<int32_t>>& prompts,
                                           const GenerationConfig& c, const TokenCallback& on_token,
                                           const StopCheck& should_stop) {
  VKF_REQUIRE(!prompts.empty(), "generate: no prompts");
  VKF_REQUIRE(c.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0");
  VKF_REQUIRE(c.temperature > 0, "generate: temperature must be > 0 (use greedy decoding instead)");
  VKF_REQUIRE(
      c.steps_per_submission >= 1 && c.steps_per_submission <= DecodeStepRunner::kMaxRunSteps,
      "generate: steps_per_submission must be 1 to {}, got {}", DecodeStepRunner::kMaxRunSteps,
      c.steps_per_submission);
  const int64_t V = model.spec().vocab_size;
  const int64_t B = static_cast<int64_t>(prompts.size());
  const auto rows = static_cast<size_t>(B);
  size_t L = 0;
  for (const auto& p : prompts) {
    VKF_REQUIRE(!p.empty(), "generate: an empty prompt (it needs at least one token, e.g. BOS)");
    for (int32_t t : p) VKF_REQUIRE(t >= 0 && t < V, "generate: token id {} outside the vocabulary of {}", t, V);
    L = std::max(L, p.size());
  }
  autograd::NoGradScope no_grad;
  // Left padding, positions counted over real tokens (transformers: cumsum(mask) - 1).
  std::vector<int32_t> ids(rows * L, c.pad_token_id), mask(ids.size(), 0), pos(ids.size(), 1);
  std::vector<int32_t> next_pos(rows);
  std::vector<std::vector<int32_t>> seen(rows);
  for (size_t b = 0; b < rows; ++b) {
    const auto& p = prompts[b];
    const size_t off = L - p.size();
    for (size_t t = 0; t < p.size(); ++t) {
      ids[b * L + off + t] = p[t];
      mask[b * L + off + t] = 1;
      pos[b * L + off + t] = static_cast<int32_t>(t);
    }
    next_pos[b] = static_cast<int32_t>(p.size());
    seen[b] = p;
  }
  const int64_t capacity = static_cast<int64_t>(L) + std::max<int64_t>(c.max_new_tokens, 1);
  models::KVCache cache = model.make_cache(B, capacity);
  // (Batches past what the device argmax's advance takes pick on the host: the same tokens.)
  const bool on_device = c.device_argmax && !c.do_sample && c.repetition_penalty == 1.0 &&
                         B <= ops::kArgmaxAdvanceMaxRows;
  const DecodeMode mode = effective_decode_mode(model, c.decode_mode);

  // The step's result: each row's token (device argmax) or its logits, whichever path produced it.
  std::vector<int32_t> device_ids(rows);
  std::vector<float> host_logits;
  auto take_result = [&](const Tensor& last) {  // last: [B, 1, V] logits of the newest position
    if (on_device) {
      const auto chosen = ops::argmax_rows(last).to_int();
      for (size_t b = 0; b < rows; ++b) device_ids[b] = static_cast<int32_t>(chosen[b]);
    } else {
      host_logits = last.to_float();
    }
  };
  const Tensor prefill = model.forward(Tensor::from_host_i32(ids, {B, static_cast<int64_t>(L)}),
                                       Tensor::from_host_i32(mask, {B, static_cast<int64_t>(L)}),
                                       {}, &cache, pos, /*last_only=*/true);

  std::unique_ptr<DecodeStepRunner> runner;
  std::vector<int32_t> full_mask = mask;  // Generic: [B, keys], grows by one column per step
  int64_t keys = static_cast<int64_t>(L);
  if (mode != DecodeMode::Generic && c.max_new_tokens > 1) {
    // Every slot past the prompt holds a generated token, which every row attends to.
    std::vector<int32_t> slots(rows * static_cast<size_t>(capacity), 1);
    for (size_t b = 0; b < rows; ++b)
      std::copy(mask.begin() + static_cast<std::ptrdiff_t>(b * L),
                mask.begin() + static_cast<std::ptrdiff_t>((b + 1) * L),
                slots.begin() + static_cast<std::ptrdiff_t>(b * static_cast<size_t>(capacity)));
    runner = std::make_unique<DecodeStepRunner>(model, cache, slots, mode == DecodeMode::Replay,
                                                on_device);
  }
  if (runner && mode == DecodeMode::Replay && g_capture_during_prefill) {
    // The step is captured while the GPU runs the prefill, and no step runs eagerly first.
    vk::Context::get().stream().submit();
    runner->prepare();
  }
  take_result(prefill);

  std::vector<std::vector<int32_t>> out(rows);
  std::vector<bool> done(rows, false);
  int64_t group_steps = 0, group_next = 0;  // the runner's last group, and its next unread step
  int64_t queued = 0;                       // the steps of the group queued behind it (0: none)
  // The first group has two steps, so that the runner's capture overlaps its eager first step
  // (unless it was captured during the prefill); later ones as many as take about kGroupMs at the
  // last group's pace (a slow device streams its tokens one by one), at most steps_per_submission.
  // Replaying, each group is queued before the host waits for the one before it, so that the GPU
  // goes from one to the next without waiting for the host.
  constexpr double kGroupMs = 20.0;
  int64_t next_group = std::min<int64_t>(2, c.steps_per_submission);
  auto group_clock = std::chrono::steady_clock::now();
  uint64_t rng = c.seed;
  for (int64_t step = 0; step < c.max_new_tokens; ++step) {
    std::vector<int32_t> chosen(rows, c.pad_token_id);
    bool all_done = true;
    for (size_t b = 0; b < rows; ++b) {
      if (done[b]) continue;
      int32_t t;
      if (on_device) {
        t = device_ids[b];
      } else {
        std::vector<float> row(host_logits.begin() + static_cast<std::ptrdiff_t>(b) * V,
                               host_logits.begin() + static_cast<std::ptrdiff_t>(b + 1) * V);
        t = choose_token(std::move(row), seen[b], c, rng);
      }
      chosen[b] = t;
      out[b].push_back(t);
      seen[b].push_back(t);
      if (on_token) on_token(b, t);
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), t) != c.eos_token_ids.end() ||
          (should_stop && should_stop(b, out[b])))
        done[b] = true;
      all_done = all_done && done[b];
    }
    if (all_done || step + 1 == c.max_new_tokens) break;
    std::vector<int32_t> step_pos(rows);
    for (size_t b = 0; b < rows; ++b) step_pos[b] = next_pos[b]++;
    if (runner) {
      if (on_device) {
        // Steps run in groups: the first takes `chosen` (pad for finished rows), the later ones
        // the tokens the device chose, every row one position further as step_pos is here. A
        // finished row's tokens are never used, and rows do not see each other, so the other
        // rows' tokens are those of one step at a time.
        if (group_next == group_steps) {
          const int64_t left = c.max_new_tokens - 1 - step;  // steps still to run
          if (queued == 0) {
            group_steps = std::min(next_group, left);
            group_clock = std::chrono::steady_clock::now();
            runner->submit(chosen, step_pos, group_steps);
          } else {
            group_steps = queued;  // already running
          }
          queued = runner->replaying()
                       ? std::min({next_group, left - group_steps, runner->queue_room()})
                       : 0;
          if (queued > 0) runner->submit_next(queued);
          runner->wait_next();
          group_next = 0;
          // The pace: from the last group's end (or this one's submission) to this one's.
          const auto now = std::chrono::steady_clock::now();
          const double ms = std::chrono::duration<double, std::milli>(now - group_clock).count() /
                            static_cast<double>(group_steps);
          group_clock = now;
          next_group = std::clamp(static_cast<int64_t>(kGroupMs / std::max(ms, 1e-3)), int64_t{1},
                                  c.steps_per_submission);
        }
        const auto got = runner->chosen(group_next++);
        std::copy(got.begin(), got.end(), device_ids.begin());
      } else {
        runner->step(chosen, step_pos);
        const auto got = runner->logits();
        host_logits.assign(got.begin(), got.end());
      }
      continue;
    }
    // Generic: append one column to the mask (every row attends to its new token, as transformers
    // does).
    std::vector<int32_t> grown(rows * static_cast<size_t>(keys + 1));
    for (size_t b = 0; b < rows; ++b) {
      std::copy(full_mask.begin() + static_cast<std::ptrdiff_t>(b) * keys,
                full_mask.begin() + static_cast<std::ptrdiff_t>(b + 1) * keys,
                grown.begin() + static_cast<std::ptrdiff_t>(b) * (keys + 1));
      grown[b * static_cast<size_t>(keys + 1) + static_cast<size_t>(keys)] = 1;
    }
    full_mask.swap(grown);
    ++keys;
    take_result(model.forward(Tensor::from_host_i32(chosen, {B, 1}),
                              Tensor::from_host_i32(full_mask, {B, keys}), {}, &cache, step_pos));
  }
  return out;
}

}  // namespace vkf::infer
