// Matrix products in f32: matmul (batched, with transposes), matmul_into (the non-differentiable
// workhorse with alpha/beta accumulation and a bias epilogue) and linear (Hugging Face
// nn.Linear: y = x W^T + b). Deterministic: the same inputs give the same bits on one device.
//
// Operands may be strided views. A view whose matrices have a contiguous row or column (a slice
// of a bigger matrix, a transpose of the last two dimensions) is read in place; a transposed view
// is simply read as the transposed operand. Other layouts are copied to contiguous first.
#pragma once

#include <memory>

#include "core/tensor.h"

namespace vkf::ops {

// C = op(a) op(b), where op(x) is x or, with the flag, x with its last two dimensions swapped.
// a is [..., M, K] ([..., K, M] with trans_a), b is [..., K, N] ([..., N, K] with trans_b), and
// the result is [..., M, N]. Batch dimensions: b has the same leading dimensions as a, or b is
// rank 2 and shared by every matrix of a (a weight). Differentiable in a and b.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

// out = alpha * op(a) op(b) + beta * out (+ bias[N] added to every row). Shapes as matmul; out
// has the result's shape, may be a strided view, and must not overlap a or b in memory. With
// beta == 0, out is never read (it may hold NaN). Not differentiable: nothing is recorded.
void matmul_into(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const Tensor& out,
                 float alpha = 1.0f, float beta = 0.0f, const Tensor& bias = {});

// y = x W^T + bias: x is [..., in], weight is [out, in] (the Hugging Face layout), bias is [out]
// or undefined; y is [..., out]. Differentiable in x, weight and bias. The weight may be stored in
// f16 (inference: half the bytes to read; products accumulate in fp32, x and y stay f32); such a
// weight cannot carry a gradient.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// While alive, products on tensor cores with f16 operand copies (mixed precision) that read an f32
// operand already converted in this scope take that copy instead of converting it again: e.g.
// the q, k and v projections of one input. The caller promises that no operand read in the scope
// is modified in place while it lives; the copies (and their sources) are held until it ends.
// Elsewhere it does nothing. Scopes nest (the innermost one is used).
class SharedF16Inputs {
 public:
  SharedF16Inputs();
  ~SharedF16Inputs();
  SharedF16Inputs(const SharedF16Inputs&) = delete;
  SharedF16Inputs& operator=(const SharedF16Inputs&) = delete;

 private:
  struct Scope;  // a detail::F16OperandReuse and the Use that makes it current
  std::unique_ptr<Scope> scope_;
};

}  // namespace vkf::ops
