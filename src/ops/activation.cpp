// Activations and gated activations (see activation.h). Kernels: activation.comp (elementwise
// forward/backward) and gated_act.comp (act(gate) * up, forward and both gradients), sharing the
// formulas of activation.glsl; the activation kind is a spec constant.
#include "ops/activation.h"

#include <string>
#include <utility>

#include "core/autograd.h"
#include "core/launch.h"
#include "ops/checks.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

using detail::check_f32;

constexpr uint32_t kLocal = 256;

struct NameMap {
  std::string_view name;
  Activation kind;
};
// transformers' ACT2FN names whose formula we implement (see activation.h for the formulas).
constexpr NameMap kNames[] = {
    {"silu", Activation::SiLU},
    {"swish", Activation::SiLU},
    {"gelu", Activation::GELU},
    {"gelu_python", Activation::GELU},
    {"gelu_pytorch_tanh", Activation::GELUTanh},
    {"gelu_new", Activation::GELUTanh},
    {"gelu_fast", Activation::GELUTanh},
    {"gelu_accurate", Activation::GELUTanh},
    {"gelu_python_tanh", Activation::GELUTanh},
    {"relu", Activation::ReLU},
    {"quick_gelu", Activation::QuickGELU},
};

uint32_t code(Activation kind) {
  const auto c = static_cast<uint32_t>(kind);
  VKF_REQUIRE(c <= static_cast<uint32_t>(Activation::QuickGELU),
              "activation: unknown Activation value {}", c);
  return c;
}

Tensor contiguous_input(const Tensor& x) { return x.is_contiguous() ? x : x.contiguous(); }

struct ActPush {
  uint64_t x, dy, out;
  uint32_t n;
};

// Elementwise act (dy undefined) or dy * act' over contiguous tensors of one size.
void run_act(Activation kind, const Tensor& x, const Tensor& dy, const Tensor& out) {
  const Tensor& d = dy.defined() ? dy : x;
  const ActPush push{x.address(), d.address(), out.address(),
                     checked_u32(x.numel(), "element count")};
  const double n = static_cast<double>(x.numel());
  launch(dy.defined() ? "activation_bwd" : "activation_fwd", push, grid_1d(x.numel(), kLocal),
         {&x, &d}, {&out}, {code(kind)}, {n * 20.0, n * (dy.defined() ? 12.0 : 8.0)});
}

struct GatedPush {
  uint64_t gate, up, dy, out, d_up;
  uint32_t n, inner, gate_stride, up_stride;
};

// How gate and up (and their gradients) are laid out: `rows` rows of `inner` elements, each
// operand with its own row stride in elements.
struct GatedLayout {
  int64_t rows, inner, gate_stride, up_stride;
};

// Whether the gated kernels' fwd4 / bwd4 builds (four elements of a row per invocation, 16-byte
// accesses) can take this layout and these operand addresses.
bool gated_vec4(const GatedLayout& l, std::initializer_list<uint64_t> addresses) {
  if (l.inner % 4 != 0 || l.gate_stride % 4 != 0 || l.up_stride % 4 != 0) return false;
  for (uint64_t a : addresses)
    if (a % 16 != 0) return false;
  return true;
}

void run_gated_fwd(Activation kind, const Tensor& gate, const Tensor& up, const GatedLayout& l,
                   uint64_t gate_addr, uint64_t up_addr, const Tensor& out) {
  const int64_t n = l.rows * l.inner;
  const GatedPush push{gate_addr, up_addr, out.address(), out.address(), out.address(),
                       checked_u32(n, "element count"), checked_u32(l.inner, "inner size"),
                       checked_u32(l.gate_stride, "row stride"), checked_u32(l.up_stride, "row stride")};
  const double dn = static_cast<double>(n);
  const bool vec4 = gated_vec4(l, {gate_addr, up_addr, out.address()});
  // An f16 output (the operand of a tensor-core product, gated_act_fused_value) stores f16 bits.
  const bool f16 = out.dtype() == DType::F16;
  const std::string module =
      std::string(vec4 ? "gated_act_fwd4" : "gated_act_fwd") + (f16 ? "_h" : "");
  launch(module, push, grid_1d(vec4 ? n / 4 : n, kLocal), {&gate, &up}, {&out}, {code(kind)},
         {dn * 20.0, dn * (f16 ? 10.0 : 12.0)});
}

void run_gated_bwd(Activation kind, const Tensor& gate, const Tensor& up, const GatedLayout& l,
                   uint64_t gate_addr, uint64_t up_addr, const Tensor& dy, const Tensor& d_gate,
                   const Tensor& d_up, uint64_t d_gate_addr, uint64_t d_up_addr) {
  const int64_t n = l.rows * l.inner;
  const GatedPush push{gate_addr, up_addr, dy.address(), d_gate_addr, d_up_addr,
                       checked_u32(n, "element count"), checked_u32(l.inner, "inner size"),
                       checked_u32(l.gate_stride, "row stride"), checked_u32(l.up_stride, "row stride")};
  const double dn = static_cast<double>(n);
  const bool vec4 = gated_vec4(l, {gate_addr, up_addr, dy.address(), d_gate_addr, d_up_addr});
  // f16 gradients (operands of tensor-core products, gated_act_fused_grad) store f16 bits.
  const bool f16 = d_gate.dtype() == DType::F16;
  const std::string module =
      std::string(vec4 ? "gated_act_bwd4" : "gated_act_bwd") + (f16 ? "_h" : "");
  launch(module, push, grid_1d(vec4 ? n / 4 : n, kLocal), {&gate, &up, &dy}, {&d_gate, &d_up},
         {code(kind)}, {dn * 30.0, dn * (f16 ? 16.0 : 20.0)});
}

}  // namespace

Activation parse_activation(std::string_view hf_name) {
  for (const NameMap& m : kNames)
    if (m.name == hf_name) return m.kind;
  std::string supported;
  for (const NameMap& m : kNames) supported += (supported.empty() ? "" : ", ") + std::string(m.name);
  fail("activation '{}' is not supported; supported names (transformers' ACT2FN): {}", hf_name,
       supported);
}

const char* activation_name(Activation kind) {
  switch (kind) {
    case Activation::SiLU: return "silu";
    case Activation::GELU: return "gelu";
    case Activation::GELUTanh: return "gelu_pytorch_tanh";
    case Activation::ReLU: return "relu";
    case Activation::QuickGELU: return "quick_gelu";
  }
  fail("activation_name: unknown Activation value {}", static_cast<uint32_t>(kind));
}

Tensor activation(const Tensor& x, Activation kind) {
  const char* name = activation_name(kind);
  check_f32(x, name, "x");
  const Tensor xc = contiguous_input(x);
  Tensor out = Tensor::empty(x.shape(), DType::F32);
  run_act(kind, xc, {}, out);
  autograd::record_op(name, {xc}, {out}, [kind, xc](autograd::GradContext& ctx) {
    const Tensor& g = ctx.grad_output(0);
    if (!g.defined()) return;
    const Tensor gc = contiguous_input(g);
    Tensor dx = Tensor::empty(xc.shape(), DType::F32);
    run_act(kind, xc, gc, dx);
    ctx.add_grad(0, dx);
  });
  return out;
}

Tensor silu(const Tensor& x) { return activation(x, Activation::SiLU); }
Tensor gelu(const Tensor& x) { return activation(x, Activation::GELU); }
Tensor gelu_tanh(const Tensor& x) { return activation(x, Activation::GELUTanh); }
Tensor relu(const Tensor& x) { return activation(x, Activation::ReLU); }
Tensor quick_gelu(const Tensor& x) { return activation(x, Activation::QuickGELU); }

Tensor gated_act(const Tensor& gate, const Tensor& up, Activation kind) {
  check_f32(gate, "gated_act", "gate");
  check_f32(up, "gated_act", "up");
  VKF_REQUIRE(gate.shape() == up.shape(),
              "gated_act: gate has shape {} and up has shape {}; expected equal shapes",
              shape_str(gate.shape()), shape_str(up.shape()));
  (void)code(kind);  // an invalid kind fails before any work is queued
  const Tensor gc = contiguous_input(gate), uc = contiguous_input(up);
  const int64_t n = gate.numel();
  const GatedLayout layout{1, n, n, n};
  Tensor out = Tensor::empty(gate.shape(), DType::F32);
  run_gated_fwd(kind, gc, uc, layout, gc.address(), uc.address(), out);
  autograd::record_op("gated_act", {gc, uc}, {out}, [kind, gc, uc, layout](autograd::GradContext& ctx) {
    const Tensor& g = ctx.grad_output(0);
    if (!g.defined()) return;
    const Tensor dy = contiguous_input(g);
    Tensor d_gate = Tensor::empty(gc.shape(), DType::F32);
    Tensor d_up = Tensor::empty(uc.shape(), DType::F32);
    run_gated_bwd(kind, gc, uc, layout, gc.address(), uc.address(), dy, d_gate, d_up,
                  d_gate.address(), d_up.address());
    ctx.add_grad(0, d_gate);
    ctx.add_grad(1, d_up);
  });
  return out;
}

namespace {

// gated_act_fused's layout of gate_up's two halves.
struct FusedHalves {
  GatedLayout layout;
  uint64_t gate_off, up_off;  // byte offsets of the gate and up halves within a row
};

FusedHalves fused_halves(const Tensor& gu, bool gate_first) {
  const int64_t inner = gu.dim(-1) / 2;
  const uint64_t half_bytes = static_cast<uint64_t>(inner) * sizeof(float);
  return {{gu.numel() / (2 * inner), inner, 2 * inner, 2 * inner},
          gate_first ? 0 : half_bytes,
          gate_first ? half_bytes : 0};
}

void check_gate_up(const Tensor& gate_up, const char* op) {
  check_f32(gate_up, op, "gate_up");
  VKF_REQUIRE(gate_up.rank() >= 1 && gate_up.dim(-1) % 2 == 0,
              "{}: gate_up has shape {}; expected [..., 2*I] with an even last dimension (gate and "
              "up halves)",
              op, shape_str(gate_up.shape()));
}

}  // namespace

namespace detail {

Tensor gated_act_fused_value(const Tensor& gate_up, Activation kind, bool gate_first,
                             DType out_dtype) {
  check_gate_up(gate_up, "gated_act_fused");
  VKF_REQUIRE(out_dtype == DType::F32 || out_dtype == DType::F16,
              "gated_act_fused: internal: the output is f32 or f16, not {}", dtype_name(out_dtype));
  (void)code(kind);
  const Tensor gu = contiguous_input(gate_up);
  const FusedHalves h = fused_halves(gu, gate_first);
  Shape out_shape = gu.shape();
  out_shape.back() = h.layout.inner;
  Tensor out = Tensor::empty(out_shape, out_dtype);
  run_gated_fwd(kind, gu, gu, h.layout, gu.address() + h.gate_off, gu.address() + h.up_off, out);
  return out;
}

Tensor gated_act_fused_grad(const Tensor& gate_up, Activation kind, bool gate_first,
                            const Tensor& dy, DType out_dtype) {
  VKF_REQUIRE(out_dtype == DType::F32 || out_dtype == DType::F16,
              "gated_act_fused: internal: the gradient is f32 or f16, not {}",
              dtype_name(out_dtype));
  const Tensor gu = contiguous_input(gate_up);
  const FusedHalves h = fused_halves(gu, gate_first);
  const Tensor dyc = contiguous_input(dy);
  Tensor d_gu = Tensor::empty(gu.shape(), out_dtype);
  // The halves' byte offsets in d_gu: gu's, halved for f16.
  const uint64_t per = out_dtype == DType::F16 ? 2 : 1;
  run_gated_bwd(kind, gu, gu, h.layout, gu.address() + h.gate_off, gu.address() + h.up_off, dyc,
                d_gu, d_gu, d_gu.address() + h.gate_off / per, d_gu.address() + h.up_off / per);
  return d_gu;
}

Tensor gated_act_value(const Tensor& gate, const Tensor& up, Activation kind, DType out_dtype) {
  const Tensor gc = contiguous_input(gate), uc = contiguous_input(up);
  const int64_t n = gc.numel();
  Tensor out = Tensor::empty(gc.shape(), out_dtype);
  run_gated_fwd(kind, gc, uc, GatedLayout{1, n, n, n}, gc.address(), uc.address(), out);
  return out;
}

std::pair<Tensor, Tensor> gated_act_grads(const Tensor& gate, const Tensor& up, Activation kind,
                                          const Tensor& dy, DType out_dtype) {
  const Tensor gc = contiguous_input(gate), uc = contiguous_input(up), dyc = contiguous_input(dy);
  const int64_t n = gc.numel();
  Tensor d_gate = Tensor::empty(gc.shape(), out_dtype), d_up = Tensor::empty(uc.shape(), out_dtype);
  run_gated_bwd(kind, gc, uc, GatedLayout{1, n, n, n}, gc.address(), uc.address(), dyc, d_gate,
                d_up, d_gate.address(), d_up.address());
  return {d_gate, d_up};
}

}  // namespace detail

Tensor gated_act_fused(const Tensor& gate_up, Activation kind, bool gate_first) {
  check_gate_up(gate_up, "gated_act_fused");
  const Tensor gu = contiguous_input(gate_up);
  Tensor out = detail::gated_act_fused_value(gu, kind, gate_first, DType::F32);
  autograd::record_op("gated_act_fused", {gu}, {out},
                      [kind, gu, gate_first](autograd::GradContext& ctx) {
                        const Tensor& g = ctx.grad_output(0);
                        if (!g.defined()) return;
                        ctx.add_grad(0, detail::gated_act_fused_grad(gu, kind, gate_first, g));
                      });
  return out;
}

}  // namespace vkf::ops
