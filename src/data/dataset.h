// Choosing a dataset's files for a split the way the Hub and the `datasets` library name them:
// files `{split}-NNNNN-of-NNNNN.*` (push_to_hub and the Parquet conversion, any split name);
// otherwise split keywords in file or folder names, delimited by non-word characters
// (train/training; validation/valid/val/dev; test/testing/eval/evaluation); otherwise every data
// file is the train split. `--data` may be a file, a folder, or a Hub dataset `org/name[@rev]`
// (only the split's files are fetched into the shared cache; offline from the cache).
#pragma once

#include <string>
#include <vector>

namespace vkf::data {

// The split of one repository file path, by the rules above ("" when its name carries none).
std::string split_of(const std::string& path);
// The data files (is_record_file, or .txt) among `files` that belong to `split`, sorted. An unknown
// split is an error listing the splits there are; `what` names the dataset in errors.
std::vector<std::string> files_for_split(const std::vector<std::string>& files, const std::string& split,
                                         const std::string& what);
// Local paths of the data of `arg`: itself for a file; the split's files for a folder or a Hub
// dataset reference.
std::vector<std::string> resolve_data(const std::string& arg, const std::string& split);

}  // namespace vkf::data
