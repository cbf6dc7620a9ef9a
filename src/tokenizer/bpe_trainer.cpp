// Byte-level BPE training (see bpe_trainer.h).
#include "tokenizer/bpe_trainer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "io/safetensors.h"
#include "tokenizer/components.h"
#include "vk/error.h"

namespace vkf::tok {
using nlohmann::json;

namespace {

const json kByteLevel = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                         {"use_regex", true}};

// Splits a byte-level word into its characters (each one UTF-8 sequence).
std::vector<std::string> symbols_of(const std::string& word) {
  std::vector<std::string> out;
  for (size_t i = 0; i < word.size();) {
    const auto c = static_cast<unsigned char>(word[i]);
    const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    out.push_back(word.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace

json train_byte_level_bpe(const std::vector<std::string>& texts, const BpeTrainerOptions& o) {
  const int64_t base = static_cast<int64_t>(o.special_tokens.size()) + 256;
  VKF_REQUIRE(o.vocab_size >= base, "--vocab-size {} is too small: the {} special tokens and 256 byte "
              "symbols alone need {}", o.vocab_size, o.special_tokens.size(), base);
  // Word frequencies after ByteLevel pre-tokenization.
  const auto pre = make_pre_tokenizer(kByteLevel, "trainer.pre_tokenizer");
  std::unordered_map<std::string, int64_t> counts;
  for (const auto& text : texts) {
    std::vector<Piece> pieces{Piece{text, true}};
    pre->split(pieces);
    for (const auto& p : pieces) ++counts[p.text];
  }
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  std::vector<std::string> sorted;
  for (const auto& [w, c] : counts) sorted.push_back(w);
  std::sort(sorted.begin(), sorted.end());  // a fixed order, whatever the hash map did
  for (const auto& w : sorted) words.push_back({symbols_of(w), counts[w]});

  json vocab = json::object();
  int64_t next = 0;
  for (const auto& s : o.special_tokens) vocab[s] = next++;
  for (int b = 0; b < 256; ++b) vocab[byte_level_char(static_cast<uint8_t>(b))] = next++;
  json merges = json::array();
  while (next < o.vocab_size) {
    std::map<std::pair<std::string, std::string>, int64_t> pairs;  // ordered: ties -> smallest pair
    for (const auto& [syms, c] : words)
      for (size_t i = 0; i + 1 < syms.size(); ++i) pairs[{syms[i], syms[i + 1]}] += c;
    auto best = pairs.end();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (best == pairs.end() || it->second > best->second) best = it;
    if (best == pairs.end() || best->second < o.min_frequency) break;
    const auto [a, b] = best->first;
    const std::string merged = a + b;
    if (!vocab.contains(merged)) vocab[merged] = next++;
    merges.push_back({a, b});
    for (auto& [syms, c] : words) {
      std::vector<std::string> out;
      for (size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
          out.push_back(merged);
          ++i;
        } else {
          out.push_back(syms[i]);
        }
      }
      syms.swap(out);
    }
  }
  json added = json::array();
  for (size_t i = 0; i < o.special_tokens.size(); ++i) {
    added.push_back({{"id", i}, {"content", o.special_tokens[i]}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  json post = kByteLevel;
  post["trim_offsets"] = false;
  return {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
          {"normalizer", nullptr}, {"pre_tokenizer", kByteLevel}, {"post_processor", post},
          {"decoder", kByteLevel},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                     {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                     {"vocab", vocab}, {"merges", merges}}}};
}

int64_t train_tokenizer_files(const std::vector<std::string>& files, const std::string& dir,
                              const BpeTrainerOptions& o) {
  VKF_REQUIRE(!files.empty(), "tokenizer train: give at least one text file");
  std::vector<std::string> texts;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    VKF_REQUIRE(in, "{}: cannot open", f);
    std::stringstream ss;
    ss << in.rdbuf();
    texts.push_back(ss.str());
  }
  const json tok = train_byte_level_bpe(texts, o);
  std::filesystem::create_directories(dir);
  auto write = [&](const char* name, const json& j) {
    const std::string text = j.dump(2) + "\n";
    io::write_file_atomic((std::filesystem::path(dir) / name).string(),
                          {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  };
  write("tokenizer.json", tok);
  const std::string special = o.special_tokens.empty() ? "" : o.special_tokens[0];
  write("tokenizer_config.json", {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"bos_token", special},
                                  {"eos_token", special}, {"pad_token", special}, {"add_bos_token", false}});
  return static_cast<int64_t>(tok["model"]["vocab"].size());
}

}  // namespace vkf::tok
