// Model + adapter loading for the CLI (see model_args.h).
#include "cli/model_args.h"

#include <fmt/format.h>

#include <filesystem>

#include "hub/resolve.h"
#include "peft/lora.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf::cli {
namespace fs = std::filesystem;

namespace {
// A peft adapter folder given as --model: adapter_config.json and no config.json of its own.
bool is_adapter_only_folder(const std::string& dir) {
  return fs::exists(fs::path(dir) / "adapter_config.json") && !fs::exists(fs::path(dir) / "config.json");
}
}  // namespace

DType matrix_dtype_for(const std::string& dtype, const std::string& model_dir) {
  VKF_REQUIRE(dtype == "auto" || dtype == "f16" || dtype == "f32",
              "--dtype '{}': use auto (the checkpoint's precision), f16 or f32", dtype);
  if (dtype == "f32") return DType::F32;
  const bool storage16 = vk::Context::get().info().storage16;
  if (dtype == "f16") {
    VKF_REQUIRE(storage16,
                "--dtype f16: the Vulkan device {} has no 16-bit storage buffer access; use "
                "--dtype f32",
                vk::Context::get().info().name);
    return DType::F16;
  }
  return storage16 ? models::DecoderModel::checkpoint_matrix_dtype(model_dir) : DType::F32;
}

LoadedModel load_for_inference(const std::string& model_arg,
                               const std::vector<std::string>& adapters, const std::string& active,
                               bool disable, const std::string& dtype) {
  // Any folder may be a Hub reference org/name[@rev]: resolved through the shared cache.
  const std::string model = hub::resolve_path(model_arg, hub::Need::Adapter);
  std::string base = model;
  std::vector<std::string> specs = adapters;
  std::string tokenizer_dir = model;
  if (is_adapter_only_folder(model)) {
    const auto cfg = peft::LoraConfig::from_file((fs::path(model) / "adapter_config.json").string());
    VKF_REQUIRE(!cfg.base_model_name_or_path.empty(),
                "{}: an adapter folder whose adapter_config.json names no base_model_name_or_path; pass "
                "--model BASE_DIR --adapter {}", model, model);
    base = hub::resolve_path(cfg.base_model_name_or_path, hub::Need::Model);  // usually a Hub id, as peft writes it
    VKF_REQUIRE(fs::is_directory(base), "{}: base_model_name_or_path '{}' is not a folder here; pass "
                "--model BASE_DIR --adapter {}", model, base, model);
    specs.insert(specs.begin(), model);
    if (!fs::exists(fs::path(model) / "tokenizer.json")) tokenizer_dir = base;
  }
  LoadedModel out{models::DecoderModel::load(base, matrix_dtype_for(dtype, base)), base,
                  tokenizer_dir};
  int unnamed = 0;
  for (const auto& s : specs) {
    const size_t eq = s.find('=');
    std::string name, dir = s;
    if (eq != std::string::npos && !fs::exists(s)) {
      name = s.substr(0, eq);
      dir = s.substr(eq + 1);
    } else {
      name = unnamed++ == 0 ? "default" : fmt::format("adapter{}", unnamed - 1);
    }
    out.model.add_adapter(name, peft::LoraAdapter::load(out.model, hub::resolve_path(dir, hub::Need::Adapter)));
  }
  if (!active.empty()) out.model.set_active_adapter(active);
  out.model.set_adapters_enabled(!disable);
  return out;
}

}  // namespace vkf::cli
