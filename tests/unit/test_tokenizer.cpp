// Unit tests for the tokenizer stages on small hand-checked inputs (behaviour documented by the
// HF tokenizers library), malformed tokenizer.json errors, and tokenizer_config.json handling.
// Parity with the library itself over a corpus is tests/cli/tokenizer_parity.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tokenizer/components.h"
#include "tokenizer/tokenizer.h"
#include "vk/error.h"

namespace {

using vkf::tok::json;
using Strings = std::vector<std::string>;

std::string norm(const std::string& spec, const std::string& text) {
  return vkf::tok::make_normalizer(json::parse(spec), "n")->normalize(text);
}

Strings pre(const std::string& spec, const std::string& text) {
  std::vector<vkf::tok::Piece> p{{text, true}};
  vkf::tok::make_pre_tokenizer(json::parse(spec), "p")->split(p);
  Strings out;
  for (auto& x : p) out.push_back(x.text);
  return out;
}

std::string dec(const std::string& spec, const Strings& tokens) {
  std::string out;
  for (auto& s : vkf::tok::make_decoder(json::parse(spec), "d")->decode(tokens)) out += s;
  return out;
}

// The error message of loading `text`, or "" when it loads.
std::string load_error(const std::string& text) {
  try {
    vkf::Tokenizer::from_json_text(text, "tokenizer.json");
  } catch (const vkf::Error& e) {
    return e.what();
  }
  return "";
}

const char* kWordLevel =
    R"({"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1}, "unk_token": "[UNK]"})";

TEST(TokenizerErrors, MalformedFilesNameTheField) {
  EXPECT_NE(load_error("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(load_error("{}").find("missing field \"model\""), std::string::npos);
  EXPECT_NE(load_error(R"({"model": {"type": "Nope"}})").find("tokenizer.json.model.type"),
            std::string::npos);
  const std::string bad_merge =
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b c"]}})";
  EXPECT_NE(load_error(bad_merge).find("tokenizer.json.model.merges[0]"), std::string::npos);
  const std::string missing_tok =
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "z"]]}})";
  EXPECT_NE(load_error(missing_tok).find("\"z\" is not in the vocab"), std::string::npos);
  const std::string dropout =
      R"({"model": {"type": "BPE", "dropout": 0.1, "vocab": {"a": 0}, "merges": []}})";
  EXPECT_NE(load_error(dropout).find("model.dropout"), std::string::npos);
  const std::string bad_vocab = R"({"model": {"type": "WordLevel", "vocab": {"a": "x"}}})";
  EXPECT_NE(load_error(bad_vocab).find("model.vocab[\"a\"]"), std::string::npos);
  const std::string pre =
      std::string(R"({"model": )") + kWordLevel +
      R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated"}})";
  EXPECT_NE(load_error(pre).find("pre_tokenizer.pattern.Regex"), std::string::npos);
  const std::string precompiled =
      std::string(R"({"model": )") + kWordLevel +
      R"(, "normalizer": {"type": "Precompiled", "precompiled_charsmap": ""}})";
  EXPECT_NE(load_error(precompiled).find("normalizer.precompiled_charsmap"), std::string::npos);
  const std::string behavior =
      std::string(R"({"model": )") + kWordLevel +
      R"(, "pre_tokenizer": {"type": "Split", "pattern": {"String": "-"}, "behavior": "Sideways"}})";
  EXPECT_NE(load_error(behavior).find("behavior"), std::string::npos);
  EXPECT_THROW(vkf::Tokenizer::from_file("/nonexistent/tokenizer.json"), vkf::Error);
}

TEST(TokenizerNormalizers, Basic) {
  EXPECT_EQ(norm(R"({"type": "Lowercase"})", "HeLLo ÀB"), "hello àb");
  EXPECT_EQ(norm(R"({"type": "NFD"})", "\xC3\xA9"), "e\xCC\x81");
  EXPECT_EQ(norm(R"({"type": "NFC"})", "e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(norm(R"({"type": "NFKC"})", "\xEF\xAC\x81"), "fi");  // the fi ligature
  EXPECT_EQ(norm(R"({"type": "NFKD"})", "\xE2\x91\xA0"), "1");   // circled one
  EXPECT_EQ(norm(R"({"type": "Strip", "strip_left": true, "strip_right": true})", "  a b \t"),
            "a b");
  EXPECT_EQ(norm(R"({"type": "Strip", "strip_left": false, "strip_right": true})", "  a  "), "  a");
  EXPECT_EQ(
      norm(R"({"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}]})",
           "caf\xC3\xA9"),
      "cafe");
  EXPECT_EQ(norm(R"({"type": "Replace", "pattern": {"String": " "}, "content": "_"})", "a b c"),
            "a_b_c");
  EXPECT_EQ(norm(R"({"type": "Replace", "pattern": {"Regex": "\\d+"}, "content": "#"})", "a12b3"),
            "a#b#");
  EXPECT_EQ(norm(R"({"type": "Prepend", "prepend": "_"})", "ab"), "_ab");
  EXPECT_EQ(norm(R"({"type": "Prepend", "prepend": "_"})", ""), "");
  // BERT: control characters dropped, whitespace to spaces, CJK padded, accents stripped.
  EXPECT_EQ(norm(R"({"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                     "strip_accents": null, "lowercase": true})",
                 "H\xC3\xA9llo\tWorld\x01\xE6\x9D\xB1"),
            "hello world \xE6\x9D\xB1 ");
}

TEST(TokenizerPreTokenizers, SplitBehaviours) {
  // The library's documented example: "the-final--countdown" split on "-".
  const std::string text = "the-final--countdown";
  auto split = [&](const char* behavior) {
    return pre(std::string(R"({"type": "Split", "pattern": {"String": "-"}, "behavior": ")") +
                   behavior + R"(", "invert": false})",
               text);
  };
  EXPECT_EQ(split("Removed"), (Strings{"the", "final", "countdown"}));
  EXPECT_EQ(split("Isolated"), (Strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithPrevious"), (Strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithNext"), (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split("Contiguous"), (Strings{"the", "-", "final", "--", "countdown"}));
}

TEST(TokenizerPreTokenizers, Others) {
  EXPECT_EQ(
      pre(R"({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true})", "Hello world"),
      (Strings{"\xC4\xA0Hello", "\xC4\xA0world"}));
  EXPECT_EQ(pre(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": false})", "a b\n"),
            (Strings{"a\xC4\xA0"
                     "b\xC4\x8A"}));
  EXPECT_EQ(
      pre(R"({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true})",
          "Hey friend"),
      (Strings{"\xE2\x96\x81Hey",
               "\xE2\x96\x81"
               "friend"}));
  EXPECT_EQ(pre(R"({"type": "Whitespace"})", "Hey friend!  ok?"),
            (Strings{"Hey", "friend", "!", "ok", "?"}));
  EXPECT_EQ(pre(R"({"type": "WhitespaceSplit"})", "Hey friend!  ok"),
            (Strings{"Hey", "friend!", "ok"}));
  EXPECT_EQ(pre(R"({"type": "Punctuation", "behavior": "Isolated"})", "Hey!?"),
            (Strings{"Hey", "!", "?"}));
  EXPECT_EQ(pre(R"({"type": "Digits", "individual_digits": true})", "Call 123"),
            (Strings{"Call ", "1", "2", "3"}));
  EXPECT_EQ(pre(R"({"type": "Digits", "individual_digits": false})", "Call 123"),
            (Strings{"Call ", "123"}));
  EXPECT_EQ(pre(R"({"type": "BertPreTokenizer"})", "Hey, you!"), (Strings{"Hey", ",", "you", "!"}));
}

TEST(TokenizerDecoders, Basic) {
  EXPECT_EQ(dec(R"({"type": "ByteFallback"})", {"<0x61>", "b", "<0xE2>"}), "ab\xEF\xBF\xBD");
  EXPECT_EQ(dec(R"({"type": "ByteFallback"})", {"<0xE2>", "<0x96>", "<0x81>"}), "\xE2\x96\x81");
  EXPECT_EQ(
      dec(R"({"type": "WordPiece", "prefix": "##", "cleanup": true})", {"hello", "##world", "!"}),
      "helloworld!");
  EXPECT_EQ(dec(R"({"type": "Strip", "content": " ", "start": 1, "stop": 0})", {" a", " b"}), "ab");
  EXPECT_EQ(dec(R"({"type": "BPEDecoder", "suffix": "</w>"})", {"hel", "lo</w>", "you</w>"}),
            "hello you");
  EXPECT_EQ(dec(R"({"type": "ByteLevel"})", {"\xC4\xA0Hello", "\xC4\xA0world"}), " Hello world");
  EXPECT_EQ(dec(R"({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"})",
                {"\xE2\x96\x81Hey",
                 "\xE2\x96\x81"
                 "friend"}),
            "Hey friend");
}

TEST(TokenizerModels, BpeMergesAndFallback) {
  const std::string j = R"({"model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
    "vocab": {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "abb": 4, "<0x7A>": 5},
    "merges": [["a", "b"], "ab b"]}})";
  const auto tok = vkf::Tokenizer::from_json_text(j, "t");
  EXPECT_EQ(tok.encode("abbab"), (std::vector<int32_t>{4, 3}));
  EXPECT_EQ(tok.encode("az"), (std::vector<int32_t>{1, 5}));  // z via byte fallback
  EXPECT_EQ(tok.encode("aq"), (std::vector<int32_t>{1, 0}));  // no byte token for q: unk
  EXPECT_EQ(tok.token_to_id("abb"), 4);
  EXPECT_EQ(tok.id_to_token(3), "ab");
  EXPECT_EQ(tok.vocab_size(), 6);
}

TEST(TokenizerModels, BpeFuseUnkAndAffixes) {
  // Consecutive unknown characters become one unk token when fuse_unk is set.
  const std::string vocab = R"("vocab": {"<unk>": 0, "a": 1}, "merges": [])";
  const auto fused = vkf::Tokenizer::from_json_text(
      R"({"model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, )" + vocab + "}}", "t");
  EXPECT_EQ(fused.encode("axyza"), (std::vector<int32_t>{1, 0, 1}));
  const auto unfused = vkf::Tokenizer::from_json_text(
      R"({"model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": false, )" + vocab + "}}", "t");
  EXPECT_EQ(unfused.encode("axyza"), (std::vector<int32_t>{1, 0, 0, 0, 1}));
  // continuing_subword_prefix on non-initial characters, end_of_word_suffix on the last.
  const auto affix = vkf::Tokenizer::from_json_text(
      R"({"model": {"type": "BPE", "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>",
          "vocab": {"a": 0, "##b": 1, "##c</w>": 2, "a##b": 3, "ab": 4, "abc</w>": 5},
          "merges": [["a", "##b"], ["ab", "##c</w>"]]}})",
      "t");
  EXPECT_EQ(affix.encode("abc"), (std::vector<int32_t>{5}));
}

TEST(TokenizerModels, WordPieceAndUnigram) {
  const auto wp = vkf::Tokenizer::from_json_text(
      R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
          "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3}},
          "pre_tokenizer": {"type": "WhitespaceSplit"}})",
      "t");
  EXPECT_EQ(wp.encode("unaffable unx"), (std::vector<int32_t>{1, 2, 3, 0}));
  const auto ug = vkf::Tokenizer::from_json_text(
      R"({"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0], ["a", -1], ["b", -1],
          ["ab", -1.5], ["abc", -5]]}})",
      "t");
  EXPECT_EQ(ug.encode("abab"), (std::vector<int32_t>{3, 3}));  // -3 beats a,b,a,b at -4
  EXPECT_EQ(ug.encode("abxy"), (std::vector<int32_t>{3, 0}));  // unknowns fused into one
}

TEST(TokenizerAddedTokens, MatchedBeforeTheModel) {
  const auto tok = vkf::Tokenizer::from_json_text(
      R"({"model": {"type": "WordLevel", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "a": 1, "b": 2}},
          "pre_tokenizer": {"type": "WhitespaceSplit"},
          "added_tokens": [
            {"id": 3, "content": "<m>", "lstrip": true, "rstrip": false, "single_word": false, "normalized": false, "special": true},
            {"id": 4, "content": "<w>", "lstrip": false, "rstrip": false, "single_word": true, "normalized": false, "special": false}]})",
      "t");
  EXPECT_EQ(tok.encode("a <m>b"), (std::vector<int32_t>{1, 3, 2}));
  EXPECT_EQ(tok.encode("a <w> b"), (std::vector<int32_t>{1, 4, 2}));
  EXPECT_EQ(tok.encode("a<w>"), (std::vector<int32_t>{0}));  // not a single word: "a<w>" is unknown
  const std::vector<int32_t> ids{1, 3, 2};
  EXPECT_EQ(tok.decode(ids), "a <m> b");
  EXPECT_EQ(tok.decode(ids, true), "a b");
}

TEST(TokenizerFolder, ConfigOverridesPostProcessor) {
  const auto dir = std::filesystem::temp_directory_path() / "vkf_test_tokenizer_folder";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "WordLevel", "unk_token": "<unk>",
      "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3}}, "pre_tokenizer": {"type": "WhitespaceSplit"},
      "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
      {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}})";
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}, "add_bos_token": false,
            "add_eos_token": true, "chat_template": "from config", "tokenizer_class": "LlamaTokenizer"})";
  std::ofstream(dir / "chat_template.jinja") << "{{ messages }}";
  const auto tok = vkf::Tokenizer::from_folder(dir);
  EXPECT_EQ(tok.encode("a a"), (std::vector<int32_t>{3, 3, 2}));
  EXPECT_EQ(tok.encode("a", false), (std::vector<int32_t>{3}));
  EXPECT_EQ(tok.bos_token(), "<s>");
  EXPECT_EQ(tok.eos_token(), "</s>");
  EXPECT_EQ(tok.chat_template(), "{{ messages }}");
  // Other tokenizer classes keep tokenizer.json's post-processor, as transformers does.
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": "<s>", "add_bos_token": false, "tokenizer_class": "Qwen2Tokenizer"})";
  std::filesystem::remove(dir / "chat_template.jinja");
  const auto other = vkf::Tokenizer::from_folder(dir);
  EXPECT_EQ(other.encode("a"), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(other.chat_template(), "");
  std::filesystem::remove_all(dir);
}

}  // namespace
