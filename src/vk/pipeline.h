// Compute pipelines created lazily from the embedded SPIR-V (or from modules generated at run
// time, see register_generated), one per (module, specialization
// constants), and cached for the life of the context. Every pipeline shares one layout: no
// descriptor sets, only a 128-byte push-constant block carrying buffer device addresses and sizes.
// The driver's VkPipelineCache is persisted under ~/.cache/vkformer (VKF_PIPELINE_CACHE=0 disables).
// With VKF_PIPELINE_STATS=1 on a driver that has VK_KHR_pipeline_executable_properties, each
// pipeline's statistics (on NVIDIA: registers per thread, shared memory, ...) are printed to stderr
// as it is created: what a kernel's occupancy is, without a vendor profiler.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace vkf::vk {

struct DeviceInfo;

inline constexpr uint32_t kPushConstantBytes = 128;

struct Kernel {
  VkPipeline pipeline = VK_NULL_HANDLE;
  std::string name;  // module name plus specialization, for profiles
};

class Pipelines {
 public:
  Pipelines(VkDevice device, const DeviceInfo& info);
  ~Pipelines();
  Pipelines(const Pipelines&) = delete;
  Pipelines& operator=(const Pipelines&) = delete;

  // `spec` gives specialization constants 0..n-1 (all 32-bit). Throws if the module is not
  // embedded (for example a variant the installed glslc could not compile).
  const Kernel& get(const std::string& module, const std::vector<uint32_t>& spec = {});
  static bool has_module(const std::string& module);
  // Adds a module generated at run time (vk/spirv_builder.h) under `name`, after which get() and
  // has_module() find it like an embedded one. Registering a name again keeps the first words.
  static void register_generated(const std::string& name, std::vector<uint32_t> words);
  VkPipelineLayout layout() const { return layout_; }

 private:
  void save_cache();
  void print_statistics(VkPipeline pipeline, const std::string& module,
                        const std::vector<uint32_t>& spec) const;
  VkDevice device_;
  bool statistics_ = false;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::string cache_path_;
  std::map<std::string, VkShaderModule> modules_;
  std::map<std::pair<std::string, std::vector<uint32_t>>, Kernel> kernels_;
};

}  // namespace vkf::vk
