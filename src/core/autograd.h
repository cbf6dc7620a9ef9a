// Reverse-mode autodiff. Ops applied to tensors that require gradients, while a Tape is active,
// record a node: inputs, outputs and a backward function. Tape::backward walks the nodes in reverse
// and accumulates gradients: `+=` into leaf gradients (parameters, as torch does across calls)
// and `=` then `+=` into the gradients of intermediate tensors. The order is fixed by the tape, so
// gradients are deterministic.
//
// A backward function reads its output gradients (undefined = zero) and hands each input's
// gradient either as a new tensor (add_grad) or by writing into a target it asks for
// (grad_target), which lets kernels such as matmul accumulate in place with beta = 1.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace vkf::autograd {

struct GradSlot {
  Tensor grad;
  bool exclusive = false;  // true when grad is owned by this slot alone and may change in place
};

struct GradTarget {
  Tensor tensor;
  bool accumulate;  // write `tensor += g` when true, `tensor = g` when false
  // The beta of a product or sum that writes the gradient into `tensor`: 1 adds, 0 overwrites.
  float beta() const { return accumulate ? 1.0f : 0.0f; }
};

class Tape;

class GradContext {
 public:
  GradContext(Tape& tape, const std::vector<Tensor>& inputs, std::vector<Tensor> grad_outputs)
      : tape_(tape), inputs_(inputs), grad_outputs_(std::move(grad_outputs)) {}
  // Gradient of output i; undefined when nothing downstream used that output.
  const Tensor& grad_output(size_t i) const { return grad_outputs_.at(i); }
  bool needs_grad(size_t input) const;
  void add_grad(size_t input, const Tensor& g);
  // add_grad for a contiguous gradient the caller hands over (its last handle, moved in; no other
  // tensor views its storage): where the input has no gradient yet, g becomes it and may later be
  // added to in place, so a large gradient made ahead of time is never copied.
  void add_grad_owned(size_t input, Tensor&& g);
  GradTarget grad_target(size_t input);

 private:
  Tape& tape_;
  const std::vector<Tensor>& inputs_;
  std::vector<Tensor> grad_outputs_;
};

using BackwardFn = std::function<void(GradContext&)>;

struct Node {
  std::string op;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  BackwardFn backward;
};

class Tape {
 public:
  void record(std::string op, std::vector<Tensor> inputs, std::vector<Tensor> outputs,
              BackwardFn backward);
  // Gradients of `root` (seed: ones of root's shape when undefined; root must then be a scalar).
  void backward(const Tensor& root, const Tensor& seed = {});
  // Gradients of several roots at once, each with its seed (same shape as its root); used where a
  // sub-graph with several outputs is back-propagated, as in activation checkpointing.
  void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& seeds);
  void clear();
  size_t size() const { return nodes_.size(); }

  // Used by GradContext.
  GradSlot& slot_for(const Tensor& t);
  // owned: nothing else references g (see GradContext::add_grad_owned).
  void accumulate(const Tensor& t, const Tensor& g, bool owned = false);
  GradTarget target_for(const Tensor& t);

 private:
  std::vector<Node> nodes_;
  std::unordered_map<const TensorImpl*, GradSlot> slots_;
};

// The tape ops record on (per thread); null when none is active.
Tape* active_tape();
// True when an op on these inputs must be recorded (a tape is active and one input needs grad).
bool should_record(std::initializer_list<const Tensor*> inputs);

// Makes `tape` the active tape for its lifetime (restoring the previous one after).
class TapeScope {
 public:
  explicit TapeScope(Tape& tape);
  ~TapeScope();
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  Tape* previous_;
};

// Disables recording for its lifetime (e.g. evaluation, optimizer updates).
class NoGradScope {
 public:
  NoGradScope();
  ~NoGradScope();
  NoGradScope(const NoGradScope&) = delete;
  NoGradScope& operator=(const NoGradScope&) = delete;

 private:
  Tape* previous_;
};

// Turns recording back on for its lifetime inside a NoGradScope (or a backward pass, which runs
// without recording): activation checkpointing re-runs a forward on a local tape there.
class EnableGradScope {
 public:
  EnableGradScope();
  ~EnableGradScope();
  EnableGradScope(const EnableGradScope&) = delete;
  EnableGradScope& operator=(const EnableGradScope&) = delete;

 private:
  int previous_depth_;
};

// Marks `out` as produced by a recorded op and records the node, if recording applies.
// Returns true when recorded. Convenience for op implementations.
bool record_op(const char* op, std::vector<Tensor> inputs, std::vector<Tensor> outputs,
               BackwardFn backward);

}  // namespace vkf::autograd
