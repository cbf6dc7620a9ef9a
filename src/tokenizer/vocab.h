// A token <-> id table shared by the models, read from a tokenizer.json "vocab" object.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/components.h"

namespace vkf::tok {

struct Vocab {
  std::unordered_map<std::string, int32_t> ids;
  std::vector<std::string> tokens;  // by id; ids missing from the file are empty strings

  void add(const std::string& token, int32_t id);
  std::optional<int32_t> find(const std::string& t) const {
    auto it = ids.find(t);
    return it == ids.end() ? std::nullopt : std::optional<int32_t>(it->second);
  }
  const std::string* at(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < tokens.size() ? &tokens[static_cast<size_t>(id)]
                                                              : nullptr;
  }
  static Vocab from_object(const json& j, const std::string& where);
};

}  // namespace vkf::tok
