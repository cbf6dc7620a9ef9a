// Eager and replayed training steps (see step_runner.h).
#include "train/step_runner.h"

#include <fmt/format.h>

#include <cstring>

#include "core/autograd.h"
#include "ops/elementwise.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf::train {

Tensor backward_from_device(models::DecoderModel& model, const Tensor& ids, const Tensor& mask,
                            const Tensor& shifted_labels, HeadLoss how,
                            dropout_rng::Stream* dropout, const Tensor& seed) {
  autograd::Tape tape;
  Tensor loss_sum;
  {
    autograd::TapeScope scope(tape);
    dropout_rng::StreamScope dropout_scope(dropout);
    loss_sum = causal_lm_loss_parts(model, ids, mask, shifted_labels, how).loss_sum;
  }
  tape.backward(loss_sum, seed);
  return loss_sum;
}

float backward_seed_value(const OptimizerStep& update, int64_t counted) {
  VKF_REQUIRE(counted > 0, "a training step counts {} tokens; it needs some", counted);
  // What ops::scale(loss_sum, fl(1/counted))'s backward passes on from a seed of S: one f32
  // product, exact for a power-of-two S.
  return update.seed_scale() * static_cast<float>(1.0 / static_cast<double>(counted));
}

namespace {

int64_t counted_tokens(const std::vector<MicroBatch>& micro) {
  int64_t counted = 0;
  for (const MicroBatch& mb : micro) {
    VKF_REQUIRE(mb.batch > 0 && mb.seq > 0 &&
                    mb.ids.size() == static_cast<size_t>(mb.batch * mb.seq) &&
                    mb.shifted_labels.size() == mb.ids.size() &&
                    (mb.mask.empty() || mb.mask.size() == mb.ids.size()),
                "training step: a micro-batch of [{}, {}] has {} ids, {} labels and {} mask values",
                mb.batch, mb.seq, mb.ids.size(), mb.shifted_labels.size(), mb.mask.size());
    counted += mb.counted;
  }
  return counted;
}

vk::Stream& stream() {
  return vk::Context::get().stream();
}

}  // namespace

StepRunner::StepRunner(models::DecoderModel& model, OptimizerStep& update, HeadLoss how,
                       bool replay)
    : model_(model), update_(update), how_(how), replay_(replay) {
  if (!replay_) eager_reason_ = "replay is off";
}

StepRunner::~StepRunner() {
  graph_.reset();
  if (host_in_) stream().release(host_in_);
}

void StepRunner::release() {
  graph_.reset();
}

StepRunner::Key StepRunner::key_of(const std::vector<MicroBatch>& micro) const {
  Key k;
  for (const MicroBatch& mb : micro) {
    k.shapes.insert(k.shapes.end(),
                    {mb.batch, mb.seq, mb.mask.empty() ? 0 : 1, mb.counted > 0 ? 1 : 0});
  }
  k.scale = update_.seed_scale();
  return k;
}

StepOutcome StepRunner::run(int64_t step, const std::vector<MicroBatch>& micro,
                            dropout_rng::Stream* dropout) {
  const int64_t counted = counted_tokens(micro);
  VKF_REQUIRE(counted > 0, "train: step {} has no tokens to predict (all labels are -100)", step);
  ++steps_;
  const Key key = key_of(micro);
  if (!eager_reason_.empty() || update_.injects_overflow_at(step)) {
    release();
    warm_key_.reset();  // an injected step's graph would carry the injection
    return eager(step, micro, counted, dropout);
  }
  if (graph_ && key == graph_key_) {
    stream().wait(*graph_);  // its last replay has read the inputs (finish() waited for it too)
    fill_host_inputs(step, micro, counted);
    update_.replayed(step, figures_);
    return replay();
  }
  release();
  if (warm_key_ && *warm_key_ == key) {
    if (capture(step, micro, counted, dropout)) return replay();
    return eager(step, micro, counted, dropout);
  }
  warm_key_ = key;
  return eager(step, micro, counted, dropout);
}

Tensor StepRunner::backward_micro_batches(const std::vector<MicroTensors>& inputs,
                                          const Tensor& seed, dropout_rng::Stream* dropout) {
  Tensor loss_sum;
  for (const MicroTensors& t : inputs) {
    if (!t.ids.defined()) continue;  // nothing counted
    const Tensor part = backward_from_device(model_, t.ids, t.mask, t.labels, how_, dropout, seed);
    loss_sum = loss_sum.defined() ? ops::add(loss_sum, part) : part;
  }
  return loss_sum;
}

StepOutcome StepRunner::eager(int64_t step, const std::vector<MicroBatch>& micro, int64_t counted,
                              dropout_rng::Stream* dropout) {
  std::vector<MicroTensors> inputs(micro.size());
  for (size_t i = 0; i < micro.size(); ++i) {
    const MicroBatch& mb = micro[i];
    if (mb.counted == 0) continue;
    inputs[i].ids = Tensor::from_host_i32(mb.ids, {mb.batch, mb.seq});
    if (!mb.mask.empty()) inputs[i].mask = Tensor::from_host_i32(mb.mask, {mb.batch, mb.seq});
    inputs[i].labels = Tensor::from_host_i32(mb.shifted_labels, {mb.batch * mb.seq});
  }
  const Tensor seed = Tensor::full({}, backward_seed_value(update_, counted));
  update_.record(step, backward_micro_batches(inputs, seed, dropout));
  return update_.finish();
}

void StepRunner::fill_host_inputs(int64_t step, const std::vector<MicroBatch>& micro,
                                  int64_t counted) {
  char* base = static_cast<char*>(host_in_.mapped());
  auto put = [&](uint64_t at, const void* data, size_t bytes) {
    std::memcpy(base + at, data, bytes);
  };
  for (size_t i = 0; i < micro.size(); ++i) {
    const MicroBatch& mb = micro[i];
    const MicroTensors& d = inputs_[i];
    const InputOffsets& at = input_at_[i];
    if (!d.ids.defined()) continue;  // nothing counted: not in the recording
    put(at.ids, mb.ids.data(), mb.ids.size() * 4);
    if (d.mask.defined()) put(at.mask, mb.mask.data(), mb.mask.size() * 4);
    put(at.labels, mb.shifted_labels.data(), mb.shifted_labels.size() * 4);
  }
  const float seed = backward_seed_value(update_, counted);
  put(seed_at_, &seed, 4);
  update_.step_scalars(step, scalars_);
  put(scalars_at_, scalars_.data(), scalars_.size() * 4);
}

bool StepRunner::capture(int64_t step, const std::vector<MicroBatch>& micro, int64_t counted,
                         dropout_rng::Stream* dropout) {
  // The recording's inputs: device tensors, and the host-visible buffer they are copied from.
  uint64_t bytes = 0;
  auto place = [&](uint64_t n) {
    const uint64_t at = bytes;
    bytes += (n + 15) / 16 * 16;
    return at;
  };
  inputs_.assign(micro.size(), {});
  input_at_.assign(micro.size(), {});
  for (size_t i = 0; i < micro.size(); ++i) {
    const MicroBatch& mb = micro[i];
    if (mb.counted == 0) continue;
    MicroTensors& d = inputs_[i];
    InputOffsets& at = input_at_[i];
    d.ids = Tensor::empty({mb.batch, mb.seq}, DType::I32);
    at.ids = place(d.ids.nbytes());
    if (!mb.mask.empty()) {
      d.mask = Tensor::empty({mb.batch, mb.seq}, DType::I32);
      at.mask = place(d.mask.nbytes());
    }
    d.labels = Tensor::empty({mb.batch * mb.seq}, DType::I32);
    at.labels = place(d.labels.nbytes());
  }
  seed_ = Tensor::empty({}, DType::F32);
  seed_at_ = place(4);
  scalars_.assign(update_.step_scalar_count(), 0.0f);
  step_scalars_ = Tensor::empty({static_cast<int64_t>(scalars_.size())}, DType::F32);
  scalars_at_ = place(scalars_.size() * 4);
  if (host_in_) stream().release(host_in_);
  host_in_ = vk::Context::get().allocator().allocate(bytes, vk::MemoryKind::Staging);
  fill_host_inputs(step, micro, counted);

  auto copy_in = [&](const Tensor& t, uint64_t at) {
    stream().copy(host_in_, at, t.allocation(), 0, t.nbytes());
  };
  const uint64_t drawn_before = dropout ? dropout->offset : 0;
  bool recorded_update = false;
  stream().begin_capture();
  try {
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const MicroTensors& d = inputs_[i];
      if (!d.ids.defined()) continue;
      copy_in(d.ids, input_at_[i].ids);
      if (d.mask.defined()) copy_in(d.mask, input_at_[i].mask);
      copy_in(d.labels, input_at_[i].labels);
    }
    copy_in(seed_, seed_at_);
    copy_in(step_scalars_, scalars_at_);
    const Tensor loss_sum = backward_micro_batches(inputs_, seed_, dropout);
    recorded_update = true;
    update_.record(step, loss_sum, step_scalars_);
    figures_ = update_.figures();
  } catch (const Error& e) {
    stream().end_capture().reset();  // never replayed; its memory goes back
    if (recorded_update) throw;      // the optimizer's host state may have moved: no retry
    // A forward or backward that needs the host inside the step (e.g. attention dropout's
    // parameters are uploaded per call): this run goes eager, and the step runs eagerly now.
    if (dropout) dropout->offset = drawn_before;
    eager_reason_ = fmt::format("the step cannot be recorded: {}", e.what());
    return false;
  }
  graph_ = stream().end_capture();
  graph_key_ = key_of(micro);
  ++captures_;
  graph_dispatches_ = graph_->dispatch_count();
  arena_bytes_ = graph_->arena_bytes();
  if (dropout && dropout->offset != drawn_before) {
    // Its masks come from counter offsets fixed in the recording: right for this step only.
    eager_reason_ = "the model draws dropout masks in training";
  }
  return true;
}

std::string StepRunner::summary() const {
  std::string s = fmt::format("steps replayed: {} of {}", replayed_steps_, steps_);
  if (captures_ > 0) {
    s += fmt::format(" ({} recording{}, the last of {} dispatches, {:.1f} MiB of activations)",
                     captures_, captures_ == 1 ? "" : "s", graph_dispatches_,
                     static_cast<double>(arena_bytes_) / (1024.0 * 1024.0));
  }
  if (!eager_reason_.empty())
    s += "; eager: " + eager_reason_;
  else if (replayed_steps_ < steps_)
    s += "; a step runs eagerly when its shapes or loss scale are new";
  return s;
}

StepOutcome StepRunner::replay() {
  stream().replay(*graph_);
  ++replayed_steps_;
  if (!eager_reason_.empty()) graph_.reset();  // replayed once (see capture())
  return update_.finish();
}

}  // namespace vkf::train
