// Activation checkpointing: the unrecorded first run and the recomputing backward node (see
// activation_checkpoint.h).
#include "core/activation_checkpoint.h"

#include <optional>
#include <utility>

#include "core/autograd.h"
#include "core/dropout_rng.h"
#include "vk/error.h"

namespace vkf::autograd {
namespace {

void recompute_backward(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                        const std::optional<dropout_rng::Stream>& dropout_state, GradContext& ctx) {
  // Fresh leaves on the inputs' storage: the local tape's gradients for them are what this node
  // hands on, and the global tape's history of the inputs stays out of the local walk.
  std::vector<Tensor> leaves;
  leaves.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      leaves.emplace_back();
      continue;
    }
    Tensor leaf = inputs[i].detach();
    if (ctx.needs_grad(i)) leaf.set_requires_grad(true);
    leaves.push_back(leaf);
  }
  Tape local;
  std::vector<Tensor> outputs;
  {
    EnableGradScope recording;  // backward passes run with recording off
    TapeScope tape(local);
    std::optional<dropout_rng::Stream> replay = dropout_state;  // a copy: the live stream stays put
    dropout_rng::StreamScope stream(replay ? &*replay : nullptr);
    outputs = fn(leaves);
  }
  std::vector<Tensor> roots, seeds;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& g = ctx.grad_output(k);
    if (g.defined() && outputs[k].defined() && outputs[k].requires_grad()) {
      roots.push_back(outputs[k]);
      seeds.push_back(g);
    }
  }
  if (!roots.empty()) local.backward(roots, seeds);
  for (size_t i = 0; i < leaves.size(); ++i)
    if (ctx.needs_grad(i) && leaves[i].defined() && leaves[i].grad().defined())
      ctx.add_grad(i, leaves[i].grad());
}

}  // namespace

std::vector<Tensor> checkpoint(CheckpointFn fn, const std::vector<Tensor>& inputs) {
  Tape* tape = active_tape();
  if (!tape) return fn(inputs);
  std::optional<dropout_rng::Stream> dropout_state;
  if (const dropout_rng::Stream* s = dropout_rng::active_stream()) dropout_state = *s;
  std::vector<Tensor> outputs;
  {
    NoGradScope no_grad;
    outputs = fn(inputs);
  }
  for (const Tensor& o : outputs) {
    VKF_REQUIRE(o.defined(), "checkpoint: the function returned an undefined tensor");
    VKF_REQUIRE(o.dtype() == DType::F32,
                "checkpoint: outputs must be f32 (they carry gradients), got {}",
                dtype_name(o.dtype()));
    for (const Tensor& in : inputs)
      VKF_REQUIRE(o.impl() != in.impl(),
                  "checkpoint: the function returned one of its inputs; return a new tensor");
    o.impl()->requires_grad = true;
    o.impl()->is_leaf = false;
  }
  tape->record("checkpoint", inputs, outputs,
               [fn = std::move(fn), inputs, dropout_state](GradContext& ctx) {
                 recompute_backward(fn, inputs, dropout_state, ctx);
               });
  return outputs;
}

}  // namespace vkf::autograd
