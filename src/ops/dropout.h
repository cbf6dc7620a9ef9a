// Inverted dropout with counter-based randomness: element i of x is kept iff the Philox word of
// (seed, offset + i) gives a uniform u >= p, and kept values are scaled by 1 / (1 - p), so the
// expected value is unchanged (torch.nn.functional.dropout in training mode). Nothing is stored for
// the backward pass: it regenerates the mask from (seed, offset). train_dropout() is what models
// call: it draws seed and offset from the active training dropout stream (core/dropout_rng.h) and
// is the identity outside training.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace vkf::ops {

// Differentiable; x f32 of any shape (non-contiguous inputs are copied), p in [0, 1] (p = 0
// returns x itself, p = 1 gives zeros). The element order is row-major over x's shape.
Tensor dropout(const Tensor& x, float p, uint64_t seed, uint64_t offset);

// Dropout during training: x unchanged when p == 0 or no dropout stream is active (evaluation,
// generation, parity); otherwise dropout(x, p, stream seed, stream offset), and the stream's
// offset advances by x.numel().
Tensor train_dropout(const Tensor& x, float p);

// The raw 32-bit Philox words of counters offset .. offset + n - 1 under seed, as an I32 tensor
// holding their bit patterns [n]: the source of every dropout mask, exposed for tests.
Tensor dropout_bits(int64_t n, uint64_t seed, uint64_t offset);

// The integer keep threshold ceil(p * 2^24) and the scale 1 / (1 - p) (0 for p = 1) that the
// kernels use; fused kernels (attention) share them. p must be in [0, 1]; `what` names the caller
// in the error otherwise.
uint32_t dropout_threshold(float p, const char* what);
float dropout_scale(float p);

}  // namespace vkf::ops
