// `vkformer devices`: every Vulkan device with the capabilities that choose vkformer's kernels.
#include <fmt/format.h>

#include "cli/commands.h"
#include "ops/coopmat_layout.h"
#include "vk/context.h"

namespace vkf::cli {
namespace {

std::string mib(uint64_t b) {
  return fmt::format("{:.0f} MiB", static_cast<double>(b) / 1048576.0);
}
const char* yes(bool b) {
  return b ? "yes" : "no";
}

std::string shapes(const std::vector<vk::CoopMatShape>& list) {
  std::string out;
  for (const auto& s : list) {
    out += fmt::format("\n      {}x{}x{}  A {} B {} C {} -> {} ({})", s.m, s.n, s.k, s.a_type,
                       s.b_type, s.c_type, s.result_type, s.scope);
  }
  return out;
}

int run_devices() {
  const auto devices = vk::Context::list_devices();
  if (devices.empty()) {
    fmt::print(
        "No Vulkan device found. Install your GPU's Vulkan driver, or the Debian package "
        "mesa-vulkan-drivers for the CPU device (lavapipe).\n");
    return 0;
  }
  const uint32_t fallback = vk::default_device_index(devices);
  const uint32_t chosen =
      vk::Context::resolve_device_index(devices, vk::Context::requested_device_index());
  for (const auto& d : devices) {
    std::string mark = d.index == fallback ? " (default)" : "";
    if (d.index == chosen) mark += " (selected)";
    fmt::print("device {}: {}{}\n", d.index, d.name, mark);
    fmt::print("  type: {}\n  driver: {} {}\n  Vulkan API: {}\n", d.type_name(), d.driver_name,
               d.driver_info, d.api_string());
    fmt::print("  memory heaps:");
    for (size_t i = 0; i < d.heaps.size(); ++i)
      fmt::print(" [{}] {}{}", i, mib(d.heaps[i].size),
                 d.heaps[i].device_local ? " device-local" : "");
    fmt::print("\n  memory budget (VK_EXT_memory_budget): {}", yes(d.memory_budget));
    fmt::print("\n  subgroup size: {}\n  max shared memory per workgroup: {} KiB\n",
               d.subgroup_size, d.max_shared_memory / 1024);
    if (d.multiprocessors > 0) fmt::print("  multiprocessors: {}\n", d.multiprocessors);
    fmt::print("  maxStorageBufferRange: {}\n  max push constants: {} bytes\n",
               mib(d.max_storage_buffer_range), d.max_push_constants);
    fmt::print(
        "  fp16 arithmetic: {}\n  bf16 (VK_KHR_shader_bfloat16): {}\n  fp64 arithmetic: {}\n",
        yes(d.float16_arithmetic), yes(d.bfloat16), yes(d.float64_arithmetic));
    fmt::print("  16-bit storage: {}\n  int64: {}\n  buffer device address: {}\n", yes(d.storage16),
               yes(d.int64), yes(d.buffer_device_address));
    fmt::print("  cooperative matrix NV: {}{}\n", yes(d.coopmat_nv), shapes(d.coopmat_nv_shapes));
    fmt::print("  cooperative matrix KHR: {}{}\n", yes(d.coopmat_khr),
               shapes(d.coopmat_khr_shapes));
    fmt::print("  cooperative matrix 2 NV: {}\n", yes(d.coopmat2_nv));
    // Probed on the selected device only (it runs a kernel there).
    if (d.index == chosen && d.coopmat_nv)
      fmt::print("  accumulator layout (16x16 f32): {}\n",
                 ops::detail::describe(ops::detail::accumulator_layout()));
    for (const auto& f : d.coopmat2_flexible_shapes) {
      fmt::print(
          "      flexible, granularity {}x{}x{}  A {} B {} C {} -> {} ({}{})\n", f.m, f.n, f.k,
          f.a_type, f.b_type, f.c_type, f.result_type, f.scope,
          f.workgroup_invocations ? fmt::format(", {} invocations", f.workgroup_invocations) : "");
    }
    if (d.coopmat2_nv)
      fmt::print(
          "      workgroup scope: up to {} invocations, dimensions up to {}, {} bytes of shared "
          "memory reserved\n",
          d.workgroup_matrix_max_invocations, d.workgroup_matrix_max_dimension,
          d.workgroup_matrix_reserved_shared);
    const std::string why = d.unsupported_reason();
    fmt::print("  usable by vkformer: {}\n", why.empty() ? "yes" : "no (" + why + ")");
  }
  return 0;
}

}  // namespace

void add_devices_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("devices", "List Vulkan devices and their capabilities");
  cmd->callback([&exit_code] { exit_code = run_devices(); });
}

}  // namespace vkf::cli
