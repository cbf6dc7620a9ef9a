// Decoder models with random weights, built in memory from a config.json as a JSON object: what
// tests train, compare and plan for without a model folder on disk.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "models/decoder.h"

namespace vkf::test {

// Every parameter normal(0, stddev) from a generator seeded with `seed`; normalization weights
// (names containing "norm") get 1 added, except where the architecture stores them as offsets
// from 1 (norm_one_plus). The config is read as config.json would be.
models::DecoderModel random_decoder(const nlohmann::json& config, uint64_t seed, double stddev);

// One training step's causal-LM loss on ids [batch, seq] (labels: the ids) and then, in
// parameter_names() order, the gradient of every parameter (contiguous), from a fresh tape. The
// model's parameters must require gradients.
std::vector<Tensor> loss_and_gradients(models::DecoderModel& model, const std::vector<int32_t>& ids,
                                       int64_t batch, int64_t seq);

}  // namespace vkf::test
