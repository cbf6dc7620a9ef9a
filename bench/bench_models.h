// Model shapes shared by the benchmarks (train_bench, decode_bench) and their PyTorch
// counterparts: the SmolLM2-135M and Llama-3.2-1B shapes of the performance issue, and a tiny one
// that runs anywhere; weights are cheap pseudo-random values (throughput does not depend on them).
#pragma once

#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include "models/decoder.h"
#include "models/registry.h"
#include "vk/error.h"

namespace vkf::bench {

// The shapes of bench/torch_train_bench.py (SmolLM2-135M and Llama-3.2-1B), and a tiny one that
// runs anywhere (CI-sized, for checking the benchmark itself).
inline nlohmann::json shape_config(const std::string& shape) {
  nlohmann::json c = {{"model_type", "llama"},        {"hidden_act", "silu"},
                      {"rms_norm_eps", 1e-5},         {"tie_word_embeddings", true},
                      {"attention_bias", false},      {"mlp_bias", false},
                      {"max_position_embeddings", 4096}};
  if (shape == "135m") {
    c.update({{"hidden_size", 576}, {"intermediate_size", 1536}, {"num_hidden_layers", 30},
              {"num_attention_heads", 9}, {"num_key_value_heads", 3}, {"vocab_size", 49152},
              {"rope_theta", 10000.0}});
  } else if (shape == "1b") {
    c.update({{"hidden_size", 2048}, {"intermediate_size", 8192}, {"num_hidden_layers", 16},
              {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"vocab_size", 128256},
              {"rope_theta", 500000.0}});
  } else if (shape == "tiny") {
    c.update({{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"vocab_size", 512},
              {"rope_theta", 10000.0}});
  } else {
    throw Error(fmt::format("--shape '{}': expected 135m, 1b or tiny", shape));
  }
  return c;
}

// Deterministic pseudo-random weights (a cheap hash, not a distribution anyone trains from:
// throughput does not depend on the values as long as they are finite and moderate).
inline Tensor pseudo_random(const Shape& s, uint64_t seed, float scale, float offset) {
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& e : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    e = offset + scale * (static_cast<float>(x >> 40) / static_cast<float>(1 << 24) - 0.5f);
  }
  return Tensor::from_host(std::span<const float>(v), s);
}


// A Llama model of the shape with pseudo-random matrices and unit norm weights; `params` gets the
// parameter count.
inline models::DecoderModel make_model(const std::string& shape, int64_t& params) {
  models::ArchSpec spec = models::spec_from_config(shape_config(shape), "bench " + shape);
  std::map<std::string, Tensor> weights;
  uint64_t seed = 1;
  params = 0;
  for (const auto& [name, s] : models::DecoderModel::parameter_shapes(spec)) {
    weights[name] = s.size() == 1 ? Tensor::full(s, 1.0f) : pseudo_random(s, seed++, 0.04f, 0.0f);
    params += shape_numel(s);
  }
  return models::DecoderModel(spec, std::move(weights));
}

}  // namespace vkf::bench
