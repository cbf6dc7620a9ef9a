// Core runtime tests: transfers, views, strided copies, dtype conversion (against the compiler's
// IEEE _Float16 and a double-based bf16 rounding), autodiff accumulation, errors on bad input.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/tensor_kernels.h"
#include "test_util.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf {
namespace {

using test::Rng;

TEST(Core, RoundTripAllDtypes) {
  Rng rng(1);
  const auto v = test::as_f32(rng.uniform(37, -5, 5));
  Tensor t = test::to_gpu(v, {37});
  EXPECT_EQ(t.to_double(), v);
  std::vector<int64_t> ids = {0, -1, 7, 1ll << 40, 3};
  Tensor l = Tensor::from_host_i64(ids, {5});
  EXPECT_EQ(l.to_int(), ids);
  std::vector<int32_t> i32 = {5, -9, 2147483647};
  EXPECT_EQ(Tensor::from_host_i32(i32, {3}).to_int(), (std::vector<int64_t>{5, -9, 2147483647}));
}

TEST(Core, ViewsAndStridedCopy) {
  Rng rng(2);
  const auto v = test::as_f32(rng.uniform(2 * 3 * 5));
  Tensor t = test::to_gpu(v, {2, 3, 5});
  // transpose(0,2) then contiguous: out[k][j][i] = t[i][j][k]
  Tensor tt = t.transpose(0, 2).contiguous();
  EXPECT_EQ(tt.shape(), (Shape{5, 3, 2}));
  const auto got = tt.to_double();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 5; ++k) EXPECT_EQ(got[(k * 3 + j) * 2 + i], v[(i * 3 + j) * 5 + k]);
  // slice of the middle dimension
  Tensor s = t.slice(1, 1, 3);
  EXPECT_FALSE(s.is_contiguous());
  const auto sv = s.to_double();
  ASSERT_EQ(sv.size(), 2u * 2 * 5);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 5; ++k) EXPECT_EQ(sv[(i * 2 + j) * 5 + k], v[(i * 3 + j + 1) * 5 + k]);
  // copy_ into a slice leaves the rest untouched
  Tensor z = Tensor::zeros({2, 3, 5});
  z.slice(1, 1, 3).copy_(s);
  const auto zv = z.to_double();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 5; ++k)
        EXPECT_EQ(zv[(i * 3 + j) * 5 + k], j == 0 ? 0.0 : v[(i * 3 + j) * 5 + k]);
  EXPECT_EQ(t.reshape({6, -1}).shape(), (Shape{6, 5}));
}

// Copies whose views are rows of contiguous elements (column slices of a matrix, copies into
// them, whole tensors) take copy_rows.comp, in 16-byte units where every row allows and element by
// element otherwise, for every element width; the values must be those of the view.
TEST(Core, RowCopies) {
  Rng rng(3);
  for (const int64_t cols : {int64_t{12}, int64_t{16}, int64_t{7}}) {  // 16-byte rows or not
    const auto v = test::as_f32(rng.uniform(static_cast<size_t>(6 * 5 * cols)));
    const Tensor t = test::to_gpu(v, {6, 5, cols});
    for (const int64_t lo : {int64_t{0}, int64_t{4}, int64_t{1}}) {  // aligned starts or not
      const int64_t hi = std::min(cols, lo + 4 + cols / 2);
      const std::string what = std::to_string(cols) + " columns [" + std::to_string(lo) + ", " +
                               std::to_string(hi) + ")";
      const Tensor s = t.slice(2, lo, hi);  // [6, 5, hi - lo], rows of hi - lo at stride cols
      const auto got = s.contiguous().to_double();
      ASSERT_EQ(got.size(), static_cast<size_t>(30 * (hi - lo))) << what;
      for (int64_t r = 0; r < 30; ++r)
        for (int64_t c = lo; c < hi; ++c)
          ASSERT_EQ(got[static_cast<size_t>(r * (hi - lo) + c - lo)],
                    v[static_cast<size_t>(r * cols + c)])
              << what << " row " << r << " col " << c;
      // Back into a column slice of a zero tensor: the other columns stay zero.
      const Tensor z = Tensor::zeros({6, 5, cols});
      z.slice(2, lo, hi).copy_(s.contiguous());
      const auto zv = z.to_double();
      for (int64_t r = 0; r < 30; ++r)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(zv[static_cast<size_t>(r * cols + c)],
                    c >= lo && c < hi ? v[static_cast<size_t>(r * cols + c)] : 0.0)
              << what << " row " << r << " col " << c << " written back";
    }
  }
  // Every element width, through a column slice of 8 of 24 (16-byte rows for 2- and 8-byte
  // elements; for 4-byte ones too) and of 3 of 24 (element by element).
  for (const DType dt : {DType::F16, DType::F32, DType::I64}) {
    for (const int64_t width : {int64_t{8}, int64_t{3}}) {
      const auto v = rng.uniform(static_cast<size_t>(10 * 24), -100, 100);
      std::vector<double> rounded(v.size());
      for (size_t i = 0; i < v.size(); ++i) rounded[i] = std::round(v[i]);  // exact in each type
      const Tensor t = test::to_gpu(rounded, {10, 24}).to(dt);
      const auto got = t.slice(1, 8, 8 + width).contiguous().to(DType::F32).to_double();
      for (int64_t r = 0; r < 10; ++r)
        for (int64_t c = 0; c < width; ++c)
          ASSERT_EQ(got[static_cast<size_t>(r * width + c)],
                    rounded[static_cast<size_t>(r * 24 + 8 + c)])
              << dtype_name(dt) << " width " << width;
    }
  }
}

TEST(Core, FillAllDtypes) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    Tensor t = Tensor::empty({3, 7}, dt);
    t.fill_(3.0f);
    for (double x : t.to_double()) EXPECT_EQ(x, 3.0) << dtype_name(dt);
  }
}

TEST(Core, ConversionsMatchIeee) {
  // Values that exercise rounding ties, subnormals, overflow, infinities and NaN.
  std::vector<float> v = {0.f,      -0.f,      1.f,           -2.5f,          65504.f,
                          65520.f,  1e6f,      -1e6f,         6.1e-5f,        5.96e-8f,
                          2.98e-8f, 1e-10f,    1.0009765625f, 1.00048828125f, 1.00146484375f,
                          INFINITY, -INFINITY, 3.14159265f,   1.17549435e-38f};
  Rng rng(3);
  for (double x : rng.normal(500, 100)) v.push_back(static_cast<float>(x));
  for (double x : rng.normal(200, 1e-5)) v.push_back(static_cast<float>(x));
  Tensor t = Tensor::from_host(std::span<const float>(v), {static_cast<int64_t>(v.size())});
  const auto h = t.to(DType::F16).to_bytes();
  const auto b = t.to(DType::BF16).to_bytes();
  for (size_t i = 0; i < v.size(); ++i) {
    const _Float16 ref = static_cast<_Float16>(v[i]);  // IEEE round-to-nearest-even
    uint16_t ref_bits, got_bits;
    std::memcpy(&ref_bits, &ref, 2);
    std::memcpy(&got_bits, h.data() + 2 * i, 2);
    EXPECT_EQ(got_bits, ref_bits) << "f16 of " << v[i];
    // bf16 reference: the nearest of the two bf16 neighbours in double, ties to even.
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    const uint32_t lo = bits & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    std::memcpy(&flo, &lo, 4);
    std::memcpy(&fhi, &hi, 4);
    const double dlo = std::fabs(static_cast<double>(v[i]) - flo);
    const double dhi = std::fabs(static_cast<double>(fhi) - v[i]);
    uint16_t want = static_cast<uint16_t>(lo >> 16);
    if (std::isfinite(v[i]) && (dhi < dlo || (dhi == dlo && (want & 1u))))
      want = static_cast<uint16_t>(hi >> 16);
    uint16_t got_b;
    std::memcpy(&got_b, b.data() + 2 * i, 2);
    EXPECT_EQ(got_b, want) << "bf16 of " << v[i];
  }
  // The same from a view one element in (not 16-byte aligned: the element-wise kernel, where the
  // aligned whole tensor above took the eight-at-a-time one; 719 elements leave a tail of 7).
  const auto h_shifted = t.slice(0, 1, t.dim(0)).to(DType::F16).to_bytes();
  ASSERT_EQ(h_shifted.size() + 2, h.size());
  EXPECT_TRUE(std::equal(h_shifted.begin(), h_shifted.end(), h.begin() + 2));
  // And back: f16 -> f32 is exact.
  const auto back = t.to(DType::F16).to(DType::F32).to_double();
  for (size_t i = 0; i < v.size(); ++i) {
    const double want = static_cast<double>(static_cast<float>(static_cast<_Float16>(v[i])));
    if (std::isnan(want)) continue;
    EXPECT_EQ(back[i], want);
  }
  // NaN stays NaN.
  std::vector<float> nan = {NAN};
  EXPECT_TRUE(std::isnan(
      Tensor::from_host(std::span<const float>(nan), {1}).to(DType::BF16).to_float()[0]));
}

TEST(Core, IntegerConversions) {
  std::vector<int64_t> ids = {0, 1, -7, 123456789};
  Tensor l = Tensor::from_host_i64(ids, {4});
  EXPECT_EQ(l.to(DType::I32).to_int(), ids);
  EXPECT_EQ(l.to(DType::I32).to(DType::I64).to_int(), ids);
  EXPECT_EQ(l.to(DType::F32).to_double(), (std::vector<double>{0, 1, -7, 123456792}));
  std::vector<float> f = {1.9f, -1.9f, 0.5f};
  EXPECT_EQ(Tensor::from_host(std::span<const float>(f), {3}).to(DType::I64).to_int(),
            (std::vector<int64_t>{1, -1, 0}));
}

TEST(Core, AutogradAccumulatesIntoLeaves) {
  // y = reshape(slice(x)) used twice: grads of x sum both paths; leaf grads accumulate across
  // calls.
  Tensor x = test::to_gpu({1, 2, 3, 4, 5, 6}, {2, 3});
  x.set_requires_grad(true);
  for (int call = 1; call <= 2; ++call) {
    autograd::Tape tape;
    Tensor y;
    {
      autograd::TapeScope scope(tape);
      Tensor a = x.slice(1, 1, 3);   // [2,2]
      Tensor b = x.transpose(0, 1);  // [3,2]
      Tensor c = b.slice(0, 0, 2);   // [2,2] = x[:, :2]^T
      Tensor s = a.contiguous().reshape({4});
      Tensor t = c.contiguous().reshape({4});
      y = Tensor(s);
      tape.backward(s, test::to_gpu({1, 10, 100, 1000}, {4}));
      (void)t;
    }
    // s = [x01, x02, x11, x12]; its seed lands there.
    const auto g = x.grad().to_double();
    EXPECT_EQ(g, (std::vector<double>{0, 1. * call, 10. * call, 0, 100. * call, 1000. * call}));
  }
}

// Ops for the gradient-sharing tests below, each forwarding its input (values do not matter):
// pass_through hands its output's gradient on as is (shared), handed_over gives a fresh copy
// (add_grad_owned), and fork_sum (out = a + b) gives its gradient to both inputs, shared.
Tensor pass_through(const Tensor& x) {
  Tensor y = x.clone();
  autograd::record_op("pass", {x}, {y},
                      [](autograd::GradContext& ctx) { ctx.add_grad(0, ctx.grad_output(0)); });
  return y;
}
Tensor handed_over(const Tensor& x) {
  Tensor y = x.clone();
  autograd::record_op("fresh", {x}, {y}, [](autograd::GradContext& ctx) {
    ctx.add_grad_owned(0, ctx.grad_output(0).clone());
  });
  return y;
}
Tensor fork_sum(const Tensor& a, const Tensor& b, const Storage** shared) {
  Tensor y = detail::add(a, b);
  autograd::record_op("fork", {a, b}, {y}, [shared](autograd::GradContext& ctx) {
    *shared = ctx.grad_output(0).impl()->storage.get();  // no handle: only its identity
    ctx.add_grad(0, ctx.grad_output(0));
    ctx.add_grad(1, ctx.grad_output(0));
  });
  return y;
}
// out = h; its backward accumulates its gradient into h's through grad_target (as a norm's
// backward does) and only then hands the same gradient to z, so an in-place update of a gradient
// that is still shared would show in z's. `in_place`: the target was the shared tensor itself.
Tensor accumulate_into(const Tensor& h, const Tensor& z, const Storage* const* shared,
                       bool* in_place) {
  Tensor y = h.clone();
  autograd::record_op("into", {h, z}, {y}, [shared, in_place](autograd::GradContext& ctx) {
    const Tensor& g = ctx.grad_output(0);
    const autograd::GradTarget t = ctx.grad_target(0);
    *in_place = t.tensor.impl()->storage.get() == *shared;
    if (t.accumulate) {
      detail::add_inplace(t.tensor, g);
    } else {
      t.tensor.copy_(g);
    }
    ctx.add_grad(1, g);
  });
  return y;
}

TEST(Core, SharedGradientChangesInPlaceOnlyOnceUnshared) {
  const std::vector<double> seed = {1, 2, 3, 4};
  for (const bool still_shared : {true, false}) {
    Tensor x = test::to_gpu({0, 0, 0, 0}, {4}), z = test::to_gpu({0, 0, 0, 0}, {4});
    x.set_requires_grad(true);
    z.set_requires_grad(true);
    const Storage* shared = nullptr;
    bool in_place = false;
    {
      autograd::Tape tape;
      autograd::TapeScope scope(tape);
      const Tensor h = pass_through(x);
      Tensor out;
      if (still_shared) {
        // The fork's gradient is h's and also the gradient `into` reads as its own.
        out = fork_sum(h, accumulate_into(h, z, &shared, &in_place), &shared);
      } else {
        // The decoder's residual: the branch's own op hands a fresh gradient back, so once it
        // has run, h's slot holds the fork's gradient alone.
        out = fork_sum(h, handed_over(accumulate_into(h, z, &shared, &in_place)), &shared);
      }
      tape.backward(handed_over(out), test::to_gpu(seed, {4}));
    }
    EXPECT_EQ(in_place, !still_shared) << (still_shared ? "still shared" : "unshared");
    EXPECT_EQ(x.grad().to_double(), (std::vector<double>{2, 4, 6, 8}));
    EXPECT_EQ(z.grad().to_double(), seed);
  }
}

TEST(Core, ErrorsAreClear) {
  Tensor a = Tensor::zeros({2, 3});
  EXPECT_THROW(a.reshape({4, 2}), Error);
  EXPECT_THROW(a.slice(1, 2, 5), Error);
  EXPECT_THROW(a.transpose(0, 3), Error);
  EXPECT_THROW(Tensor::from_host(std::vector<float>(5), {2, 3}), Error);
  EXPECT_THROW(Tensor::zeros({2}, DType::I32).set_requires_grad(true), Error);
  EXPECT_THROW(a.item(), Error);
  try {
    a.reshape({7});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
  }
}

TEST(Core, LargerThanStorageRange) {
  // 200 MB: past lavapipe's 128 MiB maxStorageBufferRange; buffer device addresses reach it all.
  const int64_t n = 50'000'000;
  Tensor t = Tensor::empty({n});
  t.fill_(2.0f);
  Tensor tail = t.slice(0, n - 3, n);
  tail.copy_(test::to_gpu({7, 8, 9}, {3}));
  Tensor h = t.to(DType::F16);
  const auto back = h.slice(0, n - 4, n).to_double();
  EXPECT_EQ(back, (std::vector<double>{2, 7, 8, 9}));
}

}  // namespace
}  // namespace vkf
