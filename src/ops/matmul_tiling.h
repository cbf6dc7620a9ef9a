// How the fp32 tiled GEMM (matmul_tiled*.comp) is laid out for a product: the tile, the
// kernel's implementation variant and the split along K -- the rules and the settings that
// override them (tests, benchmarks). Internal to src/ops (matmul_kernels.cpp dispatches).
#pragma once

#include <cstdint>
#include <string>

#include "ops/matmul_kernels.h"

namespace vkf::ops::detail {

// A tile of 16 x 16 threads, each with a tm x tn register micro-tile, over bk-deep slices of K.
struct Tile {
  uint32_t tm, tn, bk;
  uint32_t bm() const { return 16 * tm; }
  uint32_t bn() const { return 16 * tn; }
};
constexpr Tile kMedium{4, 4, 16}, kLarge{8, 8, 8};

// The tiled kernel's implementation and the options of the pipelined one (see set_tiled_variant);
// the defaults are plain "new".
struct TiledVariant {
  bool pipelined = true;      // matmul_tiled_pipelined.comp, else matmul_tiled.comp
  uint32_t large_bk = 8;      // slice depth of the 128x128 tile
  bool double_buffer = true;  // two shared buffers, one barrier per slice
  bool vec4 = true;           // 16-byte loads where the operand allows
  uint32_t group_m = 8;       // tile rows per rasterization band (1: row-major)
  bool warp_blocks = true;    // warps of 8x4 threads
};

// The tile and implementation of the tiled kernel for a problem, and the plan's name: the variant
// as set, plus "/single" where the device lacks shared memory for two buffers.
struct TiledPlan {
  Tile tile;
  TiledVariant variant;
  std::string name;
};
TiledPlan tiled_plan(int64_t batch, int64_t m, int64_t n);

// The tile of a batch x m x n product (the setting of set_tile_choice, else the rule).
Tile pick_tile(int64_t batch, int64_t m, int64_t n);

// How many K-chunks to split a single product into (1: none). A product with few output tiles and
// a long K (a weight gradient: [out, in] summed over every token) leaves most compute units idle;
// split, each chunk's partial product runs as one batch entry of the tiled kernel and a second
// pass sums the partials in a fixed order. Only in Fast math mode: Precise keeps one ordered sum.
int64_t split_k_chunks(int64_t batch, int64_t m, int64_t n, int64_t k);

}  // namespace vkf::ops::detail
