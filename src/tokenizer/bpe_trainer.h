// Training a byte-level BPE tokenizer (GPT-2 style: ByteLevel pre-tokenizer with its regex, the
// 256 byte symbols as the base alphabet, merges of the most frequent adjacent pair until the
// vocabulary size is reached) and writing it as tokenizer.json + tokenizer_config.json that the
// Hugging Face tokenizers library loads. Ties between equally frequent pairs go to the
// lexicographically smallest pair, so training is deterministic.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace vkf::tok {

struct BpeTrainerOptions {
  int64_t vocab_size = 8000;  // including special tokens and the 256 byte symbols
  int64_t min_frequency = 2;  // pairs seen fewer times are not merged
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
};

// The tokenizer.json document for `texts`.
nlohmann::json train_byte_level_bpe(const std::vector<std::string>& texts, const BpeTrainerOptions& options);

// Trains on the files and writes <dir>/tokenizer.json and <dir>/tokenizer_config.json (the first
// special token serves as BOS, EOS and PAD). Returns the vocabulary size reached.
int64_t train_tokenizer_files(const std::vector<std::string>& files, const std::string& dir,
                              const BpeTrainerOptions& options);

}  // namespace vkf::tok
