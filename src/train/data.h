// Training data: plain text files, JSONL with "text", "prompt"+"completion" (loss on the
// completion only) or "messages" (chat template; loss on assistant turns only), or a folder of
// such files; tokenized, then packed into fixed-length sequences (EOS between documents) or kept
// one example per sequence (truncated, padded per batch). Errors name the file and line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace vkf::train {

struct Example {
  std::vector<int32_t> ids;
  std::vector<int32_t> labels;  // same length; -100 where no loss is taken (HF convention)
};

struct DataOptions {
  int64_t max_length = 512;
  bool packing = true;
  int32_t eos_id = -1;  // appended after every document (when >= 0)
};

// Documents of one file or every .txt/.jsonl file of a folder (sorted by name), tokenized.
std::vector<Example> load_documents(const std::string& path, const Tokenizer& tokenizer,
                                    const DataOptions& options);
// Packs documents into sequences of exactly max_length (the remainder is dropped, as
// transformers' run_clm does) or truncates each to max_length.
std::vector<Example> make_sequences(const std::vector<Example>& docs, const DataOptions& options);

}  // namespace vkf::train
