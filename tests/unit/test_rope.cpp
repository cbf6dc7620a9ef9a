// Rotary embedding tests: inverse frequencies of every rope type against the independent double
// reference (and against transformers' own numbers when the oracle fixture is present), cos/sin
// tables, the rotation on odd shapes with both pair layouts, partial rotary and non-monotonic
// positions, its gradient (reference and finite differences), accumulation, strided input,
// position clamping, determinism and input validation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "ops/rope.h"
#include "ops/rope_ref.h"
#include "test_util.h"
#include "vk/error.h"

namespace vkf {
namespace {

using ops::RopeConfig;
using ops::RopeLayout;
using test::Rng;

std::vector<double> ramp_factors(size_t n, double start, double step) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + step * static_cast<double>(i);
  return v;
}

struct NamedConfig {
  std::string name;
  RopeConfig cfg;
  int64_t seq_len = 0;
};

// One or more configurations of every rope type, including the edge settings of each.
std::vector<NamedConfig> all_configs() {
  std::vector<NamedConfig> v;
  RopeConfig c;
  c.head_dim = 64;
  v.push_back({"default", c});
  c.theta = 500000;
  c.head_dim = 128;
  c.partial_rotary_factor = 0.5;
  v.push_back({"default theta 5e5 partial 0.5", c});
  c = RopeConfig{};
  c.head_dim = 10;
  v.push_back({"default head_dim 10", c});
  c.head_dim = 64;
  c.type = "linear";
  c.factor = 4;
  v.push_back({"linear 4", c});
  c.type = "dynamic";
  c.factor = 2;
  c.max_position_embeddings = 2048;
  v.push_back({"dynamic init", c, 0});
  v.push_back({"dynamic within", c, 1500});
  v.push_back({"dynamic beyond", c, 5000});
  c.factor = 1.7;
  v.push_back({"dynamic 1.7 beyond", c, 100003});
  c = RopeConfig{};
  c.type = "llama3";
  c.theta = 500000;
  c.head_dim = 128;
  c.factor = 8;
  c.low_freq_factor = 1;
  c.high_freq_factor = 4;
  c.original_max_position_embeddings = 8192;
  c.max_position_embeddings = 131072;
  v.push_back({"llama3", c});
  c = RopeConfig{};
  c.type = "yarn";
  c.head_dim = 64;
  c.factor = 4;
  c.original_max_position_embeddings = 4096;
  c.max_position_embeddings = 16384;
  v.push_back({"yarn 4", c});
  c.mscale = 0.707;
  c.mscale_all_dim = 1.0;
  v.push_back({"yarn mscale", c});
  c.mscale.reset();
  c.truncate = false;
  v.push_back({"yarn no truncate", c});
  c.truncate = true;
  c.factor = 0;  // derived: 16384 / 4096
  c.attention_factor = 1.25;
  v.push_back({"yarn derived factor, attention_factor", c});
  c = RopeConfig{};
  c.type = "yarn";
  c.theta = 1e6;
  c.head_dim = 128;
  c.partial_rotary_factor = 0.5;
  c.factor = 4;
  c.beta_fast = 16;
  c.beta_slow = 2;
  c.max_position_embeddings = 4096;  // original defaults to this
  v.push_back({"yarn partial, betas", c});
  c = RopeConfig{};
  c.type = "longrope";
  c.head_dim = 64;
  c.factor = 0;
  c.original_max_position_embeddings = 4096;
  c.max_position_embeddings = 131072;
  c.short_factor = ramp_factors(32, 1.0, 0.037);
  c.long_factor = ramp_factors(32, 1.0, 1.31);
  v.push_back({"longrope short", c, 100});
  v.push_back({"longrope long", c, 5000});
  c.factor = 0.5;  // <= 1: no attention scaling
  v.push_back({"longrope factor 0.5", c, 4096});
  return v;
}

bool is_float(double v) {
  return static_cast<double>(static_cast<float>(v)) == v;
}

TEST(Rope, InvFreqMatchesIndependentReference) {
  for (const auto& [name, cfg, seq_len] : all_configs()) {
    const ops::RopeTables got = ops::rope_inv_freq(cfg, seq_len);
    const ref::RopeFreqs want = ref::rope_inv_freq(cfg, seq_len);
    EXPECT_EQ(got.rotary_dim, static_cast<int64_t>(2 * want.inv_freq.size())) << name;
    // transformers works in float32; its steps' roundings leave a few ulps against exact math.
    test::expect_close(got.inv_freq, want.inv_freq, 0, 2e-6, name + " inv_freq");
    EXPECT_NEAR(got.attention_scaling, want.attention_scaling, 1e-14) << name;
    for (double v : got.inv_freq)
      EXPECT_TRUE(is_float(v)) << name << ": " << v << " is not a float32";
  }
}

TEST(Rope, InvFreqKnownValues) {
  // Checks that do not rely on either implementation: theta^0 = 1, the last of default RoPE,
  // attention factors from their closed forms, llama3's untouched high frequencies.
  RopeConfig c;
  c.head_dim = 64;
  auto t = ops::rope_inv_freq(c);
  ASSERT_EQ(t.inv_freq.size(), 32u);
  EXPECT_EQ(t.inv_freq[0], 1.0);
  EXPECT_NEAR(t.inv_freq[31], std::pow(10000.0, -62.0 / 64.0), 1e-6 * t.inv_freq[31]);
  EXPECT_EQ(t.attention_scaling, 1.0);
  c.type = "yarn";
  c.factor = 4;
  c.max_position_embeddings = 4096;
  EXPECT_DOUBLE_EQ(ops::rope_inv_freq(c).attention_scaling, 0.1 * std::log(4.0) + 1.0);
  c.type = "longrope";
  c.factor = 0;
  c.original_max_position_embeddings = 4096;
  c.max_position_embeddings = 131072;
  c.short_factor = c.long_factor = std::vector<double>(32, 1.0);
  EXPECT_DOUBLE_EQ(ops::rope_inv_freq(c).attention_scaling,
                   std::sqrt(1 + std::log(32.0) / std::log(4096.0)));
  c = RopeConfig{};
  c.type = "llama3";
  c.head_dim = 128;
  c.theta = 500000;
  c.factor = 8;
  c.original_max_position_embeddings = 8192;
  const auto l3 = ops::rope_inv_freq(c);
  const auto plain = ops::rope_inv_freq(RopeConfig{.theta = 500000, .head_dim = 128});
  EXPECT_EQ(l3.inv_freq[0], plain.inv_freq[0]);  // wavelength 2 pi < 8192 / 4: kept
  EXPECT_NEAR(l3.inv_freq[63], plain.inv_freq[63] / 8, 1e-7 * plain.inv_freq[63]);  // divided
}

TEST(Rope, CosSinTables) {
  for (const auto& [name, cfg, seq_len] : all_configs()) {
    const auto t = ops::rope_inv_freq(cfg, seq_len);
    const int64_t positions = 300;
    const auto host = ops::rope_cos_sin_host(t, positions);
    const int64_t half = host.half;
    std::vector<double> want_cos, want_sin;
    ref::rope_cos_sin(t.inv_freq, t.attention_scaling, positions, want_cos, want_sin);
    // Each entry is the double value rounded once to float32: within half an ulp of it.
    for (int64_t p = 0; p < positions; ++p)
      for (int64_t j = 0; j < half; ++j) {
        const double tol = 0x1p-24 * std::abs(want_cos[p * half + j]) + 0x1p-149;
        const double tol_sin = 0x1p-24 * std::abs(want_sin[p * half + j]) + 0x1p-149;
        ASSERT_NEAR(host.cos[p * half + j], want_cos[p * half + j], tol) << name << " p=" << p;
        ASSERT_NEAR(host.sin[p * half + j], want_sin[p * half + j], tol_sin) << name << " p=" << p;
      }
    EXPECT_EQ(host.cos[0], static_cast<float>(t.attention_scaling)) << name;
    EXPECT_EQ(host.sin[0], 0.0f) << name;
    const auto dev = ops::rope_cos_sin(t, positions);
    EXPECT_EQ(dev.cos.shape(), (Shape{positions, half}));
    EXPECT_EQ(dev.cos.to_float(), host.cos) << name;
    EXPECT_EQ(dev.sin.to_float(), host.sin) << name;
  }
}

struct Tables {
  Tensor cos, sin;
  std::vector<double> cos_h, sin_h;  // the same float32 values, as double
  int64_t positions;
};

Tables make_tables(int64_t rotary_dim, int64_t positions, double theta = 10000) {
  RopeConfig c;
  c.head_dim = rotary_dim;
  c.theta = theta;
  const auto host = ops::rope_cos_sin_host(ops::rope_inv_freq(c), positions);
  Tables t;
  t.cos = Tensor::from_host(std::span<const float>(host.cos), {positions, rotary_dim / 2});
  t.sin = Tensor::from_host(std::span<const float>(host.sin), {positions, rotary_dim / 2});
  t.cos_h.assign(host.cos.begin(), host.cos.end());
  t.sin_h.assign(host.sin.begin(), host.sin.end());
  t.positions = positions;
  return t;
}

// Row 0 non-monotonic; row 1 repeats its first position, like left padding.
std::vector<int64_t> odd_positions(int64_t B, int64_t T, int64_t table) {
  std::vector<int64_t> p(static_cast<size_t>(B * T));
  const int64_t pattern[] = {5, 0, 3, 3, 11, 1, 2, 9, 4, 4, 15, 7, 6};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      p[b * T + t] = b % 2 == 0 ? pattern[t % 13] % table : std::max<int64_t>(0, t - 3) % table;
  return p;
}

std::vector<int32_t> to_i32(const std::vector<int64_t>& v) {
  return {v.begin(), v.end()};
}

const char* layout_name(RopeLayout l) {
  return l == RopeLayout::RotateHalf ? "rotate-half" : "interleaved";
}

TEST(Rope, ApplyMatchesReference) {
  Rng rng(7);
  const int64_t B = 2, T = 7, H = 3;
  for (int64_t D : {8, 10, 64}) {
    // Full, about half and about a quarter of the head (rounded down to even).
    for (int64_t rot : {D, D / 2 / 2 * 2, std::max<int64_t>(2, D / 4 / 2 * 2)}) {
      const Tables tab = make_tables(rot, 16);
      const auto pos = odd_positions(B, T, tab.positions);
      const Tensor ids = Tensor::from_host_i32(to_i32(pos), {B, T});
      for (RopeLayout layout : {RopeLayout::RotateHalf, RopeLayout::Interleaved}) {
        const auto x = test::as_f32(rng.normal(static_cast<size_t>(B * T * H * D)));
        const Tensor y =
            ops::apply_rope(test::to_gpu(x, {B, T, H, D}), tab.cos, tab.sin, ids, rot, layout);
        const auto want = ref::rope_apply(x, B, T, H, D, tab.cos_h, tab.sin_h, pos, rot,
                                          layout == RopeLayout::Interleaved);
        test::expect_close(y, want, 1e-6, 1e-6,
                           std::string(layout_name(layout)) + " D=" + std::to_string(D) +
                               " rotary=" + std::to_string(rot));
      }
    }
  }
}

TEST(Rope, ApplyMidSizeSharedAndI64Positions) {
  // position_ids [1, T] shared by the batch, given as I64; random positions over a 4K table.
  Rng rng(8);
  const int64_t B = 3, T = 61, H = 5, D = 128, rot = 64;
  const Tables tab = make_tables(rot, 4096, 500000);
  std::vector<int64_t> row(T);
  for (auto& p : row) p = rng.ints(1, 0, 4095)[0];
  std::vector<int64_t> pos(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) pos[b * T + t] = row[t];
  const auto x = test::as_f32(rng.normal(static_cast<size_t>(B * T * H * D)));
  for (RopeLayout layout : {RopeLayout::RotateHalf, RopeLayout::Interleaved}) {
    const Tensor y = ops::apply_rope(test::to_gpu(x, {B, T, H, D}), tab.cos, tab.sin,
                                     Tensor::from_host_i64(row, {1, T}), rot, layout);
    test::expect_close(y,
                       ref::rope_apply(x, B, T, H, D, tab.cos_h, tab.sin_h, pos, rot,
                                       layout == RopeLayout::Interleaved),
                       1e-6, 1e-6, layout_name(layout));
  }
}

TEST(Rope, BackwardMatchesReference) {
  Rng rng(9);
  const int64_t B = 2, T = 7, H = 3;
  for (int64_t D : {10, 64}) {
    for (int64_t rot : {D, std::max<int64_t>(2, D / 4 / 2 * 2)}) {
      const Tables tab = make_tables(rot, 16);
      const auto pos = odd_positions(B, T, tab.positions);
      const Tensor ids = Tensor::from_host_i32(to_i32(pos), {B, T});
      for (RopeLayout layout : {RopeLayout::RotateHalf, RopeLayout::Interleaved}) {
        const auto x = test::as_f32(rng.normal(static_cast<size_t>(B * T * H * D)));
        const auto dy = test::as_f32(rng.normal(x.size()));
        const auto grads = test::gpu_grads(
            [&](std::vector<Tensor>& in) {
              return ops::apply_rope(in[0], tab.cos, tab.sin, ids, rot, layout);
            },
            {test::to_gpu(x, {B, T, H, D})}, test::to_gpu(dy, {B, T, H, D}));
        test::expect_close(grads[0],
                           ref::rope_apply_backward(dy, B, T, H, D, tab.cos_h, tab.sin_h, pos, rot,
                                                    layout == RopeLayout::Interleaved),
                           1e-6, 1e-6,
                           std::string(layout_name(layout)) + " dx D=" + std::to_string(D) +
                               " rotary=" + std::to_string(rot));
      }
    }
  }
}

TEST(Rope, ReferenceBackwardMatchesFiniteDifferences) {
  Rng rng(10);
  const int64_t B = 1, T = 3, H = 2, D = 6;
  const Tables tab = make_tables(4, 8);
  const std::vector<int64_t> pos = {7, 2, 2};
  for (bool interleaved : {false, true}) {
    const auto x = rng.normal(static_cast<size_t>(B * T * H * D));
    const auto dy = rng.normal(x.size());
    const auto numeric = test::numeric_grad(
        [&](const std::vector<double>& v) {
          return ref::rope_apply(v, B, T, H, D, tab.cos_h, tab.sin_h, pos, 4, interleaved);
        },
        x, dy);
    test::expect_close(
        ref::rope_apply_backward(dy, B, T, H, D, tab.cos_h, tab.sin_h, pos, 4, interleaved),
        numeric, 1e-8, 1e-7, interleaved ? "interleaved" : "rotate-half");
  }
}

TEST(Rope, GradientsAccumulateAndFlowThroughStridedInput) {
  // x is a transposed view [B, T, heads, D] of base [B, heads, T, D]; two backward calls add up.
  Rng rng(12);
  const int64_t B = 2, T = 5, H = 3, D = 12, rot = 8;
  const Tables tab = make_tables(rot, 16);
  const auto pos = odd_positions(B, T, tab.positions);
  const Tensor ids = Tensor::from_host_i32(to_i32(pos), {B, T});
  const auto base = test::as_f32(rng.normal(static_cast<size_t>(B * H * T * D)));
  const auto dy = test::as_f32(rng.normal(base.size()));
  auto to_bthd = [&](const std::vector<double>& v) {  // [B, H, T, D] -> [B, T, H, D]
    std::vector<double> o(v.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < D; ++d)
            o[((b * T + t) * H + h) * D + d] = v[((b * H + h) * T + t) * D + d];
    return o;
  };
  auto to_bhtd = [&](const std::vector<double>& v) {
    std::vector<double> o(v.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < D; ++d)
            o[((b * H + h) * T + t) * D + d] = v[((b * T + t) * H + h) * D + d];
    return o;
  };
  const auto want_y =
      ref::rope_apply(to_bthd(base), B, T, H, D, tab.cos_h, tab.sin_h, pos, rot, false);
  const auto want_dx =
      to_bhtd(ref::rope_apply_backward(dy, B, T, H, D, tab.cos_h, tab.sin_h, pos, rot, false));
  Tensor xb = test::to_gpu(base, {B, H, T, D});
  xb.set_requires_grad(true);
  for (int call = 1; call <= 2; ++call) {
    autograd::Tape tape;
    Tensor y;
    {
      autograd::TapeScope scope(tape);
      y = ops::apply_rope(xb.transpose(1, 2), tab.cos, tab.sin, ids, rot, RopeLayout::RotateHalf);
    }
    test::expect_close(y, want_y, 1e-6, 1e-6, "strided forward");
    tape.backward(y, test::to_gpu(dy, {B, T, H, D}));
    auto want = want_dx;
    for (auto& v : want) v *= call;
    test::expect_close(xb.grad(), want, 2e-6, 1e-6, "dx after call " + std::to_string(call));
  }
}

TEST(Rope, OutOfRangePositionsAreClamped) {
  Rng rng(13);
  const int64_t B = 1, T = 4, H = 2, D = 8;
  const Tables tab = make_tables(D, 6);
  const auto x = test::as_f32(rng.normal(static_cast<size_t>(B * T * H * D)));
  const Tensor y =
      ops::apply_rope(test::to_gpu(x, {B, T, H, D}), tab.cos, tab.sin,
                      Tensor::from_host_i32(std::vector<int32_t>{-3, 2, 6, 1000}, {B, T}), D,
                      RopeLayout::RotateHalf);
  test::expect_close(y,
                     ref::rope_apply(x, B, T, H, D, tab.cos_h, tab.sin_h, {0, 2, 5, 5}, D, false),
                     1e-6, 1e-6, "clamped");
  // Host-known ids are checked instead.
  EXPECT_NO_THROW(ops::rope_position_ids(std::vector<int64_t>{0, 5, 3, 1}, {1, 4}, 6));
  EXPECT_THROW(ops::rope_position_ids(std::vector<int64_t>{0, 6, 3, 1}, {1, 4}, 6), Error);
  EXPECT_THROW(ops::rope_position_ids(std::vector<int64_t>{0, -1, 3, 1}, {1, 4}, 6), Error);
  EXPECT_THROW(ops::rope_position_ids(std::vector<int64_t>{0, 1, 3}, {1, 4}, 6), Error);
  EXPECT_EQ(ops::rope_position_ids(std::vector<int64_t>{4, 5}, {1, 2}, 6).to_int(),
            (std::vector<int64_t>{4, 5}));
}

TEST(Rope, Deterministic) {
  Rng rng(14);
  const int64_t B = 2, T = 33, H = 7, D = 96, rot = 48;
  const Tables tab = make_tables(rot, 64);
  const Tensor ids = Tensor::from_host_i32(to_i32(odd_positions(B, T, 64)), {B, T});
  const auto x = rng.normal(static_cast<size_t>(B * T * H * D));
  const auto dy = rng.normal(x.size());
  std::vector<Tensor> ys, dxs;
  for (int run = 0; run < 2; ++run) {
    const auto grads = test::gpu_grads(
        [&](std::vector<Tensor>& in) {
          ys.push_back(ops::apply_rope(in[0], tab.cos, tab.sin, ids, rot, RopeLayout::Interleaved));
          return ys.back();
        },
        {test::to_gpu(x, {B, T, H, D})}, test::to_gpu(dy, {B, T, H, D}));
    dxs.push_back(test::to_gpu(grads[0], {B, T, H, D}));
  }
  test::expect_bitwise_equal(ys[0], ys[1], "forward");
  test::expect_bitwise_equal(dxs[0], dxs[1], "backward");
}

TEST(Rope, BadInputsAreRejected) {
  const Tables tab = make_tables(8, 4);
  const Tensor x = Tensor::zeros({1, 2, 3, 10});
  const Tensor ids = Tensor::from_host_i32(std::vector<int32_t>{0, 1}, {1, 2});
  const auto rope = [&](const Tensor& xx, const Tensor& c, const Tensor& s, const Tensor& p,
                        int64_t rot) {
    return ops::apply_rope(xx, c, s, p, rot, RopeLayout::RotateHalf);
  };
  EXPECT_NO_THROW(rope(x, tab.cos, tab.sin, ids, 8));
  std::string msg = test::error_message([&] { rope(x, tab.cos, tab.sin, ids, 7); });
  EXPECT_NE(msg.find("apply_rope: rotary_dim"), std::string::npos) << msg;
  EXPECT_NE(msg.find("7"), std::string::npos) << msg;
  EXPECT_THROW(rope(x, tab.cos, tab.sin, ids, 12), Error);  // > head_dim
  EXPECT_THROW(rope(x, tab.cos, tab.sin, ids, 0), Error);
  msg = test::error_message([&] { rope(x, tab.cos, tab.sin, ids, 6); });  // tables are for rotary_dim 8
  EXPECT_NE(msg.find("cos"), std::string::npos) << msg;
  EXPECT_THROW(rope(x, tab.cos, make_tables(8, 5).sin, ids, 8), Error);
  EXPECT_THROW(rope(x.to(DType::F16), tab.cos, tab.sin, ids, 8), Error);
  EXPECT_THROW(rope(Tensor::zeros({2, 3, 10}), tab.cos, tab.sin, ids, 8), Error);
  EXPECT_THROW(rope(Tensor(), tab.cos, tab.sin, ids, 8), Error);
  EXPECT_THROW(
      rope(Tensor::zeros({1, 0, 3, 10}), tab.cos, tab.sin, Tensor::zeros({1, 0}, DType::I32), 8),
      Error);
  EXPECT_THROW(rope(x, tab.cos.to(DType::BF16), tab.sin, ids, 8), Error);
  EXPECT_THROW(rope(x, tab.cos, tab.sin, ids.to(DType::F32), 8), Error);
  msg = test::error_message([&] { rope(x, tab.cos, tab.sin, Tensor::zeros({1, 3}, DType::I32), 8); });
  EXPECT_NE(msg.find("position_ids"), std::string::npos) << msg;
  EXPECT_THROW(
      rope(Tensor::zeros({2, 2, 3, 10}), tab.cos, tab.sin, Tensor::zeros({3, 2}, DType::I32), 8),
      Error);

  RopeConfig c;
  c.head_dim = 10;
  c.partial_rotary_factor = 0.5;  // rotary_dim 5: odd
  msg = test::error_message([&] { ops::rope_inv_freq(c); });
  EXPECT_NE(msg.find("rotary_dim"), std::string::npos) << msg;
  c.partial_rotary_factor = 1;
  c.type = "ntk-by-parts";
  msg = test::error_message([&] { ops::rope_inv_freq(c); });
  EXPECT_NE(msg.find("ntk-by-parts"), std::string::npos) << msg;
  c.type = "dynamic";
  EXPECT_THROW(ops::rope_inv_freq(c), Error);  // no max_position_embeddings
  c.head_dim = 2;
  c.max_position_embeddings = 64;
  EXPECT_THROW(ops::rope_inv_freq(c), Error);  // d / (d - 2)
  c = RopeConfig{};
  c.head_dim = 8;
  c.type = "longrope";
  c.max_position_embeddings = 64;
  c.short_factor = {1, 1, 1};
  c.long_factor = {1, 1, 1, 1};
  msg = test::error_message([&] { ops::rope_inv_freq(c); });
  EXPECT_NE(msg.find("short_factor"), std::string::npos) << msg;
  c.type = "yarn";
  c.max_position_embeddings = 0;
  EXPECT_THROW(ops::rope_inv_freq(c), Error);  // no context length at all
  c = RopeConfig{};
  c.head_dim = 8;
  c.theta = 0;
  EXPECT_THROW(ops::rope_inv_freq(c), Error);
  c.theta = 10000;
  c.head_dim = 0;
  EXPECT_THROW(ops::rope_inv_freq(c), Error);
  c.head_dim = 8;
  c.type = "linear";
  c.factor = -2;
  EXPECT_THROW(ops::rope_inv_freq(c), Error);
  c = RopeConfig{};
  c.head_dim = 8;
  EXPECT_THROW(ops::rope_cos_sin(ops::rope_inv_freq(c), 0), Error);
}

// transformers' own numbers, written by tools/oracle/rope_tables.py.
TEST(Rope, MatchesTransformersFixture) {
  const auto path = std::filesystem::path(__FILE__).parent_path().parent_path() /
                    "fixtures/rope/rope_tables.json";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path
                 << " is missing: run tools/oracle/rope_tables.py where transformers is "
                    "installed and commit its output";
  std::ifstream in(path);
  const auto fixture = nlohmann::json::parse(in);
  ASSERT_FALSE(fixture.at("cases").empty());
  for (const auto& cs : fixture.at("cases")) {
    const auto& j = cs.at("config");
    RopeConfig c;
    c.type = j.at("type").get<std::string>();
    c.theta = j.at("theta").get<double>();
    c.head_dim = j.at("head_dim").get<int64_t>();
    c.partial_rotary_factor = j.at("partial_rotary_factor").get<double>();
    c.factor = j.at("factor").get<double>();
    c.original_max_position_embeddings = j.at("original_max_position_embeddings").get<int64_t>();
    c.max_position_embeddings = j.at("max_position_embeddings").get<int64_t>();
    c.low_freq_factor = j.at("low_freq_factor").get<double>();
    c.high_freq_factor = j.at("high_freq_factor").get<double>();
    c.beta_fast = j.at("beta_fast").get<double>();
    c.beta_slow = j.at("beta_slow").get<double>();
    for (auto [key, field] :
         {std::pair{"mscale", &c.mscale}, std::pair{"mscale_all_dim", &c.mscale_all_dim},
          std::pair{"attention_factor", &c.attention_factor}})
      if (!j.at(key).is_null()) *field = j.at(key).get<double>();
    c.truncate = j.at("truncate").get<bool>();
    c.short_factor = j.at("short_factor").get<std::vector<double>>();
    c.long_factor = j.at("long_factor").get<std::vector<double>>();
    const std::string name = cs.at("name").get<std::string>();
    const auto want = cs.at("inv_freq").get<std::vector<double>>();
    const auto t = ops::rope_inv_freq(c, cs.at("seq_len").get<int64_t>());
    ASSERT_EQ(t.inv_freq.size(), want.size()) << name;
    // Bit-exact except where torch's float pow rounds differently: at most one ulp.
    for (size_t i = 0; i < want.size(); ++i) {
      const float ours = static_cast<float>(t.inv_freq[i]), theirs = static_cast<float>(want[i]);
      int32_t a, b;
      std::memcpy(&a, &ours, 4);
      std::memcpy(&b, &theirs, 4);
      EXPECT_LE(std::abs(a - b), 1)
          << name << " inv_freq[" << i << "]: " << ours << " vs " << theirs;
    }
    EXPECT_NEAR(t.attention_scaling, cs.at("attention_scaling").get<double>(), 1e-15) << name;

    // The cos/sin table built from transformers' inv_freq reproduces its forward's table.
    ops::RopeTables theirs{want, cs.at("attention_scaling").get<double>(), t.rotary_dim};
    const auto positions = cs.at("positions").get<std::vector<int64_t>>();
    const auto host =
        ops::rope_cos_sin_host(theirs, *std::max_element(positions.begin(), positions.end()) + 1);
    const auto cos = cs.at("cos").get<std::vector<std::vector<double>>>();
    const auto sin = cs.at("sin").get<std::vector<std::vector<double>>>();
    const int64_t half = host.half;
    for (size_t k = 0; k < positions.size(); ++k) {
      ASSERT_EQ(static_cast<int64_t>(cos[k].size()), 2 * half) << name;
      for (int64_t jj = 0; jj < 2 * half; ++jj) {
        const size_t at = static_cast<size_t>(positions[k] * half + jj % half);
        // transformers' fp32 forward rounds the angle to float32 (moving it by up to
        // |angle| * 2^-24) and then cos/sin within an ulp; ours keeps the angle exact.
        const double angle = want[static_cast<size_t>(jj % half)] * static_cast<double>(positions[k]);
        const double tol = (angle * 0x1p-24 + 0x1p-23) * theirs.attention_scaling;
        EXPECT_NEAR(host.cos[at], cos[k][jj], tol)
            << name << " cos p=" << positions[k] << " j=" << jj;
        EXPECT_NEAR(host.sin[at], sin[k][jj], tol)
            << name << " sin p=" << positions[k] << " j=" << jj;
      }
    }
  }
}

}  // namespace
}  // namespace vkf
