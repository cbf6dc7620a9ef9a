// The generic decoder's parameters: their names and shapes from the architecture, loading them
// from a Hugging Face folder (and which matrix dtype a checkpoint holds), converting the matrices
// between f32 and f16, adapters, and saving the model back (see decoder.h). The forward pass and
// the decode step are in decoder.cpp.
#include <algorithm>
#include <filesystem>

#include "core/autograd.h"
#include "io/safetensors.h"
#include "models/decoder.h"
#include "models/registry.h"
#include "vk/error.h"

namespace vkf::models {
namespace fs = std::filesystem;

std::vector<std::pair<std::string, Shape>> DecoderModel::parameter_shapes(const ArchSpec& s) {
  std::vector<std::pair<std::string, Shape>> out;
  const int64_t H = s.hidden_size, D = s.head_dim, I = s.intermediate_size;
  const int64_t qdim = s.num_heads * D, kvdim = s.num_kv_heads * D;
  const auto& n = s.names;
  out.push_back({n.embed, {s.vocab_size, H}});
  auto add_norm = [&](const std::string& prefix, int64_t width, bool bias) {
    out.push_back({prefix + ".weight", {width}});
    if (bias) out.push_back({prefix + ".bias", {width}});
  };
  for (int64_t l = 0; l < s.num_layers; ++l) {
    auto L = [&](const std::string& leaf) { return s.layer_name(l, leaf); };
    if (s.fused_qkv) {
      out.push_back({L(n.qkv + ".weight"), {qdim + 2 * kvdim, H}});
    } else {
      for (auto [proj, rows] : {std::pair{&n.q, qdim}, {&n.k, kvdim}, {&n.v, kvdim}}) {
        out.push_back({L(*proj + ".weight"), {rows, H}});
        if (s.qkv_bias) out.push_back({L(*proj + ".bias"), {rows}});
      }
    }
    out.push_back({L(n.o + ".weight"), {H, qdim}});
    if (s.o_bias) out.push_back({L(n.o + ".bias"), {H}});
    if (s.qk_norm == QkNorm::PerHead) {
      add_norm(L(n.q_norm), D, false);
      add_norm(L(n.k_norm), D, false);
    } else if (s.qk_norm == QkNorm::Full) {
      add_norm(L(n.q_norm), qdim, false);
      add_norm(L(n.k_norm), kvdim, false);
    }
    if (s.mlp == MlpKind::Plain) {
      out.push_back({L(n.fc + ".weight"), {I, H}});
      if (s.mlp_bias) out.push_back({L(n.fc + ".bias"), {I}});
      out.push_back({L(n.proj + ".weight"), {H, I}});
      if (s.mlp_bias) out.push_back({L(n.proj + ".bias"), {H}});
    } else if (s.fused_gate_up) {
      out.push_back({L(n.gate_up + ".weight"), {2 * I, H}});
      out.push_back({L(n.down + ".weight"), {H, I}});
    } else {
      for (auto [proj, shape] : {std::pair{&n.gate, Shape{I, H}}, {&n.up, Shape{I, H}}, {&n.down, Shape{H, I}}}) {
        out.push_back({L(*proj + ".weight"), shape});
        if (s.mlp_bias) out.push_back({L(*proj + ".bias"), {shape[0]}});
      }
    }
    add_norm(L(n.norm1), H, s.norm_bias);
    if (s.placement != NormPlacement::Parallel) add_norm(L(n.norm2), H, s.norm_bias);
    if (s.placement == NormPlacement::Sandwich) {
      add_norm(L(n.pre_ff_norm), H, s.norm_bias);
      add_norm(L(n.post_ff_norm), H, s.norm_bias);
    }
  }
  add_norm(n.final_norm, H, s.norm_bias);
  if (!s.tie_word_embeddings) out.push_back({n.lm_head, {s.vocab_size, H}});
  return out;
}

DecoderModel::DecoderModel(ArchSpec spec, std::map<std::string, Tensor> params)
    : spec_(std::move(spec)), params_(std::move(params)) {
  const auto shapes = parameter_shapes(spec_);
  // Matrices share one dtype: that of the embedding (always a matrix).
  if (auto it = params_.find(spec_.names.embed);
      it != params_.end() && it->second.dtype() == DType::F16)
    matrix_dtype_ = DType::F16;
  for (const auto& [name, shape] : shapes) {
    auto it = params_.find(name);
    VKF_REQUIRE(it != params_.end(), "{} model: parameter '{}' is missing", spec_.model_type, name);
    const DType want = shape.size() == 2 ? matrix_dtype_ : DType::F32;
    VKF_REQUIRE(it->second.shape() == shape && it->second.dtype() == want,
                "{} model: parameter '{}' has shape {} ({}), expected {} ({})", spec_.model_type,
                name, shape_str(it->second.shape()), dtype_name(it->second.dtype()),
                shape_str(shape), dtype_name(want));
    order_.push_back(name);
  }
}

void DecoderModel::convert_matrices(DType dtype) {
  VKF_REQUIRE(dtype == DType::F32 || dtype == DType::F16,
              "convert_matrices: weight matrices are f32 or f16, not {}", dtype_name(dtype));
  if (dtype == matrix_dtype_) return;
  VKF_REQUIRE(
      dtype == DType::F32 || !std::any_of(params_.begin(), params_.end(),
                                          [](const auto& p) { return p.second.requires_grad(); }),
      "convert_matrices: the model's parameters require gradients; f16 matrices are for inference");
  autograd::NoGradScope no_grad;
  for (const auto& [name, shape] : parameter_shapes(spec_))
    if (shape.size() == 2) params_[name] = params_[name].to(dtype);
  matrix_dtype_ = dtype;
}

DecoderModel DecoderModel::load(const std::string& dir, DType matrix_dtype) {
  VKF_REQUIRE(matrix_dtype == DType::F32 || matrix_dtype == DType::F16,
              "{}: weight matrices load as f32 or f16, not {}", dir, dtype_name(matrix_dtype));
  const fs::path root(dir);
  VKF_REQUIRE(fs::is_directory(root), "{}: not a folder; --model needs a Hugging Face model folder "
              "(config.json + *.safetensors)", dir);
  ArchSpec spec = spec_from_file((root / "config.json").string());
  io::SafetensorsModel weights(dir);
  std::map<std::string, Tensor> params;
  for (const auto& [name, shape] : parameter_shapes(spec)) {
    VKF_REQUIRE(weights.contains(name),
                "{}: tensor '{}' is missing; a {} model with this config.json needs it", weights.source(),
                name, spec.model_type);
    const auto& entry = weights.entry(name);
    VKF_REQUIRE(entry.shape == shape, "{}: tensor '{}' has shape {}, but config.json implies {}",
                weights.file_of(name).path(), name, shape_str(entry.shape), shape_str(shape));
    VKF_REQUIRE(entry.dtype == io::StDtype::F32 || entry.dtype == io::StDtype::F16 ||
                    entry.dtype == io::StDtype::BF16 || entry.dtype == io::StDtype::F64,
                "{}: tensor '{}' is {}; weights must be floating point",
                weights.file_of(name).path(), name, io::st_dtype_name(entry.dtype));
    params[name] = weights.load(name, shape.size() == 2 ? matrix_dtype : DType::F32);
  }
  return DecoderModel(std::move(spec), std::move(params));
}

DType DecoderModel::checkpoint_matrix_dtype(const std::string& dir) {
  const ArchSpec spec = spec_from_file((fs::path(dir) / "config.json").string());
  const io::SafetensorsModel weights(dir);
  VKF_REQUIRE(weights.contains(spec.names.embed),
              "{}: tensor '{}' is missing; a {} model with this "
              "config.json needs it",
              weights.source(), spec.names.embed, spec.model_type);
  const io::StDtype stored = weights.entry(spec.names.embed).dtype;
  return stored == io::StDtype::F16 || stored == io::StDtype::BF16 ? DType::F16 : DType::F32;
}

const Tensor& DecoderModel::param(const std::string& name) const {
  // Inside forward() the active adapter's modules_to_save copies stand in for base weights.
  if (const nn::ModuleAdapter* a = nn::active_adapter()) {
    if (const Tensor* r = a->replacement(name)) return *r;
  }
  auto it = params_.find(name);
  VKF_REQUIRE(it != params_.end(), "{} model has no parameter '{}'", spec_.model_type, name);
  return it->second;
}

std::vector<Tensor> DecoderModel::parameters() const {
  std::vector<Tensor> out;
  for (const auto& n : order_) out.push_back(params_.at(n));
  return out;
}

void DecoderModel::set_requires_grad(bool on) {
  VKF_REQUIRE(!on || matrix_dtype_ == DType::F32,
              "this {} model holds f16 weight matrices, which are for inference; load it with f32 "
              "weights to train it",
              spec_.model_type);
  for (auto& [name, t] : params_) t.set_requires_grad(on);
}

void DecoderModel::add_adapter(const std::string& name, std::shared_ptr<nn::ModuleAdapter> adapter) {
  VKF_REQUIRE(!name.empty() && adapter, "add_adapter: an adapter needs a name and a value");
  VKF_REQUIRE(!adapters_.contains(name), "an adapter named '{}' is already loaded; choose another name",
              name);
  adapters_[name] = std::move(adapter);
  if (active_.empty()) active_ = name;
}

void DecoderModel::set_active_adapter(const std::string& name) {
  if (!adapters_.contains(name)) {
    std::string have;
    for (const auto& [n, a] : adapters_) have += (have.empty() ? "" : ", ") + n;
    fail("no adapter named '{}' is loaded (loaded: {})", name, have.empty() ? "none" : have);
  }
  active_ = name;
}

void DecoderModel::set_adapters_enabled(bool on) { adapters_enabled_ = on; }

const nn::ModuleAdapter* DecoderModel::effective_adapter() const {
  return adapters_enabled_ && !active_.empty() ? adapters_.at(active_).get() : nullptr;
}

void DecoderModel::save(const std::string& dir, uint64_t max_shard_bytes) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  VKF_REQUIRE(fs::is_directory(dir), "{}: cannot create the output folder ({})", dir, ec.message());
  std::vector<io::WriteTensor> tensors;
  for (const auto& name : order_) tensors.push_back(io::to_write_tensor(name, params_.at(name)));
  io::write_sharded(dir, tensors, max_shard_bytes);
  nlohmann::json config = spec_.config;
  config.erase("torch_dtype");
  config["dtype"] = matrix_dtype_ == DType::F16 ? "float16" : "float32";
  const std::string text = config.dump(2) + "\n";
  io::write_file_atomic((fs::path(dir) / "config.json").string(),
                        {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

}  // namespace vkf::models
