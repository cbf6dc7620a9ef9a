// Checks of mixed-precision (MatmulPrecision::F16) matrix products shared by the f16 GEMM tests:
// a CPU reference in double on f16-rounded operands (core/dtype's f32_to_f16_bits) with the error
// bound of fp32 accumulation, 4 K 2^-24 sum_k |a||b| per element, and a scope that selects F16
// precision and a kernel and puts every setting back after.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/launch.h"
#include "ops/matmul.h"
#include "ops/matmul_coopmat.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_ref.h"
#include "test_util.h"

namespace vkf::test {

using ops::matmul;
using ops::detail::F16Convert;

inline double f16_round(double x) {
  return f16_bits_to_f32(f32_to_f16_bits(static_cast<float>(x)));
}
inline std::vector<double> rounded(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = f16_round(v[i]);
  return r;
}
inline std::vector<double> magnitudes(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = std::fabs(v[i]);
  return r;
}

// F16 precision with a kernel choice ("auto", "off" or a cooperative-matrix tile) and an f16
// conversion for one scope; everything back to the defaults after, also when a check fails.
struct F16Scope {
  explicit F16Scope(const std::string& choice = "auto", F16Convert convert = F16Convert::Auto) {
    set_matmul_precision(MatmulPrecision::F16);
    ops::detail::set_coopmat_choice(choice);
    ops::detail::set_f16_convert(convert);
  }
  ~F16Scope() {
    set_matmul_precision(MatmulPrecision::F32);
    ops::detail::set_coopmat_choice("auto");
    ops::detail::set_f16_convert(F16Convert::Auto);
    ops::detail::set_coopmat_emulation(false);
    ops::detail::set_coopmat_f16_operands(true);
    ops::detail::set_split_k(0);
    ops::detail::set_grid_limit(65535);
  }
  F16Scope(const F16Scope&) = delete;
  F16Scope& operator=(const F16Scope&) = delete;
};

inline bool coopmat_supported() {
  return ops::detail::coopmat_support().unsupported.empty();
}

// The kernel choices to run each case under: the default, and on a device with cooperative
// matrices also the portable kernels ("off"), so that both are checked there.
inline std::vector<std::string> path_choices() {
  if (coopmat_supported()) return {"auto", "off"};
  return {"auto"};
}

// What an F16 product must give: alpha * op(round(a)) op(round(b)) [+ beta * c + bias] in double,
// and per element the bound of fp32 accumulation and epilogue on it.
struct Expected {
  std::vector<double> value, tol;
};
inline Expected expect_f16(const std::vector<double>& a, const std::vector<double>& b,
                           const ref::MatmulShape& s, double alpha = 1.0) {
  const auto ra = rounded(a), rb = rounded(b);
  Expected e{ref::matmul(ra, rb, s), ref::matmul(magnitudes(ra), magnitudes(rb), s)};
  const double u = std::ldexp(1.0, -24);
  for (size_t i = 0; i < e.value.size(); ++i) {
    e.value[i] *= alpha;
    e.tol[i] = 4.0 * static_cast<double>(s.k) * u * std::fabs(alpha) * e.tol[i] +
               4.0 * u * std::fabs(e.value[i]) + 1e-30;
  }
  return e;
}
// Adds beta * c + bias(n) to every element (C is M x N per batch entry, row-major here).
inline void add_epilogue(Expected& e, double beta, const std::vector<double>& c,
                         const std::vector<double>& bias, int64_t n) {
  const double u = std::ldexp(1.0, -24);
  for (size_t i = 0; i < e.value.size(); ++i) {
    const double extra = beta * c[i] + (bias.empty() ? 0.0 : bias[i % n]);
    e.value[i] += extra;
    e.tol[i] += 4.0 * u * (std::fabs(beta * c[i]) + std::fabs(e.value[i]) + std::fabs(extra));
  }
}

// Every element within its bound; infinities and NaN must match exactly.
inline void expect_within(const std::vector<double>& got, const Expected& e,
                          const std::string& what) {
  ASSERT_EQ(got.size(), e.value.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = e.value[i];
    bool ok;
    double ratio = 0;
    if (std::isnan(want)) {
      ok = std::isnan(got[i]);
    } else if (std::isinf(want)) {
      ok = got[i] == want;
    } else {
      ratio = std::fabs(got[i] - want) / e.tol[i];
      ok = ratio <= 1.0;  // NaN got gives a NaN ratio: not ok
    }
    if (!ok) {
      if (bad == 0 || !(ratio <= worst_ratio)) {
        worst = i;
        worst_ratio = ratio;
      }
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements outside the fp32-accumulation bound; e.g. at " << worst
                     << ": got " << (got.empty() ? 0.0 : got[worst]) << " want "
                     << (got.empty() ? 0.0 : e.value[worst]) << " (bound "
                     << (got.empty() ? 0.0 : e.tol[worst]) << ")";
}

// The rounding must be visible: the result sits much closer to the rounded reference than to the
// plain fp32 one (operands here are random, almost never f16 values).
inline void expect_rounding_visible(const std::vector<double>& got, const Expected& e,
                                    const std::vector<double>& unrounded, const std::string& what) {
  const double to_rounded = test::max_abs_diff(got, e.value);
  const double to_unrounded = test::max_abs_diff(got, unrounded);
  EXPECT_GT(to_unrounded, 100.0 * to_rounded)
      << what << ": max |result - f32 reference| " << to_unrounded
      << " vs max |result - f16-rounded reference| " << to_rounded;
}

inline std::string describe(const ref::MatmulShape& s, const std::string& path) {
  return path + ": batch " + std::to_string(s.batch) + " M=" + std::to_string(s.m) +
         " N=" + std::to_string(s.n) + " K=" + std::to_string(s.k) + (s.trans_a ? " A^T" : "") +
         (s.trans_b ? " B^T" : "") + (s.shared_b ? " shared B" : "") + " [" +
         ops::detail::gemm_plan(s.batch, s.m, s.n, s.k) + "]";
}

// matmul on fresh random operands of shape s (batch dimensions `batch`) against the reference;
// with `visible`, also asserts that the rounding shows.
inline void check_product(Rng& rng, const Shape& batch, ref::MatmulShape s, const std::string& path,
                          bool visible = false) {
  s.batch = shape_numel(batch);
  const auto a = test::as_f32(rng.uniform(s.a_size()));
  const auto b = test::as_f32(rng.uniform(s.b_size()));
  const std::string what = describe(s, path);
  const auto got = matmul(test::to_gpu(a, s.a_shape(batch)), test::to_gpu(b, s.b_shape(batch)),
                          s.trans_a, s.trans_b)
                       .to_double();
  const Expected e = expect_f16(a, b, s);
  expect_within(got, e, what);
  if (visible) expect_rounding_visible(got, e, ref::matmul(a, b, s), what);
}

}  // namespace vkf::test
