// Where a command-line argument names a model, tokenizer or adapter, it may be a local path or a
// Hub reference `org/name[@revision]`: a local path that exists always wins; a Hub reference
// becomes its snapshot folder in the shared cache, fetching only the files the use needs (online),
// or from the cache alone (HF_HUB_OFFLINE=1, or the Hub unreachable).
#pragma once

#include <string>

namespace vkf::hub {

enum class Need {
  Model,      // config.json, *.safetensors (+ index), tokenizer and generation files: top-level *.json, *.safetensors, *.jinja
  Tokenizer,  // tokenizer.json, tokenizer_config.json, special_tokens_map.json, added_tokens.json, chat templates, config.json
  Adapter,    // a peft adapter: adapter_config.json, adapter_model.safetensors, tokenizer files
};

// `arg` itself when it is an existing path or not shaped like a Hub reference; otherwise the local
// snapshot folder. Errors name the reference, what is missing and how to get it.
std::string resolve_path(const std::string& arg, Need need);

}  // namespace vkf::hub
