// vkf::Tokenizer: the Hugging Face `tokenizers` pipeline (added tokens, normalizer,
// pre-tokenizer, model, post-processor, decoder) loaded from tokenizer.json, producing the same
// ids and text as the library.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vkf {

namespace tok {
class Normalizer;
class PreTokenizer;
class Model;
class PostProcessor;
class Decoder;
struct AddedToken;
}  // namespace tok

class Tokenizer {
 public:
  // Loads a tokenizer.json file.
  static Tokenizer from_file(const std::filesystem::path& path);
  // Loads <dir>/tokenizer.json plus <dir>/tokenizer_config.json (special tokens, add_bos_token /
  // add_eos_token, chat_template) and <dir>/chat_template.jinja when present.
  static Tokenizer from_folder(const std::filesystem::path& dir);
  // A folder or a tokenizer.json file.
  static Tokenizer load(const std::filesystem::path& path);
  // Parses tokenizer.json text; `origin` names it in errors.
  static Tokenizer from_json_text(const std::string& text, const std::string& origin);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(const std::string& token) const;
  // Model vocabulary plus added tokens (the largest id + 1).
  int32_t vocab_size() const;

  // From tokenizer_config.json (empty when absent).
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }
  const std::string& pad_token() const { return pad_; }
  const std::string& unk_token() const { return unk_; }
  const std::string& chat_template() const { return chat_template_; }

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string bos_, eos_, pad_, unk_, chat_template_;
};

}  // namespace vkf
