// LoRA adapters: planning from a config, peft-compatible initialization, files, the forward hook,
// merge and unmerge (see lora.h).
#include "peft/lora.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include "core/autograd.h"
#include "io/safetensors.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embed.h"
#include "ops/matmul.h"
#include "vk/error.h"

namespace vkf::peft {
namespace fs = std::filesystem;

std::string peft_key(const std::string& name) { return "base_model.model." + name; }

std::vector<ModuleInfo> model_modules(const models::ArchSpec& spec) {
  std::vector<ModuleInfo> out;
  auto module_of = [](const std::string& p) { return p.substr(0, p.rfind('.')); };
  for (const auto& [name, shape] : models::DecoderModel::parameter_shapes(spec)) {
    const std::string mod = module_of(name);
    if (!out.empty() && out.back().name == mod) {  // a bias after its weight
      out.back().params.push_back(name);
      continue;
    }
    ModuleInfo m;
    m.name = mod;
    m.params = {name};
    if (name == spec.names.embed) {
      m.kind = ModuleInfo::Embedding;
      m.in = shape[0];
      m.out = shape[1];
    } else if (shape.size() == 2) {
      m.kind = ModuleInfo::Linear;
      m.in = shape[1];
      m.out = shape[0];
      m.is_head = name == spec.names.lm_head;
    } else {
      m.kind = ModuleInfo::Norm;
      m.in = m.out = shape[0];
    }
    out.push_back(m);
  }
  if (spec.tie_word_embeddings) {  // the head module exists even when its weight is the embedding
    ModuleInfo m;
    m.name = module_of(spec.names.lm_head);
    m.kind = ModuleInfo::Linear;
    m.in = spec.hidden_size;
    m.out = spec.vocab_size;
    m.is_head = true;
    m.params = {spec.names.lm_head};
    out.push_back(m);
  }
  return out;
}

bool is_lora_target(const LoraConfig& c, const ModuleInfo& m) {
  if (c.all_linear && m.kind != ModuleInfo::Linear) return false;
  return c.targets(m.name, m.is_head);
}

namespace {


struct Plan {
  std::vector<LoraModule> lora;               // tensors unset
  std::vector<std::pair<std::string, Shape>> saved;  // modules_to_save params and shapes
};

Plan make_plan(const models::ArchSpec& spec, const LoraConfig& c) {
  Plan p;
  const auto mods = model_modules(spec);
  std::set<std::string> saved_keys_used;
  for (const auto& m : mods) {
    const bool target = is_lora_target(c, m);
    const bool save = c.saves(m.name);
    VKF_REQUIRE(!(target && save), "module '{}' is both a LoRA target and in modules_to_save; choose one",
                m.name);
    if (target) {
      VKF_REQUIRE(m.kind != ModuleInfo::Norm,
                  "target_modules matches the normalization layer '{}'; LoRA adapts linear layers and "
                  "embeddings (put norms in modules_to_save to train them)", m.name);
      LoraModule lm;
      lm.module = m.name;
      lm.embedding = m.kind == ModuleInfo::Embedding;
      lm.rank = c.rank_for(m.name);
      lm.alpha = c.alpha_for(m.name);
      lm.scaling = static_cast<float>(c.scaling_for(m.name));
      lm.dropout = static_cast<float>(c.lora_dropout);
      p.lora.push_back(lm);
    }
    if (save) {
      for (const auto& k : c.modules_to_save)
        if (saved_by_key(m.name, k)) saved_keys_used.insert(k);
      for (const auto& param : m.params) {
        Shape s = m.kind == ModuleInfo::Norm ? Shape{m.in}
                  : m.kind == ModuleInfo::Embedding ? Shape{m.in, m.out} : Shape{m.out, m.in};
        if (param.size() > 5 && param.compare(param.size() - 5, 5, ".bias") == 0) s = {m.out};
        p.saved.push_back({param, s});
      }
    }
  }
  VKF_REQUIRE(!p.lora.empty() || !p.saved.empty(),
              "target_modules matches no module of this {} model (its linear layers are named like "
              "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; or use all-linear)",
              spec.model_type);
  for (const auto& k : c.modules_to_save)
    VKF_REQUIRE(saved_keys_used.contains(k), "modules_to_save entry '{}' matches no module of this {} model",
                k, spec.model_type);
  return p;
}

// peft's layouts, one formula for both kinds since ModuleInfo's in/out are the embedding's vocab
// and dim: linear A [r, in], B [out, r]; embedding A [r, vocab], B [dim, r].
Shape a_shape(const LoraModule& m, const ModuleInfo& info) { return {m.rank, info.in}; }
Shape b_shape(const LoraModule& m, const ModuleInfo& info) { return {info.out, m.rank}; }

const ModuleInfo& info_of(const std::vector<ModuleInfo>& mods, const std::string& name) {
  for (const auto& m : mods)
    if (m.name == name) return m;
  fail("internal: no module '{}'", name);
}

// Deterministic draws (independent of the standard library's distributions).
struct Draw {
  std::mt19937_64 rng;
  double uniform01() { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform01(); }
  double normal() {  // Box-Muller
    const double u1 = 1.0 - uniform01(), u2 = uniform01();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
};

Tensor filled(const Shape& s, Draw& d, const std::string& how, double param) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (auto& x : v) {
    if (how == "uniform") x = d.uniform(-param, param);
    else if (how == "normal") x = param * d.normal();
    else x = 0.0;
  }
  return Tensor::from_host(std::span<const double>(v), s);
}

}  // namespace

const LoraModule* LoraAdapter::find(const std::string& module) const {
  const auto it = by_module_.find(module);
  return it == by_module_.end() ? nullptr : &modules_[it->second];
}

std::vector<Shape> LoraAdapter::plan(const models::DecoderModel& model) {
  Plan p = make_plan(model.spec(), config_);
  modules_ = std::move(p.lora);
  // Every projection of every forward asks for its module by name.
  by_module_.clear();
  for (size_t i = 0; i < modules_.size(); ++i) by_module_[modules_[i].module] = i;
  saved_.clear();
  std::vector<Shape> saved_shapes;
  for (const auto& [name, shape] : p.saved) {
    saved_.push_back({name, Tensor()});
    saved_shapes.push_back(shape);
  }
  return saved_shapes;
}

void LoraAdapter::index_parameters() {
  params_.clear();
  // Module order of the model: LoRA pairs and saved copies interleaved as peft lists them.
  for (const auto& m : modules_) {
    if (m.embedding) {
      params_.push_back({peft_key(m.module + ".lora_embedding_A"), m.A});
      params_.push_back({peft_key(m.module + ".lora_embedding_B"), m.B});
    } else {
      params_.push_back({peft_key(m.module + ".lora_A.weight"), m.A});
      params_.push_back({peft_key(m.module + ".lora_B.weight"), m.B});
    }
  }
  for (const auto& [name, t] : saved_) params_.push_back({peft_key(name), t});
}

std::shared_ptr<LoraAdapter> LoraAdapter::create(const models::DecoderModel& model, const LoraConfig& config,
                                                 uint64_t seed) {
  std::shared_ptr<LoraAdapter> a(new LoraAdapter());
  a->config_ = config;
  a->plan(model);
  const auto mods = model_modules(model.spec());
  Draw d{std::mt19937_64(seed)};
  const std::string& init = config.init_lora_weights;
  for (auto& m : a->modules_) {
    const ModuleInfo& info = info_of(mods, m.module);
    const Shape as = a_shape(m, info), bs = b_shape(m, info);
    if (m.embedding) {
      // peft: zero A and standard-normal B (true/gaussian); both standard normal with false.
      m.A = filled(as, d, init == "false" ? "normal" : "zeros", 1.0);
      m.B = filled(bs, d, "normal", 1.0);
    } else {
      // A: kaiming_uniform(a=sqrt(5)) = U(±1/sqrt(in)), or N(0, 1/r) for gaussian; B: zeros, or
      // nn.Linear's own init U(±1/sqrt(r)) when init_lora_weights is false.
      if (init == "gaussian") m.A = filled(as, d, "normal", 1.0 / static_cast<double>(m.rank));
      else m.A = filled(as, d, "uniform", 1.0 / std::sqrt(static_cast<double>(info.in)));
      m.B = init == "false" ? filled(bs, d, "uniform", 1.0 / std::sqrt(static_cast<double>(m.rank)))
                            : Tensor::zeros(bs);
    }
  }
  for (auto& [name, t] : a->saved_) {
    // A copy of the base weight (the tied head copies the embedding matrix).
    const std::string src = name == model.spec().names.lm_head && model.spec().tie_word_embeddings
                                ? model.spec().names.embed : name;
    t = model.param(src).clone();
  }
  a->index_parameters();
  return a;
}

std::shared_ptr<LoraAdapter> LoraAdapter::load(const models::DecoderModel& model, const std::string& dir) {
  const fs::path root(dir);
  VKF_REQUIRE(fs::is_directory(root), "{}: not a folder; --adapter needs a peft adapter folder "
              "(adapter_config.json + adapter_model.safetensors)", dir);
  const fs::path weights = root / "adapter_model.safetensors";
  if (!fs::exists(weights) && fs::exists(root / "adapter_model.bin"))
    fail("{}: the adapter is in PyTorch pickle format (adapter_model.bin); save it with "
         "safe_serialization=True (adapter_model.safetensors)", dir);
  std::shared_ptr<LoraAdapter> a(new LoraAdapter());
  a->config_ = LoraConfig::from_file((root / "adapter_config.json").string());
  const std::vector<Shape> saved_shapes = a->plan(model);
  io::SafetensorsFile f(weights.string());
  const auto mods = model_modules(model.spec());
  std::set<std::string> used;
  auto take = [&](const std::string& key, const Shape& expect) {
    const auto* e = f.find(key);
    VKF_REQUIRE(e, "{}: tensor '{}' is missing; adapter_config.json implies it for this {} model",
                weights.string(), key, model.spec().model_type);
    VKF_REQUIRE(e->shape == expect, "{}: tensor '{}' has shape {}, expected {} (check r / rank_pattern "
                "in adapter_config.json and the base model)", weights.string(), key, shape_str(e->shape),
                shape_str(expect));
    used.insert(key);
    return f.load(key, DType::F32);
  };
  for (auto& m : a->modules_) {
    const ModuleInfo& info = info_of(mods, m.module);
    const std::string a_key = peft_key(m.module + (m.embedding ? ".lora_embedding_A" : ".lora_A.weight"));
    const std::string b_key = peft_key(m.module + (m.embedding ? ".lora_embedding_B" : ".lora_B.weight"));
    m.A = take(a_key, a_shape(m, info));
    m.B = take(b_key, b_shape(m, info));
    // peft also saves the whole embedding matrix next to an embedding LoRA (save_embedding_layers
    // "auto", for resized vocabularies). Accept it when it is the base model's matrix.
    const std::string base_key = peft_key(m.module + ".base_layer.weight");
    if (m.embedding && f.find(base_key)) {
      const Tensor& w = model.param(m.module + ".weight");
      // Compared in the base's dtype (an inference model may hold its matrices in f16).
      const Tensor stored = take(base_key, w.shape()).to(w.dtype());
      VKF_REQUIRE(stored.to_bytes() == w.to_bytes(), "{}: '{}' differs from the base model's embedding "
                  "matrix (an adapter made for a resized or different base model); vkformer needs the "
                  "same base model", weights.string(), base_key);
    }
  }
  for (size_t i = 0; i < a->saved_.size(); ++i)
    a->saved_[i].second = take(peft_key(a->saved_[i].first), saved_shapes[i]);
  for (const auto& e : f.entries()) {
    VKF_REQUIRE(used.contains(e.name), "{}: tensor '{}' does not belong to this adapter config on a {} "
                "model (a different base model, or an unsupported peft feature)", weights.string(), e.name,
                model.spec().model_type);
  }
  a->index_parameters();
  return a;
}

void LoraAdapter::save(const std::string& dir) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  VKF_REQUIRE(fs::is_directory(dir), "{}: cannot create the adapter folder ({})", dir, ec.message());
  std::vector<io::WriteTensor> tensors;
  for (const auto& [name, t] : params_) tensors.push_back(io::to_write_tensor(name, t));
  io::write_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), tensors);
  const std::string text = config_.to_json().dump(2) + "\n";
  io::write_file_atomic((fs::path(dir) / "adapter_config.json").string(),
                        {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

int64_t LoraAdapter::trainable_count() const {
  int64_t n = 0;
  for (const auto& [name, t] : params_) n += t.numel();
  return n;
}

void LoraAdapter::set_requires_grad(bool on) const {
  for (const auto& [name, t] : params_) Tensor(t).set_requires_grad(on);
}

Tensor LoraAdapter::adapt_linear(const std::string& module, const Tensor& x, const Tensor& y) const {
  const LoraModule* m = find(module);
  if (!m) return y;
  // peft: result + lora_B(lora_A(dropout(x))) * scaling; the dropout is drawn from the training
  // stream (identity outside training), so it replays under gradient checkpointing and resume.
  const Tensor h = ops::linear(ops::linear(ops::train_dropout(x, m->dropout), m->A), m->B);
  return ops::add(y, ops::scale(h, m->scaling));
}

Tensor LoraAdapter::adapt_embedding(const std::string& module, const Tensor& ids, const Tensor& y,
                                    std::optional<int64_t> padding_idx) const {
  const LoraModule* m = find(module);
  if (!m) return y;
  // peft: result + (embedding(ids, Aᵀ) @ Bᵀ) * scaling, with the base layer's padding_idx.
  const Tensor after_a = ops::embedding(m->A.transpose(0, 1).contiguous(), ids, padding_idx);
  return ops::add(y, ops::scale(ops::linear(after_a, m->B), m->scaling));
}

const Tensor* LoraAdapter::replacement(const std::string& param_name) const {
  for (const auto& [name, t] : saved_)
    if (name == param_name) return &t;
  return nullptr;
}

void LoraAdapter::merge_into(models::DecoderModel& model) {
  VKF_REQUIRE(merged_originals_.empty(), "the adapter is already merged into this model");
  autograd::NoGradScope no_grad;
  const auto& spec = model.spec();
  for (const auto& m : modules_) {
    const std::string weight = m.module + ".weight";
    VKF_REQUIRE(!(m.module + ".weight" == spec.names.lm_head && spec.tie_word_embeddings),
                "cannot merge LoRA on the tied LM head of this {} model into a single matrix (it is the "
                "embedding); untie the head (tie_word_embeddings false) first", spec.model_type);
    const Tensor& w = model.param(weight);
    // linear: Δ = scaling·B·A [out, in]; embedding: Δ = scaling·(B·A)ᵀ = scaling·Aᵀ·Bᵀ [vocab, dim].
    const Tensor delta = m.embedding ? ops::matmul(m.A, m.B, true, true) : ops::matmul(m.B, m.A);
    w.copy_(ops::add(w, ops::scale(delta, m.scaling)));
  }
  for (const auto& [name, t] : saved_) {
    VKF_REQUIRE(!(name == spec.names.lm_head && spec.tie_word_embeddings),
                "cannot merge the adapter's own lm_head copy into this {} model: its head is tied to the "
                "embedding; untie it (tie_word_embeddings false) first", spec.model_type);
    merged_originals_.push_back({name, model.param(name).clone()});
    model.param(name).copy_(t);
  }
  merged_originals_.push_back({"", Tensor()});  // marks "merged" even without saved modules
}

void LoraAdapter::unmerge_from(models::DecoderModel& model) {
  VKF_REQUIRE(!merged_originals_.empty(), "the adapter is not merged into this model");
  autograd::NoGradScope no_grad;
  for (const auto& m : modules_) {
    const Tensor& w = model.param(m.module + ".weight");
    const Tensor delta = m.embedding ? ops::matmul(m.A, m.B, true, true) : ops::matmul(m.B, m.A);
    w.copy_(ops::sub(w, ops::scale(delta, m.scaling)));
  }
  for (const auto& [name, t] : merged_originals_)
    if (!name.empty()) model.param(name).copy_(t);
  merged_originals_.clear();
}

int64_t count_trainable(const models::ArchSpec& spec, const LoraConfig& config) {
  const Plan p = make_plan(spec, config);
  const auto mods = model_modules(spec);
  int64_t n = 0;
  for (const auto& m : p.lora) {
    const ModuleInfo& info = info_of(mods, m.module);
    n += m.rank * (info.in + info.out);
  }
  for (const auto& [name, shape] : p.saved) n += shape_numel(shape);
  return n;
}

}  // namespace vkf::peft
