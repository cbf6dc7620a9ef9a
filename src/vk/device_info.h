// What vkformer needs to know about a physical device: identity, limits and the optional features
// that choose kernels (16-bit arithmetic and storage, cooperative matrices, buffer device address).
// Read once per device; printed by `vkformer devices` and used for device selection.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <string>
#include <vector>

namespace vkf::vk {

struct CoopMatShape {
  uint32_t m, n, k;  // the shape, or for VK_NV_cooperative_matrix2's flexible dimensions the
                     // granularity of each dimension
  std::string a_type, b_type, c_type, result_type;
  std::string scope;
  uint32_t workgroup_invocations = 0;  // flexible dimensions at workgroup scope: its size
};

struct MemoryHeapInfo {
  uint64_t size;
  bool device_local;
};

// PCI vendor id of NVIDIA devices (DeviceInfo::vendor_id).
constexpr uint32_t kNvidiaVendorId = 0x10DE;

struct DeviceInfo {
  uint32_t index = 0;
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  std::string name;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  std::string driver_name;
  std::string driver_info;
  uint32_t api_version = 0;
  uint32_t vendor_id = 0;
  uint8_t uuid[VK_UUID_SIZE] = {};
  std::vector<MemoryHeapInfo> heaps;
  uint32_t subgroup_size = 0;
  // Smallest subgroup a compute shader may run with (VK_EXT_subgroup_size_control's
  // minSubgroupSize where the device reports it, else subgroup_size), and whether compute
  // shaders have subgroup shuffles.
  uint32_t min_subgroup_size = 0;
  bool subgroup_shuffle = false;
  // Multiprocessors, where the driver reports them (VK_NV_shader_sm_builtins); 0 elsewhere.
  uint32_t multiprocessors = 0;
  uint32_t max_shared_memory = 0;
  uint64_t max_storage_buffer_range = 0;
  uint32_t max_push_constants = 0;
  uint32_t max_workgroup_invocations = 0;
  uint32_t max_workgroup_count[3] = {};
  float timestamp_period_ns = 0;
  bool timestamps = false;
  bool float16_arithmetic = false;
  bool float64_arithmetic = false;
  bool int64 = false;
  // shaderBufferInt64Atomics, enabled where present (decode_bench's atomics rows use it).
  bool int64_atomics = false;
  bool int16 = false;
  bool storage16 = false;
  bool bfloat16 = false;
  bool buffer_device_address = false;
  bool subgroup_size_control = false;
  bool coopmat_nv = false;
  bool coopmat_khr = false;
  bool coopmat2_nv = false;
  bool memory_budget = false;
  // VK_KHR_pipeline_executable_properties: the driver can report per-pipeline statistics
  // (registers, shared memory, ...). Enabled only when VKF_PIPELINE_STATS=1 asks for them.
  bool pipeline_statistics = false;
  bool vulkan_memory_model = false;
  // ... at device scope too: the "_vmm" builds of chained kernels need both (stage_chain.glsl).
  bool vulkan_memory_model_device_scope = false;
  // Both of the above: what the "_vmm" builds of chained kernels need.
  bool memory_model_at_device_scope() const {
    return vulkan_memory_model && vulkan_memory_model_device_scope;
  }
  // VK_KHR_shader_float_controls (core in 1.2): kernels may require round-to-nearest-even and
  // preserved subnormals for 16-bit floats.
  bool f16_rounding_rte = false;
  bool f16_denorm_preserve = false;
  std::vector<CoopMatShape> coopmat_nv_shapes;
  std::vector<CoopMatShape> coopmat_khr_shapes;
  std::vector<CoopMatShape> coopmat2_flexible_shapes;  // VK_NV_cooperative_matrix2
  // VK_NV_cooperative_matrix2's limits on workgroup-scope matrices: the largest workgroup, the
  // largest flexible dimension, and the shared memory the driver keeps for staging them.
  uint32_t workgroup_matrix_max_invocations = 0;
  uint32_t workgroup_matrix_max_dimension = 0;
  uint32_t workgroup_matrix_reserved_shared = 0;
  // Set by the context once workgroup-scope matrices (and tensor-addressed loads of them) are
  // enabled on the logical device.
  bool workgroup_matrices = false;
  bool workgroup_tensor_addressing = false;

  std::string type_name() const;
  std::string api_string() const;
  uint64_t device_local_bytes() const;
  // Why the device cannot run vkformer, or "" when it can.
  std::string unsupported_reason() const;
};

// The feature structures of VK_KHR_cooperative_matrix and VK_NV_cooperative_matrix2, declared
// from the Vulkan registry because Debian 12's headers (1.3.239) predate both.
struct CoopmatKhrFeatures {
  VkStructureType sType;
  void* pNext;
  VkBool32 cooperativeMatrix;
  VkBool32 cooperativeMatrixRobustBufferAccess;
};
struct Coopmat2Features {
  VkStructureType sType;
  void* pNext;
  VkBool32 cooperativeMatrixWorkgroupScope;
  VkBool32 cooperativeMatrixFlexibleDimensions;
  VkBool32 cooperativeMatrixReductions;
  VkBool32 cooperativeMatrixConversions;
  VkBool32 cooperativeMatrixPerElementOperations;
  VkBool32 cooperativeMatrixTensorAddressing;
  VkBool32 cooperativeMatrixBlockLoads;
};
struct WorkgroupMatrixFeatures {
  CoopmatKhrFeatures khr{};
  Coopmat2Features coopmat2{};
};
// Whether the device has cooperative matrices (KHR) with workgroup scope and flexible dimensions
// (NV 2); if so, fills `f` with exactly those features switched on (and tensor addressing where
// the device has it), ready to chain into VkDeviceCreateInfo.
bool query_workgroup_matrix_features(VkPhysicalDevice device, WorkgroupMatrixFeatures& f);

// Reads the capabilities of every physical device of the instance, in enumeration order.
std::vector<DeviceInfo> query_devices(VkInstance instance);

// The default choice: first discrete GPU, then integrated, then virtual, then CPU.
uint32_t default_device_index(const std::vector<DeviceInfo>& devices);

}  // namespace vkf::vk
