// The registry of supported Hugging Face model types: for each `model_type` of config.json, how
// to fill an ArchSpec (flags and HF tensor names) from the config. Adding an architecture that
// only recombines existing features is one entry in registry.cpp.
#pragma once

#include <string>
#include <vector>

#include "models/arch_spec.h"

namespace vkf::models {

struct ArchInfo {
  std::string model_type;
  std::string features;  // one line: what distinguishes it
  bool verified;         // a transformers parity fixture passes in CI (tests/fixtures/parity)
};

const std::vector<ArchInfo>& supported_architectures();

// Parses `config` (read from `file`) into a spec; unsupported model types or features are errors
// naming the key and what is supported.
ArchSpec spec_from_config(const nlohmann::json& config, const std::string& file);
ArchSpec spec_from_file(const std::string& config_json_path);

}  // namespace vkf::models
