// Cross-entropy fused with the LM head: the loss of logits = softcap(logit_scale · h·Wᵀ) against
// labels, without ever holding the [N, V] logits (for Llama-3.2-1B at 8 x 1024 tokens those are
// 4.2 GB, and as much again for their gradient). Tokens are processed in chunks whose [chunk, V]
// logits are the largest temporary; the result is ops::cross_entropy_parts' (loss_sum over the
// counted rows and count), and gradients reach h and W (and through W a tied embedding).
//
// Numerics: each chunk's logits come from the same matmul as the unfused head, and the loss,
// log-sum-exp and softmax gradient use the same f32 expressions and reduction orders as
// ops::scale, ops::softcap and ops::cross_entropy_parts. The chunk size changes nothing but
// summation order: dW is summed over the tokens chunk by chunk (fp32, in chunk order), and a
// chunk's products may take another matmul kernel, tile or split-K for the chunk's row count than
// the whole batch would (the last bits of a row's logits and of dh). loss_sum, count and every
// per-row value are otherwise independent of it. Deterministic: the same inputs and chunk size
// give the same bits.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/loss.h"

namespace vkf::ops {

struct LinearCrossEntropyOptions {
  // logits = (h·Wᵀ) · logit_scale, in f32 as ops::scale does it (1: no scaling).
  float logit_scale = 1.0f;
  // > 0: logits = cap · tanh(logits / cap) afterwards (ops::softcap); 0: none.
  float softcap = 0.0f;
  int64_t ignore_index = -100;
  // Tokens per chunk; 0: linear_cross_entropy_chunk_rows(N, V).
  int64_t chunk_rows = 0;
  // With f16 operand copies (ops::detail::f16_operands_active), the chunks' gradients of the
  // logits are kept as f16 for this many chunks and the gradient products run once per group
  // (a taller dW product); 0: linear_cross_entropy_group_chunks(). 1: per chunk.
  int64_t group_chunks = 0;
};

// hidden [N, H] f32, weight [V, H] f32 (Hugging Face's [out, in] head layout), labels [N] i32 or
// i64. Returns loss_sum (differentiable in hidden and weight) and count, as cross_entropy_parts
// on the logits would. With gradients recorded, they are computed during this call (for an
// incoming gradient of 1) and only scaled by the real one in the backward pass; without, only the
// loss is computed.
CrossEntropyParts linear_cross_entropy(const Tensor& hidden, const Tensor& weight,
                                       const Tensor& labels,
                                       const LinearCrossEntropyOptions& options = {});

// The group chosen when options.group_chunks is 0, for chunks of chunk_rows of N rows: enough
// chunks for 4096 rows (the dW product's depth), while the f16 group stays within four times
// linear_cross_entropy_chunk_bytes(), and no more chunks than there are.
// set_linear_cross_entropy_group_chunks(n > 0) makes it n (benchmarks: 1 is per chunk); 0
// restores the rule.
int64_t linear_cross_entropy_group_chunks(int64_t rows, int64_t vocab, int64_t chunk_rows);
void set_linear_cross_entropy_group_chunks(int64_t chunks);

// The chunk chosen when options.chunk_rows is 0: as many rows as keep the [rows, V] f32 chunk
// within linear_cross_entropy_chunk_bytes() (and under 2^31 elements), whole multiples of 128
// rows (GEMM tiles) when a chunk holds more, at least 1, at most `rows`. Depends only on its
// arguments, the setting and (for the default budget) the device, so memory plans can count it.
int64_t linear_cross_entropy_chunk_rows(int64_t rows, int64_t vocab);

// The chunk budget in bytes (default: a 64th of the device's memory, within 256 MiB .. 1 GiB); 0
// restores the default.
// A larger budget means fewer, larger products and fewer passes over dW; a smaller one less memory.
void set_linear_cross_entropy_chunk_bytes(uint64_t bytes);
uint64_t linear_cross_entropy_chunk_bytes();

}  // namespace vkf::ops
