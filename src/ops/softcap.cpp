// Soft-capping forward and backward on the GPU (see softcap.h).
#include "ops/softcap.h"

#include <cmath>

#include "core/autograd.h"
#include "core/launch.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

struct Push {
  uint64_t x, dy, out;
  uint32_t n;
  float cap;
};

void run(const char* module, const Tensor& x, const Tensor& dy, const Tensor& out, float cap) {
  const int64_t n = x.numel();
  Push push{x.address(), dy.defined() ? dy.address() : 0, out.address(),
            checked_u32(n, "softcap element count"), cap};
  launch(module, push, grid_1d(n, 256), {&x, &dy}, {&out}, {},
         {static_cast<double>(n) * 20.0, static_cast<double>(n) * 12.0});
}

}  // namespace

Tensor softcap(const Tensor& x_in, float cap) {
  check_tensor(x_in, "softcap: x", DType::F32);
  VKF_REQUIRE(x_in.numel() > 0, "softcap: x is empty (shape {})", shape_str(x_in.shape()));
  VKF_REQUIRE(std::isfinite(cap) && cap > 0, "softcap: cap must be a positive number, got {}", cap);
  const Tensor x = x_in.is_contiguous() ? x_in : x_in.contiguous();
  Tensor y = Tensor::empty(x.shape());
  run("softcap_fwd", x, {}, y, cap);
  autograd::record_op("softcap", {x}, {y}, [x, cap](autograd::GradContext& ctx) {
    const Tensor& dy_in = ctx.grad_output(0);
    const Tensor dy = dy_in.is_contiguous() ? dy_in : dy_in.contiguous();
    Tensor dx = Tensor::empty(x.shape());
    run("softcap_bwd", x, dy, dx, cap);
    ctx.add_grad(0, dx);
  });
  return y;
}

}  // namespace vkf::ops
