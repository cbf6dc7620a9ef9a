// The memory plan's report and its use (see memory_plan.h): the table `vkformer train` prints,
// the one-line summary, the device capacity a run may plan on, the refusal of a run that does
// not fit (with what would fit), and byte sizes read from and written for the user.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "train/memory_plan.h"
#include "vk/error.h"
#include "vk/memory.h"

namespace vkf::train {
namespace {

using models::ArchSpec;

std::string optimizer_name(PlanOptimizer o) {
  switch (o) {
    case PlanOptimizer::AdamW:
      return "AdamW";
    case PlanOptimizer::SGD:
      return "SGD";
    case PlanOptimizer::SGDMomentum:
      return "SGD with momentum";
  }
  return "?";
}

std::string format_count(int64_t n) {
  const double v = static_cast<double>(n);
  if (n < 1'000'000) return fmt::format("{}", n);
  if (n < 1'000'000'000) return fmt::format("{:.1f}M", v / 1e6);
  return fmt::format("{:.2f}B", v / 1e9);
}

}  // namespace

std::string format_bytes(uint64_t b) {
  const double v = static_cast<double>(b);
  if (b < 1024) return fmt::format("{} B", b);
  if (v < 1024.0 * 1024) return fmt::format("{:.1f} KiB", v / 1024);
  if (v < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", v / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", v / (1024.0 * 1024 * 1024));
}

std::string MemoryPlan::table() const {
  const auto& in = input;
  std::string out = fmt::format(
      "memory plan: {} ({} layers, {} parameters), batch {} x {} tokens, {}\n", model_type,
      num_layers, format_count(parameter_count), in.batch_size, in.seq_len,
      in.training ? fmt::format("training with {}{}{}", optimizer_name(in.optimizer),
                                trainable_count < parameter_count
                                    ? fmt::format(", {} trainable", format_count(trainable_count))
                                    : std::string(),
                                in.gradient_checkpointing ? ", gradient checkpointing" : "")
                  : std::string("forward only"));
  auto row = [&](const std::string& what, uint64_t bytes, const std::string& note) {
    out += fmt::format("  {:<26}{:>12}  {}\n", what, format_bytes(bytes), note);
  };
  row("parameters (f32)", parameters.bytes, fmt::format("{} tensors", parameters.tensors));
  if (in.training) {
    row("gradients (f32)", gradients.bytes, "");
    row(fmt::format("optimizer state ({})", optimizer_name(in.optimizer)), optimizer_state.bytes,
        optimizer_moments(in.optimizer)
            ? fmt::format("{} f32 per trainable parameter", optimizer_moments(in.optimizer))
            : "");
    row("activations", activations.bytes,
        in.gradient_checkpointing
            ? fmt::format("layer inputs, one layer recomputed ({}), head",
                          format_bytes(activations_per_layer))
            : fmt::format("saved for backward; {} per layer", format_bytes(activations_per_layer)));
    row("workspace", workspace.bytes, workspace_note);
  } else {
    row("activations", activations.bytes, "live at the forward's peak");
  }
  row("inputs, rotary tables", inputs.bytes, "");
  row("total (tensors)", total(), "peak at " + peak_moment);
  row("device memory", device_bytes(),
      fmt::format("in {} blocks; larger tensors get their own",
                  format_bytes(vk::kDeviceBlockBytes)));
  return out;
}

std::string MemoryPlan::summary() const {
  if (!input.training) {
    return fmt::format(
        "memory plan: {} total = parameters {} + activations {} + inputs {} "
        "({} of device memory)",
        format_bytes(total()), format_bytes(parameters.bytes), format_bytes(activations.bytes),
        format_bytes(inputs.bytes), format_bytes(device_bytes()));
  }
  return fmt::format(
      "memory plan: {} total = parameters {} + gradients {} + optimizer {} + "
      "activations {} + workspace {} + inputs {} ({} of device memory)",
      format_bytes(total()), format_bytes(parameters.bytes), format_bytes(gradients.bytes),
      format_bytes(optimizer_state.bytes), format_bytes(activations.bytes),
      format_bytes(workspace.bytes), format_bytes(inputs.bytes), format_bytes(device_bytes()));
}

MemoryCapacity usable_capacity(uint64_t max_memory) {
  const vk::DeviceCapacity c = vk::device_capacity();
  const uint64_t total = c.total();
  // Not tensors, but on the same heap: staging buffers (64 MiB blocks; on integrated GPUs and
  // lavapipe), driver allocations, and blocks split by allocations of many sizes.
  const uint64_t margin = std::min<uint64_t>(total, (uint64_t{256} << 20) + total / 100 * 3);
  MemoryCapacity out;
  out.usable = total - margin;
  out.description = fmt::format(
      "{} of device memory ({} {} less a {} safety margin)", format_bytes(out.usable),
      format_bytes(total), c.budget_bytes ? "budget (VK_EXT_memory_budget)" : "device-local heap",
      format_bytes(margin));
  if (max_memory > 0 && max_memory < out.usable) {
    out.usable = max_memory;
    out.description = fmt::format("{} (--max-memory)", format_bytes(max_memory));
  }
  return out;
}

void require_fits(const ArchSpec& spec, const MemoryPlan& plan, const MemoryCapacity& capacity) {
  if (plan.device_bytes() <= capacity.usable) return;
  const MemoryPlanInput& in = plan.input;
  auto needs = [&](MemoryPlanInput changed) {
    return format_bytes(plan_memory(spec, changed).device_bytes());
  };
  std::string advice;
  if (in.batch_size > 1) {
    MemoryPlanInput c = in;
    c.batch_size = 1;
    advice += fmt::format(
        "a smaller --per-device-train-batch-size (1 needs {}; raise "
        "--gradient-accumulation-steps to keep the tokens per step), ",
        needs(c));
  }
  if (in.seq_len > 1) {
    MemoryPlanInput c = in;
    c.seq_len = std::max<int64_t>(1, in.seq_len / 2);
    advice += fmt::format("a shorter --max-length ({} needs {}), ", c.seq_len, needs(c));
  }
  if (in.training && !in.gradient_checkpointing) {
    MemoryPlanInput c = in;
    c.gradient_checkpointing = true;
    advice += fmt::format("--gradient-checkpointing (about {}), ", needs(c));
  }
  if (in.training) {
    advice += "LoRA (gradients and optimizer state for the adapters only), ";
  }
  std::string parts =
      in.training
          ? fmt::format(
                "parameters {}, gradients {}, optimizer state {}, "
                "activations {}, workspace {}",
                format_bytes(plan.parameters.bytes), format_bytes(plan.gradients.bytes),
                format_bytes(plan.optimizer_state.bytes), format_bytes(plan.activations.bytes),
                format_bytes(plan.workspace.bytes))
          : fmt::format("parameters {}, activations {}", format_bytes(plan.parameters.bytes),
                        format_bytes(plan.activations.bytes));
  // Shared blocks are allocated whole: below one block, nothing fits however small the run.
  const std::string blocks =
      capacity.usable < vk::kDeviceBlockBytes
          ? fmt::format(" (vkformer takes device memory in blocks of {}, so no run fits in less)",
                        format_bytes(vk::kDeviceBlockBytes))
          : "";
  fail(
      "not enough device memory: this run needs about {} of device memory ({} of tensors for "
      "{}, batch {} x {} tokens: {}), but only {} is usable{}. Try {}or a smaller model; "
      "--estimate-memory prints the whole plan",
      format_bytes(plan.device_bytes()), format_bytes(plan.total()), plan.model_type, in.batch_size,
      in.seq_len, parts, capacity.description, blocks, advice);
}

uint64_t parse_byte_size(const std::string& text, const std::string& option) {
  auto bad = [&]() -> uint64_t {
    fail(
        "{} '{}' is not a size; write a number with an optional unit, e.g. 2GiB, 500MB, 1.5G "
        "(KiB/MiB/GiB/TiB and K/M/G/T are powers of 1024, KB/MB/GB/TB powers of 1000)",
        option, text);
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0) return bad();
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(text.substr(0, i), &used);
    if (used != i) return bad();
  } catch (const std::exception&) {
    return bad();
  }
  std::string unit;
  for (size_t j = i; j < text.size(); ++j)
    if (!std::isspace(static_cast<unsigned char>(text[j])))
      unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[j])));
  double scale = 0;
  const char* prefixes = "kmgt";
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (const char* at = std::strchr(prefixes, unit[0]); at && *at) {
    const int power = static_cast<int>(at - prefixes) + 1;
    const std::string rest = unit.substr(1);
    if (rest.empty() || rest == "ib")
      scale = std::pow(1024.0, power);
    else if (rest == "b")
      scale = std::pow(1000.0, power);
  }
  if (scale == 0 || !std::isfinite(value * scale) || value * scale >= 1.8e19) return bad();
  const auto bytes = static_cast<uint64_t>(value * scale);
  VKF_REQUIRE(bytes > 0, "{} '{}' must be more than 0 bytes", option, text);
  return bytes;
}

}  // namespace vkf::train
