// Dropout forward and backward on the GPU, and the training-time entry point (see dropout.h).
#include "ops/dropout.h"

#include <cmath>

#include "core/autograd.h"
#include "core/dropout_rng.h"
#include "core/launch.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

// Mirrors the push constants of src/shaders/dropout.comp.
struct Push {
  uint64_t x, out;
  uint32_t n, threshold;
  float scale;
  uint32_t seed_lo, seed_hi, offset_lo, offset_hi;
};

Push make_push(const Tensor& x, const Tensor& out, int64_t n, float p, uint64_t seed,
               uint64_t offset) {
  return {x.defined() ? x.address() : 0,
          out.address(),
          checked_u32(n, "dropout element count"),
          dropout_threshold(p, "dropout"),
          dropout_scale(p),
          static_cast<uint32_t>(seed),
          static_cast<uint32_t>(seed >> 32),
          static_cast<uint32_t>(offset),
          static_cast<uint32_t>(offset >> 32)};
}

// out = dropout(x) with the given mask parameters; x and out contiguous f32 of n elements.
void apply(const Tensor& x, const Tensor& out, float p, uint64_t seed, uint64_t offset) {
  const int64_t n = x.numel();
  launch("dropout_apply", make_push(x, out, n, p, seed, offset), grid_1d(n, 256), {&x}, {&out}, {},
         {static_cast<double>(n) * 40.0, static_cast<double>(n) * 8.0});
}

}  // namespace

uint32_t dropout_threshold(float p, const char* what) {
  VKF_REQUIRE(std::isfinite(p) && p >= 0.0f && p <= 1.0f,
              "{}: the dropout probability must be in [0, 1], got {}", what, p);
  // u = bits / 2^24 >= p  <=>  bits >= p * 2^24  <=>  bits >= ceil(p * 2^24) for integer bits.
  return static_cast<uint32_t>(std::ceil(static_cast<double>(p) * 16777216.0));
}

float dropout_scale(float p) {
  return p < 1.0f ? static_cast<float>(1.0 / (1.0 - static_cast<double>(p))) : 0.0f;
}

Tensor dropout(const Tensor& x_in, float p, uint64_t seed, uint64_t offset) {
  check_tensor(x_in, "dropout: x", DType::F32);
  VKF_REQUIRE(x_in.numel() > 0, "dropout: x is empty (shape {})", shape_str(x_in.shape()));
  dropout_threshold(p, "dropout");  // validates p
  if (p == 0.0f) return x_in;
  const Tensor x = x_in.is_contiguous() ? x_in : x_in.contiguous();
  Tensor y = Tensor::empty(x.shape());
  apply(x, y, p, seed, offset);
  autograd::record_op("dropout", {x}, {y}, [p, seed, offset](autograd::GradContext& ctx) {
    const Tensor& dy_in = ctx.grad_output(0);
    const Tensor dy = dy_in.is_contiguous() ? dy_in : dy_in.contiguous();
    Tensor dx = Tensor::empty(dy.shape());
    apply(dy, dx, p, seed, offset);  // the same mask and scale: d(x * m * s)/dx = m * s
    ctx.add_grad(0, dx);
  });
  return y;
}

Tensor train_dropout(const Tensor& x, float p) {
  if (p == 0.0f) return x;
  dropout_threshold(p, "train_dropout");  // validates p even when no stream is active
  VKF_REQUIRE(x.defined(), "train_dropout: x is undefined");
  const auto r = dropout_rng::reserve(static_cast<uint64_t>(x.numel()));
  if (!r) return x;
  return dropout(x, p, r->seed, r->offset);
}

Tensor dropout_bits(int64_t n, uint64_t seed, uint64_t offset) {
  VKF_REQUIRE(n > 0, "dropout_bits: n must be positive, got {}", n);
  Tensor out = Tensor::empty({n}, DType::I32);
  launch("dropout_bits", make_push({}, out, n, 0.0f, seed, offset), grid_1d(n, 256), {}, {&out});
  return out;
}

}  // namespace vkf::ops
