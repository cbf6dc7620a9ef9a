// Registration of the `vkformer` subcommands; one file per command group under src/cli.
#pragma once

#include <CLI/CLI.hpp>

namespace vkf::cli {

// Each registers its subcommand on `app`; the callback runs the command and sets `exit_code`.
void add_devices_command(CLI::App& app, int& exit_code);
void add_architectures_command(CLI::App& app, int& exit_code);
void add_parity_command(CLI::App& app, int& exit_code);
void add_dump_command(CLI::App& app, int& exit_code);
void add_generate_commands(CLI::App& app, int& exit_code);  // generate, chat
void add_train_command(CLI::App& app, int& exit_code);
void add_tokenizer_command(CLI::App& app, int& exit_code);  // tokenizer train
void add_tokenize_command(CLI::App& app, int& exit_code);
void add_lora_command(CLI::App& app, int& exit_code);  // lora merge
void add_pull_command(CLI::App& app, int& exit_code);

}  // namespace vkf::cli
