// The memory planner against measurement: real training steps (forward, backward, clipping,
// AdamW) of small models of several shapes and architectures, with the loss fused with the LM
// head (as train() runs it) and without, three also in mixed precision (with the products' f16
// operand copies where the device or the cooperative-matrix emulation makes them), and
// forward-only passes, each compared with the plan's total tensor bytes; what the
// fused loss saves; plus the plan's arithmetic where nothing here can measure it (gradient
// checkpointing, a trainable subset), the fit check's error and size parsing.
//
// The measured figure is the allocator's peak of live tensor bytes (vk::memory_stats), which
// counts every tensor from its allocation to its release, rounded as the allocator rounds, so the
// plan and the measurement count the same thing; it does not depend on timing.
//
// The bound: measured <= estimate <= kSlack * measured, kSlack = 1.1. The plan must never be below
// what a run uses (a run it accepts must not run out of memory for want of a tensor it forgot),
// and may be above by what it simplifies: a 16 KiB allowance for scalars and small buffers, the
// residual stream's gradient counted twice at moments where one copy is alive, and, forward-only,
// every block's tensors counted at their largest moment. On these shapes that is 0.2-2.4% for
// training and 0.5-5% forward-only (measured when this was written); on real models, where those
// terms are small beside [N, H] and [N, V] tensors, less. A plan that forgot a saved tensor (say
// attention's [B, H, T, T] probabilities, were the attention to keep them) falls below the
// measurement; one that counted a per-layer [N, H] tensor twice rises above the bound.
#include <cmath>

#include "core/autograd.h"
#include "emulated_f16.h"
#include "models/decoder.h"
#include "models/registry.h"
#include "ops/attention.h"
#include "ops/attention_coopmat.h"
#include "ops/gated_projection.h"
#include "ops/linear_cross_entropy.h"
#include "ops/loss.h"
#include "ops/matmul_coopmat.h"
#include "test_models.h"
#include "test_util.h"
#include "train/causal_lm.h"
#include "train/memory_plan.h"
#include "train/trainer.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf {
namespace {
using nlohmann::json;

constexpr double kSlack = 1.1;

json config(const std::string& type, int64_t vocab, int64_t hidden, int64_t inter, int64_t layers,
            int64_t heads, int64_t kv_heads, bool tied) {
  json c = {{"model_type", type},
            {"vocab_size", vocab},
            {"hidden_size", hidden},
            {"intermediate_size", inter},
            {"num_hidden_layers", layers},
            {"num_attention_heads", heads},
            {"num_key_value_heads", kv_heads},
            {"max_position_embeddings", 4096},
            {"tie_word_embeddings", tied}};
  if (type == "gemma2") {
    c["layer_types"] = json::array();
    for (int64_t l = 0; l < layers; ++l)
      c["layer_types"].push_back(l % 2 ? "full_attention" : "sliding_attention");
    c["sliding_window"] = 16;
    c["query_pre_attn_scalar"] = hidden / heads;
    c["attn_logit_softcapping"] = 50.0;
    c["final_logit_softcapping"] = 30.0;
    c["head_dim"] = hidden / heads;
  }
  if (type == "granite") {
    c["embedding_multiplier"] = 2.0;
    c["residual_multiplier"] = 0.5;
    c["attention_multiplier"] = 0.3;
    c["logits_scaling"] = 4.0;
  }
  return c;
}

models::DecoderModel random_model(const json& cfg) {
  return test::random_decoder(cfg, 3, 0.05);
}

std::vector<train::Example> random_sequences(size_t count, int64_t length, int64_t vocab) {
  test::Rng rng(11);
  std::vector<train::Example> out(count);
  for (auto& e : out) {
    e.ids = rng.ints(static_cast<size_t>(length), 0, static_cast<int32_t>(vocab - 1));
    e.labels = e.ids;
  }
  return out;
}

struct Case {
  std::string name;
  json cfg;
  int64_t batch, seq, accum = 1;
  bool fused = true;  // the loss fused with the LM head (TrainOptions::fused_loss)
};

// Measured peak of live tensor bytes over two training steps (the second has every buffer of a
// steady step: AdamW state, gradients made and dropped again), from before the model exists.
uint64_t measure_training(const Case& c, MatmulPrecision precision = MatmulPrecision::F32) {
  vk::stream().synchronize();
  const uint64_t base = vk::memory_stats().live_bytes, held_base = vk::memory_stats().held_bytes;
  vk::reset_memory_peak();
  {
    models::DecoderModel model = random_model(c.cfg);
    const auto data = random_sequences(static_cast<size_t>(2 * c.batch * c.accum), c.seq,
                                       model.spec().vocab_size);
    train::TrainOptions o;
    o.max_steps = 2;
    o.batch_size = c.batch;
    o.grad_accum = c.accum;
    o.schedule.learning_rate = 1e-3;
    o.precision = precision;
    o.fused_loss = c.fused;
    train::train(model, data, {}, o);
  }
  vk::stream().synchronize();
  const vk::DeviceMemoryStats s = vk::memory_stats();
  EXPECT_EQ(s.live_bytes, base) << "tensors outlived the run";
  // For the record, not checked: memory released while the GPU may still use it is held until
  // the stream sees that work finish, so held bytes peak above live ones by how far it lags.
  std::printf("%-34s held peak %10llu\n", c.name.c_str(),
              static_cast<unsigned long long>(s.peak_held_bytes - held_base));
  return s.peak_live_bytes - base;
}

// The plan of a case under the precision it runs in (the products' temporaries depend on it).
train::MemoryPlan plan_for(const Case& c, bool training,
                           MatmulPrecision precision = MatmulPrecision::F32) {
  const MatmulPrecision before = matmul_precision();
  set_matmul_precision(precision);
  train::MemoryPlanInput in;
  in.batch_size = c.batch;
  in.seq_len = c.seq;
  in.training = training;
  in.gradient_accumulation_steps = c.accum;
  in.fused_loss = c.fused;
  train::MemoryPlan plan = train::plan_memory(models::spec_from_config(c.cfg, "config.json"), in);
  set_matmul_precision(before);
  return plan;
}

void expect_within_bound(const Case& c, const train::MemoryPlan& plan, uint64_t measured) {
  const double ratio = static_cast<double>(plan.total()) / static_cast<double>(measured);
  std::printf("%-34s estimate %10llu  measured %10llu  ratio %.3f  (%s)\n", c.name.c_str(),
              static_cast<unsigned long long>(plan.total()),
              static_cast<unsigned long long>(measured), ratio, plan.peak_moment.c_str());
  EXPECT_GE(plan.total(), measured) << c.name << "\n" << plan.table();
  EXPECT_LE(ratio, kSlack) << c.name << "\n" << plan.table();
}

std::vector<Case> training_cases() {
  return {
      {"llama untied", config("llama", 512, 64, 176, 2, 4, 2, false), 2, 64},
      {"llama tied, large vocab", config("llama", 3000, 64, 128, 2, 4, 4, true), 4, 32},
      {"llama long sequence", config("llama", 256, 64, 160, 3, 4, 1, false), 1, 256},
      {"llama wide MLP", config("llama", 128, 32, 512, 2, 2, 2, false), 2, 256},
      {"llama many heads, thin MLP", config("llama", 128, 64, 32, 2, 16, 16, false), 2, 128},
      {"llama untied, large vocab, short", config("llama", 8000, 32, 64, 1, 2, 1, false), 1, 8},
      {"llama accumulation", config("llama", 512, 64, 176, 2, 4, 2, false), 2, 32, 3},
      {"qwen3 (q/k norm)", config("qwen3", 700, 96, 256, 2, 6, 2, true), 2, 48},
      {"gemma2 (sandwich, soft-cap)", config("gemma2", 600, 64, 192, 2, 4, 2, true), 2, 40},
      {"granite (multipliers)", config("granite", 400, 64, 160, 2, 4, 2, false), 3, 24},
      {"phi3 (fused qkv, gate_up)", config("phi3", 500, 64, 176, 2, 4, 4, false), 2, 40},
      {"starcoder2 (LayerNorm, plain)", config("starcoder2", 500, 64, 256, 2, 4, 2, true), 2, 40},
      {"cohere (parallel)", config("cohere", 500, 64, 176, 2, 4, 2, true), 2, 40},
      {"olmo2 (post-norm, q/k norm)", config("olmo2", 500, 64, 176, 2, 4, 2, false), 2, 40},
      {"llama tied, large vocab, unfused", config("llama", 3000, 64, 128, 2, 4, 4, true), 4, 32, 1, false},
      {"llama accumulation, unfused", config("llama", 512, 64, 176, 2, 4, 2, false), 2, 32, 3, false},
      {"gemma2 (soft-cap), unfused", config("gemma2", 600, 64, 192, 2, 4, 2, true), 2, 40, 1, false},
      {"granite (multipliers), unfused", config("granite", 400, 64, 160, 2, 4, 2, false), 3, 24, 1, false},
  };
}

TEST(MemoryPlan, TrainingEstimateBoundsTheMeasuredPeak) {
  for (const Case& c : training_cases()) {
    SCOPED_TRACE(c.name);
    const uint64_t measured = measure_training(c);
    expect_within_bound(c, plan_for(c, true), measured);
  }
}

// Mixed precision keeps every tensor f32 and adds the loss scaler's small check buffers after
// backward; where products read f16 operand copies (tensor cores, or the cooperative-matrix
// emulation that stands in for them here on devices without), also those copies and the fused
// loss's f16 gradient group, which the plan counts at its moments; and with f16 activations
// (ops::gated_mlp, ops::gated_projection) their f16 tensors. With clipping (the default), with
// accumulation, and a large vocabulary (the fused loss's group at the peak).
TEST(MemoryPlan, MixedPrecisionTrainingStaysWithinThePlan) {
  const auto cases = training_cases();
  const test::F16ActivationSwitchesRestored switches;
  struct EmulationOff {
    ~EmulationOff() { ops::detail::set_coopmat_emulation(false); }
  } emulation_off;
  for (const int mode : {0, 1, 2}) {  // plain f32; emulated tensor cores; and f16 activations
    ops::detail::set_coopmat_emulation(mode >= 1);
    ops::set_gated_projection(mode == 2);
    ops::set_gated_mlp(mode == 2);
    for (const Case& c : {cases[0], cases[6], cases[1]}) {
      SCOPED_TRACE(c.name + (mode == 1   ? ", emulated cooperative matrices"
                             : mode == 2 ? ", emulated, f16 activations"
                                         : ""));
      const uint64_t measured = measure_training(c, MatmulPrecision::F16);
      expect_within_bound(c, plan_for(c, true, MatmulPrecision::F16), measured);
    }
  }
}

// A forward pass without gradients and the loss, as evaluation runs it (fused) or as a forward
// for logits followed by cross_entropy_parts does (unfused).
TEST(MemoryPlan, ForwardEstimateBoundsTheMeasuredPeak) {
  for (const Case& c : training_cases()) {
    if (c.accum > 1) continue;
    SCOPED_TRACE(c.name);
    vk::stream().synchronize();
    const uint64_t base = vk::memory_stats().live_bytes;
    vk::reset_memory_peak();
    {
      models::DecoderModel model = random_model(c.cfg);
      const int64_t V = model.spec().vocab_size;
      const auto data = random_sequences(static_cast<size_t>(c.batch), c.seq, V);
      std::vector<int32_t> ids, mask;
      std::vector<int64_t> labels;
      for (const auto& e : data) {
        ids.insert(ids.end(), e.ids.begin(), e.ids.end());
        labels.insert(labels.end(), e.ids.begin(), e.ids.end());
      }
      mask.assign(ids.size(), 1);
      autograd::NoGradScope no_grad;
      const auto shifted = train::shift_labels(labels, c.batch, c.seq);
      const auto parts = train::causal_lm_loss_parts(
          model, Tensor::from_host_i32(ids, {c.batch, c.seq}), Tensor::from_host_i32(mask, {c.batch, c.seq}),
          Tensor::from_host_i32(shifted, {c.batch * c.seq}),
          c.fused ? train::HeadLoss::Fused : train::HeadLoss::Unfused);
      EXPECT_TRUE(std::isfinite(parts.loss_sum.item()));
    }
    vk::stream().synchronize();
    const uint64_t measured = vk::memory_stats().peak_live_bytes - base;
    expect_within_bound(c, plan_for(c, false), measured);
  }
}

// Parameter counting against a published figure: Llama-3.2-1B has 1,235,814,400 parameters
// (tied embeddings), so its f32 master copy is 4.94 GB.
TEST(MemoryPlan, CountsParametersOfARealShape) {
  json c = config("llama", 128256, 2048, 8192, 16, 32, 8, true);
  c["head_dim"] = 64;
  train::MemoryPlanInput in;
  in.batch_size = 8;
  in.seq_len = 1024;
  // The moments below are those of the backward that recomputes its score gradients; storing
  // them (the fp32 register-tiled default at this size) is checked at the end.
  ops::detail::set_fast_dq_source(ops::detail::FastDqSource::Recompute);
  const auto p = train::plan_memory(models::spec_from_config(c, "config.json"), in);
  EXPECT_EQ(p.parameter_count, 1235814400);
  EXPECT_NEAR(static_cast<double>(p.parameters.bytes), 4.0 * 1235814400, 4096.0 * 200);
  EXPECT_EQ(p.gradients.bytes, p.parameters.bytes);
  EXPECT_EQ(p.optimizer_state.bytes, 2 * p.parameters.bytes);
  // Saved for backward: 16 layers of 1392 MiB ([8192, 2048] x 11 and [8192, 8192] x 3, with
  // q 32 heads and k/v 8 of 64) and the head's: with the fused loss, tensors of [8192, 2048];
  // unfused, the [8192, 128256] f32 logits.
  const uint64_t logits = uint64_t{8192} * 128256 * 4;
  EXPECT_GT(p.activations.bytes, 16 * (uint64_t{1392} << 20));
  EXPECT_LT(p.activations.bytes, 16 * (uint64_t{1393} << 20) + (uint64_t{200} << 20));
  EXPECT_GE(p.device_bytes(), p.total());
  std::printf("%s", p.table().c_str());
  in.fused_loss = false;
  const auto unfused = train::plan_memory(models::spec_from_config(c, "config.json"), in);
  EXPECT_GT(unfused.activations.bytes, 16 * (uint64_t{1392} << 20) + logits);
  EXPECT_LT(unfused.activations.bytes, 16 * (uint64_t{1393} << 20) + logits + (uint64_t{200} << 20));
  std::printf("%s", unfused.table().c_str());
  // Both peak in the first layer's MLP backward, where the unfused step still holds the logits
  // (the tape keeps them to the end) and the fused one the hidden-state gradient [8192, 2048]
  // instead; at the head, where the unfused step also holds the logits' gradient, the fused one
  // holds the head weight's gradient and a [512, 128256] block, far below that peak.
  EXPECT_EQ(p.peak_moment, "backward, first layer's MLP");
  EXPECT_EQ(unfused.peak_moment, "backward, first layer's MLP");
  const uint64_t lse = 8192 * 4, hidden_grad = uint64_t{8192} * 2048 * 4;
  EXPECT_EQ(unfused.total() - p.total(), logits + lse - hidden_grad);
  // With the score gradients stored ([8, 32, 1024, 1024] f32, 1 GiB, where the attention runs
  // the fp32 register-tiled kernels) the first layer's attention backward becomes the peak, by
  // less than that buffer.
  ops::detail::set_fast_dq_source(ops::detail::FastDqSource::Auto);
  const uint64_t ds = ops::attention_backward_stored_ds_bytes(8, 1024, 1024, 32, 64, 0);
  in.fused_loss = true;
  const auto stored = train::plan_memory(models::spec_from_config(c, "config.json"), in);
  if (ds > 0) {
    EXPECT_EQ(ds, uint64_t{1} << 30);
    EXPECT_EQ(stored.peak_moment, "backward, first layer's attention");
    EXPECT_GT(stored.total(), p.total());
    EXPECT_LE(stored.total(), p.total() + ds);
  } else {
    EXPECT_EQ(stored.total(), p.total());
  }
}

// The fused head loss against the unfused one in real training steps of a model whose logits
// dominate: the peak of live tensor bytes drops by at least the [N, V] f32 logits (unfused, the
// step also holds their gradient beside them; fused, one [chunk, V] block and the head weight's
// gradient), and the plan bounds both.
TEST(MemoryPlan, FusedHeadLossSavesTheLogits) {
  const Case unfused{"llama, vocab 8000, unfused", config("llama", 8000, 32, 64, 1, 2, 1, false), 2, 64, 1, false};
  Case fused = unfused;
  fused.name = "llama, vocab 8000, fused";
  fused.fused = true;
  const int64_t vocab = 8000, tokens = 2 * 64;
  const uint64_t logits = static_cast<uint64_t>(tokens * vocab * 4);
  ops::set_linear_cross_entropy_chunk_bytes(static_cast<uint64_t>(32 * vocab * 4));  // 4 chunks
  const uint64_t measured_unfused = measure_training(unfused);
  const uint64_t measured_fused = measure_training(fused);
  expect_within_bound(unfused, plan_for(unfused, true), measured_unfused);
  expect_within_bound(fused, plan_for(fused, true), measured_fused);
  ops::set_linear_cross_entropy_chunk_bytes(0);
  std::printf("peak live bytes: unfused %llu, fused %llu, logits %llu\n",
              static_cast<unsigned long long>(measured_unfused),
              static_cast<unsigned long long>(measured_fused), static_cast<unsigned long long>(logits));
  EXPECT_GE(measured_unfused, measured_fused + logits);
  EXPECT_LE(measured_unfused, measured_fused + 3 * logits);
}

// Not measured here (this branch has no gradient checkpointing yet): the plan keeps each layer's
// input and one layer's tensors instead of every layer's, and nothing else changes.
TEST(MemoryPlan, GradientCheckpointingKeepsLayerInputsAndOneLayer) {
  const auto spec =
      models::spec_from_config(config("llama", 512, 64, 176, 4, 4, 2, false), "config.json");
  train::MemoryPlanInput in;
  in.batch_size = 2;
  in.seq_len = 64;
  const auto full = train::plan_memory(spec, in);
  in.gradient_checkpointing = true;
  const auto ckpt = train::plan_memory(spec, in);
  const uint64_t layer_input = 2 * 64 * 64 * 4;
  EXPECT_EQ(full.activations.bytes - ckpt.activations.bytes,
            3 * full.activations_per_layer - 4 * layer_input);
  EXPECT_EQ(ckpt.parameters.bytes, full.parameters.bytes);
  EXPECT_EQ(ckpt.gradients.bytes, full.gradients.bytes);
  EXPECT_NE(ckpt.table().find("gradient checkpointing"), std::string::npos);
}

// LoRA-style runs: gradients and optimizer state for the trainable parameters only.
TEST(MemoryPlan, TrainableSubsetScalesGradientsAndOptimizerState) {
  const auto spec =
      models::spec_from_config(config("llama", 512, 64, 176, 2, 4, 2, false), "config.json");
  train::MemoryPlanInput in;
  in.batch_size = 2;
  in.seq_len = 64;
  in.trainable_parameters = 10000;
  const auto p = train::plan_memory(spec, in);
  EXPECT_EQ(p.trainable_count, 10000);
  EXPECT_EQ(p.gradients.bytes, 40192u);  // 40000 rounded up to 256 bytes
  EXPECT_EQ(p.optimizer_state.bytes, 2 * 40192u);
  in.optimizer = train::PlanOptimizer::SGD;
  EXPECT_EQ(train::plan_memory(spec, in).optimizer_state.bytes, 0u);
}

TEST(MemoryPlan, DeviceBytesRoundSharedTensorsToBlocks) {
  const auto spec =
      models::spec_from_config(config("llama", 512, 64, 176, 2, 4, 2, false), "config.json");
  train::MemoryPlanInput in;
  const auto p = train::plan_memory(spec, in);
  EXPECT_LT(p.total(), vk::kDeviceBlockBytes);
  EXPECT_EQ(p.device_bytes(), vk::kDeviceBlockBytes);  // one shared block
  // 100k x 1000 f32 logits of the unfused loss (400 MB) get blocks of their own, counted at
  // their size.
  const auto big = train::plan_memory(
      models::spec_from_config(config("llama", 100000, 64, 176, 2, 4, 2, true), "config.json"),
      {.batch_size = 1, .seq_len = 1000, .fused_loss = false});
  EXPECT_GE(big.activations.dedicated, uint64_t{400'000'000});
  uint64_t dedicated = 0;
  for (const auto* t : {&big.parameters, &big.gradients, &big.optimizer_state, &big.activations,
                        &big.workspace, &big.inputs})
    dedicated += t->dedicated;
  const uint64_t shared_blocks = big.device_bytes() - dedicated;
  EXPECT_EQ(shared_blocks % vk::kDeviceBlockBytes, 0u);
  EXPECT_GE(shared_blocks, big.total() - dedicated);
  EXPECT_LT(shared_blocks, big.total() - dedicated + vk::kDeviceBlockBytes);
}

TEST(MemoryPlan, RefusesARunThatDoesNotFitAndSaysWhatToTry) {
  const auto spec =
      models::spec_from_config(config("llama", 512, 64, 176, 2, 4, 2, false), "config.json");
  train::MemoryPlanInput in;
  in.batch_size = 4;
  in.seq_len = 128;
  const auto p = train::plan_memory(spec, in);
  const train::MemoryCapacity tiny = train::usable_capacity(1 << 20);
  EXPECT_EQ(tiny.usable, 1u << 20);
  test::expect_error([&] { train::require_fits(spec, p, tiny); },
                     {"not enough device memory", "needs about 256.0 MiB", "1.0 MiB (--max-memory)",
                      "--per-device-train-batch-size (1 needs", "--max-length (64 needs",
                      "--gradient-checkpointing", "LoRA", "--estimate-memory",
                      "blocks of 256.0 MiB, so no run fits in less"});
  const train::MemoryCapacity device = train::usable_capacity(0);
  const vk::DeviceCapacity dc = vk::device_capacity();
  EXPECT_LT(device.usable, dc.total());
  EXPECT_GT(device.usable, dc.total() / 2);
  EXPECT_NE(device.description.find("safety margin"), std::string::npos);
  EXPECT_NO_THROW(train::require_fits(spec, p, device));
  // A cap above what the device has does not raise the capacity.
  EXPECT_EQ(train::usable_capacity(uint64_t{1} << 50).usable, device.usable);
}

TEST(MemoryPlan, ParsesSizes) {
  EXPECT_EQ(train::parse_byte_size("2GiB", "--max-memory"), uint64_t{2} << 30);
  EXPECT_EQ(train::parse_byte_size("500MB", "--max-memory"), uint64_t{500'000'000});
  EXPECT_EQ(train::parse_byte_size("1.5G", "--max-memory"), uint64_t{3} << 29);
  EXPECT_EQ(train::parse_byte_size("64 mib", "--max-memory"), uint64_t{64} << 20);
  EXPECT_EQ(train::parse_byte_size("4096", "--max-memory"), 4096u);
  EXPECT_EQ(train::parse_byte_size("3kb", "--max-memory"), 3000u);
  for (const char* bad : {"", "GiB", "2XB", "1.2.3G", "-5G", "2 GBs"})
    test::expect_error([&] { train::parse_byte_size(bad, "--max-memory"); },
                       {"--max-memory", "is not a size"});
  test::expect_error([&] { train::parse_byte_size("0", "--max-memory"); }, {"more than 0 bytes"});
  EXPECT_EQ(train::format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(train::format_bytes(uint64_t{3} << 29), "1.50 GiB");
}

}  // namespace
}  // namespace vkf
