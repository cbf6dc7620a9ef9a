// Capability queries for physical devices (see device_info.h).
#include "vk/device_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "vk/enumerate.h"
#include "vk/error.h"

// Debian 12's Vulkan headers (1.3.239) predate VK_KHR_cooperative_matrix (1.3.255). Its property
// query is declared here from the specification when the header lacks it; the enum values of its
// component types and scopes equal those of VK_NV_cooperative_matrix.
#ifndef VK_KHR_cooperative_matrix
namespace {
using VkComponentTypeKHR = VkComponentTypeNV;
using VkScopeKHR = VkScopeNV;
constexpr auto VK_COMPONENT_TYPE_FLOAT16_KHR = VK_COMPONENT_TYPE_FLOAT16_NV;
constexpr auto VK_COMPONENT_TYPE_FLOAT32_KHR = VK_COMPONENT_TYPE_FLOAT32_NV;
constexpr auto VK_COMPONENT_TYPE_FLOAT64_KHR = VK_COMPONENT_TYPE_FLOAT64_NV;
constexpr auto VK_COMPONENT_TYPE_SINT8_KHR = VK_COMPONENT_TYPE_SINT8_NV;
constexpr auto VK_COMPONENT_TYPE_SINT16_KHR = VK_COMPONENT_TYPE_SINT16_NV;
constexpr auto VK_COMPONENT_TYPE_SINT32_KHR = VK_COMPONENT_TYPE_SINT32_NV;
constexpr auto VK_COMPONENT_TYPE_SINT64_KHR = VK_COMPONENT_TYPE_SINT64_NV;
constexpr auto VK_COMPONENT_TYPE_UINT8_KHR = VK_COMPONENT_TYPE_UINT8_NV;
constexpr auto VK_COMPONENT_TYPE_UINT16_KHR = VK_COMPONENT_TYPE_UINT16_NV;
constexpr auto VK_COMPONENT_TYPE_UINT32_KHR = VK_COMPONENT_TYPE_UINT32_NV;
constexpr auto VK_COMPONENT_TYPE_UINT64_KHR = VK_COMPONENT_TYPE_UINT64_NV;
constexpr auto VK_SCOPE_SUBGROUP_KHR = VK_SCOPE_SUBGROUP_NV;
constexpr auto VK_SCOPE_WORKGROUP_KHR = VK_SCOPE_WORKGROUP_NV;
constexpr auto VK_SCOPE_DEVICE_KHR = VK_SCOPE_DEVICE_NV;
constexpr auto VK_SCOPE_QUEUE_FAMILY_KHR = VK_SCOPE_QUEUE_FAMILY_NV;
constexpr auto VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR =
    static_cast<VkStructureType>(1000506001);
struct VkCooperativeMatrixPropertiesKHR {
  VkStructureType sType;
  void* pNext;
  uint32_t MSize;
  uint32_t NSize;
  uint32_t KSize;
  VkComponentTypeKHR AType;
  VkComponentTypeKHR BType;
  VkComponentTypeKHR CType;
  VkComponentTypeKHR ResultType;
  VkBool32 saturatingAccumulation;
  VkScopeKHR scope;
};
using PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR =
    VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*, VkCooperativeMatrixPropertiesKHR*);
}  // namespace
#endif

namespace vkf::vk {
namespace {

std::set<std::string> device_extensions(VkPhysicalDevice pd) {
  uint32_t count = 0;
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &count, nullptr);
  std::vector<VkExtensionProperties> props(count);
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &count, props.data());
  std::set<std::string> names;
  for (const auto& p : props) names.insert(p.extensionName);
  return names;
}

std::string component_name(VkComponentTypeKHR t) {
  switch (t) {
    case VK_COMPONENT_TYPE_FLOAT16_KHR:
      return "f16";
    case VK_COMPONENT_TYPE_FLOAT32_KHR:
      return "f32";
    case VK_COMPONENT_TYPE_FLOAT64_KHR:
      return "f64";
    case VK_COMPONENT_TYPE_SINT8_KHR:
      return "s8";
    case VK_COMPONENT_TYPE_SINT16_KHR:
      return "s16";
    case VK_COMPONENT_TYPE_SINT32_KHR:
      return "s32";
    case VK_COMPONENT_TYPE_SINT64_KHR:
      return "s64";
    case VK_COMPONENT_TYPE_UINT8_KHR:
      return "u8";
    case VK_COMPONENT_TYPE_UINT16_KHR:
      return "u16";
    case VK_COMPONENT_TYPE_UINT32_KHR:
      return "u32";
    case VK_COMPONENT_TYPE_UINT64_KHR:
      return "u64";
    default:
      // VK_COMPONENT_TYPE_BFLOAT16_KHR (VK_KHR_shader_bfloat16) postdates these headers.
      if (static_cast<int>(t) == 1000141000) return "bf16";
      return fmt::format("type{}", static_cast<int>(t));
  }
}

std::string scope_name(VkScopeKHR s) {
  switch (s) {
    case VK_SCOPE_SUBGROUP_KHR:
      return "subgroup";
    case VK_SCOPE_WORKGROUP_KHR:
      return "workgroup";
    case VK_SCOPE_DEVICE_KHR:
      return "device";
    case VK_SCOPE_QUEUE_FAMILY_KHR:
      return "queuefamily";
    default:
      return "other";
  }
}

// VK_NV_cooperative_matrix2's flexible-dimension properties, declared here because Debian 12's
// Vulkan headers (1.3.239) predate the extension. Layout and values from the Vulkan registry.
constexpr VkStructureType kFlexibleDimensionsPropertiesType = static_cast<VkStructureType>(
    1000593001);  // ..._COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV
struct FlexibleDimensionsProperties {
  VkStructureType sType;
  void* pNext;
  uint32_t MGranularity;
  uint32_t NGranularity;
  uint32_t KGranularity;
  VkComponentTypeKHR AType;
  VkComponentTypeKHR BType;
  VkComponentTypeKHR CType;
  VkComponentTypeKHR ResultType;
  VkBool32 saturatingAccumulation;
  VkScopeKHR scope;
  uint32_t workgroupInvocations;
};

constexpr auto kCoopmatKhrFeaturesType = static_cast<VkStructureType>(
    1000506000);  // ..._PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR
constexpr auto kCoopmat2FeaturesType = static_cast<VkStructureType>(
    1000593000);  // ..._PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV
constexpr auto kCoopmat2PropertiesType = static_cast<VkStructureType>(
    1000593002);  // ..._PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV
struct Coopmat2Properties {
  VkStructureType sType;
  void* pNext;
  uint32_t cooperativeMatrixWorkgroupScopeMaxWorkgroupSize;
  uint32_t cooperativeMatrixFlexibleDimensionsMaxDimension;
  uint32_t cooperativeMatrixWorkgroupScopeReservedSharedMemory;
};

// A listed shape with its types and scope by name. The NV and KHR enums share their values, so
// either extension's properties convert.
template <class Component, class Scope>
CoopMatShape shape_of(uint32_t m, uint32_t n, uint32_t k, Component a, Component b, Component c,
                      Component result, Scope scope) {
  auto name = [](Component t) { return component_name(static_cast<VkComponentTypeKHR>(t)); };
  return {
      m, n, k, name(a), name(b), name(c), name(result), scope_name(static_cast<VkScopeKHR>(scope))};
}

// The shapes one of the cooperative-matrix properties queries lists (the NV, KHR and NV-2 flexible
// queries share the two-call form), each converted by to_shape; none where the driver lacks it.
template <class Props, class ToShape>
std::vector<CoopMatShape> listed_shapes(VkInstance instance, VkPhysicalDevice device,
                                        const char* query_name, VkStructureType type,
                                        ToShape&& to_shape) {
  using Query = VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*, Props*);
  const auto query = reinterpret_cast<Query>(vkGetInstanceProcAddr(instance, query_name));
  std::vector<CoopMatShape> shapes;
  if (!query) return shapes;
  for (const Props& p : enumerate_structs<Props>(
           type, [&](uint32_t*n, Props*data) { return query(device, n, data); }))
    shapes.push_back(to_shape(p));
  return shapes;
}

void query_coopmat(VkInstance instance, DeviceInfo& info) {
  if (info.coopmat_nv) {
    info.coopmat_nv_shapes = listed_shapes<VkCooperativeMatrixPropertiesNV>(
        instance, info.handle, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV",
        VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV, [](const auto& p) {
          return shape_of(p.MSize, p.NSize, p.KSize, p.AType, p.BType, p.CType, p.DType, p.scope);
        });
  }
  if (info.coopmat_khr) {
    info.coopmat_khr_shapes = listed_shapes<VkCooperativeMatrixPropertiesKHR>(
        instance, info.handle, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR",
        VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR, [](const auto& p) {
          return shape_of(p.MSize, p.NSize, p.KSize, p.AType, p.BType, p.CType, p.ResultType,
                          p.scope);
        });
  }
  if (info.coopmat2_nv) {
    info.coopmat2_flexible_shapes = listed_shapes<FlexibleDimensionsProperties>(
        instance, info.handle, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV",
        kFlexibleDimensionsPropertiesType, [](const auto& p) {
          CoopMatShape shape = shape_of(p.MGranularity, p.NGranularity, p.KGranularity, p.AType,
                                        p.BType, p.CType, p.ResultType, p.scope);
          shape.workgroup_invocations = p.workgroupInvocations;
          return shape;
        });
    Coopmat2Properties props{kCoopmat2PropertiesType, nullptr, 0, 0, 0};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p2.pNext = &props;
    vkGetPhysicalDeviceProperties2(info.handle, &p2);
    info.workgroup_matrix_max_invocations = props.cooperativeMatrixWorkgroupScopeMaxWorkgroupSize;
    info.workgroup_matrix_max_dimension = props.cooperativeMatrixFlexibleDimensionsMaxDimension;
    info.workgroup_matrix_reserved_shared =
        props.cooperativeMatrixWorkgroupScopeReservedSharedMemory;
  }
}

DeviceInfo query_device(VkInstance instance, VkPhysicalDevice pd, uint32_t index) {
  DeviceInfo info;
  info.index = index;
  info.handle = pd;
  const auto exts = device_extensions(pd);

  VkPhysicalDeviceFloatControlsProperties float_controls{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES};
  VkPhysicalDeviceSubgroupSizeControlProperties size_control{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
  VkPhysicalDeviceSubgroupProperties subgroup{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  subgroup.pNext = &float_controls;
  // Core in Vulkan 1.3; chained only where the device reports 1.3 or later.
  VkPhysicalDeviceProperties pre{};
  vkGetPhysicalDeviceProperties(pd, &pre);
  if (pre.apiVersion >= VK_API_VERSION_1_3) float_controls.pNext = &size_control;
  VkPhysicalDeviceShaderSMBuiltinsPropertiesNV sm_builtins{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
  if (exts.count("VK_NV_shader_sm_builtins") > 0) {
    sm_builtins.pNext = subgroup.pNext;
    subgroup.pNext = &sm_builtins;
  }
  VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  driver.pNext = &subgroup;
  VkPhysicalDeviceProperties2 props2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  props2.pNext = &driver;
  vkGetPhysicalDeviceProperties2(pd, &props2);
  const auto& p = props2.properties;
  info.name = p.deviceName;
  info.type = p.deviceType;
  info.api_version = p.apiVersion;
  info.vendor_id = p.vendorID;
  std::memcpy(info.uuid, p.pipelineCacheUUID, VK_UUID_SIZE);
  info.driver_name = driver.driverName;
  info.driver_info = driver.driverInfo;
  info.multiprocessors = sm_builtins.shaderSMCount;
  info.subgroup_size = subgroup.subgroupSize;
  info.min_subgroup_size = size_control.minSubgroupSize > 0
                               ? std::min(size_control.minSubgroupSize, subgroup.subgroupSize)
                               : subgroup.subgroupSize;
  info.subgroup_shuffle = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0 &&
                          (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) != 0;
  info.f16_rounding_rte = float_controls.shaderRoundingModeRTEFloat16 == VK_TRUE;
  info.f16_denorm_preserve = float_controls.shaderDenormPreserveFloat16 == VK_TRUE;
  info.max_shared_memory = p.limits.maxComputeSharedMemorySize;
  info.max_storage_buffer_range = p.limits.maxStorageBufferRange;
  info.max_push_constants = p.limits.maxPushConstantsSize;
  info.max_workgroup_invocations = p.limits.maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; ++i) info.max_workgroup_count[i] = p.limits.maxComputeWorkGroupCount[i];
  info.timestamp_period_ns = p.limits.timestampPeriod;
  info.timestamps = p.limits.timestampComputeAndGraphics == VK_TRUE;

  VkPhysicalDeviceVulkan13Features f13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  f12.pNext = &f11;
  f11.pNext = info.api_version >= VK_API_VERSION_1_3 ? &f13 : nullptr;
  VkPhysicalDeviceFeatures2 features2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  features2.pNext = &f12;
  vkGetPhysicalDeviceFeatures2(pd, &features2);
  info.float64_arithmetic = features2.features.shaderFloat64;
  info.int64 = features2.features.shaderInt64;
  info.int16 = features2.features.shaderInt16;
  info.float16_arithmetic = f12.shaderFloat16;
  info.storage16 = f11.storageBuffer16BitAccess;
  info.buffer_device_address = f12.bufferDeviceAddress;
  info.vulkan_memory_model = f12.vulkanMemoryModel;
  info.vulkan_memory_model_device_scope = f12.vulkanMemoryModelDeviceScope;
  info.subgroup_size_control = f13.subgroupSizeControl;
  info.coopmat_nv = exts.count("VK_NV_cooperative_matrix") > 0;
  info.coopmat_khr = exts.count("VK_KHR_cooperative_matrix") > 0;
  info.coopmat2_nv = exts.count("VK_NV_cooperative_matrix2") > 0;
  info.bfloat16 = exts.count("VK_KHR_shader_bfloat16") > 0;
  info.memory_budget = exts.count("VK_EXT_memory_budget") > 0;
  info.pipeline_statistics = exts.count("VK_KHR_pipeline_executable_properties") > 0;

  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  for (uint32_t i = 0; i < mem.memoryHeapCount; ++i) {
    info.heaps.push_back({mem.memoryHeaps[i].size,
                          (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0});
  }
  query_coopmat(instance, info);
  return info;
}

}  // namespace

std::string DeviceInfo::type_name() const {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "CPU";
    default:
      return "other";
  }
}

std::string DeviceInfo::api_string() const {
  return fmt::format("{}.{}.{}", VK_API_VERSION_MAJOR(api_version),
                     VK_API_VERSION_MINOR(api_version), VK_API_VERSION_PATCH(api_version));
}

uint64_t DeviceInfo::device_local_bytes() const {
  uint64_t total = 0;
  for (const auto& h : heaps)
    if (h.device_local) total += h.size;
  return total;
}

std::string DeviceInfo::unsupported_reason() const {
  if (api_version < VK_API_VERSION_1_3) return fmt::format("Vulkan {} < 1.3", api_string());
  if (!buffer_device_address) return "no bufferDeviceAddress";
  if (!int64) return "no shaderInt64";
  if (!storage16) return "no storageBuffer16BitAccess";
  return "";
}

bool query_workgroup_matrix_features(VkPhysicalDevice device, WorkgroupMatrixFeatures& f) {
  CoopmatKhrFeatures khr{kCoopmatKhrFeaturesType, nullptr, 0, 0};
  Coopmat2Features nv2{kCoopmat2FeaturesType, nullptr, 0, 0, 0, 0, 0, 0, 0};
  khr.pNext = &nv2;
  VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  features.pNext = &khr;
  vkGetPhysicalDeviceFeatures2(device, &features);
  if (!khr.cooperativeMatrix || !nv2.cooperativeMatrixWorkgroupScope ||
      !nv2.cooperativeMatrixFlexibleDimensions)
    return false;
  f.khr = {kCoopmatKhrFeaturesType, nullptr, VK_TRUE, VK_FALSE};
  f.coopmat2 = {kCoopmat2FeaturesType,
                nullptr,
                VK_TRUE,
                VK_TRUE,
                0,
                0,
                0,
                nv2.cooperativeMatrixTensorAddressing,
                0};
  return true;
}

std::vector<DeviceInfo> query_devices(VkInstance instance) {
  uint32_t count = 0;
  VKF_VK_CHECK(vkEnumeratePhysicalDevices(instance, &count, nullptr));
  std::vector<VkPhysicalDevice> handles(count);
  VKF_VK_CHECK(vkEnumeratePhysicalDevices(instance, &count, handles.data()));
  std::vector<DeviceInfo> out;
  for (uint32_t i = 0; i < count; ++i) out.push_back(query_device(instance, handles[i], i));
  return out;
}

uint32_t default_device_index(const std::vector<DeviceInfo>& devices) {
  const VkPhysicalDeviceType order[] = {VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU,
                                        VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU,
                                        VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU,
                                        VK_PHYSICAL_DEVICE_TYPE_CPU, VK_PHYSICAL_DEVICE_TYPE_OTHER};
  for (auto type : order)
    for (const auto& d : devices)
      if (d.type == type && d.unsupported_reason().empty()) return d.index;
  return 0;
}

}  // namespace vkf::vk
