// Tape recording and the reverse walk (see autograd.h).
#include "core/autograd.h"

#include "core/tensor_kernels.h"
#include "vk/error.h"

namespace vkf::autograd {
namespace {
thread_local Tape* g_active = nullptr;
thread_local int g_no_grad_depth = 0;
}  // namespace

Tape* active_tape() { return g_no_grad_depth > 0 ? nullptr : g_active; }

bool should_record(std::initializer_list<const Tensor*> inputs) {
  if (!active_tape()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

TapeScope::TapeScope(Tape& tape) : previous_(g_active) { g_active = &tape; }
TapeScope::~TapeScope() { g_active = previous_; }
NoGradScope::NoGradScope() : previous_(nullptr) { ++g_no_grad_depth; }
NoGradScope::~NoGradScope() { --g_no_grad_depth; }
EnableGradScope::EnableGradScope() : previous_depth_(g_no_grad_depth) { g_no_grad_depth = 0; }
EnableGradScope::~EnableGradScope() { g_no_grad_depth = previous_depth_; }

bool record_op(const char* op, std::vector<Tensor> inputs, std::vector<Tensor> outputs,
               BackwardFn backward) {
  Tape* tape = active_tape();
  if (!tape) return false;
  bool any = false;
  for (const auto& t : inputs) any = any || (t.defined() && t.requires_grad());
  if (!any) return false;
  for (auto& o : outputs) {
    o.impl()->requires_grad = true;
    o.impl()->is_leaf = false;
  }
  tape->record(op, std::move(inputs), std::move(outputs), std::move(backward));
  return true;
}

void Tape::record(std::string op, std::vector<Tensor> inputs, std::vector<Tensor> outputs,
                  BackwardFn backward) {
  nodes_.push_back({std::move(op), std::move(inputs), std::move(outputs), std::move(backward)});
}

void Tape::clear() {
  nodes_.clear();
  slots_.clear();
}

GradSlot& Tape::slot_for(const Tensor& t) { return slots_[t.impl()]; }

// Leaves keep their gradient on the tensor; intermediates in the tape's slot map.
void Tape::accumulate(const Tensor& t, const Tensor& g, bool owned) {
  VKF_REQUIRE(g.shape() == t.shape(), "backward produced a gradient of shape {} for a tensor of shape {}",
              shape_str(g.shape()), shape_str(t.shape()));
  TensorImpl* impl = t.impl();
  Tensor current;
  bool exclusive = false;
  if (impl->is_leaf) {
    current = Tensor(impl->grad);
    exclusive = impl->grad_exclusive;
  } else {
    GradSlot& s = slots_[impl];
    current = s.grad;
    exclusive = s.exclusive;
  }
  Tensor result;
  owned = owned && g.is_contiguous();
  if (!current.defined()) {
    if (g.is_contiguous()) {
      result = g;  // unless owned, shared with whoever produced g: never modified in place
      exclusive = owned;
    } else {
      result = g.contiguous();
      exclusive = true;
    }
  } else if (exclusive) {
    detail::add_inplace(current, g);
    result = current;
  } else if (owned) {
    detail::add_inplace(g, current);
    result = g;
    exclusive = true;
  } else {
    result = detail::add(current, g);
    exclusive = true;
  }
  if (impl->is_leaf) {
    impl->grad = result.impl_ptr();
    impl->grad_exclusive = exclusive;
  } else {
    slots_[impl] = {result, exclusive};
  }
}

GradTarget Tape::target_for(const Tensor& t) {
  TensorImpl* impl = t.impl();
  Tensor current = impl->is_leaf ? Tensor(impl->grad) : slots_[impl].grad;
  bool exclusive = impl->is_leaf ? impl->grad_exclusive : slots_[impl].exclusive;
  // A gradient recorded as shared whose other holders are gone -- e.g. a residual add's, handed to
  // both branches, once the branch's own op has run -- is the slot's alone: the slot and `current`
  // are the only handles on it and no other view shares its storage. It may then change in place
  // instead of being copied (a copy of the residual stream per norm backward before this).
  if (current.defined() && !exclusive && current.impl_ptr().use_count() == 2 &&
      current.impl()->storage.use_count() == 1)
    exclusive = true;
  GradTarget target{};
  if (!current.defined()) {
    target = {Tensor::empty(t.shape(), DType::F32), false};
  } else if (!exclusive) {
    target = {current.clone(), true};
  } else {
    target = {current, true};
  }
  if (impl->is_leaf) {
    impl->grad = target.tensor.impl_ptr();
    impl->grad_exclusive = true;
  } else {
    slots_[impl] = {target.tensor, true};
  }
  return target;
}

bool GradContext::needs_grad(size_t input) const {
  return input < inputs_.size() && inputs_[input].defined() && inputs_[input].requires_grad();
}

void GradContext::add_grad(size_t input, const Tensor& g) {
  if (!needs_grad(input) || !g.defined()) return;
  tape_.accumulate(inputs_[input], g);
}

void GradContext::add_grad_owned(size_t input, Tensor&& g) {
  const Tensor mine = std::move(g);
  if (!needs_grad(input) || !mine.defined()) return;
  // A handle kept elsewhere would see in-place additions: treat the gradient as shared then.
  tape_.accumulate(inputs_[input], mine, mine.impl_ptr().use_count() == 1);
}

GradTarget GradContext::grad_target(size_t input) {
  VKF_REQUIRE(needs_grad(input), "grad_target asked for input {} that needs no gradient", input);
  return tape_.target_for(inputs_[input]);
}

void Tape::backward(const Tensor& root, const Tensor& seed) {
  VKF_REQUIRE(root.defined() && root.requires_grad(),
              "backward() on a tensor that does not require grad (no recorded op produced it)");
  Tensor s = seed;
  if (!s.defined()) {
    VKF_REQUIRE(root.numel() == 1,
                "backward() without a seed needs a scalar; got shape {}", shape_str(root.shape()));
    s = Tensor::full(root.shape(), 1.0f);
  }
  backward(std::vector<Tensor>{root}, std::vector<Tensor>{s});
}

void Tape::backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& seeds) {
  VKF_REQUIRE(roots.size() == seeds.size(), "backward(): {} roots but {} seeds", roots.size(),
              seeds.size());
  for (size_t i = 0; i < roots.size(); ++i) {
    VKF_REQUIRE(roots[i].defined() && roots[i].requires_grad(),
                "backward() on a tensor that does not require grad (no recorded op produced it)");
    VKF_REQUIRE(seeds[i].defined() && seeds[i].shape() == roots[i].shape(),
                "backward seed shape {} differs from root shape {}",
                seeds[i].defined() ? shape_str(seeds[i].shape()) : "(undefined)",
                shape_str(roots[i].shape()));
  }
  {
    NoGradScope no_grad;
    for (size_t i = 0; i < roots.size(); ++i) accumulate(roots[i], seeds[i]);
    for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
      Node& n = *it;
      std::vector<Tensor> grads;
      bool any = false;
      for (const auto& o : n.outputs) {
        auto found = slots_.find(o.impl());
        if (found != slots_.end() && found->second.grad.defined()) {
          grads.push_back(found->second.grad);
          any = true;
        } else {
          grads.emplace_back();
        }
      }
      if (!any) continue;
      GradContext ctx(*this, n.inputs, std::move(grads));
      n.backward(ctx);
      // Every output is produced once, so its gradient is complete and no longer needed.
      for (const auto& o : n.outputs) slots_.erase(o.impl());
    }
  }
  clear();
}

}  // namespace vkf::autograd
