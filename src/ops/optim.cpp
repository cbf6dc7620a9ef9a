// AdamW and SGD (see optim.h; kernels adamw.comp and sgd.comp): validation, the host-side
// scalars in torch's order, one dispatch over every parameter for AdamW (a multi-tensor kernel)
// and one elementwise dispatch per parameter for SGD.
#include "ops/optim.h"

#include <cmath>
#include <set>

#include "core/autograd.h"
#include "core/launch.h"
#include "ops/multi_tensor.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

constexpr uint32_t kLocal = 256;
// Flags shared with sgd.comp.
constexpr uint32_t kHasWeightDecay = 1, kHasMomentum = 2, kFirstStep = 4, kNesterov = 8;

void check_finite_at_least(const char* op, const char* name, double v, double lo) {
  VKF_REQUIRE(std::isfinite(v) && v >= lo, "{}: {} must be finite and >= {}, got {}", op, name, lo,
              v);
}

void check_config(const AdamWConfig& c) {
  check_finite_at_least("AdamW", "lr", c.lr, 0.0);
  check_finite_at_least("AdamW", "eps", c.eps, 0.0);
  check_finite_at_least("AdamW", "weight_decay", c.weight_decay, 0.0);
  VKF_REQUIRE(c.beta1 >= 0.0 && c.beta1 < 1.0, "AdamW: beta1 must be in [0, 1), got {}", c.beta1);
  VKF_REQUIRE(c.beta2 >= 0.0 && c.beta2 < 1.0, "AdamW: beta2 must be in [0, 1), got {}", c.beta2);
}

void check_config(const SGDConfig& c) {
  check_finite_at_least("SGD", "lr", c.lr, 0.0);
  check_finite_at_least("SGD", "momentum", c.momentum, 0.0);
  check_finite_at_least("SGD", "dampening", c.dampening, 0.0);
  check_finite_at_least("SGD", "weight_decay", c.weight_decay, 0.0);
  VKF_REQUIRE(!c.nesterov || (c.momentum > 0.0 && c.dampening == 0.0),
              "SGD: nesterov needs momentum > 0 and dampening 0, got momentum {} and dampening {}",
              c.momentum, c.dampening);
}

// A tensor an update writes in place: defined, f32, contiguous, of the parameter's shape.
void check_state(const char* op, const char* what, const Tensor& t, const Tensor& param) {
  VKF_REQUIRE(t.defined(), "{}: {} is undefined", op, what);
  VKF_REQUIRE(t.dtype() == DType::F32, "{}: {} must be f32, got {}", op, what,
              dtype_name(t.dtype()));
  VKF_REQUIRE(t.shape() == param.shape(), "{}: {} has shape {}, the parameter {}", op, what,
              shape_str(t.shape()), shape_str(param.shape()));
  VKF_REQUIRE(t.is_contiguous(), "{}: {} (shape {}) must be contiguous to be updated in place", op,
              what, shape_str(t.shape()));
}

Tensor contiguous_grad(const char* op, const Tensor& grad, const Tensor& param) {
  VKF_REQUIRE(grad.defined(), "{}: grad is undefined", op);
  VKF_REQUIRE(grad.dtype() == DType::F32, "{}: grad must be f32, got {}", op,
              dtype_name(grad.dtype()));
  VKF_REQUIRE(grad.shape() == param.shape(), "{}: grad has shape {}, the parameter {}", op,
              shape_str(grad.shape()), shape_str(param.shape()));
  return grad.is_contiguous() ? grad : grad.contiguous();
}

// The parameters an optimizer owns: each defined, f32, contiguous and listed once; and the
// per-parameter weight decay (empty: the config's for all).
std::vector<double> check_params(const char* op, const std::vector<Tensor>& params,
                                 std::vector<double> weight_decay, double default_decay) {
  std::set<const void*> seen;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    VKF_REQUIRE(p.defined(), "{}: parameter {} is undefined", op, i);
    VKF_REQUIRE(p.dtype() == DType::F32, "{}: parameter {} ({}) must be f32, got {}", op, i,
                p.name(), dtype_name(p.dtype()));
    VKF_REQUIRE(p.is_contiguous(), "{}: parameter {} ({}, shape {}) must be contiguous", op, i,
                p.name(), shape_str(p.shape()));
    checked_u32(p.numel(), "parameter element count");
    VKF_REQUIRE(seen.insert(p.impl()).second, "{}: parameter {} ({}) is listed twice", op, i,
                p.name());
  }
  if (weight_decay.empty()) return std::vector<double>(params.size(), default_decay);
  VKF_REQUIRE(weight_decay.size() == params.size(),
              "{}: {} weight-decay values for {} parameters", op, weight_decay.size(),
              params.size());
  for (double wd : weight_decay) check_finite_at_least(op, "weight_decay", wd, 0.0);
  return weight_decay;
}

// The checks of a gate (StepGate) and of a device step-scalar table for `entries` scalar entries.
void check_gate(const char* op, const StepGate& gate) {
  if (gate.found_inf.defined()) {
    VKF_REQUIRE(gate.found_inf.dtype() == DType::F32 && gate.found_inf.numel() == 1,
                "{}: the gate's found_inf must be a one-element f32 tensor, got {} of shape {}", op,
                dtype_name(gate.found_inf.dtype()), shape_str(gate.found_inf.shape()));
  }
  VKF_REQUIRE(std::isfinite(gate.grad_multiplier) && gate.grad_multiplier > 0.0f,
              "{}: the gradient multiplier must be finite and positive, got {}", op,
              gate.grad_multiplier);
  if (gate.clip_norm.defined()) {
    VKF_REQUIRE(gate.clip_norm.dtype() == DType::F32 && gate.clip_norm.numel() == 1,
                "{}: the gate's clip_norm must be a one-element f32 tensor, got {} of shape {}", op,
                dtype_name(gate.clip_norm.dtype()), shape_str(gate.clip_norm.shape()));
    VKF_REQUIRE(!std::isnan(gate.max_norm) && gate.max_norm >= 0.0f,
                "{}: max_norm is {}; expected a non-negative number", op, gate.max_norm);
    VKF_REQUIRE(std::isfinite(gate.clip_unscale) && gate.clip_unscale > 0.0f,
                "{}: clip_unscale is {}; expected 1 / loss scale, a positive finite number", op,
                gate.clip_unscale);
    VKF_REQUIRE(gate.grad_multiplier == 1.0f,
                "{}: with clipping folded in, unscale through clip_unscale (grad_multiplier is {})",
                op, gate.grad_multiplier);
  }
}

void check_scalar_table(const char* op, const Tensor& table, int64_t entries) {
  if (!table.defined()) return;
  VKF_REQUIRE(table.dtype() == DType::F32 && table.is_contiguous() && 3 * entries <= table.numel(),
              "{}: the step-scalar table needs 3 f32 values for each of {} entries, it is {} of "
              "shape {}",
              op, entries, dtype_name(table.dtype()), shape_str(table.shape()));
}

// One dispatch of adamw.comp over `list` (each entry checked, its scalars filled in).
void adamw_list(const std::vector<detail::MultiTensorEntry>& list, const AdamWConfig& config,
                const StepGate& gate, const Tensor& scalar_table) {
  const detail::TensorTable table = detail::make_tensor_table(list, "AdamW");
  if (table.count == 0) return;
  // torch's lerp(weight): start + weight * (end - start) for |weight| < 0.5, else
  // end + (weight - 1) * (end - start), the weight and weight - 1 in f32.
  const float lerp_weight = static_cast<float>(1.0 - config.beta1);
  const bool from_grad = !(std::fabs(lerp_weight) < 0.5f);
  const bool gated = gate.found_inf.defined(), clip = gate.clip_norm.defined();
  struct {
    uint64_t table, found_inf, clip_norm, scalars;
    uint32_t count, chunks;
    float lerp_coeff;
    uint32_t lerp_from_grad;
    float beta2, one_minus_beta2, eps, grad_multiplier, max_norm, unscale;
    uint32_t gated;
  } push{table.records.address(),
         // Unread unless gated / clipping; valid addresses all the same.
         gated ? gate.found_inf.address() : table.records.address(),
         clip ? gate.clip_norm.address() : table.records.address(),
         scalar_table.defined() ? scalar_table.address() : 0ull, table.count, table.chunks,
         from_grad ? lerp_weight - 1.0f : lerp_weight, from_grad ? 1u : 0u,
         static_cast<float>(config.beta2), static_cast<float>(1.0 - config.beta2),
         static_cast<float>(config.eps), gate.grad_multiplier, gate.max_norm, gate.clip_unscale,
         gated ? 1u : 0u};
  std::vector<const Tensor*> reads = table.reads;
  for (const Tensor* t : {&gate.found_inf, &gate.clip_norm, &scalar_table})
    if (t->defined()) reads.push_back(t);
  double elems = 0;
  for (const auto& e : list) elems += static_cast<double>(e.grad.numel());
  launch_lists("adamw", push, grid_1d(table.chunks, 1), reads, table.writes, {clip ? 1u : 0u},
               {12.0 * elems, 28.0 * elems});
}

detail::MultiTensorEntry adamw_entry(const char* op, const Tensor& param, const Tensor& grad,
                                     const Tensor& exp_avg, const Tensor& exp_avg_sq,
                                     const AdamWConfig& config, int64_t t, uint32_t index) {
  VKF_REQUIRE(param.defined(), "{}: param is undefined", op);
  check_state(op, "param", param, param);
  check_state(op, "exp_avg", exp_avg, param);
  check_state(op, "exp_avg_sq", exp_avg_sq, param);
  VKF_REQUIRE(t >= 1, "{}: the step number t must be >= 1, got {}", op, t);
  const AdamWStepScalars scalars = adamw_step_scalars(config, t);
  return {param,
          contiguous_grad(op, grad, param),
          exp_avg,
          exp_avg_sq,
          index,
          scalars.decay,
          scalars.bc2_sqrt,
          scalars.neg_step_size};
}

}  // namespace

AdamWStepScalars adamw_step_scalars(const AdamWConfig& config, int64_t t) {
  // Python's arithmetic in double: bias corrections, step size, sqrt(bc2), 1 - lr * wd.
  const double bc1 = 1.0 - std::pow(config.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(config.beta2, static_cast<double>(t));
  const double step_size = config.lr / bc1;
  return {static_cast<float>(1.0 - config.lr * config.weight_decay),
          static_cast<float>(std::sqrt(bc2)), static_cast<float>(-step_size)};
}

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const AdamWConfig& config, int64_t t,
                  const StepGate& gate, const DeviceStepScalars& device_scalars) {
  const char* op = "adamw_update";
  check_config(config);
  check_gate(op, gate);
  VKF_REQUIRE(device_scalars.index >= 0, "{}: step-scalar entry {} is negative", op,
              device_scalars.index);
  check_scalar_table(op, device_scalars.table, device_scalars.index + 1);
  const std::vector<detail::MultiTensorEntry> list{
      adamw_entry(op, param, grad, exp_avg, exp_avg_sq, config, t,
                  checked_u32(device_scalars.index, "step-scalar entry"))};
  adamw_list(list, config, gate, device_scalars.table);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWConfig config)
    : AdamW(std::move(params), config, {}) {}

AdamW::AdamW(std::vector<Tensor> params, AdamWConfig config, std::vector<double> weight_decay)
    : params_(std::move(params)), config_(config) {
  check_config(config_);
  weight_decay_ = check_params("AdamW", params_, std::move(weight_decay), config_.weight_decay);
  param_steps_.assign(params_.size(), 0);
  for (const Tensor& p : params_) {
    exp_avg_.push_back(Tensor::zeros(p.shape()));
    exp_avg_sq_.push_back(Tensor::zeros(p.shape()));
  }
}

void AdamW::step(const StepGate& gate, const Tensor& device_scalars) {
  autograd::NoGradScope no_grad;
  VKF_REQUIRE(param_steps_.size() == params_.size() && exp_avg_.size() == params_.size() &&
                  exp_avg_sq_.size() == params_.size(),
              "AdamW: state lists ({} steps, {} exp_avg, {} exp_avg_sq) do not match the {} "
              "parameters",
              param_steps_.size(), exp_avg_.size(), exp_avg_sq_.size(), params_.size());
  check_gate("AdamW", gate);
  check_scalar_table("AdamW", device_scalars, static_cast<int64_t>(params_.size()));
  std::vector<size_t> stepped;
  std::vector<detail::MultiTensorEntry> list;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor grad = params_[i].grad();
    if (!grad.defined()) continue;
    AdamWConfig c = config_;
    c.weight_decay = weight_decay_[i];
    list.push_back(adamw_entry("AdamW", params_[i], grad, exp_avg_[i], exp_avg_sq_[i], c,
                               param_steps_[i] + 1, static_cast<uint32_t>(i)));
    stepped.push_back(i);
  }
  adamw_list(list, config_, gate, device_scalars);
  count_step(stepped);
}

void AdamW::next_step_scalars(std::span<float> out) const {
  VKF_REQUIRE(out.size() == 3 * params_.size(), "AdamW: {} step scalars for {} parameters",
              out.size(), params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    AdamWConfig c = config_;
    c.weight_decay = weight_decay_[i];
    const AdamWStepScalars s = adamw_step_scalars(c, param_steps_[i] + 1);
    out[3 * i] = s.decay;
    out[3 * i + 1] = s.bc2_sqrt;
    out[3 * i + 2] = s.neg_step_size;
  }
}

void AdamW::count_step(const std::vector<size_t>& stepped) {
  for (size_t i : stepped) {
    VKF_REQUIRE(i < params_.size(), "AdamW: a step of parameter {} of {}", i, params_.size());
    ++param_steps_[i];
  }
  last_stepped_ = stepped;
  ++steps_;
  last_step_countable_ = true;
}

void AdamW::uncount_last_step() {
  VKF_REQUIRE(last_step_countable_, "AdamW: uncount_last_step() without a step() since the last one");
  for (size_t i : last_stepped_) --param_steps_[i];
  last_stepped_.clear();
  --steps_;
  last_step_countable_ = false;
}

void AdamW::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad();
}

void AdamW::set_lr(double lr) {
  check_finite_at_least("AdamW", "lr", lr, 0.0);
  config_.lr = lr;
}

void AdamW::set_step_count(int64_t steps) {
  VKF_REQUIRE(steps >= 0, "AdamW: step count must be >= 0, got {}", steps);
  steps_ = steps;
  last_step_countable_ = false;
}

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                const SGDConfig& config, bool first_step) {
  const char* op = "sgd_update";
  check_config(config);
  VKF_REQUIRE(param.defined(), "{}: param is undefined", op);
  check_state(op, "param", param, param);
  const bool momentum = config.momentum != 0.0;
  if (momentum) check_state(op, "momentum_buffer", momentum_buffer, param);
  const Tensor g = contiguous_grad(op, grad, param);
  const int64_t n = param.numel();
  if (n == 0) return;
  const uint32_t flags = (config.weight_decay != 0.0 ? kHasWeightDecay : 0) |
                         (momentum ? kHasMomentum : 0) | (momentum && first_step ? kFirstStep : 0) |
                         (config.nesterov ? kNesterov : 0);
  struct {
    uint64_t param, grad, momentum_buffer;
    uint32_t n;
    float weight_decay, momentum, one_minus_dampening, neg_lr;
    uint32_t flags;
  } push{param.address(),
         g.address(),
         momentum ? momentum_buffer.address() : 0,
         static_cast<uint32_t>(n),
         static_cast<float>(config.weight_decay),
         static_cast<float>(config.momentum),
         static_cast<float>(1.0 - config.dampening),
         static_cast<float>(-config.lr),
         flags};
  const Tensor* buffer = momentum ? &momentum_buffer : nullptr;
  const double elems = static_cast<double>(n);
  launch("sgd", push, grid_1d(n, kLocal), {&param, &g, buffer}, {&param, buffer}, {},
         {6.0 * elems, (momentum ? 20.0 : 12.0) * elems});
}

SGD::SGD(std::vector<Tensor> params, SGDConfig config) : SGD(std::move(params), config, {}) {}

SGD::SGD(std::vector<Tensor> params, SGDConfig config, std::vector<double> weight_decay)
    : params_(std::move(params)), config_(config) {
  check_config(config_);
  weight_decay_ = check_params("SGD", params_, std::move(weight_decay), config_.weight_decay);
  momentum_buffer_.resize(params_.size());
}

void SGD::step() {
  autograd::NoGradScope no_grad;
  VKF_REQUIRE(momentum_buffer_.size() == params_.size(),
              "SGD: {} momentum buffers for {} parameters", momentum_buffer_.size(),
              params_.size());
  const bool momentum = config_.momentum != 0.0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor grad = params_[i].grad();
    if (!grad.defined()) continue;
    SGDConfig c = config_;
    c.weight_decay = weight_decay_[i];
    const bool first = momentum && !momentum_buffer_[i].defined();
    if (first) momentum_buffer_[i] = Tensor::empty(params_[i].shape());
    sgd_update(params_[i], grad, momentum_buffer_[i], c, first);
  }
  ++steps_;
}

void SGD::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad();
}

void SGD::set_lr(double lr) {
  check_finite_at_least("SGD", "lr", lr, 0.0);
  config_.lr = lr;
}

void SGD::set_step_count(int64_t steps) {
  VKF_REQUIRE(steps >= 0, "SGD: step count must be >= 0, got {}", steps);
  steps_ = steps;
}

}  // namespace vkf::ops
