// The `vkformer` command-line tool: parses arguments and hands off to a subcommand. Errors are
// printed as one clear line and turn into exit code 1; nothing here holds library logic.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "vk/context.h"
#include "vk/error.h"

int main(int argc, char** argv) {
  CLI::App app{"vkformer: train, fine-tune and run Hugging Face Transformer models on any Vulkan GPU"};
  app.require_subcommand(1);
  int device = -1;
  app.add_option("--device", device, "Vulkan device index (see `vkformer devices`); or VKF_DEVICE")
      ->check(CLI::NonNegativeNumber);
  // Runs before any subcommand callback, so every command sees the chosen device.
  app.parse_complete_callback([&device] {
    if (device >= 0) vkf::vk::Context::select_device(device);
  });
  int exit_code = 0;
  vkf::cli::add_devices_command(app, exit_code);
  vkf::cli::add_architectures_command(app, exit_code);
  vkf::cli::add_parity_command(app, exit_code);
  vkf::cli::add_dump_command(app, exit_code);
  vkf::cli::add_generate_commands(app, exit_code);
  vkf::cli::add_train_command(app, exit_code);
  vkf::cli::add_tokenizer_command(app, exit_code);
  vkf::cli::add_tokenize_command(app, exit_code);
  vkf::cli::add_lora_command(app, exit_code);
  vkf::cli::add_pull_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const vkf::Error& e) {
    std::fprintf(stderr, "vkformer: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vkformer: internal error: %s\n", e.what());
    return 2;
  }
  try {
    vkf::vk::Context::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vkformer: error at shutdown: %s\n", e.what());
    return 1;
  }
  return exit_code;
}
