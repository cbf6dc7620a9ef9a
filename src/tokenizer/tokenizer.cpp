// Tokenizer: loading tokenizer.json / tokenizer_config.json and running the pipeline stages.
#include "tokenizer/tokenizer.h"

#include <fstream>
#include <map>
#include <sstream>

#include "tokenizer/added_tokens.h"
#include "tokenizer/components.h"
#include "vk/error.h"

namespace vkf {

using namespace tok;

struct Tokenizer::Impl {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post;
  std::unique_ptr<Decoder> decoder;
  std::vector<AddedToken> added;
  std::map<int32_t, size_t> added_by_id;
  std::map<std::string, int32_t> added_by_content;
  // Tokens matched on the raw text, and (normalized=true) on the normalized text.
  std::vector<const AddedToken*> raw_tokens, norm_tokens;
  std::vector<std::string> raw_patterns, norm_patterns;

  void encode_text(const std::string& text, bool at_start, std::vector<int32_t>& out) const {
    std::string norm = normalizer ? normalizer->normalize(text) : text;
    for (auto& seg : split_added(norm, norm_tokens, norm_patterns, at_start)) {
      if (seg.id >= 0) {
        out.push_back(seg.id);
        continue;
      }
      std::vector<Piece> pieces{{seg.text, seg.at_start}};
      if (pre_tokenizer) pre_tokenizer->split(pieces);
      for (const auto& p : pieces) model->tokenize(p.text, out);
    }
  }
};

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

static std::string read_text(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  VKF_REQUIRE(f.good(), "{}: cannot open the file; check the path", path.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Tokenizer Tokenizer::from_json_text(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({}); re-download or fix the file", origin, e.what());
  }
  VKF_REQUIRE(j.is_object(), "{}: expected a JSON object at the top level", origin);
  Tokenizer t;
  Impl& m = *t.impl_;
  auto has = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  m.model = make_model(field(j, origin, "model"), origin + ".model");
  if (has("normalizer")) m.normalizer = make_normalizer(j["normalizer"], origin + ".normalizer");
  if (has("pre_tokenizer"))
    m.pre_tokenizer = make_pre_tokenizer(j["pre_tokenizer"], origin + ".pre_tokenizer");
  if (has("post_processor"))
    m.post = make_post_processor(j["post_processor"], origin + ".post_processor");
  if (has("decoder")) m.decoder = make_decoder(j["decoder"], origin + ".decoder");
  if (has("added_tokens")) {
    const json& list = j["added_tokens"];
    VKF_REQUIRE(list.is_array(), "{}.added_tokens: expected an array", origin);
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string w = fmt::format("{}.added_tokens[{}]", origin, i);
      const json& e = list[i];
      AddedToken a;
      a.content = str_field(e, w, "content");
      const json& id = field(e, w, "id");
      VKF_REQUIRE(id.is_number_unsigned(), "{}.id: expected a non-negative integer", w);
      a.id = id.get<int32_t>();
      a.special = bool_field(e, w, "special", false);
      a.single_word = bool_field(e, w, "single_word", false);
      a.lstrip = bool_field(e, w, "lstrip", false);
      a.rstrip = bool_field(e, w, "rstrip", false);
      a.normalized = bool_field(e, w, "normalized", !a.special);
      m.added.push_back(a);
    }
  }
  for (size_t i = 0; i < m.added.size(); ++i) {
    const AddedToken& a = m.added[i];
    m.added_by_id[a.id] = i;
    m.added_by_content[a.content] = a.id;
  }
  for (const auto& a : m.added) {
    if (a.normalized) {
      m.norm_tokens.push_back(&a);
      m.norm_patterns.push_back(m.normalizer ? m.normalizer->normalize(a.content) : a.content);
    } else {
      m.raw_tokens.push_back(&a);
      m.raw_patterns.push_back(a.content);
    }
  }
  return t;
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  return from_json_text(read_text(path), path.string());
}

// A special-token entry in tokenizer_config.json: a string or {"content": ...}.
static std::string config_token(const json& cfg, const char* name, const std::string& where) {
  auto it = cfg.find(name);
  if (it == cfg.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  VKF_REQUIRE(it->is_object() && it->contains("content") && (*it)["content"].is_string(),
              "{}.{}: expected a string or {{\"content\": ...}}", where, name);
  return (*it)["content"].get<std::string>();
}

Tokenizer Tokenizer::from_folder(const std::filesystem::path& dir) {
  const auto tj = dir / "tokenizer.json";
  VKF_REQUIRE(std::filesystem::exists(tj),
              "{}: no tokenizer.json in this folder; vkformer needs the fast-tokenizer file "
              "(save it with transformers' tokenizer.save_pretrained)",
              dir.string());
  Tokenizer t = from_file(tj);
  const auto cfg_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(cfg_path)) {
    const std::string where = cfg_path.string();
    json cfg;
    try {
      cfg = json::parse(read_text(cfg_path));
    } catch (const json::exception& e) {
      fail("{}: not valid JSON ({})", where, e.what());
    }
    VKF_REQUIRE(cfg.is_object(), "{}: expected a JSON object", where);
    t.bos_ = config_token(cfg, "bos_token", where);
    t.eos_ = config_token(cfg, "eos_token", where);
    t.pad_ = config_token(cfg, "pad_token", where);
    t.unk_ = config_token(cfg, "unk_token", where);
    if (auto it = cfg.find("chat_template"); it != cfg.end() && it->is_string())
      t.chat_template_ = it->get<std::string>();
    // As transformers does for Llama-style tokenizers (Llama, CodeLlama, Gemma, Cohere classes;
    // other classes keep tokenizer.json's post-processor): add_bos_token / add_eos_token rebuild
    // the post-processor as [bos] $A [eos].
    const std::string cls = cfg.contains("tokenizer_class") && cfg["tokenizer_class"].is_string()
                                ? cfg["tokenizer_class"].get<std::string>()
                                : "";
    const bool llama_style = cls.find("Llama") != std::string::npos ||
                             cls.find("Gemma") != std::string::npos ||
                             cls.find("Cohere") != std::string::npos;
    const bool has_bos = cfg.contains("add_bos_token"), has_eos = cfg.contains("add_eos_token");
    if (llama_style && (has_bos || has_eos)) {
      const bool add_bos = bool_field(cfg, where, "add_bos_token", false);
      const bool add_eos = bool_field(cfg, where, "add_eos_token", false);
      std::vector<int32_t> before, after;
      auto id_of = [&](const std::string& tok, const char* what) {
        auto id = t.token_to_id(tok);
        VKF_REQUIRE(id, "{}: {} \"{}\" is not in the vocabulary", where, what, tok);
        return *id;
      };
      if (add_bos) before.push_back(id_of(t.bos_, "bos_token"));
      if (add_eos) after.push_back(id_of(t.eos_, "eos_token"));
      t.impl_->post = make_template(std::move(before), std::move(after));
    }
  }
  const auto jinja = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja)) t.chat_template_ = read_text(jinja);
  return t;
}

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  return std::filesystem::is_directory(path) ? from_folder(path) : from_file(path);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& m = *impl_;
  std::vector<int32_t> ids;
  for (auto& seg : split_added(text, m.raw_tokens, m.raw_patterns, true)) {
    if (seg.id >= 0)
      ids.push_back(seg.id);
    else
      m.encode_text(seg.text, seg.at_start, ids);
  }
  if (add_special_tokens && m.post) ids = m.post->process(std::move(ids));
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  for (int32_t id : ids) {
    if (auto it = m.added_by_id.find(id); it != m.added_by_id.end()) {
      const AddedToken& a = m.added[it->second];
      if (!(skip_special_tokens && a.special)) tokens.push_back(a.content);
      continue;
    }
    if (const std::string* t = m.model->id_to_token(id)) {
      // A model token whose text is also a special added token is skipped the same way.
      auto ac = m.added_by_content.find(*t);
      if (skip_special_tokens && ac != m.added_by_content.end() &&
          m.added[m.added_by_id.at(ac->second)].special)
        continue;
      tokens.push_back(*t);
    }
  }
  if (m.decoder)
    tokens = m.decoder->decode(std::move(tokens));
  else {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
    return joined;
  }
  std::string out;
  for (auto& t : tokens) out += t;
  return out;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end())
    return impl_->added[it->second].content;
  if (const std::string* t = impl_->model->id_to_token(id); t && (!t->empty() || id == 0))
    return *t;
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::token_to_id(const std::string& token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end())
    return it->second;
  return impl_->model->token_to_id(token);
}

int32_t Tokenizer::vocab_size() const {
  int32_t n = impl_->model->vocab_size();
  for (const auto& a : impl_->added) n = std::max(n, a.id + 1);
  return n;
}

}  // namespace vkf
