// Data selection options (see data_args.h).
#include "cli/data_args.h"

namespace vkf::cli {

void add_data_options(CLI::App* c, train::DataOptions& d) {
  c->add_option("--split", d.split, "split of a dataset folder or Hub dataset, by file name (train, validation, test, ...)")
      ->capture_default_str();
  c->add_option("--text-column", d.text_column, "column holding plain text (default: text)");
  c->add_option("--prompt-column", d.prompt_column, "column holding the prompt (default: prompt)");
  c->add_option("--completion-column", d.completion_column, "column holding the completion (default: completion)");
  c->add_option("--messages-column", d.messages_column, "column holding chat messages (default: messages)");
}

}  // namespace vkf::cli
