// The stream-K split of a tiled GEMM (planned in ops/matmul_tiling.h, dispatched by
// ops/matmul_kernels.cpp), shared by the kernel that computes it (matmul_tiled_pipelined.comp
// with STREAM_K) and the pass that completes its split tiles (matmul_streamk_fixup.comp), so that
// both derive the same ranges from the same push constants.
//
// The first dp_tiles tiles are whole tiles, worker w taking tiles w, w + workers, ... The rest
// (the stream-K region) is a line of (tile, k-slice) iterations, tile-major, cut into `workers`
// contiguous ranges whose lengths differ by at most one: each worker ends its range where the
// next one starts, so a tile of the region is summed by one worker or by a run of consecutive
// workers, each over a contiguous run of its slices. A worker that sums part of a tile writes that
// partial tile to the workspace: slot 2w for the first tile of its range, 2w + 1 for the last, so
// a worker writes at most two and the fix-up pass finds each by the same rule.

// First iteration of worker w's range in a region of `total` iterations.
uint sk_range_begin(uint w, uint total, uint workers) {
  const uint q = total / workers, r = total % workers;
  return w * q + min(w, r);
}

// The worker whose range holds iteration i (the inverse of sk_range_begin).
uint sk_worker_of(uint i, uint total, uint workers) {
  const uint q = total / workers, r = total % workers;
  const uint long_part = r * (q + 1);  // the first r ranges hold q + 1 iterations
  return i < long_part ? i / (q + 1) : r + (i - long_part) / q;
}

// The (tile row, tile column) of tile `id` of a tiles_m x tiles_n grid, in the plain grid's
// banded order (common.glsl; bands of one row are row-major).
uvec2 sk_tile_of(uint id, uint tiles_n, uint tiles_m, uint group_m) {
  return banded_tile_of(id, tiles_n, tiles_m, group_m);
}

// The workspace slot of worker w's partial sum of region tile t (t is in w's range).
uint sk_partial_slot(uint w, uint t, uint total, uint workers, uint slices) {
  return sk_range_begin(w, total, workers) / slices == t ? 2 * w : 2 * w + 1;
}
