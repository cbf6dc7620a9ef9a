// The stages of the HF tokenizers pipeline (normalizer, pre-tokenizer, model, post-processor,
// decoder) as small interfaces, each built from its tokenizer.json object by a factory that
// reports malformed input as a vkf::Error naming the field.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vkf::tok {

using json = nlohmann::json;

// Field access with errors naming `where.field` and the expected type.
const json& field(const json& obj, const std::string& where, const char* name);
std::string str_field(const json& obj, const std::string& where, const char* name,
                      std::optional<std::string> fallback = std::nullopt);
bool bool_field(const json& obj, const std::string& where, const char* name, bool fallback);
std::string type_of(const json& obj, const std::string& where);

// One pre-tokenized piece; `at_start` is true when it begins at offset 0 of the input text
// (Metaspace's prepend_scheme "first" depends on it).
struct Piece {
  std::string text;
  bool at_start = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string s) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void split(std::vector<Piece>& pieces) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(const std::string& token) const = 0;
  virtual const std::string* id_to_token(int32_t id) const = 0;
  virtual int32_t vocab_size() const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual std::vector<int32_t> process(std::vector<int32_t> ids) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode(std::vector<std::string> tokens) const = 0;
};

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& where);
std::unique_ptr<Normalizer> make_precompiled(const json& j, const std::string& where);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& where);
std::unique_ptr<Model> make_model(const json& j, const std::string& where);
std::unique_ptr<Model> make_bpe(const json& j, const std::string& where);
std::unique_ptr<Model> make_wordpiece(const json& j, const std::string& where);
std::unique_ptr<Model> make_unigram(const json& j, const std::string& where);
std::unique_ptr<Model> make_wordlevel(const json& j, const std::string& where);
std::unique_ptr<PostProcessor> make_post_processor(const json& j, const std::string& where);
// A post-processor adding fixed ids before and after the sequence.
std::unique_ptr<PostProcessor> make_template(std::vector<int32_t> before,
                                             std::vector<int32_t> after);
std::unique_ptr<Decoder> make_decoder(const json& j, const std::string& where);

// Splits `text` at the [start, end) `matches` following an HF SplitDelimiterBehavior
// ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous").
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
SplitBehavior parse_behavior(const std::string& name, const std::string& where);
std::vector<std::string> split_by(std::string_view text,
                                  const std::vector<std::pair<size_t, size_t>>& matches,
                                  SplitBehavior behavior, bool invert = false);

// A `pattern` object {"String": s} or {"Regex": r}: match offsets in `text`.
struct Pattern {
  std::string literal;
  std::shared_ptr<const class Regex> regex;
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  static Pattern parse(const json& j, const std::string& where);
};

}  // namespace vkf::tok

namespace vkf::tok {
// GPT-2's reversible byte-to-character table used by ByteLevel: byte b is shown as
// byte_level_char(b); byte_level_byte maps back (-1 for characters outside the table).
const std::string& byte_level_char(uint8_t b);
int byte_level_byte(char32_t c);
}  // namespace vkf::tok
