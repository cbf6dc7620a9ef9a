// Public chat-template API: parse once, render with a JSON context, and the apply_chat_template
// wrapper that assembles the variables the way transformers does.
#include "tokenizer/chat_template.h"

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_render.h"
#include "vk/error.h"

namespace vkf::tokenizer {

ChatTemplate ChatTemplate::parse(const std::string& source) {
  ChatTemplate t;
  t.body_ = std::make_shared<const jinja::Body>(jinja::parse_template(source));
  return t;
}

std::string ChatTemplate::render(const nlohmann::json& context, const std::optional<std::tm>& now) const {
  VKF_REQUIRE(context.is_object(), "chat template context must be a JSON object, got {}", context.type_name());
  jinja::RenderOptions options;
  options.now = now;
  return jinja::render(*body_, jinja::Value::from_json(context), options);
}

std::string apply_chat_template(const std::string& template_source, const nlohmann::json& messages,
                                bool add_generation_prompt, const nlohmann::json& extra,
                                const std::optional<std::tm>& now) {
  VKF_REQUIRE(messages.is_array(), "apply_chat_template: messages must be a JSON array, got {}",
              messages.type_name());
  VKF_REQUIRE(extra.is_object() || extra.is_null(), "apply_chat_template: extra must be a JSON object, got {}",
              extra.type_name());
  nlohmann::json context = nlohmann::json::object();
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  if (extra.is_object())
    for (const auto& [k, v] : extra.items()) context[k] = v;
  context["messages"] = messages;
  context["add_generation_prompt"] = add_generation_prompt;
  return ChatTemplate::parse(template_source).render(context, now);
}

}  // namespace vkf::tokenizer
