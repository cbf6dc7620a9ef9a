// The options that say which data to read and how (`--split`, `--text-column`,
// `--prompt-column`, `--completion-column`, `--messages-column`), shared by commands that read
// training data, so that `vkformer train` registers them with one call.
#pragma once

#include <CLI/CLI.hpp>

#include "train/data.h"

namespace vkf::cli {

void add_data_options(CLI::App* command, train::DataOptions& options);

}  // namespace vkf::cli
