// The tiled GEMM's plan (see matmul_tiling.h): tile choice by waves, split-K sizing, the
// implementation variants and their settings.
#include "ops/matmul_tiling.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <thread>

#include "core/launch.h"
#include "ops/matmul_coopmat.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf::ops::detail {
namespace {

// Split-K: 0 lets the heuristic decide (Fast math mode only), a positive value forces that many
// chunks where K divides evenly (tests), -1 disables it.
int64_t g_split_k = 0;

TileChoice g_tile_choice = TileChoice::Auto;

// Stream-K: 0 by rule, -1 never, N > 0 forced to N workers (see set_stream_k).
int64_t g_stream_k = 0;
int64_t g_stream_k_region = 1;  // rounds of tiles the stream-K region holds at most

constexpr const char* kTiledVariantChoices =
    "use old, new, or new followed by any of /bk16 /single /scalar /rowmajor /warp16x2 /checked "
    "/gm4 "
    "/gm16 /gm32 (e.g. new/bk16/single)";

std::optional<TiledVariant> parse_tiled_variant(const std::string& text) {
  TiledVariant v;
  if (text == "old") {
    v.pipelined = false;
    return v;
  }
  if (text.rfind("new", 0) != 0) return std::nullopt;
  size_t at = 3;
  while (at < text.size()) {
    if (text[at] != '/') return std::nullopt;
    const size_t end = std::min(text.find('/', at + 1), text.size());
    const std::string option = text.substr(at + 1, end - at - 1);
    at = end;
    if (option == "bk16") {
      v.large_bk = 16;
    } else if (option == "single") {
      v.double_buffer = false;
    } else if (option == "scalar") {
      v.vec4 = false;
    } else if (option == "rowmajor") {
      v.group_m = 1;
    } else if (option == "warp16x2") {
      v.warp_blocks = false;
    } else if (option == "checked") {
      v.interior_loads = false;
    } else if (option == "gm4" || option == "gm16" || option == "gm32") {
      v.group_m = static_cast<uint32_t>(std::stoul(option.substr(2)));
    } else {
      return std::nullopt;
    }
  }
  return v;
}

// The current variant, by name and parsed (once per setting, not per dispatch).
struct NamedVariant {
  std::string name;
  TiledVariant variant;
};
NamedVariant& tiled_variant_slot() {
  static NamedVariant slot = [] {
    const char* env = std::getenv("VKF_TILED_GEMM");
    const std::string name = env && *env ? env : "new";
    const auto parsed = parse_tiled_variant(name);
    VKF_REQUIRE(parsed, "VKF_TILED_GEMM='{}': {}", name, kTiledVariantChoices);
    return NamedVariant{name, *parsed};
  }();
  return slot;
}

}  // namespace

Tile pick_tile(int64_t batch, int64_t m, int64_t n) {
  switch (g_tile_choice) {
    case TileChoice::Medium:
      return kMedium;
    case TileChoice::Large:
      return kLarge;
    case TileChoice::Auto:
      break;
  }
  auto groups = [&](const Tile& t) {
    return int64_t{div_up(m, t.bm())} * int64_t{div_up(n, t.bn())} * batch;
  };
  if (vk::Context::get().info().type == VK_PHYSICAL_DEVICE_TYPE_CPU) {
    // lavapipe runs workgroups on a few CPU threads and pays for every padded row and column:
    // pick the tile with the least work on the busiest thread, the larger tile counting 1.3x
    // as efficient (measured with Mesa 22.3).
    const int64_t threads = std::max(1u, std::thread::hardware_concurrency());
    auto cost = [&](const Tile& t, double efficiency) {
      const int64_t rounds = (groups(t) + threads - 1) / threads;
      return static_cast<double>(rounds) * t.bm() * t.bn() / efficiency;
    };
    return cost(kLarge, 1.3) <= cost(kMedium, 1.0) ? kLarge : kMedium;
  }
  // On a GPU bigger tiles reuse each loaded value more, but every compute unit needs a few
  // workgroups to hide latency, and the last wave may leave compute units idle. Single products,
  // measured on the H200 (132 multiprocessors, two large workgroups each; bench/RESULTS.md):
  // up to 264 large tiles fit one wave and beat medium from 64 on (8192x192x576: 0.073 against
  // 0.093 ms); 265-527 leave a second wave mostly empty, where medium's finer grain wins by
  // 10-13% (8192x576x576); from 528 on, large. Batches (split-K chunks among them, which
  // split_k_chunks sizes for this rule) keep the plain threshold.
  constexpr int64_t kLargeWave = 264;
  const int64_t large = groups(kLarge);
  if (batch == 1)
    return (large >= 64 && large <= kLargeWave) || large >= 2 * kLargeWave ? kLarge : kMedium;
  return large >= 256 ? kLarge : kMedium;
}

bool stream_k_pays(int64_t tiles, int64_t slices, int64_t sms) {
  // Two large workgroups run on each multiprocessor (128 registers of 256 invocations on the
  // H200), and one alone gets through a slice almost as fast as two together (1.0 against 1.8 us):
  // a last round of whole tiles that leaves each multiprocessor one costs about half a round, and
  // stream-K's fix-up and partial tiles cost about 30 us. So, measured on the H200's training
  // products (bench/RESULTS.md, fifteenth session), stream-K pays where K is at least 512 and
  //  - more than one round of tiles leaves a last round at most half full (8192 x 576 products:
  //    320 tiles on 264 slots; 8192 x 576 x 576 0.187 against 0.218 ms), or
  //  - a few tiles have a long K that split-K would cut into uneven rounds, with at least 64
  //    slices per worker (weight gradients: 576 x 576 x 8192 0.178 against 0.213 ms; the LM
  //    head's 1280 x 576 x 49152 1.87 against 2.32). With fewer slices per worker (192 x 576 x
  //    8192), a full single round (8192 x 512 x 2048), or a last round more than half full,
  //    whole tiles and split-K are as fast or faster.
  const int64_t slots = 2 * sms;
  const int64_t last_round = tiles % slots;
  const bool ragged_rounds = tiles > slots && last_round > 0 && last_round <= sms;
  const bool few_long_tiles = tiles < sms && slices >= 512 && tiles * slices >= 64 * slots;
  return slices >= 64 && (ragged_rounds || few_long_tiles);
}

std::optional<StreamKPlan> stream_k_plan(int64_t batch, int64_t m, int64_t n, int64_t k) {
  if (batch != 1 || g_stream_k < 0 || k <= 0 || m <= 0 || n <= 0) return std::nullopt;
  const TiledVariant& v = tiled_variant_slot().variant;
  if (!v.pipelined) return std::nullopt;
  const int64_t tiles = int64_t{div_up(m, kLarge.bm())} * int64_t{div_up(n, kLarge.bn())};
  const int64_t slices = div_up(k, v.large_bk);
  // The kernel indexes iterations and workspace slots in 32 bits.
  if (tiles * slices > int64_t{1} << 31) return std::nullopt;
  auto plan_for = [&](int64_t workers) {
    workers = std::clamp<int64_t>(workers, 1, std::min<int64_t>(tiles * slices, 16384));
    // Whole tiles while at least g_stream_k_region rounds of them remain: the region's tiles are
    // then fewer than that many rounds (1: the last, incomplete round alone; 2: between one and
    // two rounds, every worker's range then spanning about two tiles, which measured slower on
    // the H200: 8192 x 576 x 576 0.214 against 0.187 ms). The region needs an iteration per
    // worker.
    auto whole_tiles = [&](int64_t rounds) {
      return tiles >= rounds * workers ? (tiles / workers - (rounds - 1)) * workers : 0;
    };
    int64_t dp = whole_tiles(g_stream_k_region);
    if ((tiles - dp) * slices < workers) dp = whole_tiles(2);
    return StreamKPlan{static_cast<uint32_t>(workers), static_cast<uint32_t>(dp)};
  };
  if (g_stream_k > 0) return plan_for(g_stream_k);
  const auto& info = vk::Context::get().info();
  if (math_mode() != MathMode::Fast || info.type == VK_PHYSICAL_DEVICE_TYPE_CPU ||
      info.multiprocessors == 0 || g_tile_choice != TileChoice::Auto)
    return std::nullopt;
  if (!stream_k_pays(tiles, slices, info.multiprocessors)) return std::nullopt;
  const int64_t slots = 2 * int64_t{info.multiprocessors};
  return plan_for(slots);
}

TiledPlan tiled_plan(int64_t batch, int64_t m, int64_t n, int64_t k) {
  TiledPlan plan{pick_tile(batch, m, n), tiled_variant_slot().variant, tiled_variant_slot().name};
  TiledVariant& v = plan.variant;
  if (!v.pipelined) return plan;
  Tile& t = plan.tile;
  if (k > 0) {
    plan.stream_k = stream_k_plan(batch, m, n, k);
    if (plan.stream_k) t = kLarge;
  }
  if (t.tm == kLarge.tm && t.tn == kLarge.tn) t.bk = v.large_bk;
  // Mirrors the shared arrays of matmul_tiled_pipelined.comp: per buffer, BK rows of BM + 4 and
  // of BN + 4 floats.
  auto shared_bytes = [&t](uint32_t stages) {
    return stages * t.bk * (t.bm() + 4 + t.bn() + 4) * 4;
  };
  const uint32_t limit = vk::Context::get().info().max_shared_memory;
  if (v.double_buffer && shared_bytes(2) > limit) {
    v.double_buffer = false;
    plan.name += "/single";
  }
  VKF_REQUIRE(shared_bytes(v.double_buffer ? 2 : 1) <= limit,
              "tiled GEMM variant '{}': its {}x{}x{} tile needs {} bytes of shared memory, the "
              "device allows {}; choose another variant (VKF_TILED_GEMM)",
              plan.name, t.bm(), t.bn(), t.bk, shared_bytes(v.double_buffer ? 2 : 1), limit);
  return plan;
}

int64_t split_k_chunks(int64_t batch, int64_t m, int64_t n, int64_t k) {
  if (batch != 1 || g_split_k < 0) return 1;
  if (g_split_k > 0) return k % g_split_k == 0 ? g_split_k : 1;
  // Stream-K balances a product of the tiled kernel over the device instead.
  if (!coopmat_plan(1, m, n) && stream_k_plan(1, m, n, k)) return 1;
  if (math_mode() != MathMode::Fast ||
      vk::Context::get().info().type == VK_PHYSICAL_DEVICE_TYPE_CPU)
    return 1;
  // Enough workgroups for a few per compute unit, chunks of at least 512 along K, K divisible.
  auto chunks_for = [&](int64_t groups, int64_t max_chunks) {
    int64_t chunks = 1;
    while (groups * chunks < 512 && k / (chunks * 2) >= 512 && k % (chunks * 2) == 0 &&
           chunks < max_chunks)
      chunks *= 2;
    return chunks;
  };
  if (const auto coop = coopmat_plan(1, m, n))
    return chunks_for(int64_t{div_up(m, coop->bm)} * int64_t{div_up(n, coop->bn)}, 32);
  // The tiled kernel: large tiles where up to 16 chunks give them 512 workgroups (the chunks then
  // make pick_tile take large), which beat medium ones split less on the H200's weight gradients
  // (1536x576x8192: 0.449 against 0.534 ms); otherwise the tile pick_tile gives.
  const int64_t large = int64_t{div_up(m, kLarge.bm())} * int64_t{div_up(n, kLarge.bn())};
  if (g_tile_choice != TileChoice::Medium && pick_tile(1, m, n).bm() != kLarge.bm()) {
    const int64_t chunks = chunks_for(large, 16);
    if (chunks > 1 && large * chunks >= 512) return chunks;
  }
  const Tile tile = pick_tile(1, m, n);
  return chunks_for(int64_t{div_up(m, tile.bm())} * int64_t{div_up(n, tile.bn())}, 32);
}

void set_split_k(int64_t chunks) {
  g_split_k = chunks;
}

void set_stream_k(int64_t workers) {
  g_stream_k = workers;
}
void set_stream_k_region(int64_t rounds) {
  VKF_REQUIRE(rounds == 1 || rounds == 2, "stream-K region: 1 or 2 rounds of tiles, not {}",
              rounds);
  g_stream_k_region = rounds;
}

void set_tile_choice(TileChoice choice) {
  g_tile_choice = choice;
}

TileChoice tile_choice() {
  return g_tile_choice;
}

void set_tiled_variant(const std::string& variant) {
  const auto parsed = parse_tiled_variant(variant);
  VKF_REQUIRE(parsed, "tiled GEMM variant '{}': {}", variant, kTiledVariantChoices);
  tiled_variant_slot() = {variant, *parsed};
}
std::string tiled_variant() {
  return tiled_variant_slot().name;
}

}  // namespace vkf::ops::detail
