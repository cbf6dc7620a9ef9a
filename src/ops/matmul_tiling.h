// How the fp32 tiled GEMM (matmul_tiled*.comp) is laid out for a product: the tile, the
// kernel's implementation variant and the split along K -- the rules and the settings that
// override them (tests, benchmarks). Internal to src/ops (matmul_kernels.cpp dispatches).
#pragma once

#include <cstdint>
#include <optional>
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
  bool interior_loads =
      true;  // slices inside the matrix read without bounds tests ("/checked": off)
};

// Stream-K (matmul_tiled_pipelined.comp with STREAM_K, stream_k.glsl): `workers` workgroups, one
// per concurrent slot of the device, share a single product's (tile, k-slice) iterations evenly;
// the first dp_tiles tiles go whole, worker w taking tiles w, w + workers, ..., and the rest (the
// last, incomplete round) are cut into equal contiguous runs of iterations. Tiles split between
// workers are completed by a second pass (matmul_streamk_fixup.comp) from a workspace of
// 2 * workers partial tiles. This keeps every slot busy to the end where whole tiles would leave
// a last, mostly empty round (the 135M shape's 576-wide products: 320 tiles on 264 slots), and
// replaces split-K where that would cut a long K into uneven rounds.
struct StreamKPlan {
  uint32_t workers = 0;
  uint32_t dp_tiles = 0;
  int64_t workspace_elements(const Tile& t) const { return 2 * int64_t{workers} * t.bm() * t.bn(); }
};

// The tile and implementation of the tiled kernel for a problem, and the plan's name: the variant
// as set, plus "/single" where the device lacks shared memory for two buffers. Given the depth k
// of the product, the plan may run it as stream-K (`stream_k`, always on the large tile).
struct TiledPlan {
  Tile tile;
  TiledVariant variant;
  std::string name;
  std::optional<StreamKPlan> stream_k;
};
TiledPlan tiled_plan(int64_t batch, int64_t m, int64_t n, int64_t k = 0);

// The stream-K plan of a batch x m x n x k product on the tiled kernel's large tile, or nullopt
// where it runs as a grid of whole tiles (the setting of set_stream_k, else the rule).
std::optional<StreamKPlan> stream_k_plan(int64_t batch, int64_t m, int64_t n, int64_t k);
// The rule: whether a product of `tiles` large tiles and `slices` k-slices each runs faster as
// stream-K than as whole tiles or split-K on a GPU of `multiprocessors`.
bool stream_k_pays(int64_t tiles, int64_t slices, int64_t multiprocessors);
// 0: by rule (Fast math mode on GPUs whose multiprocessor count the driver reports, where it is
// expected to pay); -1: never; N > 0: N workers for every single product of the tiled kernel
// (tests: any N gives a correct product).
void set_stream_k(int64_t workers);
// How many rounds of tiles the stream-K region holds at most: 1 (the default: only the last,
// incomplete round; the rest whole) or 2, for measurements.
void set_stream_k_region(int64_t rounds);

// The tile of a batch x m x n product (the setting of set_tile_choice, else the rule).
Tile pick_tile(int64_t batch, int64_t m, int64_t n);

// How many K-chunks to split a single product into (1: none). A product with few output tiles and
// a long K (a weight gradient: [out, in] summed over every token) leaves most compute units idle;
// split, each chunk's partial product runs as one batch entry of the tiled kernel and a second
// pass sums the partials in a fixed order. Only in Fast math mode: Precise keeps one ordered sum.
int64_t split_k_chunks(int64_t batch, int64_t m, int64_t n, int64_t k);

}  // namespace vkf::ops::detail
