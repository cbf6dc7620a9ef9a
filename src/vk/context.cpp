// Instance/device creation, device selection and validation-message capture (see context.h).
#include "vk/context.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "vk/error.h"

namespace vkf::vk {
namespace {

std::unique_ptr<Context>& instance_slot() {
  static std::unique_ptr<Context> ctx;
  return ctx;
}
std::optional<int>& requested_device() {
  static std::optional<int> index;
  return index;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

bool has_layer(const char* name) {
  uint32_t n = 0;
  vkEnumerateInstanceLayerProperties(&n, nullptr);
  std::vector<VkLayerProperties> layers(n);
  vkEnumerateInstanceLayerProperties(&n, layers.data());
  for (const auto& l : layers)
    if (std::strcmp(l.layerName, name) == 0) return true;
  return false;
}

bool has_instance_extension(const char* name) {
  uint32_t n = 0;
  vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateInstanceExtensionProperties(nullptr, &n, exts.data());
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

VkBool32 VKAPI_CALL debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT,
                                   VkDebugUtilsMessageTypeFlagsEXT,
                                   const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  // Never throw across the driver: record, and let check_validation() raise it.
  static_cast<Context*>(user)->on_validation_message(data && data->pMessage ? data->pMessage : "?");
  return VK_FALSE;
}

VkInstance create_instance(bool validation, bool quiet_missing_driver) {
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "vkformer";
  app.pEngineName = "vkformer";
  app.apiVersion = VK_API_VERSION_1_3;
  std::vector<const char*> layers, extensions;
  if (validation) {
    VKF_REQUIRE(has_layer("VK_LAYER_KHRONOS_validation"),
                "VKF_VALIDATE=1 asks for the Khronos validation layer, which is not installed; "
                "install the Debian package vulkan-validationlayers or unset VKF_VALIDATE");
    layers.push_back("VK_LAYER_KHRONOS_validation");
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  }
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ici.pApplicationInfo = &app;
  ici.enabledLayerCount = static_cast<uint32_t>(layers.size());
  ici.ppEnabledLayerNames = layers.data();
  ici.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  ici.ppEnabledExtensionNames = extensions.data();
  VkInstance inst = VK_NULL_HANDLE;
  VkResult r = vkCreateInstance(&ici, nullptr, &inst);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
    if (quiet_missing_driver) return VK_NULL_HANDLE;
    fail(
        "no Vulkan driver found (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER); install your "
        "GPU's Vulkan driver, or mesa-vulkan-drivers for the CPU device (lavapipe)");
  }
  VKF_VK_CHECK(r);
  return inst;
}

}  // namespace

Context& Context::get() {
  auto& slot = instance_slot();
  if (!slot) {
    slot.reset(new Context(requested_device()));
    // Tear down at exit before the driver does: handlers run in reverse order of registration,
    // and the driver registers its own while the instance is created. Without this the static
    // slot (registered earlier) would destroy the device after the NVIDIA driver's teardown.
    static const bool registered = [] {
      std::atexit([] {
        try {
          Context::shutdown();
        } catch (...) {
        }
      });
      return true;
    }();
    (void)registered;
  }
  return *slot;
}

bool Context::exists() {
  return instance_slot() != nullptr;
}

void Context::select_device(int index) {
  VKF_REQUIRE(index >= 0, "device index must be >= 0 (got {}); `vkformer devices` lists them",
              index);
  if (exists()) {
    VKF_REQUIRE(static_cast<int>(get().info().index) == index,
                "device {} requested, but vkformer already runs on device {}", index,
                get().info().index);
    return;
  }
  requested_device() = index;
}

void Context::shutdown() {
  instance_slot().reset();
}

std::optional<int> Context::requested_device_index() {
  if (requested_device()) return requested_device();
  if (const char* env = std::getenv("VKF_DEVICE"); env && *env) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    VKF_REQUIRE(end && *end == '\0' && v >= 0 && v < (1 << 20),
                "VKF_DEVICE='{}' is not a device index; `vkformer devices` lists them", env);
    return static_cast<int>(v);
  }
  return std::nullopt;
}

uint32_t Context::resolve_device_index(const std::vector<DeviceInfo>& devices,
                                       std::optional<int> requested) {
  VKF_REQUIRE(!devices.empty(),
              "no Vulkan device found; install a GPU driver, or "
              "mesa-vulkan-drivers for the CPU device (lavapipe)");
  if (!requested) return default_device_index(devices);
  VKF_REQUIRE(*requested >= 0 && static_cast<size_t>(*requested) < devices.size(),
              "device {} requested (--device or VKF_DEVICE), but there are only {} Vulkan "
              "device(s), numbered 0..{}; `vkformer devices` lists them",
              *requested, devices.size(), devices.size() - 1);
  return static_cast<uint32_t>(*requested);
}

std::vector<DeviceInfo> Context::list_devices() {
  VkInstance inst = create_instance(false, true);
  if (!inst) return {};
  std::vector<DeviceInfo> out;
  try {
    out = query_devices(inst);
  } catch (...) {
    vkDestroyInstance(inst, nullptr);
    throw;
  }
  vkDestroyInstance(inst, nullptr);
  return out;
}

Context::Context(std::optional<int> requested) {
  validation_ = env_flag("VKF_VALIDATE");
  instance_ = create_instance(validation_, false);
  if (validation_ && has_instance_extension(VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
    VkDebugUtilsMessengerCreateInfoEXT mci{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    mci.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mci.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                      VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
    mci.pfnUserCallback = debug_callback;
    mci.pUserData = this;
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
    if (create) VKF_VK_CHECK(create(instance_, &mci, nullptr, &messenger_));
  }

  auto devices = query_devices(instance_);
  if (devices.empty()) {
    fail(
        "no Vulkan device found; install a GPU driver, or mesa-vulkan-drivers for the CPU "
        "device (lavapipe)");
  }
  if (!requested) requested = requested_device_index();
  const uint32_t index = resolve_device_index(devices, requested);
  info_ = devices[index];
  const std::string why = info_.unsupported_reason();
  VKF_REQUIRE(why.empty(), "device {} ({}) cannot run vkformer: {}", index, info_.name, why);

  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(info_.handle, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(info_.handle, &nq, qf.data());
  bool found = false;
  for (uint32_t i = 0; i < nq && !found; ++i) {
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      queue_family_ = i;
      found = true;
    }
  }
  VKF_REQUIRE(found, "device {} ({}) has no compute queue", index, info_.name);

  // Features: buffer device address, 16-bit storage and 64-bit integers are required; the rest are
  // enabled when present so that kernels may use them.
  VkPhysicalDeviceCooperativeMatrixFeaturesNV coopmat_nv{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  VkPhysicalDeviceVulkan13Features f13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  f12.pNext = &f11;
  f11.pNext = &f13;
  f13.pNext = info_.coopmat_nv ? &coopmat_nv : nullptr;
  VkPhysicalDeviceFeatures2 supported{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  supported.pNext = &f12;
  vkGetPhysicalDeviceFeatures2(info_.handle, &supported);

  VkPhysicalDeviceFeatures2 enable{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  enable.features.shaderInt64 = supported.features.shaderInt64;
  enable.features.shaderInt16 = supported.features.shaderInt16;
  enable.features.shaderFloat64 = supported.features.shaderFloat64;
  VkPhysicalDeviceVulkan12Features e12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  e12.bufferDeviceAddress = VK_TRUE;
  e12.shaderFloat16 = f12.shaderFloat16;
  e12.shaderInt8 = f12.shaderInt8;
  e12.storageBuffer8BitAccess = f12.storageBuffer8BitAccess;
  e12.scalarBlockLayout = f12.scalarBlockLayout;
  e12.vulkanMemoryModel = f12.vulkanMemoryModel;
  e12.vulkanMemoryModelDeviceScope = f12.vulkanMemoryModelDeviceScope;
  e12.timelineSemaphore = f12.timelineSemaphore;
  e12.shaderBufferInt64Atomics = f12.shaderBufferInt64Atomics;
  info_.int64_atomics = f12.shaderBufferInt64Atomics == VK_TRUE;
  VkPhysicalDeviceVulkan11Features e11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  e11.storageBuffer16BitAccess = VK_TRUE;
  VkPhysicalDeviceVulkan13Features e13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
  e13.subgroupSizeControl = f13.subgroupSizeControl;
  e13.computeFullSubgroups = f13.computeFullSubgroups;
  e13.synchronization2 = f13.synchronization2;
  e13.maintenance4 = f13.maintenance4;
  VkPhysicalDeviceCooperativeMatrixFeaturesNV e_coop{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  e_coop.cooperativeMatrix = coopmat_nv.cooperativeMatrix;
  enable.pNext = &e12;
  e12.pNext = &e11;
  e11.pNext = &e13;
  std::vector<const char*> extensions;
  if (info_.coopmat_nv && coopmat_nv.cooperativeMatrix) {
    e13.pNext = &e_coop;
    extensions.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  }
  // From here on, coopmat_nv means usable: the extension and its feature are enabled.
  info_.coopmat_nv = info_.coopmat_nv && coopmat_nv.cooperativeMatrix;
  // Workgroup-scope matrices (VK_NV_cooperative_matrix2 on top of VK_KHR_cooperative_matrix): the
  // generated GEMM (ops/matmul_workgroup.h). Enabled where both extensions and the features it
  // uses are present; VKF_WORKGROUP_MATRICES=0 leaves them off.
  WorkgroupMatrixFeatures wg_features;
  const char* wg_env = std::getenv("VKF_WORKGROUP_MATRICES");
  const bool wg_wanted = !(wg_env && std::string(wg_env) == "0");
  if (wg_wanted && info_.coopmat_khr && info_.coopmat2_nv &&
      query_workgroup_matrix_features(info_.handle, wg_features)) {
    wg_features.coopmat2.pNext = enable.pNext;
    enable.pNext = &wg_features.khr;
    wg_features.khr.pNext = &wg_features.coopmat2;
    extensions.push_back("VK_KHR_cooperative_matrix");
    extensions.push_back("VK_NV_cooperative_matrix2");
    info_.workgroup_matrices = true;
    info_.workgroup_tensor_addressing = wg_features.coopmat2.cooperativeMatrixTensorAddressing;
  }
  if (info_.memory_budget) extensions.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  // Pipeline statistics (register counts and the like, printed as each pipeline is created) are
  // a profiling aid: asked for with VKF_PIPELINE_STATS=1, and only where the driver has them.
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR e_stats{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
  const char* stats_env = std::getenv("VKF_PIPELINE_STATS");
  info_.pipeline_statistics =
      info_.pipeline_statistics && stats_env && std::string(stats_env) == "1";
  if (info_.pipeline_statistics) {
    e_stats.pipelineExecutableInfo = VK_TRUE;
    e_stats.pNext = enable.pNext;
    enable.pNext = &e_stats;
    extensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
  }

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = queue_family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &enable;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  dci.ppEnabledExtensionNames = extensions.data();
  VKF_VK_CHECK(vkCreateDevice(info_.handle, &dci, nullptr, &device_));
  vkGetDeviceQueue(device_, queue_family_, 0, &queue_);

  allocator_ = std::make_unique<Allocator>(info_.handle, device_, info_);
  pipelines_ = std::make_unique<Pipelines>(device_, info_);
  stream_ = std::make_unique<Stream>(*this);
}

Context::~Context() {
  if (device_) vkDeviceWaitIdle(device_);
  stream_.reset();
  pipelines_.reset();
  allocator_.reset();
  if (device_) vkDestroyDevice(device_, nullptr);
  if (messenger_) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy) destroy(instance_, messenger_, nullptr);
  }
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

void Context::on_validation_message(std::string message) {
  messages_.push_back(std::move(message));
}

void Context::check_validation() {
  if (messages_.size() == messages_checked_) return;
  std::string all;
  const size_t count = messages_.size() - messages_checked_;
  for (size_t i = messages_checked_; i < messages_.size(); ++i) all += "\n  " + messages_[i];
  messages_checked_ = messages_.size();
  fail("Vulkan validation reported {} message(s) (VKF_VALIDATE=1 makes them errors):{}", count,
       all);
}

}  // namespace vkf::vk
