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
// `dtype`: how the weight matrices are held: "f32", "f16", or "auto" (see matrix_dtype_for).
LoadedModel load_for_inference(const std::string& model, const std::vector<std::string>& adapters,
                               const std::string& active = "", bool disable = false,
                               const std::string& dtype = "f32");

// The matrix dtype for `--dtype` on the base model in `model_dir`: "f32", "f16" (the device must
// have 16-bit storage), or "auto": f16 when the checkpoint stores its matrices in 16 bits (f16 or
// bf16, as transformers' dtype="auto" loads them in 16 bits too) and the device has 16-bit
// storage, else f32 (an f32 checkpoint keeps its precision).
DType matrix_dtype_for(const std::string& dtype, const std::string& model_dir);

}  // namespace vkf::cli
