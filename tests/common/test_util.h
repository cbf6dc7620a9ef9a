// Shared test helpers: seeded random data, comparisons against double references, central finite
// differences in double, and a gtest environment that fails the run on any Vulkan validation
// message. Tests run with VKF_POISON=1 (ctest sets it): fresh outputs start as NaN, so an element
// a kernel forgot to write fails the comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/tensor.h"

namespace vkf::test {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  std::vector<double> uniform(size_t n, double lo = -1.0, double hi = 1.0);
  std::vector<double> normal(size_t n, double stddev = 1.0);
  std::vector<int32_t> ints(size_t n, int32_t lo, int32_t hi);  // inclusive
  std::mt19937_64& gen() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

// Values rounded to f32 and back, so a reference sees exactly what the GPU sees.
std::vector<double> as_f32(const std::vector<double>& v);
Tensor to_gpu(const std::vector<double>& v, const Shape& shape);
// Token ids or labels as a rank-1 tensor of dtype I32 or I64.
Tensor labels_tensor(const std::vector<int64_t>& labels, DType dtype);

// The tolerance of an fp32 matrix product of depth k against its double reference: atol
// 1e-6 + 3e-7 k with rtol kProductRtol (each output one fp32 sum of k terms).
inline double product_atol(int64_t k) { return 1e-6 + 3e-7 * static_cast<double>(k); }
constexpr double kProductRtol = 1e-5;

// Max |a - b|, with NaN anywhere counted as infinity.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);
// Fails the current test with the worst index unless |got - want| <= atol + rtol * |want| everywhere.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double atol,
                  double rtol, const std::string& what);
void expect_close(const Tensor& got, const std::vector<double>& want, double atol, double rtol,
                  const std::string& what);
// Bitwise equality of two tensors' bytes.
void expect_bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what);

// The vkf::Error message `fn` throws, or "" when it throws nothing.
std::string error_message(const std::function<void()>& fn);

// Fails unless `fn` throws vkf::Error whose message contains every one of `parts`.
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts);

// d/dx of sum(dy * f(x)) by central differences in double.
using DoubleFn = std::function<std::vector<double>(const std::vector<double>&)>;
std::vector<double> numeric_grad(const DoubleFn& f, const std::vector<double>& x,
                                 const std::vector<double>& dy, double eps = 1e-6);

// Runs `forward` under a fresh tape on inputs marked requires_grad, back-propagates `seed` and
// returns each input's gradient (downloaded as double).
std::vector<std::vector<double>> gpu_grads(const std::function<Tensor(std::vector<Tensor>&)>& forward,
                                           std::vector<Tensor> inputs, const Tensor& seed);

// The repository's tests/fixtures folder, and the model types with a parity fixture there
// (tests/fixtures/parity/<model_type>), sorted.
std::filesystem::path fixtures_dir();
std::vector<std::string> parity_cases();

}  // namespace vkf::test
