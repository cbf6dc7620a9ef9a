// `vkformer dump`: runs one forward pass and writes every named intermediate (embed,
// layers.N.attn.q, ..., logits) to a safetensors file, to locate a divergence from transformers
// tensor by tensor (compare with forward hooks on the HF model).
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/launch.h"
#include "io/safetensors.h"
#include "models/decoder.h"
#include "train/parity.h"

namespace vkf::cli {

void add_dump_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("dump", "Write every named intermediate of one forward pass");
  static std::string model_dir, batch_path, out;
  static std::vector<std::string> adapters;
  cmd->add_option("--model", model_dir, "Hugging Face model folder")->required();
  cmd->add_option("--adapter", adapters, "a peft LoRA adapter folder to apply, [NAME=]DIR");
  cmd->add_option("--batch", batch_path, "batch.safetensors (input_ids, attention_mask)")->required();
  cmd->add_option("--out", out, "output .safetensors")->required();
  cmd->callback([&exit_code] {
    set_math_mode(MathMode::Precise);  // a comparison tool: the accurate kernels
    auto loaded = load_for_inference(model_dir, adapters);
    auto& model = loaded.model;
    const auto batch = train::load_parity_batch(batch_path);
    std::vector<io::WriteTensor> tensors;
    model.forward(batch.input_ids, batch.attention_mask, [&](const std::string& name, const Tensor& t) {
      tensors.push_back(io::to_write_tensor(name, t.contiguous()));
    });
    io::write_safetensors(out, tensors);
    fmt::print("wrote {} tensors to {}\n", tensors.size(), out);
    exit_code = 0;
  });
}

}  // namespace vkf::cli
