// Token embedding: the lookup of rows of a [V, H] table by integer ids, and its gradient, a
// deterministic scatter-add into the table (a counting sort of token positions by id on the GPU,
// then in-order sums per row; no floating-point atomics, so the same batch gives the same bits).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace vkf::ops {

// out[i..., :] = weight[ids[i...], :] for weight [V, H] f32 and ids of any shape, I32 or I64;
// out has shape [ids..., H]. Differentiable in weight. The table may be stored in f16 (inference
// weights; the output is f32, exactly the widened halves); such a table has no gradient.
// An id outside [0, V) is not an error on the GPU (the host cannot see it without a wait): its
// output row is all zeros and it contributes nothing to the weight gradient. Data loaders should
// call check_ids() on the host, where ids are known anyway.
// padding_idx, as torch.nn.Embedding's (HF decoders pass config.pad_token_id): tokens with that id
// are looked up as usual but give that row no gradient. Negative values count from V, as in torch.
Tensor embedding(const Tensor& weight, const Tensor& ids,
                 std::optional<int64_t> padding_idx = std::nullopt);

// Throws vkf::Error naming `where`, the first id outside [0, vocab) and its position.
void check_ids(const std::vector<int64_t>& ids, int64_t vocab, const char* where);

// The weight gradient on its own: grad_weight [V, H] (+)= scatter of grad_out [ids..., H] by ids
// (accumulate: add into grad_weight; otherwise overwrite it, rows without tokens becoming 0).
// Row v receives the sum of grad_out rows of the tokens with id v, added in increasing token
// position. Used by embedding()'s backward; public for callers that hold the gradient themselves.
void embedding_backward(const Tensor& ids, const Tensor& grad_out, const Tensor& grad_weight,
                        bool accumulate, std::optional<int64_t> padding_idx = std::nullopt);

}  // namespace vkf::ops
