// Replayed training steps (train/step_runner.h): train() with steps captured once and replayed
// gives bit for bit the eager run's losses, gradient norms, loss scales and weights -- in fp32 and
// f16 (with an overflow that changes the loss scale), with gradient accumulation, padded batches
// of changing shapes, activation checkpointing, a LoRA adapter and dropout (which goes eager) --
// replays the steps the policy says it does, and needs no more memory than the eager run; a
// replayed step the device skips settles the host side as an eager skip does.
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "models/decoder.h"
#include "models/registry.h"
#include "ops/optim.h"
#include "peft/lora.h"
#include "test_models.h"
#include "test_util.h"
#include "train/optimizer_step.h"
#include "train/trainer.h"
#include "vk/memory.h"

namespace vkf {
namespace {

using test::Rng;

models::DecoderModel tiny_llama(double attention_dropout = 0.0) {
  const nlohmann::json c = {{"model_type", "llama"},
                            {"vocab_size", 40},
                            {"hidden_size", 16},
                            {"intermediate_size", 24},
                            {"num_hidden_layers", 2},
                            {"num_attention_heads", 2},
                            {"num_key_value_heads", 1},
                            {"max_position_embeddings", 64},
                            {"attention_dropout", attention_dropout}};
  return test::random_decoder(c, 3, 0.1);
}

// n sequences of random tokens; lengths cycle through `lengths`.
std::vector<train::Example> examples(size_t n, std::vector<size_t> lengths) {
  Rng rng(4);
  std::vector<train::Example> data(n);
  for (size_t i = 0; i < n; ++i) {
    data[i].ids = rng.ints(lengths[i % lengths.size()], 0, 39);
    data[i].labels = data[i].ids;
  }
  return data;
}

struct TrainRun {
  train::TrainResult result;
  std::vector<std::vector<uint8_t>> weights;  // trained tensors' bytes
  int64_t replayed = -1, steps = -1;          // from the summary line
  std::string summary;
  uint64_t peak_live = 0, peak_reserved = 0;
};

struct Case {
  std::string name;
  MatmulPrecision precision = MatmulPrecision::F32;
  int64_t grad_accum = 1;
  std::vector<size_t> lengths{9};
  bool checkpointing = false, lora = false, fused_loss = true;
  double dropout = 0.0;  // attention_dropout of the model
  std::set<int64_t> inject;
  double lora_dropout = 0.0;
};

TrainRun train_once(const Case& c, bool replay) {
  models::DecoderModel model = tiny_llama(c.dropout);
  std::shared_ptr<peft::LoraAdapter> adapter;
  if (c.lora) {
    adapter =
        peft::LoraAdapter::create(model,
                                  peft::LoraConfig::from_json({{"r", 4},
                                                               {"lora_alpha", 8},
                                                               {"target_modules", "all-linear"},
                                                               {"init_lora_weights", false},
                                                               {"lora_dropout", c.lora_dropout}},
                                                              "test config"),
                                  2);
    model.add_adapter("default", adapter);
  }
  train::TrainOptions o;
  o.max_steps = 7;
  o.batch_size = 2;
  o.grad_accum = c.grad_accum;
  o.schedule.type = "linear";
  o.schedule.learning_rate = 1e-2;
  o.schedule.warmup_steps = 2;
  o.weight_decay = 0.05;
  o.max_grad_norm = 0.5;
  o.precision = c.precision;
  o.inject_overflow_at = c.inject;
  o.gradient_checkpointing = c.checkpointing;
  o.fused_loss = c.fused_loss;
  o.adapter = adapter;
  o.replay_steps = replay;
  TrainRun run;
  run.result = train::train(model, examples(40, c.lengths), {}, o, [&](const std::string& line) {
    std::smatch m;
    if (std::regex_search(line, m, std::regex("^steps replayed: (\\d+) of (\\d+)"))) {
      run.replayed = std::stoll(m[1]);
      run.steps = std::stoll(m[2]);
      run.summary = line;
    }
  });
  run.peak_live = vk::memory_stats().peak_live_bytes;
  run.peak_reserved = vk::memory_stats().peak_reserved_bytes;
  if (adapter) {
    for (const auto& [n, t] : adapter->parameters()) run.weights.push_back(t.to_bytes());
  } else {
    for (const auto& n : model.parameter_names()) run.weights.push_back(model.param(n).to_bytes());
  }
  return run;
}

void expect_same_run(const TrainRun& replayed, const TrainRun& eager) {
  ASSERT_EQ(replayed.result.log.size(), eager.result.log.size());
  for (size_t i = 0; i < eager.result.log.size(); ++i) {
    const auto &r = replayed.result.log[i], &e = eager.result.log[i];
    SCOPED_TRACE("step " + std::to_string(e.step));
    EXPECT_EQ(r.loss, e.loss);
    EXPECT_EQ(r.grad_norm, e.grad_norm);
    EXPECT_EQ(r.lr, e.lr);
    EXPECT_EQ(r.loss_scale, e.loss_scale);
    EXPECT_EQ(r.skipped, e.skipped);
  }
  ASSERT_EQ(replayed.weights.size(), eager.weights.size());
  for (size_t i = 0; i < eager.weights.size(); ++i)
    EXPECT_TRUE(replayed.weights[i] == eager.weights[i]) << "trained tensor " << i << " differs";
}

TEST(StepRunner, ReplayedTrainingIsBitwiseTheEagerRun) {
  // Replays expected from the policy: a new key runs eagerly, the next step with it is captured
  // and replayed, later ones replay (6 of 7); an injected overflow runs eagerly and halves the
  // scale, a new key (steps 1, 3 and 4 eager: 4 of 7).
  const std::vector<std::pair<Case, int64_t>> cases = {
      {{"fp32"}, 6},
      {{"fp32 unfused loss, accumulation", MatmulPrecision::F32, 2, {9}, false, false, false}, 6},
      {{"f16 with an overflow at step 3",
        MatmulPrecision::F16,
        1,
        {9},
        false,
        false,
        true,
        0.0,
        {3}},
       4},
      {{"f16 checkpointing, accumulation", MatmulPrecision::F16, 2, {9}, true}, 6},
      {{"fp32 LoRA", MatmulPrecision::F32, 1, {9}, false, true}, 6},
  };
  for (const auto& [c, replays] : cases) {
    SCOPED_TRACE(c.name);
    const TrainRun eager = train_once(c, false);
    const TrainRun replayed = train_once(c, true);
    expect_same_run(replayed, eager);
    EXPECT_EQ(replayed.steps, 7);
    EXPECT_EQ(replayed.replayed, replays) << replayed.summary;
    EXPECT_EQ(eager.replayed, 0) << eager.summary;
    // The recording allocates as an eager step does (plus its few small input tensors), and its
    // arena -- the addresses the step's tensors used -- is the graph's, not live: the live peak
    // is the eager run's, and no more device memory is reserved than the eager run reserved.
    EXPECT_LE(replayed.peak_reserved, eager.peak_reserved);
    EXPECT_GE(replayed.peak_live, eager.peak_live);
    EXPECT_LE(replayed.peak_live, eager.peak_live + (64u << 10))
        << "replayed " << replayed.peak_live << " eager " << eager.peak_live;
  }
}

TEST(StepRunner, ChangingShapesReplayOnlyRepeats) {
  // Padded batches of shuffled rows of 9 or 12 tokens: a step's shape is its longest row, so
  // shapes change from step to step; steps replay only where a shape repeats.
  Case c{"padded"};
  c.lengths = {9, 12};
  const TrainRun eager = train_once(c, false);
  const TrainRun replayed = train_once(c, true);
  expect_same_run(replayed, eager);
  EXPECT_GT(replayed.replayed, 0) << replayed.summary;
  EXPECT_LT(replayed.replayed, 6) << replayed.summary;
}

TEST(StepRunner, DropoutGoesEager) {
  Case c{"attention dropout 0.1"};
  c.dropout = 0.1;
  const TrainRun eager = train_once(c, false);
  const TrainRun replayed = train_once(c, true);
  expect_same_run(replayed, eager);
  // Attention dropout's parameters are uploaded per call: the first capture finds that out, and
  // that step and the rest run eagerly.
  EXPECT_EQ(replayed.replayed, 0) << replayed.summary;
  EXPECT_NE(replayed.summary.find("cannot be recorded"), std::string::npos) << replayed.summary;

  // LoRA dropout draws its masks with counter offsets in push constants: the capture records,
  // sees the stream move, replays that one step (its offsets are right for it) and goes eager.
  Case lora{"LoRA dropout 0.1"};
  lora.lora = true;
  lora.lora_dropout = 0.1;
  const TrainRun lora_eager = train_once(lora, false);
  const TrainRun lora_replayed = train_once(lora, true);
  expect_same_run(lora_replayed, lora_eager);
  EXPECT_EQ(lora_replayed.replayed, 1) << lora_replayed.summary;
  EXPECT_NE(lora_replayed.summary.find("dropout masks"), std::string::npos)
      << lora_replayed.summary;
}

// The host side of a replayed step that the device skipped (an overflow found while replaying):
// AdamW's step numbers go back, the schedule holds, the scale halves -- as for an eager skip.
TEST(StepRunner, ReplayedSkipSettlesTheHostAsAnEagerOne) {
  const Tensor w = Tensor::full({4}, 0.5f), b = Tensor::full({2}, 0.25f);
  ops::AdamW opt({w, b}, {1e-2, 0.9, 0.999, 1e-8, 0.0});
  train::ScheduleConfig sc;
  sc.type = "linear";
  sc.learning_rate = 1e-2;
  sc.total_steps = 10;
  const train::LrSchedule schedule(sc);
  train::OptimizerStep update(opt, schedule, 1.0, train::GradScalerConfig{});
  std::vector<float> scalars(update.step_scalar_count());
  const Tensor table = Tensor::zeros({static_cast<int64_t>(scalars.size())});
  // Step 1, recorded with the table (as a capture records it), clean.
  w.set_grad(Tensor::full({4}, 1.0f));
  b.set_grad(Tensor::full({2}, 1.0f));
  update.step_scalars(1, scalars);
  table.copy_(Tensor::from_host(std::span<const float>(scalars), table.shape()));
  update.record(1, Tensor::full({}, 3.0f), table);
  EXPECT_FALSE(update.finish().skipped);
  EXPECT_EQ(opt.param_steps(), (std::vector<int64_t>{1, 1}));
  // Step 2, replayed: its figures say found_inf.
  update.step_scalars(2, scalars);
  update.replayed(2, Tensor::from_host(std::vector<float>{3.0f, 7.0f, 1.0f}, {3}));
  EXPECT_EQ(opt.param_steps(), (std::vector<int64_t>{2, 2})) << "counted as the capture counted";
  const train::StepOutcome out = update.finish();
  EXPECT_TRUE(out.skipped);
  EXPECT_EQ(out.loss_scale, 65536.0f);
  EXPECT_EQ(opt.param_steps(), (std::vector<int64_t>{1, 1})) << "a skipped step is not counted";
  EXPECT_EQ(update.skipped_steps(), 1);
  EXPECT_EQ(update.scaler()->scale(), 32768.0f);
  EXPECT_EQ(update.lr_for(3), schedule.lr_at(2)) << "the schedule holds back by the skip";
}

}  // namespace
}  // namespace vkf
