// vkf::Error, the one exception type vkformer throws, and helpers to raise it with a message a
// user can act on (what failed, the values involved, what to do). Vulkan results are turned into
// Errors by VKF_VK_CHECK so that no failure reaches the user as a crash.
#pragma once

#include <vulkan/vulkan.h>

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace vkf {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Device memory ran out while other memory may still be waiting for queued GPU work to release it;
// callers that can wait for the GPU (tensor storage) catch this one and retry once.
class OutOfMemory : public Error {
 public:
  explicit OutOfMemory(const std::string& message) : Error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Checks a condition that depends on user input; throws a vkf::Error with the formatted message.
#define VKF_REQUIRE(cond, ...)         \
  do {                                 \
    if (!(cond)) ::vkf::fail(__VA_ARGS__); \
  } while (0)

namespace vk {
const char* result_name(VkResult result);
[[noreturn]] void throw_vk_error(VkResult result, const char* call, const char* file, int line);
}  // namespace vk

#define VKF_VK_CHECK(call)                                                      \
  do {                                                                          \
    VkResult vkf_result_ = (call);                                              \
    if (vkf_result_ != VK_SUCCESS) ::vkf::vk::throw_vk_error(vkf_result_, #call, __FILE__, __LINE__); \
  } while (0)

}  // namespace vkf
