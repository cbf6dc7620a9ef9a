// The interpreter that walks a parsed Jinja template and produces text, with jinja2's scoping
// (for-loop bodies and macros get their own scope; namespace() objects carry values out) and
// the globals transformers installs (raise_exception, strftime_now) plus range/namespace/dict.
#pragma once

#include <ctime>
#include <optional>
#include <string>

#include "tokenizer/jinja_ast.h"

namespace vkf::tokenizer::jinja {

struct RenderOptions {
  // Time strftime_now() formats; the local time of the call when unset.
  std::optional<std::tm> now;
};

// Renders `body` with `variables` (a ValueDict value) as the template's context. Errors are
// vkf::Error naming the template line and column; raise_exception() carries its message.
std::string render(const Body& body, const Value& variables, const RenderOptions& options);

}  // namespace vkf::tokenizer::jinja
