// Operand layouts for the GEMM kernels (the fp32 tiled one, and the f16 operand copies of the
// tensor-core one further down). The tiled kernel computes the same sums in the same
// order whatever the operands' layouts, but on NVIDIA's H200 it runs fastest with A stored
// column-major ([K, M] in memory) and B row-major ([K, N]), the "tn" layout: measured at
// 8192 x 2048 x 2048, 44.2 TFLOP/s against 41.1 with A row-major ("nn") and 39.7 with B
// column-major as well ("nt", every forward product Y = X W^T); the row-major A's 32-byte
// segments per 8-deep slice are the difference. Where the product is large enough that the
// difference outweighs the copy, relayout_for_tiled() transposes the operands that are in the
// slow layout into temporaries (matmul_transpose.comp, coalesced through shared memory) and the
// product runs as "tn". Results are bitwise the same as without. Internal to src/ops.
#pragma once

#include <cstdint>
#include <optional>

#include "ops/matmul_kernels.h"

namespace vkf::ops::detail {

// Auto: on NVIDIA devices (where it was measured), by the size rule; Always: every product with
// an operand in a slow layout, whatever its size, on any device (tests); Off: never. Default from
// VKF_GEMM_RELAYOUT=auto|always|off (auto).
enum class RelayoutChoice { Auto, Always, Off };
void set_tiled_relayout(RelayoutChoice choice);

// The size rule of Auto for a batch x m x n x k product whose A is row-major (a_rows) and/or
// whose B is column-major (b_cols); a_batch / b_batch: the operands' own batch (1 when shared).
bool relayout_pays(int64_t batch, int64_t m, int64_t n, int64_t k, int64_t a_batch, int64_t b_batch,
                   bool a_rows, bool b_cols);

// Whether relayout_for_tiled() copies the operands of a batch x m x n x k product whose A is
// row-major (a_rows) and/or whose B is column-major (b_cols) -- those operands, each its own
// batch: for memory plans.
bool relayout_copies(int64_t batch, int64_t m, int64_t n, int64_t k, bool a_rows, bool b_cols);

// Rewrites a and b (f32 operands of a tiled product into c) to the "tn" layout where that pays.
void relayout_for_tiled(MatDesc& a, MatDesc& b, const MatDesc& c);

// A copy of b (the f32 B operand of several tiled products, total_m rows of A over all of them)
// in the kernel's fast layout, for a caller that keeps it across the products: the LM head's
// weight over the loss chunks, which the per-product rule above leaves "nt" because one chunk
// does not pay for a copy of the whole weight. nullopt where the products run on tensor cores,
// relayout is off, b is in the fast layout already or too large for the copy, or (Auto) the
// gain over all products does not pay for the copy. Bitwise the same products.
std::optional<MatDesc> tiled_b_kept_relaid(const MatDesc& b, int64_t total_m);
// Auto's rule for it: a K x N B (batch entries: batch) multiplied by total_m rows of A in all.
bool kept_b_relayout_pays(int64_t batch, int64_t total_m, int64_t k, int64_t n);

// The tensor-core kernel's f16 operand copies (set_coopmat_f16_operands): it too runs fastest on
// "tn" (H200, f32 inputs converted in the call: 4096^3 170 TFLOP/s against 154 "nn" and 139 "nt";
// 8192 x 2048 x 2048 167 / 147 / 131), and the copy reads and writes the operand once whichever
// layout it writes, so on NVIDIA (the choice above, without the size rule) an operand in the slow
// layout is converted transposed. f16_operand_relaid() returns nullopt where it is not: the
// choice is off, the operand is f16 or in the fast layout already (`is_a`: the A operand), or too
// large for the copy's grid and 32-bit indices.
std::optional<MatDesc> f16_operand_relaid(const MatDesc& d, bool is_a);

// The matrices of `d` (rows contiguous when !column_major, else columns) as a new contiguous
// tensor holding their transpose in the other layout: [batch, cols, rows] for a row-major source
// (the same matrices, column-major), [batch, rows, cols] for a column-major one; with to_f16 the
// values rounded to f16 (as Tensor::to). The relayouts above are made by it; public for tests.
Tensor transposed_copy(const MatDesc& d, bool column_major, bool to_f16);

}  // namespace vkf::ops::detail
