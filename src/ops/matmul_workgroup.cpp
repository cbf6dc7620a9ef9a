// The workgroup-scope GEMM (see matmul_workgroup.h): tile choice, device support, and the SPIR-V
// of the kernel. In GLSL terms each generated module is
//
//   layout(local_size_x = 256 or 128, the tile's) in;  push constants: matmul_push.glsl's block
//   lda = p.lda & ~7; ldb = p.ldb & ~7;  // the host guarantees it; the driver learns alignment
//   coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc = 0;
//   for (k = 0; k + UNROLL * BK <= K; k += UNROLL * BK)  // the body repeated UNROLL times
//     acc = coopMatMulAdd(load<f16, BM x BK, UseA>(A tile at k), load<f16, BK x BN, UseB>(B tile),
//     acc); ...
//   for (; k < K; k += BK) the same once;
//   store(accumulate ? acc + load(C tile) : acc, C tile);
//
// with the tile of a workgroup chosen as matmul_coopmat.comp does (bands of GROUP_M tile rows, so
// that concurrently running workgroups share operands in L2), and every load and store declaring
// 16-byte alignment: strided row- or column-major matrices at the tile's corner, or (tiles with
// tensor_loads) A and B sliced from tensor layouts of the whole operands. Both the masked strides
// and the unrolled loop were needed for speed on the H200 (bench/RESULTS.md, tenth session).
#include "ops/matmul_workgroup.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "core/launch.h"
#include "ops/matmul_coopmat.h"
#include "vk/context.h"
#include "vk/error.h"
#include "vk/pipeline.h"
#include "vk/spirv_builder.h"

namespace vkf::ops::detail {
namespace {

constexpr uint32_t kGroupM = 8;  // tile rows per rasterization band

// Member indices of the push-constant block (matmul_push.glsl / GemmPush).
enum PushMember : uint32_t {
  kA = 0,
  kB,
  kC,
  kBias,
  kM,
  kN,
  kK,
  kLda,
  kLdb,
  kCRs,
  kCCs,
  kSa,
  kSb,
  kSc,
  kBiasRs,
  kBiasCs,
  kAlpha,
  kBeta,
  kMemberCount
};

// Auto's tiles, in its order of preference (see workgroup_plan).
const WorkgroupTile kAutoTiles[] = {
    {128, 128, 32, true, 4, 128}, {128, 256, 32, true, 8}, {256, 128, 32, true, 4},
    {128, 192, 32, true, 4},      {64, 192, 32, true, 4},  {128, 128, 64, true, 4},
    {128, 128, 32, true, 4},
};

}  // namespace

std::string WorkgroupTile::name() const {
  return fmt::format("{}{}x{}x{}{}{}", tensor_loads ? "wgt" : "wg", bm, bn, bk,
                     unroll > 1 ? fmt::format("u{}", unroll) : "",
                     invocations != 256 ? fmt::format("i{}", invocations) : "");
}

const std::vector<WorkgroupTile>& workgroup_tiles() {
  static const std::vector<WorkgroupTile> tiles = [] {
    // Strided loads: the first form measured (bench/RESULTS.md); the H200's compiler spills them.
    std::vector<WorkgroupTile> all = {{128, 256, 32}, {128, 128, 32}, {64, 64, 32}};
    // Tensor-addressed loads, one K-step per iteration: the shapes auto's rule was chosen from.
    for (const auto& [bm, bn, bk] : {std::tuple{128u, 256u, 32u},
                                     {256u, 128u, 32u},
                                     {128u, 192u, 32u},
                                     {192u, 128u, 32u},
                                     {192u, 192u, 32u},
                                     {128u, 128u, 32u},
                                     {128u, 128u, 64u},
                                     {128u, 256u, 64u},
                                     {64u, 192u, 32u},
                                     {192u, 64u, 32u},
                                     {128u, 64u, 32u},
                                     {64u, 128u, 32u},
                                     {64u, 64u, 32u}})
      all.push_back({bm, bn, bk, true, 1});
    all.insert(all.end(), std::begin(kAutoTiles), std::end(kAutoTiles));
    return all;
  }();
  return tiles;
}

const WorkgroupTile* find_workgroup_tile(const std::string& name) {
  for (const auto& t : workgroup_tiles())
    if (t.name() == name) return &t;
  return nullptr;
}

std::string workgroup_tile_names() {
  std::string all;
  for (const auto& t : workgroup_tiles()) all += (all.empty() ? "" : ", ") + t.name();
  return all;
}

std::string workgroup_unsupported(bool tensor_loads, uint32_t invocations) {
  const auto& info = vk::Context::get().info();
  if (coopmat_emulation()) return "the cooperative-matrix emulation is on";
  if (!info.workgroup_matrices)
    return "the device has no workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2)";
  if (tensor_loads && !info.workgroup_tensor_addressing)
    return "the device has no tensor-addressed cooperative-matrix loads";
  if (!info.float16_arithmetic || !info.storage16 || !info.int64)
    return "the device lacks 16-bit floats, 16-bit storage or 64-bit integers";
  if (info.workgroup_matrix_max_invocations < invocations)
    return fmt::format("workgroup-scope matrices allow {} invocations, the kernel uses {}",
                       info.workgroup_matrix_max_invocations, invocations);
  // The tiles are multiples of the granularity this size of workgroup needs on the devices seen
  // (32 x 32 x 16 for 256 invocations, 32 x 16 x 16 for 128); a device asking for more is not
  // used.
  for (const auto& s : info.coopmat2_flexible_shapes) {
    if (s.scope == "workgroup" && s.workgroup_invocations == invocations && s.a_type == "f16" &&
        s.b_type == "f16" && s.c_type == "f32" && s.result_type == "f32" && 64 % s.m == 0 &&
        64 % s.n == 0 && 32 % s.k == 0)
      return "";
  }
  return fmt::format(
      "the device lists no f16 x f16 + f32 workgroup-scope shape for {} invocations with "
      "granularity dividing 64 x 64 x 32",
      invocations);
}

std::optional<WorkgroupTile> workgroup_plan(int64_t m, int64_t n, int64_t k) {
  if (matmul_precision() != MatmulPrecision::F16) return std::nullopt;
  const std::string choice = coopmat_choice();
  const uint32_t max_dim = vk::Context::get().info().workgroup_matrix_max_dimension;
  const auto divides = [&](const WorkgroupTile& t) {
    return m % t.bm == 0 && n % t.bn == 0 && k % t.bk == 0 &&
           std::max({t.bm, t.bn, t.bk}) <= max_dim;
  };
  if (const WorkgroupTile* forced = find_workgroup_tile(choice)) {
    if (!workgroup_unsupported(forced->tensor_loads, forced->invocations).empty() ||
        !divides(*forced))
      return std::nullopt;
    return *forced;
  }
  if (choice != "auto" || !workgroup_unsupported(true).empty()) return std::nullopt;
  // Auto: tensor-addressed loads, several K-steps per loop iteration, the first of kAutoTiles
  // that divides the product into at least kMinTiles tiles, else the one that divides it into the
  // most. Measured on the H200 (driver 580.159.04, bench/RESULTS.md): 128x256x32 ran 4096^3 at
  // 228-236 TFLOP/s in every layout where the subgroup-scope kernel ran 168 "nn" (one K-step per
  // iteration: 173); 128x128x32 at 128 invocations, four K-steps per iteration (two workgroups
  // per multiprocessor, 255 registers each, no spill) then beat it on every 1B training product
  // measured, most where K = 2048 (8192x8192x2048 1.036 against 1.212 ms; 4096^3 250 TFLOP/s
  // against 237; eighteenth session), and it divides every product 128x256 does; 128x192 and
  // 64x192 serve the 135M shape's 576- and 192-wide products, 64x192 the few-tile ones; the
  // strided-load form spills and stays below 85.
  constexpr int64_t kMinTiles = 128;
  std::optional<WorkgroupTile> most;
  int64_t most_tiles = 0;
  for (const WorkgroupTile& t : kAutoTiles) {
    if (!divides(t) || !workgroup_unsupported(true, t.invocations).empty()) continue;
    const int64_t tiles = (m / t.bm) * (n / t.bn);
    if (tiles >= kMinTiles) return t;
    if (tiles > most_tiles) {
      most = t;
      most_tiles = tiles;
    }
  }
  return most;
}

bool workgroup_relayout_pays(int64_t m, int64_t n, int64_t k) {
  static const std::string choice = [] {
    const char* env = std::getenv("VKF_WG_RELAYOUT");
    const std::string v = env ? env : "auto";
    VKF_REQUIRE(v == "auto" || v == "1" || v == "0",
                "VKF_WG_RELAYOUT='{}': use auto (products of 2^34 multiply-adds or more), 1 (every "
                "product) or 0 (none)",
                v);
    return v;
  }();
  if (choice == "0" || choice == "1") return choice == "1";
  return m * n * k >= (int64_t{1} << 34);
}

std::vector<uint32_t> workgroup_gemm_spirv(const WorkgroupGemmKey& key) {
  using namespace vk::spv;
  vk::SpirvBuilder b;
  for (uint32_t cap : {CapShader, CapFloat16, CapInt64, CapStorageBuffer16BitAccess,
                       CapPhysicalStorageBufferAddresses, CapCooperativeMatrixKHR})
    b.capability(cap);
  const bool tensor = key.tile.tensor_loads;
  if (tensor) {
    b.capability(CapTensorAddressingNV);
    b.capability(CapCooperativeMatrixTensorAddressingNV);
  }
  b.extension("SPV_KHR_cooperative_matrix");
  b.extension("SPV_NV_cooperative_matrix2");
  if (tensor) b.extension("SPV_NV_tensor_addressing");
  b.memory_model(kAddressingPhysicalStorageBuffer64, kMemoryModelGLSL450);

  // Types.
  const uint32_t t_void = b.type(OpTypeVoid), t_bool = b.type(OpTypeBool);
  const uint32_t u32 = b.type(OpTypeInt, {32, 0}), u64 = b.type(OpTypeInt, {64, 0});
  const uint32_t f16 = b.type(OpTypeFloat, {16}), f32 = b.type(OpTypeFloat, {32});
  const uint32_t v3u = b.type(OpTypeVector, {u32, 3});
  std::vector<uint32_t> members(kMemberCount, u32);
  for (uint32_t i : {kA, kB, kC, kBias}) members[i] = u64;
  members[kAlpha] = members[kBeta] = f32;
  const uint32_t t_push = b.type(OpTypeStruct, members);
  const uint32_t p_push = b.type(OpTypePointer, {PushConstant, t_push});
  const uint32_t p_push_u64 = b.type(OpTypePointer, {PushConstant, u64});
  const uint32_t p_push_u32 = b.type(OpTypePointer, {PushConstant, u32});
  const uint32_t p_in_v3u = b.type(OpTypePointer, {Input, v3u});
  const uint32_t p_f16 = b.type(OpTypePointer, {PhysicalStorageBuffer, f16});
  const uint32_t p_f32 = b.type(OpTypePointer, {PhysicalStorageBuffer, f32});
  const uint32_t t_main = b.type(OpTypeFunction, {t_void});
  const auto c32 = [&](uint32_t v) { return b.constant_u32(v); };
  const WorkgroupTile& tile = key.tile;
  const uint32_t scope = c32(ScopeWorkgroup);
  const uint32_t t_a =
      b.type(OpTypeCooperativeMatrixKHR, {f16, scope, c32(tile.bm), c32(tile.bk), c32(UseA)});
  const uint32_t t_b =
      b.type(OpTypeCooperativeMatrixKHR, {f16, scope, c32(tile.bk), c32(tile.bn), c32(UseB)});
  const uint32_t t_c = b.type(OpTypeCooperativeMatrixKHR,
                              {f32, scope, c32(tile.bm), c32(tile.bn), c32(UseAccumulator)});
  const uint32_t p_fn_c = b.type(OpTypePointer, {Function, t_c});
  const uint32_t p_fn_u32 = b.type(OpTypePointer, {Function, u32});
  const uint32_t zero_c = b.constant_composite(t_c, {b.constant_f32(0.0f)});
  // Tensor addressing: an operand is a 2-D tensor (no clamping: tiles divide it) of halves at a
  // pointer to its first element; a transposed one is read through a view swapping the two
  // dimensions.
  uint32_t t_layout = 0, t_view = 0, p_f16_array = 0, zero_a = 0, zero_b = 0;
  if (tensor) {
    const uint32_t f16_array = b.type(OpTypeRuntimeArray, {f16});
    b.decorate(f16_array, ArrayStride, {2});
    p_f16_array = b.type(OpTypePointer, {PhysicalStorageBuffer, f16_array});
    t_layout = b.type(OpTypeTensorLayoutNV, {c32(2), c32(kTensorClampUndefined)});
    t_view = b.type(OpTypeTensorViewNV,
                    {c32(2), b.constant(t_bool, {}, OpConstantFalse), c32(1), c32(0)});
    zero_a = b.constant_composite(t_a, {b.constant_f16(0)});
    zero_b = b.constant_composite(t_b, {b.constant_f16(0)});
  }

  // Interface: the push constants and two built-ins.
  const uint32_t v_push = b.global_variable(p_push, PushConstant);
  const uint32_t v_group = b.global_variable(p_in_v3u, Input);
  const uint32_t v_groups = b.global_variable(p_in_v3u, Input);
  b.decorate(t_push, Block);
  for (uint32_t i = 0; i < kMemberCount; ++i)
    b.member_decorate(t_push, i, Offset, {i <= kBias ? 8 * i : 32 + 4 * (i - kM)});
  b.decorate(v_group, BuiltIn, {WorkgroupId});
  b.decorate(v_groups, BuiltIn, {NumWorkgroups});
  const uint32_t f_main = b.fresh_id();
  b.entry_point(kExecutionModelGLCompute, f_main, "main", {v_push, v_group, v_groups});
  b.execution_mode(f_main, kExecutionModeLocalSize, {key.tile.invocations, 1, 1});

  // Code.
  b.op_with_id(OpFunction, t_void, f_main, {0, t_main});
  b.op_with_id(OpLabel, 0, b.fresh_id(), {});
  const uint32_t v_acc = b.op(OpVariable, p_fn_c, {Function});
  const uint32_t v_k = b.op(OpVariable, p_fn_u32, {Function});
  const auto push = [&](uint32_t member) {
    const bool wide = member <= kBias;
    const uint32_t ptr = b.op(OpAccessChain, wide ? p_push_u64 : p_push_u32, {v_push, c32(member)});
    return b.op(OpLoad, wide ? u64 : u32, {ptr});
  };
  const auto add = [&](uint32_t x, uint32_t y) { return b.op(OpIAdd, u32, {x, y}); };
  const auto mul = [&](uint32_t x, uint32_t y) { return b.op(OpIMul, u32, {x, y}); };
  const auto udiv = [&](uint32_t x, uint32_t y) { return b.op(OpUDiv, u32, {x, y}); };
  const auto umod = [&](uint32_t x, uint32_t y) { return b.op(OpUMod, u32, {x, y}); };
  // A pointer to element `offset` (u32) of the buffer at `base` (u64) with elements of `bytes`.
  const auto element_ptr = [&](uint32_t pointer_type, uint32_t base, uint32_t offset,
                               uint64_t bytes) {
    const uint32_t wide = b.op(OpUConvert, u64, {offset});
    const uint32_t address =
        b.op(OpIAdd, u64, {base, b.op(OpIMul, u64, {wide, b.constant_u64(bytes)})});
    return b.op(OpConvertUToPtr, pointer_type, {address});
  };

  // The workgroup's tile: consecutive workgroups walk down a band of kGroupM tile rows, then
  // move one tile column right (as matmul_coopmat.comp).
  const uint32_t group = b.op(OpLoad, v3u, {v_group}), groups = b.op(OpLoad, v3u, {v_groups});
  const uint32_t gx = b.op(OpCompositeExtract, u32, {groups, 0});
  const uint32_t gy = b.op(OpCompositeExtract, u32, {groups, 1});
  const uint32_t id = add(mul(b.op(OpCompositeExtract, u32, {group, 1}), gx),
                          b.op(OpCompositeExtract, u32, {group, 0}));
  const uint32_t z = b.op(OpCompositeExtract, u32, {group, 2});
  const uint32_t band = mul(c32(kGroupM), gx);
  const uint32_t first_row = mul(udiv(id, band), c32(kGroupM));
  const uint32_t rows_left = b.op(OpISub, u32, {gy, first_row});
  const uint32_t band_rows =
      b.op(OpSelect, u32,
           {b.op(OpULessThan, t_bool, {rows_left, c32(kGroupM)}), rows_left, c32(kGroupM)});
  const uint32_t in_band = umod(id, band);
  const uint32_t m0 = mul(add(first_row, umod(in_band, band_rows)), c32(tile.bm));
  const uint32_t n0 = mul(udiv(in_band, band_rows), c32(tile.bn));

  // Element offsets of the tiles at k = 0, and how far one step of k moves them.
  const uint32_t a = push(kA), bb = push(kB), c = push(kC), k_end = push(kK);
  // The host checks that A's and B's strides are multiples of 8 halves (16 bytes); masking the low
  // bits tells the driver's compiler so, which lets it load lines 16 bytes at a time.
  const uint32_t not7 = c32(~7u);
  const uint32_t lda = b.op(OpBitwiseAnd, u32, {push(kLda), not7});
  const uint32_t ldb = b.op(OpBitwiseAnd, u32, {push(kLdb), not7});
  const uint32_t c_rs = push(kCRs), c_cs = push(kCCs);
  const uint32_t a_tile = add(mul(z, push(kSa)), key.trans_a ? m0 : mul(m0, lda));
  const uint32_t b_tile = add(mul(z, push(kSb)), key.trans_b ? mul(n0, ldb) : n0);
  const uint32_t c_tile = add(mul(z, push(kSc)), add(mul(m0, c_rs), mul(n0, c_cs)));
  const uint32_t layout_c = c32(key.c_column_major ? ColumnMajor : RowMajor);
  const uint32_t c_stride = b.op(OpBitwiseAnd, u32, {key.c_column_major ? c_cs : c_rs, c32(~3u)});
  const uint32_t c_ptr = element_ptr(p_f32, c, c_tile, 4);

  // Tensor addressing: each operand's layout (stored rows x columns, row stride ld) at its batch
  // entry, made once; the loop slices it at each k.
  uint32_t a_tensor = 0, b_tensor = 0, layout_a = 0, layout_b = 0, view = 0;
  if (tensor) {
    const uint32_t m_end = push(kM), n_end = push(kN);
    const auto make_layout = [&](uint32_t rows, uint32_t cols, uint32_t ld) {
      const uint32_t fresh = b.op(OpCreateTensorLayoutNV, t_layout, {});
      const uint32_t sized = b.op(OpTensorLayoutSetDimensionNV, t_layout, {fresh, rows, cols});
      return b.op(OpTensorLayoutSetStrideNV, t_layout, {sized, ld, c32(1)});
    };
    a_tensor = element_ptr(p_f16_array, a, mul(z, push(kSa)), 2);
    b_tensor = element_ptr(p_f16_array, bb, mul(z, push(kSb)), 2);
    layout_a = key.trans_a ? make_layout(k_end, m_end, lda) : make_layout(m_end, k_end, lda);
    layout_b = key.trans_b ? make_layout(n_end, k_end, ldb) : make_layout(k_end, n_end, ldb);
    if (key.trans_a || key.trans_b) view = b.op(OpCreateTensorViewNV, t_view, {});
  }
  // One operand's tile at k (A: BM x BK, B: BK x BN). `k_on_lines`: k steps from line to line
  // of the stored operand (B, or A transposed), else along a line; `corner` and `span` place the
  // tile along the operand's other dimension.
  struct Operand {
    uint32_t type, zero, address, tile_offset, ld, tensor_ptr, layout;
    bool trans, k_on_lines;
    uint32_t corner, span;
  };
  const Operand op_a{t_a,      zero_a,      a,           a_tile, lda,    a_tensor,
                     layout_a, key.trans_a, key.trans_a, m0,     tile.bm};
  const Operand op_b{t_b,      zero_b,      bb,           b_tile, ldb,    b_tensor,
                     layout_b, key.trans_b, !key.trans_b, n0,     tile.bn};
  const auto load_tile = [&](const Operand& o, uint32_t k) {
    if (!tensor) {
      const uint32_t ptr =
          element_ptr(p_f16, o.address, add(o.tile_offset, o.k_on_lines ? mul(k, o.ld) : k), 2);
      return b.op(OpCooperativeMatrixLoadKHR, o.type,
                  {ptr, c32(o.trans ? ColumnMajor : RowMajor), o.ld, kMemoryAccessAligned, 16});
    }
    const uint32_t slice = o.k_on_lines ? b.op(OpTensorLayoutSliceNV, t_layout,
                                               {o.layout, k, c32(tile.bk), o.corner, c32(o.span)})
                                        : b.op(OpTensorLayoutSliceNV, t_layout,
                                               {o.layout, o.corner, c32(o.span), k, c32(tile.bk)});
    std::vector<uint32_t> operands = {o.tensor_ptr, o.zero, slice, kMemoryAccessAligned, 16};
    if (o.trans)
      operands.insert(operands.end(), {kTensorAddressingTensorView, view});
    else
      operands.push_back(0);
    return b.op(OpCooperativeMatrixLoadTensorNV, o.type, operands);
  };

  // The sums start from zero even when accumulating: C is added after the loop. Loaded into the
  // accumulator before it (as first written), the accumulating kernel spilled 960 bytes per
  // invocation against 800 this way and ran 1B f16 steps 7.5 ms slower (bench/RESULTS.md,
  // eighteenth session); with u4 or u2 unrolling instead it still spilled and gained nothing.
  b.op_void(OpStore, {v_acc, zero_c});
  b.op_void(OpStore, {v_k, c32(0)});
  // loads_hoisted: the tiles at k = 0, multiplied at every step.
  uint32_t hoisted_a = 0, hoisted_b = 0;
  if (key.loads_hoisted) {
    hoisted_a = load_tile(op_a, c32(0));
    hoisted_b = load_tile(op_b, c32(0));
  }
  // One multiply-add of the tiles at k.
  const auto step = [&](uint32_t k) {
    const uint32_t mat_a = key.loads_hoisted ? hoisted_a : load_tile(op_a, k);
    const uint32_t mat_b = key.loads_hoisted ? hoisted_b : load_tile(op_b, k);
    const uint32_t acc = b.op(OpLoad, t_c, {v_acc});
    b.op_void(OpStore, {v_acc, b.op(OpCooperativeMatrixMulAddKHR, t_c, {mat_a, mat_b, acc})});
  };
  // while (k + steps * BK <= K) { step(k), ..., step(k + (steps - 1) * BK); k += steps * BK; }
  const auto emit_loop = [&](uint32_t steps) {
    const uint32_t l_header = b.fresh_id(), l_test = b.fresh_id(), l_body = b.fresh_id(),
                   l_continue = b.fresh_id(), l_merge = b.fresh_id();
    b.op_void(OpBranch, {l_header});
    b.op_with_id(OpLabel, 0, l_header, {});
    b.op_void(OpLoopMerge, {l_merge, l_continue, 0});
    b.op_void(OpBranch, {l_test});
    b.op_with_id(OpLabel, 0, l_test, {});
    const uint32_t k_now = b.op(OpLoad, u32, {v_k});
    const uint32_t k_after = add(k_now, c32(steps * tile.bk));
    b.op_void(OpBranchConditional,
              {b.op(OpULessThanEqual, t_bool, {k_after, k_end}), l_body, l_merge});
    b.op_with_id(OpLabel, 0, l_body, {});
    const uint32_t k = b.op(OpLoad, u32, {v_k});
    for (uint32_t s = 0; s < steps; ++s) step(s == 0 ? k : add(k, c32(s * tile.bk)));
    b.op_void(OpBranch, {l_continue});
    b.op_with_id(OpLabel, 0, l_continue, {});
    b.op_void(OpStore, {v_k, add(b.op(OpLoad, u32, {v_k}), c32(steps * tile.bk))});
    b.op_void(OpBranch, {l_header});
    b.op_with_id(OpLabel, 0, l_merge, {});
  };
  if (tile.unroll > 1) emit_loop(tile.unroll);
  emit_loop(1);
  uint32_t result = b.op(OpLoad, t_c, {v_acc});
  if (key.accumulate)
    result = b.op(OpFAdd, t_c,
                  {result, b.op(OpCooperativeMatrixLoadKHR, t_c,
                                {c_ptr, layout_c, c_stride, kMemoryAccessAligned, 16})});
  b.op_void(OpCooperativeMatrixStoreKHR,
            {c_ptr, result, layout_c, c_stride, kMemoryAccessAligned, 16});
  b.op_void(OpReturn, {});
  b.op_void(OpFunctionEnd, {});
  return b.finish();
}

std::string workgroup_gemm_module(const WorkgroupGemmKey& key) {
  const std::string name =
      fmt::format("matmul_{}_{}{}_c{}{}{}", key.tile.name(), key.trans_a ? 't' : 'n',
                  key.trans_b ? 't' : 'n', key.c_column_major ? "col" : "row",
                  key.accumulate ? "_acc" : "", key.loads_hoisted ? "_hoisted" : "");
  if (!vk::Pipelines::has_module(name))
    vk::Pipelines::register_generated(name, workgroup_gemm_spirv(key));
  return name;
}

}  // namespace vkf::ops::detail
