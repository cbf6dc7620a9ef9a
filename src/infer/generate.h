// Text generation with a KV cache: left-padded batch prefill, then one token per step, with greedy
// decoding or sampling processed as transformers' generate does (repetition penalty, temperature,
// top-k, top-p, min-p, in that order), stopping per row at an EOS id or after max_new_tokens.
// Greedy decoding without a repetition penalty chooses tokens on the device (argmax): one int32
// per row comes back per step. The decode step is recorded once and replayed (decode_step.h).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "models/decoder.h"

namespace vkf::infer {

// How the steps after the prefill run.
enum class DecodeMode {
  Replay,   // DecoderModel::decode_step, captured once (after a first eager step) and replayed
  Eager,    // DecoderModel::decode_step, recorded anew at every step
  Generic,  // DecoderModel::forward with the cache and a mask grown by one column per step
};

struct GenerationConfig {
  int64_t max_new_tokens = 32;
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 50;       // 0 disables (transformers' default is 50 when sampling)
  double top_p = 1.0;       // 1 disables
  double min_p = 0.0;       // 0 disables
  double repetition_penalty = 1.0;
  uint64_t seed = 0;
  std::vector<int32_t> eos_token_ids;
  int32_t pad_token_id = 0;  // fills the left padding and finished rows
  // Replay and Eager fall back to Generic for models decode_step() does not serve (rotary
  // frequencies that depend on the sequence length: dynamic, longrope).
  DecodeMode decode_mode = DecodeMode::Replay;
  // Greedy tokens by argmax on the device (false: the logits come back and the host picks; for
  // comparisons and benchmarks). Sampling and repetition penalties always pick on the host.
  bool device_argmax = true;
  // With the device argmax (greedy, no repetition penalty) in Replay or Eager mode: decode steps
  // run in groups of up to this many (1..64), each fed the tokens of the step before on the
  // device, and submitted together: the host's submit and wait are paid once per group (on the
  // H200 about 0.05 ms per 1 ms step; bench/RESULTS.md). A group is sized to take about 20 ms at
  // the pace of the one before (the first has two steps): tokens reach the callback in bursts
  // about 20 ms apart on a fast device, one by one on a slow one. Replayed, each group is queued
  // on the GPU before the host waits for the one before it, so up to two groups minus one steps
  // may run past the end (an EOS, a stop check), their tokens unused. The tokens are those of one
  // step at a time.
  int64_t steps_per_submission = 16;
};

// Replay mode captures the decode step while the GPU runs the prompt's prefill
// (DecodeStepRunner::prepare; the default), or (false) runs the first step eagerly and captures
// the second while the GPU runs it. On the H200 the first was 0.02-0.03 ms per 1B step faster
// over 63 steps (bench/RESULTS.md, twenty-ninth session); decode_bench --eager-first-step times
// the second. The same tokens either way.
void set_decode_capture_during_prefill(bool on);

// The mode generate() uses for `model` when asked for `wanted` (the fallback rule above).
DecodeMode effective_decode_mode(const models::DecoderModel& model, DecodeMode wanted);

// Called after each token with the row's generated tokens so far; returning true finishes that
// row (stop strings: the caller decodes and looks for them).
using StopCheck = std::function<bool(size_t row, const std::vector<int32_t>& generated)>;

// Receives each generated token as it is chosen (row, token), e.g. to stream text.
using TokenCallback = std::function<void(size_t row, int32_t token)>;

// Returns the new tokens of each prompt (ending with the EOS id when one was produced).
std::vector<std::vector<int32_t>> generate(models::DecoderModel& model,
                                           const std::vector<std::vector<int32_t>>& prompts,
                                           const GenerationConfig& config,
                                           const TokenCallback& on_token = {},
                                           const StopCheck& should_stop = {});

// One decoding choice from a row of logits (exposed for tests): applies the processors of
// `config` given the tokens seen so far and returns the chosen id.
int32_t choose_token(std::vector<float> logits, const std::vector<int32_t>& seen,
                     const GenerationConfig& config, uint64_t& rng_state);

}  // namespace vkf::infer
