// Random decoder models for tests (see test_models.h).
#include "test_models.h"

#include <map>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "models/registry.h"
#include "test_util.h"
#include "train/causal_lm.h"

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

std::vector<Tensor> loss_and_gradients(models::DecoderModel& model, const std::vector<int32_t>& ids,
                                       int64_t batch, int64_t seq) {
  const std::vector<int64_t> labels(ids.begin(), ids.end());
  const Tensor tids = Tensor::from_bytes(ids.data(), DType::I32, {batch, seq});
  autograd::Tape tape;
  Tensor loss;
  {
    autograd::TapeScope scope(tape);
    loss = train::causal_lm_loss(model.forward(tids, Tensor()), labels);
  }
  tape.backward(loss);
  std::vector<Tensor> out{loss};
  for (const auto& n : model.parameter_names()) out.push_back(model.param(n).grad().contiguous());
  return out;
}

}  // namespace vkf::test
