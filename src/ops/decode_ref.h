// CPU references of the decode ops (ops/decode.h), written from their definitions: torch.argmax
// over rows, and the cache write. Decode attention's reference is ref::attention over the filled
// slots (ops/attention_ref.h).
#pragma once

#include <cstdint>
#include <vector>

namespace vkf::ref {

// First index of the maximum of each of `rows` rows of `cols` values (NaN counts as the maximum).
std::vector<int32_t> argmax_rows(const std::vector<double>& x, int64_t rows, int64_t cols);

// cache [B, capacity, row] with cache[b, slot, :] = values[b, :] (values [B, row]); a slot outside
// [0, capacity) changes nothing.
void kv_cache_write(std::vector<double>& cache, const std::vector<double>& values, int64_t batch,
                    int64_t capacity, int64_t row, int64_t slot);

}  // namespace vkf::ref
