// Small helpers the micro-benchmarks share: comma-separated option lists, "AxBxC" sizes, the
// median of timings, the wall time of replaying a captured graph, and cheap reproducible
// pseudo-random inputs. Header-only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "vk/stream.h"

namespace vkf::bench {

// The non-empty items of a comma-separated list.
inline std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Exactly `count` positive decimal sizes separated by 'x' ("8192x1536x576"), or nullopt.
inline std::optional<std::vector<int64_t>> parse_sizes(const std::string& text, size_t count) {
  std::vector<int64_t> sizes;
  size_t start = 0;
  while (true) {
    const size_t end = std::min(text.find('x', start), text.size());
    const std::string item = text.substr(start, end - start);
    if (item.empty() || item.size() > 12 ||
        !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::nullopt;
    sizes.push_back(std::stoll(item));
    if (sizes.back() <= 0) return std::nullopt;
    if (end == text.size()) break;
    start = end + 1;
  }
  if (sizes.size() != count) return std::nullopt;
  return sizes;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// Replays a captured graph until `ms` milliseconds have passed: GPU clocks fall to a fraction of
// their peak within about a second of light use (the H200's SM clock drops from 1,980 to 345 MHz)
// and short timed bursts do not bring them back, so a measurement that follows host work starts
// with this.
inline void warm_clocks(vk::Stream& stream, vk::Graph& graph, double ms) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
  do {
    stream.replay(graph);
    stream.wait(graph);
  } while (std::chrono::steady_clock::now() < until);
}

// The median wall time in microseconds of `replays` replays of a captured graph, each waited for:
// what a chain of dependent dispatches costs with no host work between them.
inline double median_replay_us(vk::Stream& stream, vk::Graph& graph, int replays) {
  std::vector<double> us;
  for (int r = 0; r < replays; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    stream.replay(graph);
    stream.wait(graph);
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(us);
}

// n values in [-1, 1) from a linear congruential generator seeded by `seed`: inputs whose values
// do not matter for speed, the same on every run.
inline std::vector<float> random_values(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(s >> 40) / 8388608.0 - 1.0);
  }
  return v;
}

}  // namespace vkf::bench
