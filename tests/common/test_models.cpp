// Random decoder models for tests (see test_models.h).
#include "test_models.h"

#include <map>
#include <string>
#include <vector>

#include "models/registry.h"
#include "test_util.h"

namespace vkf::test {

models::DecoderModel random_decoder(const nlohmann::json& config, uint64_t seed, double stddev) {
  models::ArchSpec spec = models::spec_from_config(config, "config.json");
  Rng rng(seed);
  std::map<std::string, Tensor> params;
  for (const auto& [name, shape] : models::DecoderModel::parameter_shapes(spec)) {
    std::vector<double> v = rng.normal(static_cast<size_t>(shape_numel(shape)), stddev);
    if (name.find("norm") != std::string::npos && !spec.norm_one_plus)
      for (auto& x : v) x += 1.0;
    params[name] = to_gpu(as_f32(v), shape);
  }
  return models::DecoderModel(std::move(spec), std::move(params));
}

}  // namespace vkf::test
