// The training loop (see trainer.h).
#include "train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "core/autograd.h"
#include "core/dropout_rng.h"
#include "io/safetensors.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "ops/optim.h"
#include "train/causal_lm.h"
#include "train/optimizer_step.h"
#include "train/step_runner.h"
#include "vk/error.h"
#include "vk/memory.h"

namespace vkf::train {
namespace {

struct Batch {
  MicroBatch micro;    // ids, mask and shifted labels on the host
  int64_t tokens = 0;  // real (non-padding) tokens
};

// Right-padded batch of examples[first, first + n).
Batch make_batch(const std::vector<Example>& set, const std::vector<size_t>& order, size_t first, size_t n) {
  size_t T = 0;
  for (size_t i = 0; i < n; ++i) T = std::max(T, set[order[first + i]].ids.size());
  Batch b;
  MicroBatch& m = b.micro;
  m.batch = static_cast<int64_t>(n);
  m.seq = static_cast<int64_t>(T);
  m.ids.assign(n * T, 0);
  m.mask.assign(n * T, 0);
  std::vector<int64_t> labels(n * T, -100);  // HF convention (not shifted)
  for (size_t i = 0; i < n; ++i) {
    const Example& e = set[order[first + i]];
    for (size_t t = 0; t < e.ids.size(); ++t) {
      m.ids[i * T + t] = e.ids[t];
      m.mask[i * T + t] = 1;
      labels[i * T + t] = e.labels[t];
    }
    for (size_t t = 1; t < e.ids.size(); ++t) m.counted += e.labels[t] != -100;
    b.tokens += static_cast<int64_t>(e.ids.size());
  }
  m.shifted_labels = shift_labels(labels, m.batch, m.seq);
  return b;
}

// Sets the matrix-product precision for a run and restores the previous one after it.
class PrecisionScope {
 public:
  explicit PrecisionScope(MatmulPrecision p) : before_(matmul_precision()) { set_matmul_precision(p); }
  ~PrecisionScope() { set_matmul_precision(before_); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  MatmulPrecision before_;
};

}  // namespace

MemoryPlan plan_training_memory(const models::ArchSpec& spec, const std::vector<Example>& train_set,
                                const TrainOptions& o) {
  // The products' temporaries depend on the run's precision (f16 operand copies).
  const PrecisionScope precision(o.precision);
  MemoryPlanInput in;
  in.batch_size = std::min<int64_t>(o.batch_size, std::max<int64_t>(1, static_cast<int64_t>(train_set.size())));
  for (const Example& e : train_set) in.seq_len = std::max(in.seq_len, static_cast<int64_t>(e.ids.size()));
  in.training = true;
  in.optimizer = PlanOptimizer::AdamW;
  in.gradient_accumulation_steps = o.grad_accum;
  in.gradient_checkpointing = o.gradient_checkpointing;
  // backward_micro_batch's choice (causal_lm_loss_parts): LoRA on the head needs whole logits.
  in.fused_loss = o.fused_loss && !(o.adapter && o.adapter->adapts_linear(models::DecoderModel::kHeadModule));
  if (o.adapter) {  // LoRA: the adapter alone trains; its tensors and forward add to the base's
    in.adapter = true;
    in.trainable_parameters = o.adapter->trainable_count();
    in.adapter_parameters = o.adapter->trainable_count();
    for (const auto& m : o.adapter->modules()) {
      const int64_t out = m.B.dim(0);
      in.adapter_activations_per_token += m.rank + 3 * out;
      if (m.embedding) in.adapter_parameters += m.A.numel();  // the transposed copy of A it looks up
    }
  }
  return plan_memory(spec, in);
}

bool decays(const std::string& name) {
  if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0) return false;
  return name.find("norm") == std::string::npos;  // *_layernorm, norm, q_norm, k_norm, ...
}

Tensor backward_micro_batch(models::DecoderModel& model, const Tensor& ids, const Tensor& mask,
                            const std::vector<int64_t>& labels, int64_t step_count, bool fused_loss,
                            dropout_rng::Stream* dropout, const Tensor& seed) {
  VKF_REQUIRE(step_count > 0, "backward_micro_batch: the step counts {} tokens; it needs some", step_count);
  const int64_t B = ids.dim(0), T = ids.dim(1);
  const auto shifted = shift_labels(labels, B, T);
  // The mean over every counted token of the whole accumulated step, folded into the seed as
  // StepRunner does it (the same f32 product ops::scale's backward would form).
  const float inv_count = static_cast<float>(1.0 / static_cast<double>(step_count));
  const Tensor mean_seed =
      seed.defined() ? ops::scale(seed, inv_count) : Tensor::full({}, inv_count);
  return backward_from_device(model, ids, mask, Tensor::from_host_i32(shifted, {B * T}),
                              fused_loss ? HeadLoss::Fused : HeadLoss::Unfused, dropout, mean_seed);
}

double evaluate(models::DecoderModel& model, const std::vector<Example>& set, int64_t batch_size) {
  autograd::NoGradScope no_grad;
  std::vector<size_t> order(set.size());
  std::iota(order.begin(), order.end(), 0);
  double sum = 0, count = 0;
  for (size_t first = 0; first < set.size(); first += static_cast<size_t>(batch_size)) {
    const size_t n = std::min(static_cast<size_t>(batch_size), set.size() - first);
    const Batch b = make_batch(set, order, first, n);
    const MicroBatch& m = b.micro;
    if (m.counted == 0) continue;
    const auto parts =
        causal_lm_loss_parts(model, Tensor::from_host_i32(m.ids, {m.batch, m.seq}),
                             Tensor::from_host_i32(m.mask, {m.batch, m.seq}),
                             Tensor::from_host_i32(m.shifted_labels, {m.batch * m.seq}));
    sum += parts.loss_sum.item();
    count += static_cast<double>(m.counted);
  }
  VKF_REQUIRE(count > 0, "evaluation set has no tokens to predict");
  return sum / count;
}

TrainResult train(models::DecoderModel& model, const std::vector<Example>& train_set,
                  const std::vector<Example>& eval_set, const TrainOptions& o, const LogCallback& log) {
  VKF_REQUIRE(!train_set.empty(), "train: the training set is empty");
  VKF_REQUIRE(o.batch_size > 0 && o.grad_accum > 0, "train: --batch-size and --gradient-accumulation-steps must be positive");
  const size_t per_step = static_cast<size_t>(o.batch_size * o.grad_accum);
  const int64_t steps_per_epoch = std::max<int64_t>(1, static_cast<int64_t>((train_set.size() + per_step - 1) / per_step));
  const int64_t total = o.max_steps > 0 ? o.max_steps
                                        : static_cast<int64_t>(std::ceil(o.num_train_epochs * static_cast<double>(steps_per_epoch)));
  ScheduleConfig sc = o.schedule;
  sc.total_steps = total;
  const LrSchedule schedule(sc);
  const PrecisionScope precision(o.precision);
  const bool mixed = o.precision == MatmulPrecision::F16;

  // Before anything of the run is allocated: say what it needs, and stop here if it cannot fit.
  const MemoryPlan plan = plan_training_memory(model.spec(), train_set, o);
  if (log) log(plan.summary());
  require_fits(model.spec(), plan, usable_capacity(o.max_memory));
  vk::reset_memory_peak();

  // What is trained: the adapter's tensors (LoRA) or the model's parameters. Base weights that
  // do not require gradients get none, and the optimizer never sees them.
  std::vector<std::string> names;
  std::vector<Tensor> params;
  if (o.adapter) {
    VKF_REQUIRE(model.effective_adapter() == o.adapter.get(),
                "train: the LoRA adapter to train must be added to the model and active");
    model.set_requires_grad(false);
    o.adapter->set_requires_grad(true);
    for (const auto& [n, t] : o.adapter->parameters()) names.push_back(n), params.push_back(t);
  } else {
    model.set_requires_grad(true);
    names = model.parameter_names();
    params = model.parameters();
  }
  const bool checkpointing_before = model.gradient_checkpointing();
  model.set_gradient_checkpointing(o.gradient_checkpointing);
  std::vector<double> wd;
  for (const auto& n : names) wd.push_back(decays(n) ? o.weight_decay : 0.0);
  ops::AdamW opt(params, {sc.learning_rate, o.beta1, o.beta2, o.eps, o.weight_decay}, wd);
  OptimizerStep update(opt, schedule, o.max_grad_norm,
                       mixed ? std::optional<GradScalerConfig>(o.loss_scaling) : std::nullopt);
  update.inject_overflow_at(o.inject_overflow_at);
  StepRunner runner(model, update, o.fused_loss ? HeadLoss::Fused : HeadLoss::Unfused,
                    o.replay_steps);
  if (log && mixed) {
    log(fmt::format("mixed precision: f16 matrix products with fp32 accumulation, f32 weights and AdamW state; "
                    "dynamic loss scaling from {:g} (growth x{:g} every {} clean steps, x{:g} on inf/nan)",
                    o.loss_scaling.init_scale, o.loss_scaling.growth_factor, o.loss_scaling.growth_interval,
                    o.loss_scaling.backoff_factor));
  }
  std::mt19937_64 rng(o.seed);
  std::vector<size_t> order(train_set.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  size_t cursor = 0;
  // Dropout masks of training forwards (evaluation has no stream, so no dropout).
  dropout_rng::Stream dropout_stream{o.seed, 0};
  TrainResult result;
  int64_t first_step = 1;
  if (!o.resume_from.empty()) {
    const std::string dir = o.resume_from == "auto" ? latest_checkpoint(o.output_dir) : o.resume_from;
    VKF_REQUIRE(!dir.empty(), "--resume-from-checkpoint auto: no checkpoint in {}", o.output_dir);
    const TrainerState st = load_checkpoint(dir, model, opt, o.adapter.get());
    VKF_REQUIRE(st.precision == precision_name(o.precision),
                "{}: the checkpoint was written by a --precision {} run; resume it with --precision {} (a "
                "resumed run continues the same arithmetic and loss-scaler state)",
                dir, st.precision, st.precision);
    update.restore(st.skipped_steps, st.grad_scaler);
    VKF_REQUIRE(st.order.size() == order.size(),
                "{}: the checkpoint was made on {} sequences, this data has {}", dir, st.order.size(), order.size());
    order.assign(st.order.begin(), st.order.end());
    cursor = st.cursor;
    std::istringstream(st.rng) >> rng;
    if (st.has_dropout_stream) dropout_stream = {st.dropout_seed, st.dropout_offset};
    result.log = st.log;
    first_step = st.step + 1;
    if (log) log(fmt::format("resumed from {} at step {}", dir, st.step));
  }
  auto checkpoint = [&](int64_t step) {
    if (o.output_dir.empty()) return;
    TrainerState st;
    st.step = step;
    st.order.assign(order.begin(), order.end());
    st.cursor = cursor;
    std::ostringstream r;
    r << rng;
    st.rng = r.str();
    st.dropout_seed = dropout_stream.seed;
    st.dropout_offset = dropout_stream.offset;
    st.log = result.log;
    st.precision = precision_name(o.precision);
    if (update.scaler()) st.grad_scaler = *update.scaler();
    st.skipped_steps = update.skipped_steps();
    const std::string dir = save_checkpoint(o.output_dir, model, opt, st, o.save_total_limit, o.adapter.get());
    if (log) log(fmt::format("checkpoint {}", dir));
  };
  auto next_micro = [&] {
    if (cursor >= order.size()) {  // new epoch, new order
      std::shuffle(order.begin(), order.end(), rng);
      cursor = 0;
    }
    const size_t n = std::min(static_cast<size_t>(o.batch_size), order.size() - cursor);
    Batch b = make_batch(train_set, order, cursor, n);
    cursor += n;
    return b;
  };
  std::ofstream metrics;
  if (!o.output_dir.empty()) {
    std::filesystem::create_directories(o.output_dir);
    metrics.open(std::filesystem::path(o.output_dir) / "metrics.jsonl",
                 first_step > 1 ? std::ios::app : std::ios::trunc);
  }
  const auto t_start = std::chrono::steady_clock::now();
  int64_t tokens_seen = 0;
  for (int64_t step = first_step; step <= total; ++step) {
    std::vector<MicroBatch> micro;
    int64_t counted = 0;
    for (int64_t m = 0; m < o.grad_accum; ++m) {
      Batch b = next_micro();
      counted += b.micro.counted;
      tokens_seen += b.tokens;
      micro.push_back(std::move(b.micro));
    }
    VKF_REQUIRE(counted > 0, "train: step {} has no tokens to predict (all labels are -100)", step);
    const StepOutcome out = runner.run(step, micro, &dropout_stream);
    const double loss = out.loss_sum / static_cast<double>(counted);
    const double lr = out.lr, grad_norm = out.grad_norm;
    result.log.push_back({step, loss, lr, grad_norm, out.loss_scale, out.skipped});
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    const double tps = elapsed > 0 ? static_cast<double>(tokens_seen) / elapsed : 0.0;
    const double eta = elapsed / static_cast<double>(step - first_step + 1) * static_cast<double>(total - step);
    if (metrics) {
      nlohmann::json m{{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm}, {"tokens_per_s", tps}};
      if (mixed) m.update({{"loss_scale", out.loss_scale}, {"skipped", out.skipped}});
      metrics << m.dump() << "\n" << std::flush;
    }
    if (o.on_progress) o.on_progress({step, total, loss, lr, grad_norm, tps, eta});
    // A skipped step is always logged (transformers' Trainer only shows it as a nan/inf grad_norm).
    if (log && out.skipped) {
      log(fmt::format("step {}/{}  inf/nan gradients: update skipped, loss scale {:g} -> {:g} ({} skipped so far)",
                      step, total, out.loss_scale, update.scaler()->scale(), update.skipped_steps()));
    }
    if (log && (step % std::max<int64_t>(1, o.logging_steps) == 0 || step == 1 || step == total)) {
      const std::string scaling =
          mixed ? fmt::format("  loss_scale {:g}  skipped {}", update.scaler()->scale(), update.skipped_steps()) : "";
      log(fmt::format("step {}/{}  loss {:.4f}  lr {:.3e}  grad_norm {:.3f}{}  {:.0f} tok/s", step, total, loss,
                      lr, grad_norm, scaling, tps));
    }
    const bool stopping = o.stop && o.stop->load();
    if (o.save_steps > 0 && (step % o.save_steps == 0 || step == total)) checkpoint(step);
    else if (stopping) checkpoint(step);
    if (stopping) {
      result.interrupted = true;
      if (log) log(fmt::format("interrupted after step {}", step));
      break;
    }
    if (!eval_set.empty() && o.eval_steps > 0 && step % o.eval_steps == 0 && step != total) {
      runner.release();  // the graph's activation memory, which evaluation needs
      const double el = evaluate(model, eval_set, o.batch_size);
      result.eval.push_back({step, el});
      if (metrics) metrics << nlohmann::json{{"step", step}, {"eval_loss", el}}.dump() << "\n" << std::flush;
      if (log) log(fmt::format("step {}  eval_loss {:.4f}  perplexity {:.3f}", step, el, std::exp(el)));
    }
  }
  runner.release();
  if (log) log(runner.summary());
  model.set_requires_grad(false);
  if (o.adapter) o.adapter->set_requires_grad(false);
  model.set_gradient_checkpointing(checkpointing_before);
  // How the plan compared (it counts what the process's live tensors reach, the model included).
  if (log && !result.log.empty()) {
    log(fmt::format("memory: peak {} of live tensors (planned {})",
                    format_bytes(vk::memory_stats().peak_live_bytes), format_bytes(plan.total())));
  }
  if (!eval_set.empty() && !result.interrupted) {
    result.final_eval_loss = evaluate(model, eval_set, o.batch_size);
    result.eval.push_back({result.log.empty() ? 0 : result.log.back().step, result.final_eval_loss});
    if (metrics) {
      metrics << nlohmann::json{{"step", result.eval.back().first}, {"eval_loss", result.final_eval_loss}}.dump()
              << "\n";
    }
    if (log) log(fmt::format("final eval_loss {:.4f}  perplexity {:.3f}", result.final_eval_loss,
                             std::exp(result.final_eval_loss)));
  }
  if (!o.output_dir.empty() && !result.log.empty())
    write_loss_plot((std::filesystem::path(o.output_dir) / "loss_curve.svg").string(), result);
  return result;
}

void write_loss_plot(const std::string& path, const TrainResult& r) {
  const double W = 640, H = 400, L = 60, R = 20, T = 30, B = 45;
  double lo = 1e300, hi = -1e300;
  for (const auto& s : r.log) lo = std::min(lo, s.loss), hi = std::max(hi, s.loss);
  for (const auto& e : r.eval) lo = std::min(lo, e.second), hi = std::max(hi, e.second);
  if (!(hi > lo)) hi = lo + 1;
  const double x0 = static_cast<double>(r.log.front().step), x1 = std::max(x0 + 1, static_cast<double>(r.log.back().step));
  auto X = [&](double step) { return L + (step - x0) / (x1 - x0) * (W - L - R); };
  auto Y = [&](double loss) { return T + (hi - loss) / (hi - lo) * (H - T - B); };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"18\">loss against step (train: blue line, eval: orange dots)</text>\n"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
      W, H, L, L, H - B, W - R, H - B, L, T, L, H - B);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.3g}</text>\n", L - 5, T + 4, hi);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.3g}</text>\n", L - 5, H - B + 4, lo);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", L, H - B + 18, x0);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", W - R, H - B + 18, x1);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">step</text>\n", (L + W - R) / 2, H - 8);
  svg += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
  for (const auto& s : r.log) svg += fmt::format("{:.1f},{:.1f} ", X(static_cast<double>(s.step)), Y(s.loss));
  svg += "\"/>\n";
  for (const auto& e : r.eval)
    svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"#ff7f0e\"/>\n", X(static_cast<double>(e.first)), Y(e.second));
  svg += "</svg>\n";
  io::write_file_atomic(path, {reinterpret_cast<const uint8_t*>(svg.data()), svg.size()});
}

}  // namespace vkf::train
