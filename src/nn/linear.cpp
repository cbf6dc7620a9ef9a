// nn::linear and the adapter hook (see linear.h).
#include "nn/linear.h"

#include "ops/matmul.h"

namespace vkf::nn {
namespace {
thread_local const ModuleAdapter* g_active = nullptr;
}  // namespace

AdapterScope::AdapterScope(const ModuleAdapter* adapter) : previous_(g_active) { g_active = adapter; }
AdapterScope::~AdapterScope() { g_active = previous_; }
const ModuleAdapter* active_adapter() { return g_active; }

Tensor linear(const std::string& name, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor y = ops::linear(x, weight, bias);
  return g_active ? g_active->adapt_linear(name, x, y) : y;
}

Tensor adapt_embedding(const std::string& module, const Tensor& ids, const Tensor& y,
                       std::optional<int64_t> padding_idx) {
  return g_active ? g_active->adapt_embedding(module, ids, y, padding_idx) : y;
}

}  // namespace vkf::nn
