// Training data: plain text files, or records (JSONL, JSON, CSV/TSV, Parquet; see data/records.h)
// with a text column, prompt + completion columns (loss on the completion only) or a messages
// column (chat template; loss on assistant turns only); a file, a folder, or a Hub dataset
// org/name[@rev] whose split is chosen by file name (data/dataset.h). Tokenized, then packed into
// fixed-length sequences (EOS between documents) or kept one example per sequence (truncated,
// padded per batch). Errors name the file and line.
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
  std::string split = "train";  // for folders and Hub datasets
  // Column names; "" = the defaults "text", "prompt"/"completion", "messages", found by presence.
  // A column given here must be present in every record.
  std::string text_column, prompt_column, completion_column, messages_column;
};

// Documents of one file, of the split's files of a folder (sorted by name), or of a Hub dataset.
std::vector<Example> load_documents(const std::string& path, const Tokenizer& tokenizer,
                                    const DataOptions& options);
// Packs documents into sequences of exactly max_length (the remainder is dropped, as
// transformers' run_clm does) or truncates each to max_length.
std::vector<Example> make_sequences(const std::vector<Example>& docs, const DataOptions& options);

}  // namespace vkf::train
