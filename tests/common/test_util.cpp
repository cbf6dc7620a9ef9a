// Test helpers (see test_util.h).
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "vk/context.h"
#include "vk/error.h"

namespace vkf::test {

std::vector<double> Rng::uniform(size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = d(gen_);
  return v;
}

std::vector<double> Rng::normal(size_t n, double stddev) {
  std::normal_distribution<double> d(0.0, stddev);
  std::vector<double> v(n);
  for (auto& x : v) x = d(gen_);
  return v;
}

std::vector<int32_t> Rng::ints(size_t n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> d(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(gen_);
  return v;
}

std::vector<double> as_f32(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(static_cast<float>(v[i]));
  return out;
}

Tensor to_gpu(const std::vector<double>& v, const Shape& shape) {
  return Tensor::from_host(std::span<const double>(v), shape);
}

Tensor labels_tensor(const std::vector<int64_t>& labels, DType dtype) {
  const Shape shape{static_cast<int64_t>(labels.size())};
  if (dtype == DType::I64) return Tensor::from_host_i64(labels, shape);
  std::vector<int32_t> i32(labels.begin(), labels.end());
  return Tensor::from_host_i32(i32, shape);
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double atol,
                  double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what << ": size mismatch";
  size_t worst = 0, bad = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = atol + rtol * std::fabs(want[i]);
    const double err = std::fabs(got[i] - want[i]);
    const double excess = std::isnan(err) ? std::numeric_limits<double>::infinity() : err - tol;
    if (excess > 0) ++bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements out of tolerance; worst at " << worst << ": got "
                     << (got.empty() ? 0.0 : got[worst]) << " want "
                     << (want.empty() ? 0.0 : want[worst]) << " (atol " << atol << ", rtol "
                     << rtol << ")";
}

void expect_close(const Tensor& got, const std::vector<double>& want, double atol, double rtol,
                  const std::string& what) {
  expect_close(got.to_double(), want, atol, rtol, what);
}

void expect_bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  EXPECT_EQ(a.to_bytes(), b.to_bytes()) << what << ": results differ bitwise";
}

std::string error_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in the message: " << msg;
    }
    return;
  }
  ADD_FAILURE() << "expected a vkf::Error, but nothing was thrown";
}

std::vector<double> numeric_grad(const DoubleFn& f, const std::vector<double>& x,
                                 const std::vector<double>& dy, double eps) {
  std::vector<double> g(x.size());
  std::vector<double> xp = x;
  for (size_t i = 0; i < x.size(); ++i) {
    const double h = eps * std::max(1.0, std::fabs(x[i]));
    xp[i] = x[i] + h;
    const auto fp = f(xp);
    xp[i] = x[i] - h;
    const auto fm = f(xp);
    xp[i] = x[i];
    double s = 0;
    for (size_t j = 0; j < fp.size(); ++j) s += dy[j] * (fp[j] - fm[j]);
    g[i] = s / (2 * h);
  }
  return g;
}

std::vector<std::vector<double>> gpu_grads(const std::function<Tensor(std::vector<Tensor>&)>& forward,
                                           std::vector<Tensor> inputs, const Tensor& seed) {
  autograd::Tape tape;
  Tensor out;
  {
    autograd::TapeScope scope(tape);
    for (auto& t : inputs) {
      t.zero_grad();
      t.set_requires_grad(true);
    }
    out = forward(inputs);
  }
  tape.backward(out, seed);
  std::vector<std::vector<double>> grads;
  for (auto& t : inputs) {
    grads.push_back(t.grad().defined() ? t.grad().to_double() : std::vector<double>());
    t.set_requires_grad(false);
  }
  return grads;
}

namespace {
// Fails the run if the validation layer reported anything the tests did not already surface.
class ValidationEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!vk::Context::exists()) return;
    auto& ctx = vk::Context::get();
    // Throws if any validation message arrived that no test has already seen raised as an error.
    try {
      ctx.stream().synchronize();
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
    if (std::getenv("VKF_VALIDATE")) {
      EXPECT_TRUE(ctx.validation_enabled()) << "VKF_VALIDATE set but validation is off";
    }
  }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new ValidationEnvironment);
}  // namespace

std::filesystem::path fixtures_dir() {
  return std::filesystem::path(__FILE__).parent_path().parent_path() / "fixtures";
}

std::vector<std::string> parity_cases() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(fixtures_dir() / "parity"))
    if (e.is_directory()) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace vkf::test
