// Lazy compute-pipeline cache over the embedded SPIR-V (see pipeline.h).
#include "vk/pipeline.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <span>

#include "vk/device_info.h"
#include "vk/enumerate.h"
#include "vk/error.h"
#include "vk/shader_registry.h"

namespace vkf::vk {

const EmbeddedShader* find_embedded_shader(const char* name) {
  for (const auto& s : embedded_shaders())
    if (std::strcmp(s.name, name) == 0) return &s;
  return nullptr;
}

namespace {
std::string cache_file_for(const DeviceInfo& info) {
  const char* off = std::getenv("VKF_PIPELINE_CACHE");
  if (off && std::string(off) == "0") return "";
  std::filesystem::path dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    dir = xdg;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    dir = std::filesystem::path(home) / ".cache";
  } else {
    return "";
  }
  std::string uuid;
  for (auto b : info.uuid) uuid += fmt::format("{:02x}", b);
  return (dir / "vkformer" / fmt::format("pipelines-{:04x}-{}.bin", info.vendor_id, uuid)).string();
}
}  // namespace

Pipelines::Pipelines(VkDevice device, const DeviceInfo& info)
    : device_(device), statistics_(info.pipeline_statistics) {
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushConstantBytes};
  VkPipelineLayoutCreateInfo lci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  lci.pushConstantRangeCount = 1;
  lci.pPushConstantRanges = &range;
  VKF_VK_CHECK(vkCreatePipelineLayout(device_, &lci, nullptr, &layout_));

  cache_path_ = cache_file_for(info);
  std::vector<char> data;
  if (!cache_path_.empty()) {
    std::ifstream in(cache_path_, std::ios::binary);
    if (in) data.assign(std::istreambuf_iterator<char>(in), {});
  }
  VkPipelineCacheCreateInfo pci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  pci.initialDataSize = data.size();
  pci.pInitialData = data.empty() ? nullptr : data.data();
  if (vkCreatePipelineCache(device_, &pci, nullptr, &cache_) != VK_SUCCESS) {
    pci.initialDataSize = 0;  // a stale or corrupt file: start empty
    pci.pInitialData = nullptr;
    VKF_VK_CHECK(vkCreatePipelineCache(device_, &pci, nullptr, &cache_));
  }
}

Pipelines::~Pipelines() {
  save_cache();
  for (auto& [key, k] : kernels_) vkDestroyPipeline(device_, k.pipeline, nullptr);
  for (auto& [name, m] : modules_) vkDestroyShaderModule(device_, m, nullptr);
  vkDestroyPipelineCache(device_, cache_, nullptr);
  vkDestroyPipelineLayout(device_, layout_, nullptr);
}

void Pipelines::save_cache() {
  if (cache_path_.empty() || kernels_.empty()) return;
  size_t size = 0;
  if (vkGetPipelineCacheData(device_, cache_, &size, nullptr) != VK_SUCCESS || size == 0) return;
  std::vector<char> data(size);
  if (vkGetPipelineCacheData(device_, cache_, &size, data.data()) != VK_SUCCESS) return;
  // Best effort: a cache that cannot be written only costs compile time next run. Written to a
  // temporary name and renamed, so a concurrent reader never sees half a file.
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(cache_path_).parent_path(), ec);
  const std::string tmp = fmt::format("{}.tmp{}", cache_path_, static_cast<const void*>(this));
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return;
    out.write(data.data(), static_cast<std::streamsize>(size));
    if (!out) return;
  }
  std::filesystem::rename(tmp, cache_path_, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

namespace {

// Modules generated at run time, by name. Never erased, so the words outlive every pipeline.
std::map<std::string, std::vector<uint32_t>>& generated_modules() {
  static std::map<std::string, std::vector<uint32_t>> modules;
  return modules;
}
std::mutex g_generated_mutex;

// The SPIR-V words of a module, embedded or generated; empty when there is none by that name.
std::span<const uint32_t> find_module_words(const std::string& name) {
  if (const EmbeddedShader* s = find_embedded_shader(name.c_str()))
    return {s->words, s->word_count};
  std::lock_guard lock(g_generated_mutex);
  auto it = generated_modules().find(name);
  if (it == generated_modules().end()) return {};
  return it->second;
}

}  // namespace

void Pipelines::register_generated(const std::string& name, std::vector<uint32_t> words) {
  std::lock_guard lock(g_generated_mutex);
  generated_modules().emplace(name, std::move(words));
}

bool Pipelines::has_module(const std::string& module) {
  return !find_module_words(module).empty();
}

const Kernel& Pipelines::get(const std::string& module, const std::vector<uint32_t>& spec) {
  auto key = std::make_pair(module, spec);
  if (auto it = kernels_.find(key); it != kernels_.end()) return it->second;

  VkShaderModule sm;
  if (auto it = modules_.find(module); it != modules_.end()) {
    sm = it->second;
  } else {
    const std::span<const uint32_t> words = find_module_words(module);
    VKF_REQUIRE(!words.empty(),
                "shader module '{}' is not built into this vkformer; optional modules exist only "
                "when the installed glslc accepts their extension (this build: " VKF_GLSL_EXTENSIONS
                ")",
                module);
    VkShaderModuleCreateInfo smci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    smci.codeSize = words.size() * 4;
    smci.pCode = words.data();
    VKF_VK_CHECK(vkCreateShaderModule(device_, &smci, nullptr, &sm));
    modules_[module] = sm;
  }

  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (uint32_t i = 0; i < spec.size(); ++i) entries[i] = {i, i * 4, 4};
  VkSpecializationInfo si{static_cast<uint32_t>(entries.size()), entries.data(), spec.size() * 4,
                          spec.data()};
  VkComputePipelineCreateInfo cci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  cci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cci.stage.module = sm;
  cci.stage.pName = "main";
  cci.stage.pSpecializationInfo = spec.empty() ? nullptr : &si;
  cci.layout = layout_;
  if (statistics_) cci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  Kernel k;
  k.name = module;
  VKF_VK_CHECK(vkCreateComputePipelines(device_, cache_, 1, &cci, nullptr, &k.pipeline));
  if (statistics_) print_statistics(k.pipeline, module, spec);
  return kernels_.emplace(key, k).first->second;
}

void Pipelines::print_statistics(VkPipeline pipeline, const std::string& module,
                                 const std::vector<uint32_t>& spec) const {
  // Extension entry points come from the device, not the loader's exports.
  auto get_props = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
      vkGetDeviceProcAddr(device_, "vkGetPipelineExecutablePropertiesKHR"));
  auto get_stats = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      vkGetDeviceProcAddr(device_, "vkGetPipelineExecutableStatisticsKHR"));
  if (!get_props || !get_stats) return;
  std::string specs;
  for (uint32_t v : spec) specs += fmt::format("{}{}", specs.empty() ? "" : ",", v);
  VkPipelineInfoKHR pinfo{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
  pinfo.pipeline = pipeline;
  const auto executables = enumerate_structs<VkPipelineExecutablePropertiesKHR>(
      VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR,
      [&](uint32_t* n, auto* data) { return get_props(device_, &pinfo, n, data); });
  for (uint32_t e = 0; e < executables.size(); ++e) {
    VkPipelineExecutableInfoKHR einfo{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
    einfo.pipeline = pipeline;
    einfo.executableIndex = e;
    const auto stats = enumerate_structs<VkPipelineExecutableStatisticKHR>(
        VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR,
        [&](uint32_t* n, auto* data) { return get_stats(device_, &einfo, n, data); });
    if (stats.empty()) continue;
    std::string line;
    for (const auto& st : stats) {
      std::string value;
      switch (st.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
          value = st.value.b32 ? "yes" : "no";
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
          value = std::to_string(st.value.i64);
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
          value = std::to_string(st.value.u64);
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR:
          value = fmt::format("{:g}", st.value.f64);
          break;
        default:
          continue;
      }
      line += fmt::format("; {}={}", st.name, value);
    }
    std::fprintf(stderr, "pipeline-stats %s [%s] %s%s\n", module.c_str(), specs.c_str(),
                 executables[e].name, line.c_str());
  }
}

}  // namespace vkf::vk
