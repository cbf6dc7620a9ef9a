// Vulkan's two-call enumeration of structures, shared by the device and pipeline queries.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <vector>

namespace vkf::vk {

// `query(&count, nullptr)` for the count, then `query(&count, data)` into that many structures of
// type T whose sType is `type` (the rest zeroed). Empty where either call fails or there are none.
template <class T, class Query>
std::vector<T> enumerate_structs(VkStructureType type, Query&& query) {
  uint32_t n = 0;
  if (query(&n, static_cast<T*>(nullptr)) != VK_SUCCESS || n == 0) return {};
  std::vector<T> out(n, T{});
  for (auto& x : out) x.sType = type;
  if (query(&n, out.data()) != VK_SUCCESS) return {};
  out.resize(n);
  return out;
}

}  // namespace vkf::vk
