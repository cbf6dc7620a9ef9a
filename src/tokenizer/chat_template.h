// Hugging Face chat templates rendered in C++ with the semantics of transformers'
// apply_chat_template: a jinja2 environment with trim_blocks, lstrip_blocks and loop controls,
// the tojson/raise_exception/strftime_now definitions transformers installs, and the template
// variables it passes (messages, add_generation_prompt, tools, special tokens, extra kwargs).
#pragma once

#include <nlohmann/json.hpp>

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace vkf::tokenizer {

namespace jinja {
struct Stmt;
}

class ChatTemplate {
 public:
  // Parses the template once; throws vkf::Error naming line and column when it is malformed.
  static ChatTemplate parse(const std::string& source);

  // Renders with `context` (a JSON object) as the template's variables. `now` fixes the time
  // strftime_now() sees, for reproducible output; otherwise it is the local time of the call.
  // Errors (including the template's own raise_exception) are vkf::Error.
  std::string render(const nlohmann::json& context, const std::optional<std::tm>& now = std::nullopt) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Stmt>>> body_;
};

// transformers' apply_chat_template(tokenize=False): renders with messages,
// add_generation_prompt and every key of `extra` (bos_token, eos_token, tools, documents,
// enable_thinking, date_string, ...) as variables. `tools` and `documents` are passed as None
// when absent, as transformers does.
std::string apply_chat_template(const std::string& template_source, const nlohmann::json& messages,
                                bool add_generation_prompt, const nlohmann::json& extra = nlohmann::json::object(),
                                const std::optional<std::tm>& now = std::nullopt);

}  // namespace vkf::tokenizer
