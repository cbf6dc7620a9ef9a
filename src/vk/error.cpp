// Names for VkResult codes and the conversion of failed Vulkan calls into vkf::Error.
#include "vk/error.h"

namespace vkf::vk {

const char* result_name(VkResult result) {
  switch (result) {
#define VKF_CASE(x) \
  case x: return #x;
    VKF_CASE(VK_SUCCESS)
    VKF_CASE(VK_NOT_READY)
    VKF_CASE(VK_TIMEOUT)
    VKF_CASE(VK_INCOMPLETE)
    VKF_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    VKF_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    VKF_CASE(VK_ERROR_INITIALIZATION_FAILED)
    VKF_CASE(VK_ERROR_DEVICE_LOST)
    VKF_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    VKF_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    VKF_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    VKF_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    VKF_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    VKF_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    VKF_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    VKF_CASE(VK_ERROR_FRAGMENTED_POOL)
    VKF_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
    VKF_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    VKF_CASE(VK_ERROR_FRAGMENTATION)
    VKF_CASE(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
    VKF_CASE(VK_ERROR_UNKNOWN)
#undef VKF_CASE
    default: return "VkResult(unknown)";
  }
}

void throw_vk_error(VkResult result, const char* call, const char* file, int line) {
  if (result == VK_ERROR_DEVICE_LOST) {
    fail("the Vulkan device was lost during {} ({}:{}): the driver reset the GPU, usually after a "
         "kernel fault or a timeout; results computed so far are gone, restart the process",
         call, file, line);
  }
  if (result == VK_ERROR_OUT_OF_DEVICE_MEMORY || result == VK_ERROR_OUT_OF_HOST_MEMORY) {
    fail("out of memory in {} ({}): use a smaller model, batch or sequence length", call,
         result_name(result));
  }
  fail("Vulkan call {} failed with {} ({}:{})", call, result_name(result), file, line);
}

}  // namespace vkf::vk
