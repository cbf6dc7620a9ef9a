// The process-wide Vulkan context: instance (with the Khronos validation layer when
// VKF_VALIDATE=1), the chosen device and its compute queue, the allocator, the pipeline cache and
// the command stream. Created on first use; the device is `Context::select_device(N)` if called
// before, else VKF_DEVICE, else the default order (discrete, integrated, virtual, CPU).
// Single-threaded: all recording happens on the thread that uses vkformer.
#pragma once

#include <vulkan/vulkan.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vk/device_info.h"
#include "vk/memory.h"
#include "vk/pipeline.h"
#include "vk/stream.h"

namespace vkf::vk {

class Context {
 public:
  static Context& get();
  static bool exists();
  // Chooses the device for the context created next; throws if one already exists with another.
  static void select_device(int index);
  // Destroys the context (waits for the device first). Tensors must be gone by then.
  static void shutdown();
  // Lists the devices of a temporary instance (no context is created); empty if there is no driver.
  static std::vector<DeviceInfo> list_devices();
  // The device asked for by select_device() or VKF_DEVICE (validated as a number), if any.
  static std::optional<int> requested_device_index();
  // The index a context would use among `devices`; throws a clear error for a bad request.
  static uint32_t resolve_device_index(const std::vector<DeviceInfo>& devices,
                                       std::optional<int> requested);

  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  VkDevice device() const { return device_; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return queue_family_; }
  const DeviceInfo& info() const { return info_; }
  Allocator& allocator() { return *allocator_; }
  Pipelines& pipelines() { return *pipelines_; }
  Stream& stream() { return *stream_; }
  bool validation_enabled() const { return validation_; }

  // Validation messages seen so far (with VKF_VALIDATE=1); check_validation() throws if any arrived
  // since the last check. Called by the stream after each wait.
  const std::vector<std::string>& validation_messages() const { return messages_; }
  void check_validation();
  void on_validation_message(std::string message);

 private:
  explicit Context(std::optional<int> requested);

  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  DeviceInfo info_;
  bool validation_ = false;
  std::vector<std::string> messages_;
  size_t messages_checked_ = 0;
  std::unique_ptr<Allocator> allocator_;
  std::unique_ptr<Pipelines> pipelines_;
  std::unique_ptr<Stream> stream_;
};

// Shorthand for Context::get().stream().
inline Stream& stream() { return Context::get().stream(); }

}  // namespace vkf::vk
