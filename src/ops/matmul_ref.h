// CPU reference for the matmul family, in double, written from the definitions:
//   C[z](m, n) = sum_k op(A[z])(m, k) op(B[z])(k, n),  op(X) = X or X^T,
// and Hugging Face nn.Linear, y = x W^T + b. Row-major flat vectors with explicit sizes.
#pragma once

#include <cstdint>
#include <vector>

namespace vkf::ref {

// A is `batch` matrices [M, K] ([K, M] when trans_a); B is `batch` matrices [K, N] ([N, K] when
// trans_b), or a single one when shared_b; C is `batch` matrices [M, N].
struct MatmulShape {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool trans_a = false, trans_b = false;
  bool shared_b = false;
  int64_t a_size() const { return batch * m * k; }
  int64_t b_size() const { return (shared_b ? 1 : batch) * k * n; }
  int64_t c_size() const { return batch * m * n; }
  // The tensor shapes of A and B with leading dimensions `batch` (B has none when shared_b).
  std::vector<int64_t> a_shape(const std::vector<int64_t>& batch_dims) const {
    std::vector<int64_t> r = batch_dims;
    r.push_back(trans_a ? k : m);
    r.push_back(trans_a ? m : k);
    return r;
  }
  std::vector<int64_t> b_shape(const std::vector<int64_t>& batch_dims) const {
    std::vector<int64_t> r = shared_b ? std::vector<int64_t>{} : batch_dims;
    r.push_back(trans_b ? n : k);
    r.push_back(trans_b ? k : n);
    return r;
  }
};

std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b,
                           const MatmulShape& s);
// Gradients of sum(dc * C) with respect to A and B, in A's and B's stored layouts.
void matmul_backward(const std::vector<double>& a, const std::vector<double>& b,
                     const std::vector<double>& dc, const MatmulShape& s, std::vector<double>& da,
                     std::vector<double>& db);

// x [rows, in], w [out, in], bias [out] or empty; returns y [rows, out].
std::vector<double> linear(const std::vector<double>& x, const std::vector<double>& w,
                           const std::vector<double>& bias, int64_t rows, int64_t in, int64_t out);
// Gradients of sum(dy * y); db is left empty when `with_bias` is false.
void linear_backward(const std::vector<double>& x, const std::vector<double>& w,
                     const std::vector<double>& dy, int64_t rows, int64_t in, int64_t out,
                     bool with_bias, std::vector<double>& dx, std::vector<double>& dw,
                     std::vector<double>& db);

}  // namespace vkf::ref
