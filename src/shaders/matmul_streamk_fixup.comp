// The second pass of a stream-K GEMM (ops/matmul_tiling.h, ops/matmul_kernels.cpp): completes
// each tile of the stream-K region that several workers summed a part of (stream_k.glsl). One
// invocation per element of the region's tiles (a 1-D grid, grid_1d); for every in-range output
// of a split tile,
//   out(m, n) = alpha * (partial_first + ... + partial_last) + beta * out(m, n) + bias(m, n)
// with the partials added in increasing worker order (increasing k), as matmul_splitk_reduce adds
// its chunks, so results are deterministic. A tile one worker summed whole was stored by it.
// One invocation per element keeps enough loads in flight to run at memory speed: a workgroup
// per tile walking its elements in turn waited on each element's loads (60-200 us per product
// on the H200 where a tile had 3 to 26 parts).
#version 460
#include "common.glsl"
#include "stream_k.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;
layout(constant_id = 0) const uint BM = 128;  // the tile of the stream-K kernel
layout(constant_id = 1) const uint BN = 128;
layout(constant_id = 2) const uint GROUP_M = 8;  // its rasterization band (1: row-major)

layout(push_constant, std430) uniform Push {
  F32Buf partials;  // [2 * workers][BM * BN]
  F32Buf c;         // c(m, n) at m * c_rs + n * c_cs
  uint64_t bias;    // 0 when there is no bias
  uint M, N;
  uint c_rs, c_cs;
  uint bias_rs, bias_cs;
  float alpha, beta;
  uint tiles_n, tiles_m, slices, workers, dp_tiles;
} p;

void main() {
  const uint i = flat_invocation(LOCAL_SIZE);
  const uint region_tiles = p.tiles_n * p.tiles_m - p.dp_tiles;
  const uint t = i / (BM * BN), e = i % (BM * BN);  // region tile, element within it
  if (t >= region_tiles) return;
  const uint total = region_tiles * p.slices;
  const uint w_first = sk_worker_of(t * p.slices, total, p.workers);
  const uint w_last = sk_worker_of((t + 1) * p.slices - 1, total, p.workers);
  if (w_first == w_last) return;
  const uvec2 tile = sk_tile_of(p.dp_tiles + t, p.tiles_n, p.tiles_m, GROUP_M);
  const uint m = tile.x * BM + e / BN, n = tile.y * BN + e % BN;
  if (m >= p.M || n >= p.N) return;
  // Ranges are contiguous: every worker after the first starts inside tile t (slot 2w); the first
  // started inside it only if it starts at its first slice.
  float sum = p.partials.v[sk_partial_slot(w_first, t, total, p.workers, p.slices) * (BM * BN) + e];
  for (uint w = w_first + 1; w <= w_last; ++w) sum += p.partials.v[2 * w * (BM * BN) + e];
  float v = p.alpha * sum;
  const uint ci = m * p.c_rs + n * p.c_cs;
  if (p.beta != 0.0) v += p.beta * p.c.v[ci];
  if (p.bias != 0) v += F32Buf(p.bias).v[m * p.bias_rs + n * p.bias_cs];
  p.c.v[ci] = v;
}
