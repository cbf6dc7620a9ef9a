// ops::gated_projection: the gated activation stored in f16 for the down projection's tensor-core
// products gives, bit for bit, the output and gradients of gated_act_fused followed by linear
// (whose products round the f32 activation to the same f16 copy), with one conversion fewer; and
// a mixed-precision decoder step gives the same loss and gradients with it as without. On the
// emulated tensor-core kernel where the device has none, so that lavapipe runs the path the H200
// runs (there the same tests run on the real kernels).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/dtype.h"
#include "emulated_f16.h"
#include "models/decoder.h"
#include "ops/activation.h"
#include "ops/gated_projection.h"
#include "ops/linear_group.h"
#include "ops/matmul.h"
#include "ops/matmul_kernels.h"
#include "test_models.h"
#include "test_util.h"
#include "vk/context.h"

namespace vkf {
namespace {

using test::EmulatedF16;
using test::Rng;

// Both ops switched on for a test (whatever VKF_F16_ACTIVATIONS says), as they were after.
struct Restore : test::F16ActivationSwitchesRestored {
  Restore() {
    ops::set_gated_projection(true);
    ops::set_gated_mlp(true);
  }
};

struct ProjectionRun {
  Tensor y;
  std::vector<Tensor> grads, grads_accumulated;  // d gate_up, dW after one and two backwards
  uint64_t forward_dispatches = 0;
};

// y = down(act(gate) * up) over gate_up and weight, then two backward passes with seed dy (the
// second accumulates into the first's gradients), by the fused op or the composed ops.
ProjectionRun run(bool fused, const Tensor& gate_up, const Tensor& weight, const Tensor& dy,
                  bool gate_first, ops::Activation act) {
  std::vector<Tensor> in = {gate_up, weight};
  for (Tensor& t : in) {
    t.zero_grad();
    t.set_requires_grad(true);
  }
  ProjectionRun r;
  auto& stream = vk::Context::get().stream();
  for (int pass = 0; pass < 2; ++pass) {
    autograd::Tape tape;
    Tensor y;
    {
      autograd::TapeScope scope(tape);
      const uint64_t before = stream.dispatch_count();
      y = fused ? ops::gated_projection(in[0], act, gate_first, in[1])
                : ops::linear(ops::gated_act_fused(in[0], act, gate_first), in[1]);
      r.forward_dispatches = stream.dispatch_count() - before;
    }
    tape.backward(y, dy);
    auto& grads = pass == 0 ? r.grads : r.grads_accumulated;
    for (const Tensor& t : in) grads.push_back(t.grad().contiguous());
    r.y = y;
  }
  for (Tensor& t : in) t.set_requires_grad(false);
  return r;
}

double f16_rounded(double x) {
  return static_cast<double>(f16_bits_to_f32(f32_to_f16_bits(static_cast<float>(x))));
}

// A double-precision reference of the product with both operands rounded to f16, as the tensor
// cores multiply them: y = sum_i f16(h_i) f16(W_oi), for the activation h as the f32 kernel
// computes it (its transcendental functions are the device's: a host-side h could round to
// another f16 now and then).
std::vector<double> reference_product(const std::vector<double>& h, const std::vector<double>& w,
                                      int64_t rows, int64_t inner, int64_t out) {
  std::vector<double> y(static_cast<size_t>(rows * out), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0;
      for (int64_t i = 0; i < inner; ++i)
        sum += f16_rounded(h[r * inner + i]) * f16_rounded(w[o * inner + i]);
      y[r * out + o] = sum;
    }
  }
  return y;
}

TEST(GatedProjection, GivesTheBitsOfTheComposedOps) {
  const EmulatedF16 f16;
  const Restore restore;
  ASSERT_TRUE(ops::detail::f16_operands_active());
  struct Case {
    Shape lead;
    int64_t inner, out;
    bool gate_first;
    ops::Activation act;
  };
  // inner 24: the activation kernel's 4-wide build; 13: its scalar one (and f16 rows of odd
  // length). Two leading dimensions, the gate second, GeGLU.
  const Case cases[] = {{{40}, 24, 16, true, ops::Activation::SiLU},
                        {{2, 20}, 24, 32, false, ops::Activation::SiLU},
                        {{37}, 13, 24, true, ops::Activation::GELUTanh}};
  Rng rng(97);
  for (const Case& c : cases) {
    const int64_t rows = shape_numel(c.lead);
    const std::string what =
        shape_str(c.lead) + " inner " + std::to_string(c.inner) + " out " + std::to_string(c.out);
    SCOPED_TRACE(what);
    Shape gu_shape = c.lead, y_shape = c.lead;
    gu_shape.push_back(2 * c.inner);
    y_shape.push_back(c.out);
    const std::vector<double> gu = rng.normal(rows * 2 * c.inner, 1.5);
    const std::vector<double> w = rng.normal(c.out * c.inner, 0.3);
    const Tensor tgu = test::to_gpu(gu, gu_shape), tw = test::to_gpu(w, {c.out, c.inner});
    const Tensor dy = test::to_gpu(rng.normal(rows * c.out, 1.0), y_shape);
    ASSERT_TRUE(ops::gated_projection_applies(tgu, tw, Tensor()));
    const ProjectionRun composed = run(false, tgu, tw, dy, c.gate_first, c.act);
    const ProjectionRun fused = run(true, tgu, tw, dy, c.gate_first, c.act);
    test::expect_bitwise_equal(fused.y, composed.y, "y");
    for (size_t i = 0; i < 2; ++i) {
      const std::string name = i == 0 ? "d gate_up" : "dW";
      test::expect_bitwise_equal(fused.grads[i], composed.grads[i], name);
      test::expect_bitwise_equal(fused.grads_accumulated[i], composed.grads_accumulated[i],
                                 name + " accumulated");
    }
    // The composed form converts the f32 activation to f16 for its product (on NVIDIA, where
    // the operands are relaid, perhaps more); the op does not.
    EXPECT_GE(composed.forward_dispatches, fused.forward_dispatches + 1);
    const std::vector<double> h = ops::gated_act_fused(tgu, c.act, c.gate_first).to_double();
    test::expect_close(fused.y.to_double(), reference_product(h, w, rows, c.inner, c.out), 1e-4,
                       1e-4, "y against the reference");
  }
}

// gated_mlp against linear_concat, gated_act_fused and linear: output and the gradients of x and
// the three weights bit for bit, also accumulated over a second backward; and two conversions
// fewer in the backward (four with separate gate and up).
TEST(GatedProjection, MlpGivesTheBitsOfTheComposedOps) {
  const EmulatedF16 f16;
  const Restore restore;
  struct Case {
    Shape lead;
    int64_t in, inner, out;
  };
  const Case cases[] = {{{40}, 16, 24, 16}, {{2, 20}, 32, 24, 24}, {{37}, 24, 13, 16}};
  Rng rng(98);
  auto& stream = vk::Context::get().stream();
  for (const bool grouped : {true, false})
    for (const Case& c : cases) {
      const int64_t rows = shape_numel(c.lead);
      SCOPED_TRACE(shape_str(c.lead) + " in " + std::to_string(c.in) + " inner " +
                   std::to_string(c.inner) + (grouped ? ", grouped" : ", separate"));
      Shape x_shape = c.lead, y_shape = c.lead;
      x_shape.push_back(c.in);
      y_shape.push_back(c.out);
      std::vector<Tensor> in = {test::to_gpu(rng.normal(rows * c.in, 1.0), x_shape),
                                test::to_gpu(rng.normal(c.inner * c.in, 0.3), {c.inner, c.in}),
                                test::to_gpu(rng.normal(c.inner * c.in, 0.3), {c.inner, c.in}),
                                test::to_gpu(rng.normal(c.out * c.inner, 0.3), {c.out, c.inner})};
      const Tensor dy = test::to_gpu(rng.normal(rows * c.out, 1.0), y_shape);
      ASSERT_TRUE(ops::gated_mlp_applies(in[0], in[1], in[2], in[3], grouped));
      // The composed forms gated_mlp stands for.
      auto composed = [&] {
        const ops::Activation act = ops::Activation::SiLU;
        if (grouped)
          return ops::linear(ops::gated_act_fused(ops::linear_concat(in[0], {in[1], in[2]}), act),
                             in[3]);
        Tensor g, u;
        {
          const ops::SharedF16Inputs shared;
          g = ops::linear(in[0], in[1]);
          u = ops::linear(in[0], in[2]);
        }
        return ops::linear(ops::gated_act(g, u, act), in[3]);
      };
      auto run_mlp = [&](bool fused, std::vector<Tensor>& grads, std::vector<Tensor>& accumulated,
                         uint64_t& backward_dispatches) {
        for (Tensor& t : in) {
          t.zero_grad();
          t.set_requires_grad(true);
        }
        Tensor y;
        for (int pass = 0; pass < 2; ++pass) {
          autograd::Tape tape;
          {
            autograd::TapeScope scope(tape);
            y = fused ? ops::gated_mlp(in[0], in[1], in[2], in[3], ops::Activation::SiLU, grouped)
                      : composed();
          }
          const uint64_t before = stream.dispatch_count();
          tape.backward(y, dy);
          backward_dispatches = stream.dispatch_count() - before;
          for (const Tensor& t : in)
            (pass == 0 ? grads : accumulated).push_back(t.grad().contiguous());
        }
        for (Tensor& t : in) t.set_requires_grad(false);
        return y;
      };
      std::vector<Tensor> g_composed, a_composed, g_fused, a_fused;
      uint64_t d_composed = 0, d_fused = 0;
      const Tensor y_composed = run_mlp(false, g_composed, a_composed, d_composed);
      const Tensor y_fused = run_mlp(true, g_fused, a_fused, d_fused);
      test::expect_bitwise_equal(y_fused, y_composed, "y");
      const char* names[] = {"dx", "d gate", "d up", "d down"};
      for (size_t i = 0; i < 4; ++i) {
        test::expect_bitwise_equal(g_fused[i], g_composed[i], names[i]);
        test::expect_bitwise_equal(a_fused[i], a_composed[i],
                                   std::string(names[i]) + " accumulated");
      }
      // The composed backward converts the f32 activation to f16 for the down weight's gradient,
      // and the f32 gate/up gradient (each of gate's and up's) once for both of its products;
      // gated_mlp has them in f16 (NVIDIA's relaid copies for the input gradients add more). The
      // composed separate form also converts x for each weight gradient, gated_mlp once for both.
      EXPECT_GE(d_composed, d_fused + (grouped ? 2 : 4));
    }
}

TEST(GatedProjection, AppliesOnlyWhereBothProductsReadF16Copies) {
  const Restore restore;
  const Tensor gu = Tensor::empty({40, 48}), w = Tensor::empty({16, 24}), b = Tensor::empty({16});
  set_matmul_precision(MatmulPrecision::F32);
  EXPECT_FALSE(ops::gated_projection_applies(gu, w, Tensor()));  // no f16 copies in fp32
  const EmulatedF16 f16;
  EXPECT_TRUE(ops::gated_projection_applies(gu, w, Tensor()));
  EXPECT_FALSE(ops::gated_projection_applies(gu, w, b));                         // a bias
  EXPECT_FALSE(ops::gated_projection_applies(Tensor::empty({4, 48}), w, {}));    // skinny rows
  EXPECT_FALSE(ops::gated_projection_applies(gu, Tensor::empty({16, 20}), {}));  // inner differs
  EXPECT_FALSE(ops::gated_projection_applies(gu, w.to(DType::F16), {}));         // an f16 weight
  ops::set_gated_projection(false);
  EXPECT_FALSE(ops::gated_projection_applies(gu, w, Tensor()));
}

// A Llama's mixed-precision step (gate and up grouped into one product, the rule's default)
// gives the same loss and gradients bit for bit with the f16 activation as without.
TEST(GatedProjection, DecoderStepGivesTheSameBits) {
  const EmulatedF16 f16;
  const Restore restore;
  const nlohmann::json c = {{"model_type", "llama"},    {"vocab_size", 50},
                            {"hidden_size", 32},        {"intermediate_size", 40},
                            {"num_hidden_layers", 2},   {"num_attention_heads", 4},
                            {"num_key_value_heads", 2}, {"max_position_embeddings", 64}};
  Rng rng(12);
  const std::vector<int32_t> ids = rng.ints(2 * 12, 0, 49);
  ASSERT_TRUE(ops::gated_projection_applies_to(24, 40, 32, false));
  ASSERT_TRUE(ops::gated_mlp_applies_to(24, 32, 40, 32, true));
  ASSERT_TRUE(ops::gated_mlp_applies_to(24, 32, 40, 32, false));
  // 0: the composed ops; 1: gated_projection after linear_concat (grouped only); 2: gated_mlp.
  auto step = [&](int mode) {
    ops::set_gated_projection(mode >= 1);
    ops::set_gated_mlp(mode == 2);
    models::DecoderModel model = test::random_decoder(c, 5, 0.2);
    model.set_requires_grad(true);
    return test::loss_and_gradients(model, ids, 2, 12);
  };
  struct Grouping {
    ~Grouping() { models::DecoderModel::set_projection_grouping(true); }
  } grouping;
  for (const bool grouped : {true, false}) {
    SCOPED_TRACE(grouped ? "gate and up grouped" : "gate and up separate");
    models::DecoderModel::set_projection_grouping(grouped);
    const std::vector<Tensor> composed = step(0);
    for (int mode : {1, 2}) {
      if (!grouped && mode == 1) continue;
      SCOPED_TRACE(mode == 1 ? "gated_projection" : "gated_mlp");
      const std::vector<Tensor> with = step(mode);
      ASSERT_EQ(with.size(), composed.size());
      for (size_t i = 0; i < with.size(); ++i)
        test::expect_bitwise_equal(with[i], composed[i],
                                   i == 0 ? "loss" : "gradient " + std::to_string(i));
    }
  }
}

}  // namespace
}  // namespace vkf
