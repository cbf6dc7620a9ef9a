// CPU reference for the matmul family (see matmul_ref.h): plain loops in double.
#include "ops/matmul_ref.h"

#include "vk/error.h"

namespace vkf::ref {
namespace {

// Flat index of op(A[z])(m, k) and op(B[z])(k, n) in the stored layouts.
int64_t a_index(const MatmulShape& s, int64_t z, int64_t m, int64_t k) {
  return z * s.m * s.k + (s.trans_a ? k * s.m + m : m * s.k + k);
}
int64_t b_index(const MatmulShape& s, int64_t z, int64_t k, int64_t n) {
  const int64_t zb = s.shared_b ? 0 : z;
  return zb * s.k * s.n + (s.trans_b ? n * s.k + k : k * s.n + n);
}

void check_sizes(const MatmulShape& s, size_t a, size_t b) {
  VKF_REQUIRE(static_cast<int64_t>(a) == s.a_size() && static_cast<int64_t>(b) == s.b_size(),
              "ref::matmul: {} and {} values for operands of {} and {}", a, b, s.a_size(),
              s.b_size());
}

}  // namespace

std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b,
                           const MatmulShape& s) {
  check_sizes(s, a.size(), b.size());
  std::vector<double> c(static_cast<size_t>(s.c_size()));
  for (int64_t z = 0; z < s.batch; ++z)
    for (int64_t m = 0; m < s.m; ++m)
      for (int64_t n = 0; n < s.n; ++n) {
        double sum = 0;
        for (int64_t k = 0; k < s.k; ++k) sum += a[a_index(s, z, m, k)] * b[b_index(s, z, k, n)];
        c[(z * s.m + m) * s.n + n] = sum;
      }
  return c;
}

void matmul_backward(const std::vector<double>& a, const std::vector<double>& b,
                     const std::vector<double>& dc, const MatmulShape& s, std::vector<double>& da,
                     std::vector<double>& db) {
  check_sizes(s, a.size(), b.size());
  VKF_REQUIRE(static_cast<int64_t>(dc.size()) == s.c_size(), "ref::matmul_backward: dc size");
  da.assign(a.size(), 0.0);
  db.assign(b.size(), 0.0);
  // dC/dop(A)(m,k) = op(B)(k, n) and dC/dop(B)(k,n) = op(A)(m, k), summed over every use.
  for (int64_t z = 0; z < s.batch; ++z)
    for (int64_t m = 0; m < s.m; ++m)
      for (int64_t n = 0; n < s.n; ++n) {
        const double g = dc[(z * s.m + m) * s.n + n];
        for (int64_t k = 0; k < s.k; ++k) {
          da[a_index(s, z, m, k)] += g * b[b_index(s, z, k, n)];
          db[b_index(s, z, k, n)] += g * a[a_index(s, z, m, k)];
        }
      }
}

std::vector<double> linear(const std::vector<double>& x, const std::vector<double>& w,
                           const std::vector<double>& bias, int64_t rows, int64_t in, int64_t out) {
  VKF_REQUIRE(static_cast<int64_t>(x.size()) == rows * in &&
                  static_cast<int64_t>(w.size()) == out * in &&
                  (bias.empty() || static_cast<int64_t>(bias.size()) == out),
              "ref::linear: sizes do not match [{}, {}] x [{}, {}]^T", rows, in, out, in);
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double sum = bias.empty() ? 0.0 : bias[o];
      for (int64_t i = 0; i < in; ++i) sum += x[r * in + i] * w[o * in + i];
      y[r * out + o] = sum;
    }
  return y;
}

void linear_backward(const std::vector<double>& x, const std::vector<double>& w,
                     const std::vector<double>& dy, int64_t rows, int64_t in, int64_t out,
                     bool with_bias, std::vector<double>& dx, std::vector<double>& dw,
                     std::vector<double>& db) {
  dx.assign(static_cast<size_t>(rows * in), 0.0);
  dw.assign(static_cast<size_t>(out * in), 0.0);
  db.assign(with_bias ? static_cast<size_t>(out) : 0, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      const double g = dy[r * out + o];
      if (with_bias) db[o] += g;
      for (int64_t i = 0; i < in; ++i) {
        dx[r * in + i] += g * w[o * in + i];
        dw[o * in + i] += g * x[r * in + i];
      }
    }
}

}  // namespace vkf::ref
