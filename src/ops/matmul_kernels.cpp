// Strided matrix descriptions, kernel choice and dispatch for the GEMM family (see
// matmul_kernels.h). Problems larger than one dispatch's 65535 workgroups per dimension are split
// into several dispatches over sub-ranges of the batch, rows and columns. The tiled kernel has two
// implementations with bitwise the same results (set_tiled_variant); the tile, variant and K
// split of a product are planned in matmul_tiling.cpp. In F16 precision the tensor-core kernel
// (matmul_coopmat.h) replaces the tiled one where the device allows, and the portable kernels
// round their operands to f16 (a specialization constant); that path, from the f16 operand copies
// to the tensor-core dispatches, is matmul_tensor_cores.cpp. The skinny f16 kernel's launch rules
// are in matmul_skinny_f16.cpp.
#include "ops/matmul_kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>

#include "core/autograd.h"
#include "core/launch.h"
#include "ops/matmul_coopmat.h"
#include "ops/matmul_dispatch.h"
#include "ops/matmul_relayout.h"
#include "ops/matmul_tiling.h"
#include "ops/matmul_workgroup.h"
#include "ops/norm.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf::ops::detail {
namespace {

// Workgroups per grid dimension in one dispatch: 65535 is the smallest limit vkformer supports;
// tests lower it to exercise the split into several dispatches on small problems.
int64_t g_max_groups = 65535;
constexpr uint32_t kSkinnyMaxRows = 8;  // matmul_skinny's MMAX

struct SplitKPush {
  uint64_t partial, c, bias;
  uint32_t m, n, s;
  uint32_t c_rs, c_cs;
  uint32_t bias_rs, bias_cs;
  float alpha, beta;
};

struct ColsumPush {
  uint64_t src, dst;
  uint32_t r, n;
  uint32_t ld;
  uint32_t rows_per_group;
  uint32_t dst_rs;
  float beta;
};

TiledLoadCounts g_tiled_loads;
uint64_t g_stream_k_dispatches = 0;

// Largest element offset a description reaches; the kernels index in 32 bits.
void check_extent(const MatDesc& d, const char* what) {
  const int64_t last = (d.batch - 1) * d.bs + (d.rows - 1) * d.rs + (d.cols - 1) * d.cs;
  checked_u32(last, what);
}

// A stride as the kernels take it; one along a dimension of extent 1 is never used.
// check_extent() has bounded the others.
uint32_t stride_u32(int64_t stride, int64_t extent) {
  return extent <= 1 ? 0u : static_cast<uint32_t>(stride);
}

// F16 precision: the portable kernels round every operand element to f16.
uint32_t round_f16() {
  return matmul_precision() == MatmulPrecision::F16 ? 1u : 0u;
}

// The push constants of the pipelined tiled kernel: GemmPush, then stream-K's fields (zero for a
// grid of whole tiles). Mirrors matmul_tiled_pipelined.comp's MATMUL_PUSH_EXTRA.
struct TiledPush {
  GemmPush gemm;
  uint64_t sk_partials;
  uint32_t sk_tiles_n, sk_tiles_m, sk_slices, sk_workers, sk_dp_tiles;
};

// Mirrors matmul_streamk_fixup.comp.
struct StreamKFixupPush {
  uint64_t partials, c, bias;
  uint32_t m, n;
  uint32_t c_rs, c_cs;
  uint32_t bias_rs, bias_cs;
  float alpha, beta;
  uint32_t tiles_n, tiles_m, slices, workers, dp_tiles;
};

void dispatch_tiled(const MatDesc& a, const MatDesc& b, const MatDesc& c, float alpha, float beta,
                    const Tensor& bias, int64_t bias_stride, const vk::DispatchCost& cost) {
  const int64_t m = c.rows, n = c.cols;
  const TiledPlan plan = tiled_plan(c.batch, m, n, a.cols);
  const Tile& tile = plan.tile;
  const TiledVariant& v = plan.variant;
  const KernelLayout la = kernel_layout(a), lb = kernel_layout(b);
  // A weight stored in f16 is read by the f16b variant (halves widened as they are loaded).
  const bool f16_b = b.t.dtype() == DType::F16;
  const std::string module =
      std::string(v.pipelined ? "matmul_tiled_pipelined" : "matmul_tiled") + (f16_b ? "_f16b" : "");
  // The pipelined kernel's chunks of 4 elements must divide each thread's share of a slice.
  const bool whole_chunks =
      (tile.bm() * tile.bk / 256) % 4 == 0 && (tile.bn() * tile.bk / 256) % 4 == 0;
  auto spec_for = [&](const GemmPush& push, bool stream_k) {
    std::vector<uint32_t> spec = {tile.tm, tile.tn, tile.bk, la.trans, lb.trans, round_f16()};
    if (v.pipelined) {
      // 16-byte loads (4 floats, or 4 halves in 8 bytes) need every line of every batch entry to
      // start aligned.
      const bool vec_a =
          v.vec4 && whole_chunks && push.a % 16 == 0 && push.lda % 4 == 0 && push.sa % 4 == 0;
      const bool vec_b = v.vec4 && whole_chunks && push.b % (f16_b ? 8 : 16) == 0 &&
                         push.ldb % 4 == 0 && push.sb % 4 == 0;
      // 16-byte stores: C's rows contiguous and aligned in every batch entry, the bias too.
      const bool vec_c = v.vec4 && push.c_cs == 1 && push.c % 16 == 0 && push.c_rs % 4 == 0 &&
                         push.sc % 4 == 0 &&
                         (push.bias == 0 || (push.bias % 16 == 0 && push.bias_cs == 1));
      spec.insert(spec.end(), {vec_a, vec_b, v.double_buffer, v.group_m, v.warp_blocks, stream_k,
                               vec_c, v.interior_loads});
      ++g_tiled_loads.dispatches;
      g_tiled_loads.vector_a += vec_a;
      g_tiled_loads.vector_b += vec_b;
      g_tiled_loads.vector_c += vec_c;
    }
    return spec;
  };
  if (plan.stream_k) {
    // One line of workers over the whole product, then the fix-up of the tiles they split.
    const StreamKPlan& sk = *plan.stream_k;
    Tensor partials = Tensor::empty({sk.workspace_elements(tile)});
    TiledPush push{make_push(a, b, c, 0, 0, 0, m, n, alpha, beta, bias, 0, bias_stride),
                   partials.address(),
                   div_up(n, tile.bn()),
                   div_up(m, tile.bm()),
                   div_up(a.cols, tile.bk),
                   sk.workers,
                   sk.dp_tiles};
    ++g_stream_k_dispatches;
    launch(module, push, Grid{sk.workers, 1, 1}, {&a.t, &b.t, &bias, &c.t}, {&c.t, &partials},
           spec_for(push.gemm, true), cost);
    const int64_t region_tiles = int64_t{push.sk_tiles_n} * push.sk_tiles_m - sk.dp_tiles;
    const StreamKFixupPush fix{partials.address(), push.gemm.c,       push.gemm.bias,
                               push.gemm.m,        push.gemm.n,       push.gemm.c_rs,
                               push.gemm.c_cs,     push.gemm.bias_rs, push.gemm.bias_cs,
                               alpha,              beta,              push.sk_tiles_n,
                               push.sk_tiles_m,    push.sk_slices,    sk.workers,
                               sk.dp_tiles};
    launch("matmul_streamk_fixup", fix, grid_1d(region_tiles * tile.bm() * tile.bn(), 256),
           {&partials, &bias, &c.t}, {&c.t}, {tile.bm(), tile.bn(), v.group_m});
    return;
  }
  for_each_grid_part(c.batch, m, n, tile.bm(), tile.bn(), [&](const GridPart& g) {
    const GemmPush gemm =
        make_push(a, b, c, g.z0, g.m0, g.n0, g.mc, g.nc, alpha, beta, bias, 0, bias_stride);
    const std::vector<uint32_t> spec = spec_for(gemm, false);
    const vk::DispatchCost part_cost = g.first ? cost : vk::DispatchCost{};
    if (v.pipelined) {
      launch(module, TiledPush{gemm, 0, 0, 0, 0, 0, 0}, g.grid, {&a.t, &b.t, &bias, &c.t}, {&c.t},
             spec, part_cost);
    } else {
      launch(module, gemm, g.grid, {&a.t, &b.t, &bias, &c.t}, {&c.t}, spec, part_cost);
    }
  });
}

// A product with M and N past the skinny range: on cooperative matrices when the F16 plan says
// so (workgroup scope where that kernel takes it), else the tiled kernel.
void dispatch_tiles(const MatDesc& a, const MatDesc& b, const MatDesc& c, float alpha, float beta,
                    const Tensor& bias, int64_t bias_stride, const vk::DispatchCost& cost) {
  if (dispatch_tensor_cores(a, b, c, alpha, beta, bias, bias_stride, cost)) return;
  // The fp32 tiled kernel, with its operands in its fastest layout where that pays.
  MatDesc ta = a, tb = b;
  relayout_for_tiled(ta, tb, c);
  dispatch_tiled(ta, tb, c, alpha, beta, bias, bias_stride, cost);
}

void dispatch_split_k(const MatDesc& a, const MatDesc& b, const MatDesc& c, float alpha, float beta,
                      const Tensor& bias, int64_t bias_stride, int64_t chunks,
                      const vk::DispatchCost& cost) {
  const int64_t m = c.rows, n = c.cols, kc = a.cols / chunks;
  // Chunk s of A is columns [s*kc, (s+1)*kc) and of B rows [s*kc, (s+1)*kc): batch entries.
  const MatDesc ac{a.t, chunks, m, kc, kc * a.cs, a.rs, a.cs};
  const MatDesc bc{b.t, chunks, kc, n, kc * b.rs, b.rs, b.cs};
  Tensor partial = Tensor::empty({chunks, m, n});
  const MatDesc pc{partial, chunks, m, n, m * n, n, 1};
  check_extent(ac, "split-K A");
  check_extent(bc, "split-K B");
  dispatch_tiles(ac, bc, pc, 1.0f, 0.0f, Tensor(), 0, cost);
  SplitKPush push{};
  push.partial = partial.address();
  push.c = byte_address(c.t, 0);
  push.bias = bias.defined() ? bias.address() : 0;
  push.m = static_cast<uint32_t>(m);
  push.n = static_cast<uint32_t>(n);
  push.s = static_cast<uint32_t>(chunks);
  push.c_rs = stride_u32(c.rs, m);
  push.c_cs = stride_u32(c.cs, n);
  push.bias_rs = 0;
  push.bias_cs = static_cast<uint32_t>(bias_stride);
  push.alpha = alpha;
  push.beta = beta;
  launch("matmul_splitk_reduce", push, grid_1d(m * n, 256), {&partial, &bias, &c.t}, {&c.t});
}

// a is [M <= 8, K]. bias_rs/bias_cs index the bias by output row or column (the swapped form of
// an N <= 8 problem indexes it by row).
void dispatch_skinny(const MatDesc& a, const MatDesc& b, const MatDesc& c, float alpha, float beta,
                     const Tensor& bias, int64_t bias_rs, int64_t bias_cs,
                     const vk::DispatchCost& cost) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  const KernelLayout la = kernel_layout(a), lb = kernel_layout(b);
  const uint32_t cols_per_group = lb.trans ? 8 : 32;  // matmul_skinny's COLS
  // vec4 reads of B need every row start 16-byte aligned, in every batch entry and chunk.
  const bool vec4_b =
      lb.trans && k % 4 == 0 && b.t.address() % 16 == 0 && lb.ld % 4 == 0 && b.bs % 4 == 0;
  const std::vector<uint32_t> spec = {static_cast<uint32_t>(m), la.trans, lb.trans, vec4_b,
                                      round_f16()};
  const int64_t zstep = g_max_groups, nstep = g_max_groups * cols_per_group;
  bool first = true;
  for (int64_t z0 = 0; z0 < c.batch; z0 += zstep) {
    for (int64_t n0 = 0; n0 < n; n0 += nstep) {
      const int64_t zc = std::min(zstep, c.batch - z0), nc = std::min(nstep, n - n0);
      const GemmPush push =
          make_push(a, b, c, z0, 0, n0, m, nc, alpha, beta, bias, bias_rs, bias_cs);
      const Grid grid{div_up(nc, cols_per_group), 1, static_cast<uint32_t>(zc)};
      launch("matmul_skinny", push, grid, {&a.t, &b.t, &bias, &c.t}, {&c.t}, spec,
             first ? cost : vk::DispatchCost{});
      first = false;
    }
  }
}

// a is [M <= 8, K] in f32, b a weight stored in f16 with contiguous rows (kernel_layout(b).trans:
// the [N, K] Hugging Face layout read as K x N); bias indexed by column.
void dispatch_skinny_f16(const MatDesc& a, const MatDesc& b, const MatDesc& c, float alpha,
                         float beta, const Tensor& bias, int64_t bias_stride,
                         const vk::DispatchCost& cost, const RowNorm* norm = nullptr,
                         SkinnyArgmax* argmax = nullptr, const SkinnyEmbed* embed = nullptr) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  const KernelLayout la = kernel_layout(a), lb = kernel_layout(b);
  // 16-byte loads need every row start of both operands 16-byte aligned, in every batch entry.
  const bool vec8 = !la.trans && k % 8 == 0 && a.t.address() % 16 == 0 && la.ld % 4 == 0 &&
                    a.bs % 4 == 0 && b.t.address() % 16 == 0 && lb.ld % 8 == 0 && b.bs % 8 == 0;
  const SkinnyF16Plan plan = plan_skinny_f16(m, n, k, vec8, skinny_norm_mode(norm), false);
  const uint32_t rows_per_block = plan.rows_per_block();
  const Tensor norm_w = norm ? norm->weight : Tensor();
  const int64_t zstep = g_max_groups, nstep = g_max_groups * int64_t{rows_per_block};
  VKF_REQUIRE(!argmax || (m == 1 && c.batch == 1 && !bias.defined()),
              "matmul: internal: a skinny f16 product's argmax needs one row, one batch entry and "
              "no bias");
  if (argmax && n > nstep) argmax = nullptr;  // several dispatches: no slots (workgroups 0)
  VKF_REQUIRE(!embed || (!argmax && m == 1 && c.batch == 1 && n <= nstep && vec8 && plan.staged),
              "matmul: internal: a skinny f16 product of an embedding row needs one staged row, "
              "one dispatch and no argmax");
  bool first = true;
  for (int64_t z0 = 0; z0 < c.batch; z0 += zstep) {
    for (int64_t n0 = 0; n0 < n; n0 += nstep) {
      const int64_t zc = std::min(zstep, c.batch - z0), nc = std::min(nstep, n - n0);
      struct {
        GemmPush gemm;
        uint64_t norm_w;
        float norm_eps;
        uint32_t norm_tpr_log2;
        uint64_t argmax_out;
        vk::ChainSync chain;  // filled by the stream
      } push{make_push(a, b, c, z0, 0, n0, m, nc, alpha, beta, bias, 0, bias_stride),
             norm ? norm->weight.address() : 0,
             norm ? norm->eps : 0.0f,
             norm ? norm_threads_per_row_log2(k) : 0u,
             0,
             {}};
      const uint32_t blocks = div_up(nc, rows_per_block);
      const Grid grid{skinny_f16_groups(m, blocks, plan.k_split), 1, static_cast<uint32_t>(zc)};
      const bool fold = argmax && argmax->fold_record.defined();
      if (argmax) {
        argmax->workgroups = grid.x;
        if (!fold) argmax->slots = Tensor::empty({2 * int64_t{grid.x}}, DType::F32);
        push.argmax_out = fold ? argmax->fold_record.address() : argmax->slots.address();
      }
      if (embed) {
        push.gemm.a = embed->table.address();
        push.argmax_out = embed->ids.address();
        // The embed build is never chained: it reads the chain fields' 16 bytes as its lookup's
        // store and vocabulary (matmul_skinny_f16.comp's SKINNY_PUSH_TAIL).
        struct {
          uint64_t store;
          uint32_t vocab, unused;
        } tail{embed->store.defined() ? embed->store.address() : 0,
               static_cast<uint32_t>(embed->table.dim(0)), 0};
        static_assert(sizeof(tail) == sizeof(push.chain));
        std::memcpy(static_cast<void*>(&push.chain), &tail, sizeof(tail));
      }
      // What the argmax writes: its slots, or the fold's record (cleared again) with the step's
      // state and ring.
      const Tensor none;
      const Tensor& argmax_out = argmax ? (fold ? argmax->fold_record : argmax->slots) : none;
      // The embedding's dispatches read the table, never `a` (the row one of them stores).
      const Tensor& a_read = embed ? embed->table : a.t;
      const Tensor& embed_ids = embed ? embed->ids : none;
      const Tensor& embed_store = embed ? embed->store : none;
      const Tensor& fold_state = fold ? argmax->fold_state : none;
      const Tensor& fold_ring = fold ? argmax->fold_ring : none;
      const std::vector<uint32_t> spec =
          skinny_f16_spec(plan, m, k, la.trans, vec8, 0u, skinny_norm_mode(norm), grid.x, blocks,
                          argmax != nullptr);
      // The embedding's build (a variant of its own, so that the other products' code is not
      // touched) has no chained form: it runs with a barrier before it.
      const char* module = embed  ? "matmul_skinny_f16_embed"
                           : fold ? "matmul_skinny_f16_fold"
                                  : "matmul_skinny_f16";
      const std::initializer_list<const Tensor*> reads = {&a_read, &b.t,        &bias,     &c.t,
                                                          &norm_w, &fold_state, &embed_ids};
      const std::initializer_list<const Tensor*> writes = {&c.t, &argmax_out, &fold_state,
                                                           &fold_ring, &embed_store};
      if (embed)
        launch(module, push, grid, reads, writes, spec, first ? cost : vk::DispatchCost{});
      else
        launch_chained_rows(m, module, push, offsetof(decltype(push), chain), grid, reads, writes,
                            spec, first ? cost : vk::DispatchCost{});
      first = false;
    }
  }
}

bool storage_overlaps(const MatDesc& x, const MatDesc& y) {
  if (!x.t.same_storage(y.t)) return false;
  auto span = [](const MatDesc& d) {
    const int64_t lo = d.t.offset();
    return std::pair{lo, lo + (d.batch - 1) * d.bs + (d.rows - 1) * d.rs + (d.cols - 1) * d.cs};
  };
  const auto [xl, xh] = span(x);
  const auto [yl, yh] = span(y);
  return xl <= yh && yl <= xh;
}

}  // namespace

uint64_t byte_address(const Tensor& t, int64_t element_offset) {
  return t.address() + static_cast<uint64_t>(element_offset) * dtype_size(t.dtype());
}

KernelLayout kernel_layout(const MatDesc& d) {
  if (d.cs == 1 || d.cols == 1) return {false, d.rows == 1 ? 0u : checked_u32(d.rs, "row stride")};
  return {true, checked_u32(d.cs, "column stride")};
}

GemmPush make_push(const MatDesc& a, const MatDesc& b, const MatDesc& c, int64_t z0, int64_t m0,
                   int64_t n0, int64_t mc, int64_t nc, float alpha, float beta, const Tensor& bias,
                   int64_t bias_rs, int64_t bias_cs) {
  GemmPush push{};
  push.a = byte_address(a.t, z0 * a.bs + m0 * a.rs);
  push.b = byte_address(b.t, z0 * b.bs + n0 * b.cs);
  push.c = byte_address(c.t, z0 * c.bs + m0 * c.rs + n0 * c.cs);
  push.bias = bias.defined() ? byte_address(bias, m0 * bias_rs + n0 * bias_cs) : 0;
  push.m = static_cast<uint32_t>(mc);
  push.n = static_cast<uint32_t>(nc);
  push.k = static_cast<uint32_t>(a.cols);
  push.lda = kernel_layout(a).ld;
  push.ldb = kernel_layout(b).ld;
  push.c_rs = stride_u32(c.rs, c.rows);
  push.c_cs = stride_u32(c.cs, c.cols);
  push.sa = stride_u32(a.bs, a.batch);
  push.sb = stride_u32(b.bs, b.batch);
  push.sc = stride_u32(c.bs, c.batch);
  push.bias_rs = stride_u32(bias_rs, c.rows);
  push.bias_cs = stride_u32(bias_cs, c.cols);
  push.alpha = alpha;
  push.beta = beta;
  return push;
}

int64_t max_groups_per_dimension() {
  return g_max_groups;
}

uint32_t skinny_norm_mode(const RowNorm* norm) {
  return norm == nullptr ? 0u : norm->one_plus ? 2u : 1u;
}

void skinny_f16_normed(const MatDesc& a_in, const MatDesc& b_in, const MatDesc& c_in,
                       const Tensor& bias, const RowNorm& norm, SkinnyArgmax* argmax,
                       const SkinnyEmbed* embed) {
  VKF_REQUIRE(a_in.batch == 1 && b_in.batch == 1 && c_in.batch == 1 && a_in.cs == 1 &&
                  c_in.rows <= kSkinnyMaxRows && b_in.t.dtype() == DType::F16 &&
                  kernel_layout(b_in).trans && norm.weight.is_contiguous() &&
                  norm.weight.numel() == a_in.cols,
              "matmul: internal: skinny_f16_normed needs one [<= {} rows, K] product against an "
              "f16 [N, K] weight and a norm weight of K elements",
              kSkinnyMaxRows);
  MatDesc a = a_in, b = b_in, c = c_in;
  a.bs = b.bs = c.bs = 0;
  check_extent(a, "matmul operand a extent");
  check_extent(b, "matmul operand b extent");
  check_extent(c, "matmul output extent");
  const int64_t bias_stride = bias.defined() ? bias.strides()[0] : 0;
  const double m = static_cast<double>(c.rows), n = static_cast<double>(c.cols),
               k = static_cast<double>(a.cols);
  vk::DispatchCost cost{2.0 * m * n * k, 2.0 * n * k + 4.0 * (m * k + m * n + k)};
  if (vk::Context::get().stream().profiling_detail())
    cost.detail = fmt::format("{}x{}x{} normed", c.rows, c.cols, a.cols);
  dispatch_skinny_f16(a, b, c, 1.0f, 0.0f, bias, bias_stride, cost, &norm, argmax, embed);
}

std::vector<GemmTemporary> gemm_temporaries(int64_t m, int64_t n, int64_t k, bool a_rows,
                                            bool b_cols, bool a_f16, bool b_f16) {
  // gemm(): the skinny kernels allocate nothing; otherwise split-K's partial sums, then
  // dispatch_tiles over the chunks (a batch of them) copies both operands to f16 on the
  // tensor-core path, or those in a slow layout where the tiled kernel's relayout takes them.
  std::vector<GemmTemporary> out;
  if (m <= kSkinnyMaxRows || n <= kSkinnyMaxRows || k == 0) return out;
  const int64_t chunks = split_k_chunks(1, m, n, k);
  if (chunks > 1) out.push_back({chunks * m * n, 4});
  if (coopmat_plan(chunks, m, n)) {
    if (coopmat_f16_operands()) {
      if (!a_f16) out.push_back({m * k, 2});
      if (!b_f16) out.push_back({k * n, 2});
    }
  } else {
    if (relayout_copies(chunks, m, n, k / chunks, a_rows, b_cols)) {
      if (a_rows) out.push_back({m * k, 4});
      if (b_cols) out.push_back({k * n, 4});
    }
    if (const auto sk = stream_k_plan(chunks, m, n, k / chunks))
      out.push_back({sk->workspace_elements(kLarge), 4});
  }
  return out;
}

std::optional<MatDesc> MatDesc::rows_merged() const {
  if (batch == 1) return MatDesc{t, 1, rows, cols, 0, rs, cs};
  if (rows == 1) return MatDesc{t, 1, batch, cols, 0, bs, cs};
  if (bs != rows * rs) return std::nullopt;
  return MatDesc{t, 1, batch * rows, cols, 0, rs, cs};
}

std::optional<MatDesc> describe(const Tensor& t) {
  const int r = t.rank();
  VKF_REQUIRE(r >= 2, "matmul: internal: describe() needs rank >= 2, got {}", shape_str(t.shape()));
  MatDesc d;
  d.t = t;
  d.rows = t.shape()[r - 2];
  d.cols = t.shape()[r - 1];
  d.rs = t.strides()[r - 2];
  d.cs = t.strides()[r - 1];
  int64_t batch = 1, bs = -1, next = 0;
  for (int i = r - 3; i >= 0; --i) {
    const int64_t size = t.shape()[i], stride = t.strides()[i];
    batch *= size;
    if (size == 1) continue;
    if (bs >= 0 && stride != next) return std::nullopt;
    if (bs < 0) bs = stride;
    next = stride * size;
  }
  d.batch = batch;
  d.bs = batch == 1 ? 0 : bs;
  return d;
}

MatDesc describe_readable(const Tensor& t) {
  if (auto d = describe(t); d && d->kernel_readable()) return *d;
  autograd::NoGradScope no_grad;
  return *describe(t.contiguous());
}

MatDesc describe_rows(const Tensor& t) {
  VKF_REQUIRE(t.rank() >= 1, "matmul: internal: describe_rows() needs rank >= 1");
  if (t.rank() == 1 && (t.strides()[0] == 1 || t.shape()[0] <= 1))
    return MatDesc{t, 1, 1, t.shape()[0], 0, t.shape()[0], 1};
  if (t.rank() == 1) {
    autograd::NoGradScope no_grad;
    return describe_rows(t.contiguous());
  }
  if (auto d = describe(t)) {
    auto merged = d->rows_merged();
    if (merged && (merged->cs == 1 || merged->cols == 1)) return *merged;
  }
  autograd::NoGradScope no_grad;
  return *describe(t.contiguous())->rows_merged();
}

void gemm(const MatDesc& a_in, const MatDesc& b_in, const MatDesc& c_in, float alpha, float beta,
          const Tensor& bias) {
  MatDesc a = a_in, b = b_in, c = c_in;
  VKF_REQUIRE(a.rows == c.rows && b.cols == c.cols && a.cols == b.rows,
              "matmul: internal: gemm shapes [{}, {}] x [{}, {}] -> [{}, {}] do not chain", a.rows,
              a.cols, b.rows, b.cols, c.rows, c.cols);
  VKF_REQUIRE((a.batch == 1 || a.batch == c.batch) && (b.batch == 1 || b.batch == c.batch),
              "matmul: internal: gemm batches {} and {} do not fit an output batch of {}", a.batch,
              b.batch, c.batch);
  VKF_REQUIRE(a.kernel_readable() && b.kernel_readable(),
              "matmul: internal: gemm operands need a contiguous row or column");
  VKF_REQUIRE(!storage_overlaps(a, c) && !storage_overlaps(b, c),
              "matmul: the output overlaps an input in memory");
  VKF_REQUIRE((a.t.dtype() == DType::F32 || a.t.dtype() == DType::F16) &&
                  c.t.dtype() == DType::F32 &&
                  (b.t.dtype() == DType::F32 || b.t.dtype() == DType::F16),
              "matmul: internal: gemm takes f32 operands (a may be an f16 operand copy, b may be "
              "an f16 weight)");
  const bool b_f16 = b.t.dtype() == DType::F16;
  if (a.batch == 1) a.bs = 0;
  if (b.batch == 1) b.bs = 0;
  if (c.batch == 1) c.bs = 0;
  check_extent(a, "matmul operand a extent");
  check_extent(b, "matmul operand b extent");
  check_extent(c, "matmul output extent");
  int64_t bias_stride = 0;
  if (bias.defined()) {
    VKF_REQUIRE(bias.rank() == 1 && bias.shape()[0] == c.cols && bias.dtype() == DType::F32,
                "matmul: internal: bias must be f32 [{}]", c.cols);
    bias_stride = bias.strides()[0];
    checked_u32((c.cols - 1) * bias_stride, "matmul bias extent");
    VKF_REQUIRE(!storage_overlaps(MatDesc{bias, 1, 1, c.cols, 0, 0, bias_stride}, c),
                "matmul: the output overlaps the bias in memory");
  }
  if (c.rows == 0 || c.cols == 0 || c.batch == 0) return;

  const double batch = static_cast<double>(c.batch);
  vk::DispatchCost cost;
  cost.flops = 2.0 * batch * c.rows * c.cols * a.cols;
  cost.bytes =
      4.0 * (static_cast<double>(a.batch) * a.rows * a.cols +
             batch * c.rows * c.cols * (beta != 0 ? 2 : 1)) +
      static_cast<double>(dtype_size(b.t.dtype())) * static_cast<double>(b.batch) * b.rows * b.cols;

  // A weight shared by a batch of row-major inputs: one taller product fills the GPU better.
  if (c.batch > 1 && b.batch == 1 && a.batch > 1) {
    auto am = a.rows_merged(), cm = c.rows_merged();
    if (am && cm && (am->cs == 1 || am->cols == 1)) {
      a = *am;
      c = *cm;
    }
  }
  // Profiling by detail: the product as asked for (before any relayout), e.g. "8192x576x576 nt".
  if (vk::Context::get().stream().profiling_detail()) {
    cost.detail = fmt::format("{}{}x{}x{} {}{}", c.batch > 1 ? fmt::format("{}*", c.batch) : "",
                              c.rows, c.cols, a.cols, kernel_layout(a).trans ? 't' : 'n',
                              kernel_layout(b).trans ? 't' : 'n');
  }
  // Two f16 operand copies (ops::gated_projection's dW = G^T h, whose h is stored in f16) go to
  // the tensor cores as they are, by the f32 operands' route (split-K by the same rule): the
  // same product as from the f32 tensors they were rounded from.
  const bool f16_pair =
      a.t.dtype() == DType::F16 && b_f16 && tensor_core_product(c.batch, c.rows, c.cols);
  // An f16 a (an operand converted once for several products, see f16_operands_active) is read
  // as it is by the tensor-core kernel; every other kernel gets it widened back to f32, exactly.
  if (a.t.dtype() == DType::F16 && !f16_pair &&
      (b_f16 || c.rows <= kSkinnyMaxRows || c.cols <= kSkinnyMaxRows ||
       !coopmat_plan(c.batch, c.rows, c.cols))) {
    VKF_REQUIRE(a.t.is_contiguous(), "matmul: internal: an f16 operand must be contiguous");
    autograd::NoGradScope no_grad;
    a.t = a.t.to(DType::F32);
  }
  if (b_f16 && c.rows <= kSkinnyMaxRows && kernel_layout(b).trans) {
    dispatch_skinny_f16(a, b, c, alpha, beta, bias, bias_stride, cost);
  } else if (c.rows <= kSkinnyMaxRows && !b_f16) {
    dispatch_skinny(a, b, c, alpha, beta, bias, 0, bias_stride, cost);
  } else if (c.cols <= kSkinnyMaxRows && !b_f16) {
    // C^T = b^T a^T: the bias runs along the rows of the transposed output.
    dispatch_skinny(b.transposed(), a.transposed(), c.transposed(), alpha, beta, bias, bias_stride,
                    0, cost);
  } else if (b_f16 && !f16_pair) {
    // The split-K and tensor-core kernels read an f32 B (or an f16 copy beside an f16 A): an f16
    // weight takes the tiled kernel's f16b variant.
    dispatch_tiled(a, b, c, alpha, beta, bias, bias_stride, cost);
  } else if (const int64_t chunks = split_k_chunks(c.batch, c.rows, c.cols, a.cols); chunks > 1) {
    dispatch_split_k(a, b, c, alpha, beta, bias, bias_stride, chunks, cost);
  } else {
    dispatch_tiles(a, b, c, alpha, beta, bias, bias_stride, cost);
  }
}

bool tensor_core_product(int64_t batch, int64_t m, int64_t n) {
  return f16_operands_active() && m > kSkinnyMaxRows && n > kSkinnyMaxRows &&
         coopmat_plan(batch, m, n).has_value();
}

void column_sum(const MatDesc& src, const Tensor& dst, float beta) {
  VKF_REQUIRE(src.batch == 1 && (src.cs == 1 || src.cols == 1) && src.t.dtype() == DType::F32,
              "matmul: internal: column_sum needs one f32 matrix with contiguous rows");
  VKF_REQUIRE(dst.rank() == 1 && dst.shape()[0] == src.cols && dst.is_contiguous(),
              "matmul: internal: column_sum needs a contiguous [{}] destination", src.cols);
  const int64_t rows = src.rows, n = src.cols;
  if (rows == 0 || n == 0) return;
  checked_u32((rows - 1) * src.rs + n - 1, "column sum extent");
  constexpr uint32_t kCols = 32;  // matmul_colsum's COLS
  const uint32_t ld = rows == 1 ? 0 : checked_u32(src.rs, "row stride");

  auto pass = [&](const Tensor& from, int64_t from_offset, uint32_t from_ld, int64_t r,
                  int64_t rows_per_group, const Tensor& to, uint32_t to_rs, float pass_beta) {
    const int64_t groups_y = (r + rows_per_group - 1) / rows_per_group;
    const int64_t nstep = g_max_groups * kCols;
    for (int64_t n0 = 0; n0 < n; n0 += nstep) {
      const int64_t nc = std::min(nstep, n - n0);
      ColsumPush push{};
      push.src = byte_address(from, from_offset + n0);
      push.dst = byte_address(to, n0);
      push.r = static_cast<uint32_t>(r);
      push.n = static_cast<uint32_t>(nc);
      push.ld = from_ld;
      push.rows_per_group = static_cast<uint32_t>(rows_per_group);
      push.dst_rs = to_rs;
      push.beta = pass_beta;
      const vk::DispatchCost cost{static_cast<double>(r) * nc,
                                  4.0 * (static_cast<double>(r) * nc + groups_y * nc)};
      launch("matmul_colsum", push, Grid{div_up(nc, kCols), static_cast<uint32_t>(groups_y), 1},
             {&from, &to}, {&to}, {}, cost);
    }
  };

  // Short matrices in one pass; long ones as partial sums of row chunks (at most 1024 of them),
  // then the sum of the partials, so that many workgroups share the reading.
  constexpr int64_t kOnePassRows = 4096;
  if (rows <= kOnePassRows) {
    pass(src.t, 0, ld, rows, rows, dst, 0, beta);
    return;
  }
  const int64_t chunk = std::max<int64_t>(1024, (rows + 1023) / 1024);
  const int64_t chunks = (rows + chunk - 1) / chunk;
  Tensor partial = Tensor::empty({chunks, n});
  pass(src.t, 0, ld, rows, chunk, partial, checked_u32(n, "column count"), 0.0f);
  pass(partial, 0, static_cast<uint32_t>(n), chunks, chunks, dst, 0, beta);
}

void set_grid_limit(int64_t groups) {
  g_max_groups = std::clamp<int64_t>(groups, 1, 65535);
}
TiledLoadCounts tiled_load_counts() {
  return g_tiled_loads;
}
uint64_t stream_k_dispatches() {
  return g_stream_k_dispatches;
}

std::string gemm_plan(int64_t batch, int64_t m, int64_t n, int64_t k) {
  // The portable kernels in F16 precision say so: they emulate the rounding on fp32 units.
  const std::string f16 = round_f16() ? " f16" : "";
  if (m <= kSkinnyMaxRows) return "skinny m=" + std::to_string(m) + f16;
  if (n <= kSkinnyMaxRows) return "skinny n=" + std::to_string(n) + f16;
  std::string plan;
  const int64_t chunks = split_k_chunks(batch, m, n, k);
  const auto workgroup =
      coopmat_plan(batch, m, n) ? workgroup_plan(m, n, k / chunks) : std::nullopt;
  if (workgroup) {
    // Assuming what dispatch_workgroup also checks holds: aligned operands, no bias.
    plan = "coopmat " + workgroup->name();
  } else if (const auto coop = coopmat_plan(batch, m, n)) {
    plan = "coopmat " + coop->name() + " " + f16_convert_name();
  } else {
    // Split, the chunks run as batch entries of the tiled kernel (dispatch_split_k).
    const TiledPlan tiled = tiled_plan(chunks > 1 ? chunks : batch, m, n, k / chunks);
    const Tile& t = tiled.tile;
    plan = "tiled " + std::to_string(t.bm()) + "x" + std::to_string(t.bn()) + "x" +
           std::to_string(t.bk) + f16 + (tiled.name == "new" ? "" : " " + tiled.name);
    if (tiled.stream_k)
      plan += " stream-k " + std::to_string(tiled.stream_k->workers) +
              (tiled.stream_k->dp_tiles ? "/" + std::to_string(tiled.stream_k->dp_tiles) : "");
  }
  if (chunks > 1) plan += " split-k " + std::to_string(chunks);
  return plan;
}

}  // namespace vkf::ops::detail
