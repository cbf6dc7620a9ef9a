// Loading a model for inference the way the CLI commands accept it: a Hugging Face model folder,
// or a peft adapter folder (its base found through adapter_config.json's base_model_name_or_path,
// as peft's AutoPeftModelForCausalLM does), plus any number of `--adapter [NAME=]DIR` adapters.
#pragma once

#include <string>
#include <vector>

#include "models/decoder.h"

namespace vkf::cli {

struct LoadedModel {
  models::DecoderModel model;
  std::string model_dir;      // the base model folder
  std::string tokenizer_dir;  // where tokenizer files are: the adapter folder if it has them, else the base
};

// `adapters`: "DIR" or "NAME=DIR" each (unnamed: "default", then "adapter1", ...). `active`: the
// adapter to use ("" = the first loaded). `disable`: load them but run the base model.
LoadedModel load_for_inference(const std::string& model, const std::vector<std::string>& adapters,
                               const std::string& active = "", bool disable = false);

}  // namespace vkf::cli
