// Memory planning (see memory_plan.h). Each count below names the code that allocates the tensor;
// a change there (an op saving something new, the decoder creating another intermediate) should
// change the count here too. test_memory_plan.cpp catches a plan that falls behind the code.
#include "train/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "models/decoder.h"
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
        temps = ops::detail::gemm_temporaries(p.rows, p.out, p.in, true, true, p.a_f16);
        break;
      case Pass::InputGrad:
        temps = ops::detail::gemm_temporaries(p.rows, p.in, p.out, true, false, p.a_f16);
        break;
      case Pass::WeightGrad:
        temps = ops::detail::gemm_temporaries(p.out, p.in, p.rows, false, false, p.a_f16);
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
TensorBytes mlp_forward_temporaries(const Dims& d) {
  const int64_t first = d.gate_up_one ? 2 * d.I : d.I;
  TensorBytes t =
      product_temporaries({{Pass::Forward, d.N, d.H, first}, {Pass::Forward, d.N, d.I, d.H}});
  if (d.gate_up_grouped) t.add(2 * d.I * d.H);  // the stacked weights
  return t;
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
    t.add(d.N * 2 * d.I);  // gate_up output (fused or grouped)
    t.add(d.N * d.I);      // gated activation
  } else {
    t.add(d.N * d.I, kF32, 3);  // gate, up, gated activation
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

std::string optimizer_name(PlanOptimizer o) {
  switch (o) {
    case PlanOptimizer::AdamW:
      return "AdamW";
    case PlanOptimizer::SGD:
      return "SGD";
    case PlanOptimizer::SGDMomentum:
      return "SGD with momentum";
  }
  return "?";
}

int optimizer_moments(PlanOptimizer o) {
  return o == PlanOptimizer::AdamW ? 2 : o == PlanOptimizer::SGDMomentum ? 1 : 0;
}

std::string shape2(int64_t a, int64_t b) {
  return fmt::format("[{}, {}]", a, b);
}

std::string format_count(int64_t n) {
  const double v = static_cast<double>(n);
  if (n < 1'000'000) return fmt::format("{}", n);
  if (n < 1'000'000'000) return fmt::format("{:.1f}M", v / 1e6);
  return fmt::format("{:.2f}B", v / 1e9);
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
               fmt::format("MLP gradients {} x {} f32", n, shape2(d.N, d.I)),
               {},
               grads_then(all_grads - groups.missing_at_mlp)};
      m.workspace.add(d.N * d.I, kF32, n);
      m.workspace.add(d.N * d.H, kF32, 2);
      // Grouped gate/up: the stacked weights and their gradient's [2I, H] rows, made at once.
      if (d.gate_up_grouped) m.workspace.add(2 * d.I * d.H, kF32, 2);
      // The products' input and weight gradients: the down projection's, then gate/up's.
      const int64_t first = d.gate_up_one ? 2 * d.I : d.I;
      m.workspace += product_temporaries({{Pass::InputGrad, d.N, d.I, d.H},
                                          {Pass::WeightGrad, d.N, d.I, d.H},
                                          {Pass::InputGrad, d.N, d.H, first},
                                          {Pass::WeightGrad, d.N, d.H, first}});
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
      uint64_t block = qkv.bytes + std::max({replaced.bytes, last.bytes, after.bytes}) +
                       temporaries.bytes;
      if (d.qkv_grouped) {
        const uint64_t output = align(static_cast<uint64_t>(d.N * (d.qd + 2 * d.kvd)) * kF32);
        block = std::max(block - temporaries.bytes + product_temporaries({{Pass::Forward, d.N, d.qd, d.H}}).bytes,
                         output + std::max(temporaries.bytes, qkv.bytes));
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
        later.add(d.N * d.I);
        later.add(d.N * d.H);
        later += product_temporaries({{Pass::Forward, d.N, d.I, d.H}});
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

std::string format_bytes(uint64_t b) {
  const double v = static_cast<double>(b);
  if (b < 1024) return fmt::format("{} B", b);
  if (v < 1024.0 * 1024) return fmt::format("{:.1f} KiB", v / 1024);
  if (v < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", v / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", v / (1024.0 * 1024 * 1024));
}

std::string MemoryPlan::table() const {
  const auto& in = input;
  std::string out = fmt::format(
      "memory plan: {} ({} layers, {} parameters), batch {} x {} tokens, {}\n", model_type,
      num_layers, format_count(parameter_count), in.batch_size, in.seq_len,
      in.training ? fmt::format("training with {}{}{}", optimizer_name(in.optimizer),
                                trainable_count < parameter_count
                                    ? fmt::format(", {} trainable", format_count(trainable_count))
                                    : std::string(),
                                in.gradient_checkpointing ? ", gradient checkpointing" : "")
                  : std::string("forward only"));
  auto row = [&](const std::string& what, uint64_t bytes, const std::string& note) {
    out += fmt::format("  {:<26}{:>12}  {}\n", what, format_bytes(bytes), note);
  };
  row("parameters (f32)", parameters.bytes, fmt::format("{} tensors", parameters.tensors));
  if (in.training) {
    row("gradients (f32)", gradients.bytes, "");
    row(fmt::format("optimizer state ({})", optimizer_name(in.optimizer)), optimizer_state.bytes,
        optimizer_moments(in.optimizer)
            ? fmt::format("{} f32 per trainable parameter", optimizer_moments(in.optimizer))
            : "");
    row("activations", activations.bytes,
        in.gradient_checkpointing
            ? fmt::format("layer inputs, one layer recomputed ({}), head",
                          format_bytes(activations_per_layer))
            : fmt::format("saved for backward; {} per layer", format_bytes(activations_per_layer)));
    row("workspace", workspace.bytes, workspace_note);
  } else {
    row("activations", activations.bytes, "live at the forward's peak");
  }
  row("inputs, rotary tables", inputs.bytes, "");
  row("total (tensors)", total(), "peak at " + peak_moment);
  row("device memory", device_bytes(),
      fmt::format("in {} blocks; larger tensors get their own",
                  format_bytes(vk::kDeviceBlockBytes)));
  return out;
}

std::string MemoryPlan::summary() const {
  if (!input.training) {
    return fmt::format(
        "memory plan: {} total = parameters {} + activations {} + inputs {} "
        "({} of device memory)",
        format_bytes(total()), format_bytes(parameters.bytes), format_bytes(activations.bytes),
        format_bytes(inputs.bytes), format_bytes(device_bytes()));
  }
  return fmt::format(
      "memory plan: {} total = parameters {} + gradients {} + optimizer {} + "
      "activations {} + workspace {} + inputs {} ({} of device memory)",
      format_bytes(total()), format_bytes(parameters.bytes), format_bytes(gradients.bytes),
      format_bytes(optimizer_state.bytes), format_bytes(activations.bytes),
      format_bytes(workspace.bytes), format_bytes(inputs.bytes), format_bytes(device_bytes()));
}

MemoryCapacity usable_capacity(uint64_t max_memory) {
  const vk::DeviceCapacity c = vk::device_capacity();
  const uint64_t total = c.total();
  // Not tensors, but on the same heap: staging buffers (64 MiB blocks; on integrated GPUs and
  // lavapipe), driver allocations, and blocks split by allocations of many sizes.
  const uint64_t margin = std::min<uint64_t>(total, (uint64_t{256} << 20) + total / 100 * 3);
  MemoryCapacity out;
  out.usable = total - margin;
  out.description = fmt::format(
      "{} of device memory ({} {} less a {} safety margin)", format_bytes(out.usable),
      format_bytes(total), c.budget_bytes ? "budget (VK_EXT_memory_budget)" : "device-local heap",
      format_bytes(margin));
  if (max_memory > 0 && max_memory < out.usable) {
    out.usable = max_memory;
    out.description = fmt::format("{} (--max-memory)", format_bytes(max_memory));
  }
  return out;
}

void require_fits(const ArchSpec& spec, const MemoryPlan& plan, const MemoryCapacity& capacity) {
  if (plan.device_bytes() <= capacity.usable) return;
  const MemoryPlanInput& in = plan.input;
  auto needs = [&](MemoryPlanInput changed) {
    return format_bytes(plan_memory(spec, changed).device_bytes());
  };
  std::string advice;
  if (in.batch_size > 1) {
    MemoryPlanInput c = in;
    c.batch_size = 1;
    advice += fmt::format(
        "a smaller --per-device-train-batch-size (1 needs {}; raise "
        "--gradient-accumulation-steps to keep the tokens per step), ",
        needs(c));
  }
  if (in.seq_len > 1) {
    MemoryPlanInput c = in;
    c.seq_len = std::max<int64_t>(1, in.seq_len / 2);
    advice += fmt::format("a shorter --max-length ({} needs {}), ", c.seq_len, needs(c));
  }
  if (in.training && !in.gradient_checkpointing) {
    MemoryPlanInput c = in;
    c.gradient_checkpointing = true;
    advice += fmt::format("--gradient-checkpointing (about {}), ", needs(c));
  }
  if (in.training) {
    advice += "LoRA (gradients and optimizer state for the adapters only), ";
  }
  std::string parts =
      in.training
          ? fmt::format(
                "parameters {}, gradients {}, optimizer state {}, "
                "activations {}, workspace {}",
                format_bytes(plan.parameters.bytes), format_bytes(plan.gradients.bytes),
                format_bytes(plan.optimizer_state.bytes), format_bytes(plan.activations.bytes),
                format_bytes(plan.workspace.bytes))
          : fmt::format("parameters {}, activations {}", format_bytes(plan.parameters.bytes),
                        format_bytes(plan.activations.bytes));
  // Shared blocks are allocated whole: below one block, nothing fits however small the run.
  const std::string blocks =
      capacity.usable < vk::kDeviceBlockBytes
          ? fmt::format(" (vkformer takes device memory in blocks of {}, so no run fits in less)",
                        format_bytes(vk::kDeviceBlockBytes))
          : "";
  fail(
      "not enough device memory: this run needs about {} of device memory ({} of tensors for "
      "{}, batch {} x {} tokens: {}), but only {} is usable{}. Try {}or a smaller model; "
      "--estimate-memory prints the whole plan",
      format_bytes(plan.device_bytes()), format_bytes(plan.total()), plan.model_type, in.batch_size,
      in.seq_len, parts, capacity.description, blocks, advice);
}

uint64_t parse_byte_size(const std::string& text, const std::string& option) {
  auto bad = [&]() -> uint64_t {
    fail(
        "{} '{}' is not a size; write a number with an optional unit, e.g. 2GiB, 500MB, 1.5G "
        "(KiB/MiB/GiB/TiB and K/M/G/T are powers of 1024, KB/MB/GB/TB powers of 1000)",
        option, text);
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0) return bad();
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(text.substr(0, i), &used);
    if (used != i) return bad();
  } catch (const std::exception&) {
    return bad();
  }
  std::string unit;
  for (size_t j = i; j < text.size(); ++j)
    if (!std::isspace(static_cast<unsigned char>(text[j])))
      unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[j])));
  double scale = 0;
  const char* prefixes = "kmgt";
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (const char* at = std::strchr(prefixes, unit[0]); at && *at) {
    const int power = static_cast<int>(at - prefixes) + 1;
    const std::string rest = unit.substr(1);
    if (rest.empty() || rest == "ib")
      scale = std::pow(1024.0, power);
    else if (rest == "b")
      scale = std::pow(1000.0, power);
  }
  if (scale == 0 || !std::isfinite(value * scale) || value * scale >= 1.8e19) return bad();
  const auto bytes = static_cast<uint64_t>(value * scale);
  VKF_REQUIRE(bytes > 0, "{} '{}' must be more than 0 bytes", option, text);
  return bytes;
}

}  // namespace vkf::train
