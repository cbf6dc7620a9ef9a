// Memory planning (see memory_plan.h; the report is memory_plan_report.cpp). Each count below
// names the code that allocates the tensor; a change there (an op saving something new, the
// decoder creating another intermediate) should change the count here too. test_memory_plan.cpp
// catches a plan that falls behind the code.
#include "train/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <vector>

#include "models/decoder.h"
#include "ops/attention.h"
#include "ops/gated_projection.h"
#include "ops/linear_cross_entropy.h"
#include "ops/matmul_kernels.h"
#include "vk/error.h"
#include "vk/memory.h"

namespace vkf::train {
namespace {

using models::ArchSpec;
using models::MlpKind;
using models::NormKind;
using models::NormPlacement;
using models::QkNorm;

constexpr int64_t kF32 = 4, kI32 = 4;
// Scalars (loss sums, token counts, the backward seed, clipping's norm) and small per-op buffers
// (partial sums of reductions), one 256-byte allocation each at most: an allowance, not a count.
constexpr int64_t kSmallTensors = 64;

uint64_t align(uint64_t bytes) {
  const uint64_t a = vk::kAllocationAlignment;
  return (std::max<uint64_t>(bytes, 1) + a - 1) / a * a;
}

struct Dims {
  int64_t B, T, N, H, I, V, Hq, Hkv, D, qd, kvd;
  // q, k and v (gate and up) as one product of qd + 2 kvd (2 I) outputs: phi3's fused weight, or
  // separate weights grouped (ops::linear_split / linear_concat, DecoderModel::groups_projections),
  // which stack the weights into a transient copy in the forward and again in the backward.
  bool qkv_one, gate_up_one, qkv_grouped, gate_up_grouped;
  // The gated activation stored in f16 for the down products (ops::gated_projection), and with
  // grouped gate/up the gate/up gradient too (ops::gated_mlp).
  bool gated_f16, gated_grads_f16;
};

Dims dims_of(const ArchSpec& s, const MemoryPlanInput& in) {
  Dims d{};
  d.B = in.batch_size;
  d.T = in.seq_len;
  d.N = d.B * d.T;
  d.H = s.hidden_size;
  d.I = s.intermediate_size;
  d.V = s.vocab_size;
  d.Hq = s.num_heads;
  d.Hkv = s.num_kv_heads;
  d.D = s.head_dim;
  d.qd = d.Hq * d.D;
  d.kvd = d.Hkv * d.D;
  const bool no_adapter = !in.adapter && in.adapter_parameters == 0;
  using models::DecoderModel;
  d.qkv_grouped = no_adapter && !s.fused_qkv &&
                  DecoderModel::groups_projections_of(std::max(d.qd, d.kvd));
  d.gate_up_grouped = no_adapter && s.mlp != MlpKind::Plain && !s.fused_gate_up &&
                      DecoderModel::groups_projections_of(d.I);
  d.qkv_one = s.fused_qkv || d.qkv_grouped;
  d.gate_up_one = s.fused_gate_up || d.gate_up_grouped;
  // DecoderModel::mlp_block's choice: gated_projection after a fused or grouped gate/up
  // product, gated_mlp over grouped or separate gate and up (the gradient in f16 too).
  const bool gated = no_adapter && s.mlp != MlpKind::Plain;
  if (s.fused_gate_up) {
    d.gated_f16 = gated && ops::gated_projection_applies_to(d.N, d.I, d.H, s.mlp_bias);
    d.gated_grads_f16 = false;
  } else {
    d.gated_grads_f16 =
        gated && !s.mlp_bias && ops::gated_mlp_applies_to(d.N, d.H, d.I, d.H, d.gate_up_grouped);
    d.gated_f16 =
        d.gated_grads_f16 ||
        (gated && d.gate_up_grouped && ops::gated_projection_applies_to(d.N, d.I, d.H, s.mlp_bias));
  }
  return d;
}

// The products of a linear layer with `in` inputs and `out` outputs over N rows, as gemm()
// sees them (ops::detail::gemm_temporaries): the forward y = x W^T (A row-major, B column-major),
// the input gradient dx = dy W (A row-major) and the weight gradient dW = dy^T x (A
// column-major); a_f16: A is an f16 copy already (the fused loss's grouped dz).
enum class Pass { Forward, InputGrad, WeightGrad };
struct Product {
  Pass pass;
  int64_t rows, in, out;
  bool a_f16 = false;
  bool x_f16 = false;  // x is stored in f16 (B of the weight gradient; A of the forward)
};

// What the most demanding of these products allocates while it runs, under the current settings
// and device: split-K partial sums, f16 and transposed operand copies. Products run one at a
// time, so a moment holds the temporaries of one.
TensorBytes product_temporaries(std::initializer_list<Product> products) {
  TensorBytes most;
  for (const Product& p : products) {
    std::vector<ops::detail::GemmTemporary> temps;
    switch (p.pass) {
      case Pass::Forward:
        temps = ops::detail::gemm_temporaries(p.rows, p.out, p.in, true, true, p.a_f16 || p.x_f16);
        break;
      case Pass::InputGrad:
        temps = ops::detail::gemm_temporaries(p.rows, p.in, p.out, true, false, p.a_f16);
        break;
      case Pass::WeightGrad:
        temps = ops::detail::gemm_temporaries(p.out, p.in, p.rows, false, false, p.a_f16, p.x_f16);
        break;
    }
    TensorBytes t;
    for (const auto& g : temps) t.add(g.elements, g.element_bytes);
    if (t.bytes > most.bytes) most = t;
  }
  return most;
}

// The forward products of one layer's attention and MLP.
TensorBytes attention_forward_temporaries(const Dims& d) {
  using P = Pass;
  if (d.qkv_one) {
    TensorBytes t = product_temporaries(
        {{P::Forward, d.N, d.H, d.qd + 2 * d.kvd}, {P::Forward, d.N, d.qd, d.H}});
    if (d.qkv_grouped) t.add((d.qd + 2 * d.kvd) * d.H);  // the stacked weights
    return t;
  }
  return product_temporaries(
      {{P::Forward, d.N, d.H, d.qd}, {P::Forward, d.N, d.H, d.kvd}, {P::Forward, d.N, d.qd, d.H}});
}
// (The forward plan counts grouped gate/up's products and stacked weights phase by phase.)
TensorBytes mlp_forward_temporaries(const Dims& d) {
  const int64_t first = d.gate_up_one ? 2 * d.I : d.I;
  return product_temporaries(
      {{Pass::Forward, d.N, d.H, first}, {Pass::Forward, d.N, d.I, d.H, false, d.gated_f16}});
}

// A normalization over rows of `width` (ops/norm.cpp): the output, and with a tape the rstd (and
// LayerNorm's mean) its backward reads.
void add_norm(TensorBytes& t, int64_t rows, int64_t width, NormKind kind, bool training) {
  t.add(rows * width);
  if (training) t.add(rows, kF32, kind == NormKind::Layer ? 2 : 1);
}

// What DecoderModel::attention_block creates, all kept by the tape when training.
TensorBytes attention_activations(const ArchSpec& s, const models::LayerSpec& layer,
                                  const Dims& d) {
  TensorBytes t;
  if (s.fused_qkv) {
    t.add(d.N * (d.qd + 2 * d.kvd));  // qkv_proj output
    t.add(d.N * d.qd);                // .contiguous() copies of its q, k, v slices
    t.add(d.N * d.kvd, kF32, 2);
  } else {
    t.add(d.N * d.qd);
    t.add(d.N * d.kvd, kF32, 2);
  }
  if (s.qk_norm == QkNorm::Full) {
    add_norm(t, d.N, d.qd, NormKind::RMS, true);
    add_norm(t, d.N, d.kvd, NormKind::RMS, true);
  } else if (s.qk_norm == QkNorm::PerHead) {
    add_norm(t, d.N * d.Hq, d.D, NormKind::RMS, true);
    add_norm(t, d.N * d.Hkv, d.D, NormKind::RMS, true);
  }
  if (layer.use_rope) {  // apply_rope outputs for q and k
    t.add(d.N * d.qd);
    t.add(d.N * d.kvd);
  }
  t.add(d.N * d.qd);        // attention output (ops/attention.cpp; no [B, H, T, T] probabilities:
  t.add(d.B * d.Hq * d.T);  // the fused kernel saves the log-sum-exp per query row instead)
  t.add(d.N * d.H);         // o_proj output
  return t;
}

// DecoderModel::mlp_block.
TensorBytes mlp_activations(const ArchSpec& s, const Dims& d) {
  TensorBytes t;
  if (s.mlp == MlpKind::Plain) {
    t.add(d.N * d.I, kF32, 2);  // c_fc output, activation
  } else if (d.gate_up_one) {
    t.add(d.N * 2 * d.I);                      // gate_up output (fused or grouped)
    t.add(d.N * d.I, d.gated_f16 ? 2 : kF32);  // gated activation
  } else {
    t.add(d.N * d.I, kF32, 2);                 // gate, up
    t.add(d.N * d.I, d.gated_f16 ? 2 : kF32);  // gated activation
  }
  t.add(d.N * d.H);  // down/proj output
  return t;
}

// One decoder layer of DecoderModel::forward with the tape on: every tensor it creates.
TensorBytes layer_activations(const ArchSpec& s, const models::LayerSpec& layer, const Dims& d) {
  TensorBytes t;
  auto norm = [&] { add_norm(t, d.N, d.H, s.norm, true); };
  const TensorBytes attn = attention_activations(s, layer, d);
  const TensorBytes mlp = mlp_activations(s, d);
  const bool scaled = s.residual_multiplier != 1.0;
  switch (s.placement) {
    case NormPlacement::Pre:
      norm();
      t += attn;
      if (scaled) t.add(d.N * d.H);
      t.add(d.N * d.H);  // residual
      norm();
      t += mlp;
      if (scaled) t.add(d.N * d.H);
      t.add(d.N * d.H);
      break;
    case NormPlacement::Sandwich:
      norm();
      t += attn;
      norm();
      t.add(d.N * d.H);
      norm();
      t += mlp;
      norm();
      t.add(d.N * d.H);
      break;
    case NormPlacement::Post:
      t += attn;
      norm();
      t.add(d.N * d.H);
      t += mlp;
      norm();
      t.add(d.N * d.H);
      break;
    case NormPlacement::Parallel:
      norm();
      t += attn;
      t += mlp;
      t.add(d.N * d.H, kF32, 2);  // two residual sums
      break;
  }
  return t;
}

int logit_ops(const ArchSpec& s) {
  return (s.logits_divisor != 1.0) + (s.logits_multiplier != 1.0) + (s.final_softcap > 0);
}

// The cos/sin tables DecoderModel::rope_table keeps: one pair per distinct rotary configuration,
// grown by doubling from 64 rows (exactly seq_len rows for the length-dependent kinds).
TensorBytes rope_tables(const ArchSpec& s, int64_t T) {
  TensorBytes t;
  std::set<std::string> seen;
  for (const auto& layer : s.layers) {
    if (!layer.use_rope) continue;
    const ops::RopeConfig& r = layer.rope;
    std::string key = fmt::format("{}|{}|{}|{}|{}", r.type, r.theta, r.factor,
                                  r.partial_rotary_factor, r.original_max_position_embeddings);
    for (double f : r.short_factor) key += fmt::format(",{}", f);
    for (double f : r.long_factor) key += fmt::format(";{}", f);
    if (!seen.insert(key).second) continue;
    int64_t rows = T;
    if (r.type != "dynamic" && r.type != "longrope") {
      rows = 64;
      while (rows < T) rows *= 2;
    }
    t.add(rows * (ops::rope_rotary_dim(r) / 2), kF32, 2);
  }
  return t;
}

std::string shape2(int64_t a, int64_t b) {
  return fmt::format("[{}, {}]", a, b);
}

// Gradient bytes by when backward makes them. Backward runs the tape in reverse: the head first
// (lm_head, or the tied embedding, and the final norm), then the layers from the last down, and
// the untied embedding last. Within the first layer, at its MLP's backward only down/c_proj and
// the norms after the MLP have gradients; at its attention's, everything but q/k/v, the q/k norms
// and the norm before attention.
struct ParamGroups {
  uint64_t head = 0, missing_at_mlp = 0, missing_at_attention = 0;
};

ParamGroups group_parameters(const ArchSpec& s, MemoryPlan& p) {
  ParamGroups g;
  const auto& n = s.names;
  const std::string first = s.layer_name(0, "");
  auto is = [](const std::string& leaf, const std::string& stem) {
    return leaf.rfind(stem + ".", 0) == 0;
  };
  for (const auto& [name, shape] : models::DecoderModel::parameter_shapes(s)) {
    const int64_t count = shape_numel(shape);
    TensorBytes one;
    one.add(count);
    p.parameters += one;
    p.parameter_count += count;
    const bool embed = name == n.embed;
    if (name == n.lm_head || (embed && s.tie_word_embeddings) || is(name, n.final_norm)) {
      g.head += one.bytes;
    } else if (embed) {
      g.missing_at_mlp += one.bytes;
      g.missing_at_attention += one.bytes;
    } else if (name.rfind(first, 0) == 0) {
      const std::string leaf = name.substr(first.size());
      const bool after_mlp = is(leaf, n.down) || is(leaf, n.proj) ||
                             (s.placement == NormPlacement::Sandwich && is(leaf, n.post_ff_norm)) ||
                             (s.placement == NormPlacement::Post && is(leaf, n.norm2));
      if (!after_mlp) g.missing_at_mlp += one.bytes;
      const bool before_attention = is(leaf, n.q) || is(leaf, n.k) || is(leaf, n.v) ||
                                    is(leaf, n.qkv) || is(leaf, n.q_norm) || is(leaf, n.k_norm) ||
                                    (s.placement != NormPlacement::Post && is(leaf, n.norm1));
      if (before_attention) g.missing_at_attention += one.bytes;
    }
  }
  return g;
}

}  // namespace

void TensorBytes::add(int64_t elements, int64_t element_size, int64_t count) {
  if (count <= 0) return;
  const uint64_t one = align(static_cast<uint64_t>(std::max<int64_t>(elements, 0) * element_size));
  const uint64_t all = one * static_cast<uint64_t>(count);
  bytes += all;
  if (one > vk::kSharedAllocationMax) dedicated += all;
  tensors += count;
}

TensorBytes& TensorBytes::operator+=(const TensorBytes& o) {
  bytes += o.bytes;
  dedicated += o.dedicated;
  tensors += o.tensors;
  return *this;
}

int optimizer_moments(PlanOptimizer o) {
  return o == PlanOptimizer::AdamW ? 2 : o == PlanOptimizer::SGDMomentum ? 1 : 0;
}

uint64_t MemoryPlan::total() const {
  return parameters.bytes + gradients.bytes + optimizer_state.bytes + activations.bytes +
         workspace.bytes + inputs.bytes;
}

uint64_t MemoryPlan::device_bytes() const {
  uint64_t dedicated = 0;
  for (const TensorBytes* t :
       {&parameters, &gradients, &optimizer_state, &activations, &workspace, &inputs})
    dedicated += t->dedicated;
  const uint64_t shared = total() - dedicated;
  const uint64_t block = vk::kDeviceBlockBytes;
  return dedicated + (shared + block - 1) / block * block;
}

MemoryPlan plan_memory(const ArchSpec& s, const MemoryPlanInput& in) {
  VKF_REQUIRE(in.batch_size > 0 && in.seq_len > 0,
              "memory plan: batch size ({}) and sequence length ({}) must be positive",
              in.batch_size, in.seq_len);
  VKF_REQUIRE(in.gradient_accumulation_steps > 0,
              "memory plan: gradient accumulation steps ({}) must be positive",
              in.gradient_accumulation_steps);
  VKF_REQUIRE(static_cast<int64_t>(s.layers.size()) == s.num_layers,
              "memory plan: the {} spec lists {} layers but num_hidden_layers is {}", s.model_type,
              s.layers.size(), s.num_layers);
  MemoryPlan p;
  p.input = in;
  p.model_type = s.model_type;
  p.num_layers = s.num_layers;
  const Dims d = dims_of(s, in);

  // Parameters: f32 master copies, one tensor each (a tied output matrix is the embedding). For
  // the backward's moments below, the gradients that do not exist yet at each of them.
  const ParamGroups groups = group_parameters(s, p);
  if (in.adapter_parameters > 0) p.parameters.add(in.adapter_parameters);  // the adapter's own tensors
  const bool all_trainable =
      in.trainable_parameters < 0 || in.trainable_parameters >= p.parameter_count;
  p.trainable_count =
      in.training ? (all_trainable ? p.parameter_count : in.trainable_parameters) : 0;

  // Inputs: token ids and attention mask [B, T] i32 of every micro-batch of the step (the trainer
  // builds them all first), positions [1, T], shifted labels [B*T], and the rotary tables.
  const int64_t micro = in.training ? in.gradient_accumulation_steps : 1;
  p.inputs.add(d.N, kI32, 2 * micro);
  p.inputs.add(d.T, kI32);
  p.inputs.add(d.N, kI32);
  p.inputs += rope_tables(s, d.T);

  if (in.training) {
    if (all_trainable) {
      p.gradients = p.parameters;
    } else {
      p.gradients.add(p.trainable_count);
    }
    for (int i = 0; i < optimizer_moments(in.optimizer); ++i) p.optimizer_state += p.gradients;

    // Activations: the embedding output (and its scaled copies), every layer's tensors, the final
    // norm, then either the fused head loss's hidden-state gradient [N, H] (ops/
    // linear_cross_entropy.cpp makes it in the forward) or the logits, their scaled/soft-capped
    // copies and what cross-entropy saves (lse); and the loss scalars.
    TensorBytes head;
    head.add(d.N * d.H, kF32,
             1 + (s.embed_scale_sqrt_hidden ? 1 : 0) + (s.embed_multiplier != 1.0 ? 1 : 0));
    add_norm(head, d.N, d.H, s.norm, true);
    if (in.fused_loss) {
      head.add(d.N * d.H);
    } else {
      head.add(d.N * d.V, kF32, 1 + logit_ops(s));
      head.add(d.N);
    }
    head.add(1, kF32, kSmallTensors);
    TensorBytes layers, largest_layer;
    for (const auto& layer : s.layers) {
      const TensorBytes l = layer_activations(s, layer, d);
      layers += l;
      if (l.bytes > largest_layer.bytes) largest_layer = l;
    }
    p.activations_per_layer = largest_layer.bytes;
    p.activations = head;
    if (in.gradient_checkpointing) {
      // Only each layer's input survives the forward; backward recomputes one layer at a time.
      p.activations.add(d.N * d.H, kF32, s.num_layers);
      p.activations += largest_layer;
    } else {
      p.activations += layers;
    }
    if (in.adapter_activations_per_token > 0) {
      // Spread over the layers like the rest; with checkpointing one layer's share is live.
      const int64_t per_token = in.gradient_checkpointing
                                    ? (in.adapter_activations_per_token + s.num_layers - 1) / s.num_layers
                                    : in.adapter_activations_per_token;
      p.activations.add(d.N * per_token);
    }

    // The backward's peak is at one of these moments. Each has its transients (the workspace) and
    // the gradients made so far: gradients appear as backward walks from the head to the
    // embedding, so a moment near the head has few of them (all of them, with accumulation, from
    // the previous micro-batches; all of them, too, when the trainable split is not known).
    const bool partial = in.gradient_accumulation_steps > 1 || !all_trainable;
    const uint64_t all_grads = p.gradients.bytes;
    auto grads_then = [&](uint64_t made) { return partial ? all_grads : made; };
    struct Moment {
      std::string name, note;
      TensorBytes workspace;
      uint64_t grads;
    };
    std::vector<Moment> moments;
    if (in.fused_loss) {
      //  1. The end of the forward, in the fused head loss: the head weight's gradient [V, H]
      //     (made in the forward; the backward hands it to the weight), when it trains (every
      //     parameter does, or an adapter's copy of the head of at least V x H), the [chunk, V]
      //     logits block and the row losses [2N]. No gradient exists yet (unless accumulated).
      const int64_t chunk = ops::linear_cross_entropy_chunk_rows(d.N, d.V);
      const bool head_trains = all_trainable || in.trainable_parameters >= d.V * d.H;
      Moment m{"forward, fused head loss",
               fmt::format("{}logits chunk {} f32",
                           head_trains ? fmt::format("head gradient {} + ", shape2(d.V, d.H)) : "",
                           shape2(chunk, d.V)),
               {},
               grads_then(0)};
      if (head_trains) m.workspace.add(d.V * d.H);
      m.workspace.add(chunk * d.V);
      m.workspace.add(2 * d.N);
      // The products: each chunk's logits (h W^T), and dh = dz W, dW = dz^T h over a group of
      // chunks whose dz are f16 where products read f16 operand copies (one chunk otherwise).
      // The logits products' f16 copy of W is kept across a group, and is one of their
      // temporaries.
      const bool grouped = ops::detail::f16_operands_active();
      const int64_t rows =
          grouped ? std::min(d.N, ops::linear_cross_entropy_group_chunks(d.N, d.V, chunk) * chunk)
                  : chunk;
      if (grouped) m.workspace.add(rows * d.V, 2);
      m.workspace += product_temporaries({{Pass::Forward, chunk, d.H, d.V},
                                          {Pass::InputGrad, rows, d.H, d.V, grouped},
                                          {Pass::WeightGrad, rows, d.H, d.V, grouped}});
      moments.push_back(m);
    } else {
      //  1. The logits gradient: cross-entropy writes dlogits [N, V]; a scale or soft-cap of the
      //     logits makes one more [N, V] while the previous lives; lm_head's backward then writes
      //     dx [N, H] and the head weight's gradient.
      Moment m{"backward, logits gradient",
               fmt::format("logits gradient {} f32", shape2(d.N, d.V)),
               {},
               grads_then(groups.head)};
      m.workspace.add(d.N * d.V, kF32, 1 + std::min(1, logit_ops(s)));
      m.workspace.add(d.N * d.H);
      m.workspace += product_temporaries(
          {{Pass::InputGrad, d.N, d.H, d.V}, {Pass::WeightGrad, d.N, d.H, d.V}});
      moments.push_back(m);
    }
    {
      //  2. The first layer's MLP (the last to run backward, so the most gradients exist): the
      //     gradient of its activation [N, I] and those of gate and up (plain MLP: of c_fc's
      //     output), beside the residual stream's gradient.
      const int64_t n = s.mlp == MlpKind::Plain ? 2 : 3;
      Moment m{"backward, first layer's MLP",
               d.gated_grads_f16 ? fmt::format("MLP gradients {} f32 + 2 x {} f16",
                                               shape2(d.N, d.I), shape2(d.N, d.I))
                                 : fmt::format("MLP gradients {} x {} f32", n, shape2(d.N, d.I)),
               {},
               grads_then(all_grads - groups.missing_at_mlp)};
      if (d.gated_grads_f16) {  // ops::gated_mlp: the activation's gradient, gate/up's in f16
        m.workspace.add(d.N * d.I);
        m.workspace.add(d.N * d.I, 2, 2);
      } else {
        m.workspace.add(d.N * d.I, kF32, n);
      }
      m.workspace.add(d.N * d.H, kF32, 2);
      // Grouped gate/up: the stacked weights and their gradient's [2I, H] rows, made at once.
      if (d.gate_up_grouped) m.workspace.add(2 * d.I * d.H, kF32, 2);
      // The products' input and weight gradients: the down projection's, then gate/up's.
      const int64_t first = d.gate_up_one ? 2 * d.I : d.I;
      m.workspace += product_temporaries({{Pass::InputGrad, d.N, d.I, d.H},
                                          {Pass::WeightGrad, d.N, d.I, d.H, false, d.gated_f16},
                                          {Pass::InputGrad, d.N, d.H, first, d.gated_grads_f16},
                                          {Pass::WeightGrad, d.N, d.H, first, d.gated_grads_f16}});
      moments.push_back(m);
    }
    {
      //  3. The first layer's attention: the output's gradient, dq, dk, dv and the per-row
      //     sums (delta) of the fused backward, beside the residual stream's gradient; under GQA
      //     the fp32 register-tiled dk/dv kernel adds per-query-head partials of dk and dv (two
      //     more [N, q] while the group sum writes dk and dv).
      const int64_t q_like = d.Hq != d.Hkv ? 4 : 2;
      Moment m{"backward, first layer's attention",
               fmt::format("attention gradients {} x {} + 2 x {} f32", q_like, shape2(d.N, d.qd),
                           shape2(d.N, d.kvd)),
               {},
               grads_then(all_grads - groups.missing_at_attention)};
      m.workspace.add(d.N * d.qd, kF32, q_like);
      m.workspace.add(d.N * d.kvd, kF32, 2);
      m.workspace.add(d.B * d.Hq * d.T);
      // The score gradients the dk/dv kernel may store for dq, [B, Hq, T, T].
      const uint64_t stored_ds = ops::attention_backward_stored_ds_bytes(
          d.B, d.T, d.T, d.Hq, d.D, static_cast<float>(s.attention_dropout));
      if (stored_ds > 0) m.workspace.add(static_cast<int64_t>(stored_ds), 1);
      m.workspace.add(d.N * d.H, kF32, 2);
      // The products' input and weight gradients: o's, then q's, k's and v's (or the fused one's).
      const int64_t qkv = d.qkv_one ? d.qd + 2 * d.kvd : d.qd;
      m.workspace += product_temporaries({{Pass::InputGrad, d.N, d.qd, d.H},
                                          {Pass::WeightGrad, d.N, d.qd, d.H},
                                          {Pass::InputGrad, d.N, d.H, qkv},
                                          {Pass::WeightGrad, d.N, d.H, qkv},
                                          {Pass::InputGrad, d.N, d.H, d.kvd},
                                          {Pass::WeightGrad, d.N, d.H, d.kvd}});
      moments.push_back(m);
    }
    if (s.fused_qkv) {
      //  3b. phi3's fused projection: the backward of each of the q, k, v slices of its output
      //     builds a zero-filled [N, q + 2 kv] holding its gradient, and the sum of two is a
      //     third, beside the q and k gradients still waiting for their slices.
      Moment m{"backward, first layer's fused q/k/v slices",
               fmt::format("q/k/v slice gradients 3 x {} f32", shape2(d.N, d.qd + 2 * d.kvd)),
               {},
               grads_then(all_grads - groups.missing_at_attention)};
      m.workspace.add(d.N * (d.qd + 2 * d.kvd), kF32, 3);
      m.workspace.add(d.N * d.qd);
      m.workspace.add(d.N * d.kvd);
      m.workspace.add(d.N * d.H, kF32, 2);
      m.workspace += product_temporaries({{Pass::InputGrad, d.N, d.H, d.qd + 2 * d.kvd},
                                          {Pass::WeightGrad, d.N, d.H, d.qd + 2 * d.kvd}});
      moments.push_back(m);
    }
    if (d.qkv_grouped) {
      //  3c. The grouped q/k/v product (ops::linear_split): its output's gradient [N, q + 2 kv]
      //     assembled beside dq, dk and dv, the stacked weights and the gradient rows of all
      //     three weights, beside the residual stream's gradient.
      const int64_t width = d.qd + 2 * d.kvd;
      Moment m{"backward, first layer's grouped q/k/v product",
               fmt::format("q/k/v gradient {} + weights 2 x {} f32", shape2(d.N, width),
                           shape2(width, d.H)),
               {},
               grads_then(all_grads - groups.missing_at_attention)};
      m.workspace.add(d.N * width);
      m.workspace.add(d.N * d.qd);
      m.workspace.add(d.N * d.kvd, kF32, 2);
      m.workspace.add(width * d.H, kF32, 2);
      m.workspace.add(d.N * d.H, kF32, 2);
      m.workspace += product_temporaries(
          {{Pass::InputGrad, d.N, d.H, width}, {Pass::WeightGrad, d.N, d.H, width}});
      moments.push_back(m);
    }
    {
      //  4. The embedding's backward, with every gradient made: bucket counts and offsets over the
      //     vocabulary, three [N] index arrays, the embedding output's gradient.
      Moment m{"backward, embedding gradient", "embedding gradient buckets", {}, all_grads};
      m.workspace.add(d.V, kI32, 2);
      m.workspace.add(d.N, kI32, 3);
      m.workspace.add(d.N * d.H, kF32, 2);
      moments.push_back(m);
    }
    const Moment* worst = &moments[0];
    for (const Moment& m : moments)
      if (m.grads + m.workspace.bytes > worst->grads + worst->workspace.bytes) worst = &m;
    p.peak_moment = worst->name;
    p.workspace_note = worst->note;
    // The table lists every gradient; the workspace row is what the peak holds beyond them (a
    // moment before the last gradients exist holds less than all of them: it is subtracted).
    p.workspace = worst->workspace;
    const uint64_t beyond = worst->grads + worst->workspace.bytes - all_grads;
    p.workspace.bytes = beyond;
    p.workspace.dedicated = std::min(p.workspace.dedicated, beyond);
  } else {
    // Forward without a tape: what lives at once is the residual stream and the tensors the
    // decoder's loop holds (the block's input after its norm, the attention output while the MLP
    // runs), and the largest block's intermediates; or at the end what the head and loss hold.
    const int64_t held_in_attention = s.placement == NormPlacement::Post ? 1 : 2;
    const int64_t held_in_mlp = s.placement == NormPlacement::Post ? 2 : 3;
    uint64_t layer_live = 0;
    for (const auto& layer : s.layers) {
      // Attention: q, k, v (and phi3's fused output they were copied from) live to the end of
      // the block; a q/k norm or rotary replaces q and k, the new beside the old for a moment;
      // then the attention output with its row statistics, then o_proj's output beside it.
      // Grouped q/k/v: the product's [N, q + 2 kv] output lives only inside linear_split, beside
      // the stacked weights and the product's temporaries, then beside the q, k, v it is copied
      // into.
      TensorBytes attn, mlp, qkv;
      attn.add(d.N * d.H, kF32, held_in_attention);
      if (s.fused_qkv) attn.add(d.N * (d.qd + 2 * d.kvd));
      qkv.add(d.N * d.qd);
      qkv.add(d.N * d.kvd, kF32, 2);
      TensorBytes replaced, last;
      if (s.qk_norm != QkNorm::None || layer.use_rope) replaced.add(d.N * d.qd);
      last.add(d.N * d.qd);
      TensorBytes after = last;
      after.add(d.N * d.H);
      last.add(d.B * d.Hq * d.T);
      const TensorBytes temporaries = attention_forward_temporaries(d);
      const uint64_t after_projections =
          qkv.bytes + std::max({replaced.bytes, last.bytes, after.bytes});
      uint64_t block = after_projections + temporaries.bytes;
      if (d.qkv_grouped) {
        // Inside linear_split: the output beside the stacked weights and the product's
        // temporaries, then beside q, k, v. After it: what follows, beside o's product.
        const uint64_t output = align(static_cast<uint64_t>(d.N * (d.qd + 2 * d.kvd)) * kF32);
        const uint64_t inside = output + std::max(temporaries.bytes, qkv.bytes);
        block = std::max(inside, after_projections +
                                     product_temporaries({{Pass::Forward, d.N, d.qd, d.H}}).bytes);
      }
      attn.bytes += block;
      mlp.add(d.N * d.H, kF32, held_in_mlp);
      if (d.gate_up_grouped) {
        // gate/up's output, then either the stacked weights beside the product that reads them,
        // or (once they are freed) the activation and the down projection's output beside the
        // down product.
        TensorBytes during, later;
        during.add(2 * d.I * d.H);
        during += product_temporaries({{Pass::Forward, d.N, d.H, 2 * d.I}});
        later.add(d.N * d.I, d.gated_f16 ? 2 : kF32);
        later.add(d.N * d.H);
        later += product_temporaries({{Pass::Forward, d.N, d.I, d.H, false, d.gated_f16}});
        mlp.add(d.N * 2 * d.I);
        mlp.bytes += std::max(during.bytes, later.bytes);
      } else {
        mlp += mlp_activations(s, d);
        mlp += mlp_forward_temporaries(d);
      }
      layer_live = std::max({layer_live, attn.bytes, mlp.bytes});
    }
    // At the head: the final norm's output and, fused, one [chunk, V] logits block and the row
    // losses [2N]; unfused, the logits (a scaled copy briefly beside them) and the loss's lse and
    // row losses.
    TensorBytes head_live;
    head_live.add(d.N * d.H);
    if (in.fused_loss) {
      const int64_t chunk = ops::linear_cross_entropy_chunk_rows(d.N, d.V);
      head_live.add(chunk * d.V);
      head_live.add(2 * d.N);
      head_live += product_temporaries({{Pass::Forward, chunk, d.H, d.V}});
    } else {
      head_live.add(d.N * d.V, kF32, 1 + std::min(1, logit_ops(s)));
      head_live.add(d.N, kF32, 3);
      head_live += product_temporaries({{Pass::Forward, d.N, d.H, d.V}});
    }
    if (head_live.bytes > layer_live) {
      p.activations = head_live;
      p.peak_moment = in.fused_loss ? "forward, fused head loss" : "forward, logits";
    } else {
      p.activations.bytes = layer_live;
      p.peak_moment = "forward, inside a layer";
    }
    p.activations.add(1, kF32, kSmallTensors);
    p.activations_per_layer = layer_live;
  }
  return p;
}

}  // namespace vkf::train
