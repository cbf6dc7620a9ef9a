// `vkformer architectures`: every supported Hugging Face model_type and whether a transformers
// parity fixture for it passes in the test suite.
#include <fmt/format.h>

#include "cli/commands.h"
#include "models/registry.h"

namespace vkf::cli {

void add_architectures_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("architectures", "List supported model types and their verification");
  cmd->callback([&exit_code] {
    fmt::print("{:<14} {:<10} {}\n", "model_type", "status", "features");
    for (const auto& a : models::supported_architectures()) {
      fmt::print("{:<14} {:<10} {}\n", a.model_type, a.verified ? "verified" : "unverified", a.features);
    }
    exit_code = 0;
  });
}

}  // namespace vkf::cli
