// Fused attention (see attention.h): input validation, the forward dispatch, and the backward as
// three kernels (delta = rowsum(do * o), dq over key tiles, dk/dv over query tiles and the heads
// of each GQA group; the fast family takes one query head per workgroup and adds the heads'
// partials in a fourth pass, and by default runs dk/dv first, storing the score gradients that
// its dq kernel then only multiplies by k), each from one of three families chosen by
// ops/attention_coopmat.h: plain, fp32 register-tiled (fast) or f16 tensor cores (coopmat). Tile
// sizes live in the shaders' //!variant lines and defines; the tables here (and, for the fast and
// coopmat kernels, in ops/attention_coopmat.cpp beside their choice) mirror them so the host can
// size the grids. Attention dropout's parameters travel in a six-word buffer (the push constants
// have no room left), with bit 1 of `flags` saying it is on. The tensor-core kernels read the
// operands they stage tile by tile from f16 copies made here (tile_operands).
#include "ops/attention.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "core/autograd.h"
#include "core/launch.h"
#include "ops/attention_coopmat.h"
#include "ops/attention_params.h"
#include "ops/dropout.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

using detail::AttnParams;
using detail::kAttnFlagDropout;
using detail::kAttnFlagMask;

struct ForwardPush {
  uint64_t q, k, v, mask, o, lse, dropout;
  AttnParams a;
  uint32_t flags;
};

struct DqPush {
  uint64_t q, k, v, mask, dout, lse, delta, dq, dropout;
  AttnParams a;
  uint32_t flags;
};

// The register-tiled and tensor-core dk/dv kernels run without dropout; their tenth address is
// instead the buffer for the score gradients they can store (0: none), in the same place.
struct DkvPush {
  uint64_t q, k, v, mask, dout, lse, delta, dk, dv, dropout_or_ds;
  AttnParams a;
  uint32_t flags;
};

// attention_fast_bwd_dq_ds.comp: dq from the score gradients the dk/dv kernel stored.
struct DqFromDsPush {
  uint64_t k, mask, ds, dq;
  AttnParams a;
  uint32_t flags;
};
constexpr int64_t kDqFromDsRows = 64;  // queries per workgroup (BQ in the shader)

// attention_fast_bwd_dkv_group_sum.comp: per-query-head partials of dk and dv summed over groups.
struct GroupSumPush {
  uint64_t part_k, part_v, dk, dv;
  uint32_t n, d, group;
};

struct DeltaPush {
  uint64_t dout, o, delta;
  uint32_t rows, tq, hq, d;
  uint32_t vec4_rows;  // 16-byte loads (vec4_flag)
};

// Rows of queries / keys per workgroup of each kernel, by padded head dim (the variants' -D flags).
struct Dims {
  int64_t b, tq, tk, hq, hkv, d;
};

struct Tiles {
  uint32_t bq, bk;
};
constexpr uint32_t kHeadDims[] = {32, 64, 128, 256};
constexpr Tiles kForwardTiles[] = {{64, 32}, {32, 32}, {16, 16}, {8, 8}};
constexpr Tiles kDqTiles[] = {{32, 32}, {32, 16}, {16, 8}, {8, 4}};
constexpr Tiles kDkvTiles[] = {{32, 32}, {16, 32}, {8, 16}, {4, 8}};
constexpr int64_t kMaxHeadDim = 256;

using detail::AttentionKernels;
constexpr int64_t kMaxGroups = 65535;  // per grid dimension on every device we target

// Index of the smallest variant whose padded head dim holds d.
int variant_index(int64_t d) {
  int i = 0;
  while (kHeadDims[i] < d) ++i;
  return i;
}

std::string variant_name(const char* kernel, int index) {
  return std::string(kernel) + "_d" + std::to_string(kHeadDims[index]);
}

void check_grid(int64_t groups, const char* what) {
  VKF_REQUIRE(groups <= kMaxGroups,
              "attention: {} needs {} workgroups in one grid dimension, more than the {} devices "
              "allow",
              what, groups, kMaxGroups);
}

// The grid of a kernel of family `kernels` with one workgroup per block of rows of one head:
// (blocks, heads, batch) for the plain kernels, (heads, batch, blocks) for the register-tiled and
// tensor-core ones, whose shaders map grid z to the blocks with the most work first (under a
// causal mask): workgroups are dispatched about in grid order, so the longest ones of every head
// and batch start first and the last ones to start are short (with the batch outermost instead,
// each batch's long blocks would start after the previous batch's short ones, and the last
// batch's would run alone at the end).
Grid block_grid(AttentionKernels kernels, int64_t blocks, int64_t heads, int64_t batch) {
  const auto u = [](int64_t n) { return static_cast<uint32_t>(n); };
  return kernels != AttentionKernels::Plain ? Grid{u(heads), u(batch), u(blocks)}
                                            : Grid{u(blocks), u(heads), u(batch)};
}

Dims validate(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
              const AttentionOptions& opts) {
  const std::pair<const Tensor*, const char*> qkv[] = {{&q, "q"}, {&k, "k"}, {&v, "v"}};
  for (const auto& [t, name] : qkv) {
    VKF_REQUIRE(t->defined(), "attention: {} is undefined", name);
    VKF_REQUIRE(t->dtype() == DType::F32, "attention: {} must be f32, got {}", name,
                dtype_name(t->dtype()));
    VKF_REQUIRE(t->rank() == 4, "attention: {} must be [batch, time, heads, head_dim], got {}",
                name, shape_str(t->shape()));
    for (int64_t extent : t->shape())
      VKF_REQUIRE(extent > 0, "attention: {} is empty, shape {}", name, shape_str(t->shape()));
  }
  VKF_REQUIRE(k.shape() == v.shape(), "attention: k {} and v {} must have the same shape",
              shape_str(k.shape()), shape_str(v.shape()));
  const Dims dims{q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3)};
  VKF_REQUIRE(k.dim(0) == dims.b, "attention: batch of k {} ({}) differs from batch of q {} ({})",
              shape_str(k.shape()), k.dim(0), shape_str(q.shape()), dims.b);
  VKF_REQUIRE(k.dim(3) == dims.d,
              "attention: head_dim of k {} ({}) differs from head_dim of q {} ({})",
              shape_str(k.shape()), k.dim(3), shape_str(q.shape()), dims.d);
  VKF_REQUIRE(dims.hq % dims.hkv == 0,
              "attention: query heads ({}, q {}) must be a multiple of key/value heads ({}, k {})",
              dims.hq, shape_str(q.shape()), dims.hkv, shape_str(k.shape()));
  VKF_REQUIRE(dims.d <= kMaxHeadDim, "attention: head_dim {} exceeds the supported maximum {}",
              dims.d, kMaxHeadDim);
  checked_u32(q.numel(), "attention: q element count");
  checked_u32(k.numel(), "attention: k element count");
  if (mask.defined()) {
    VKF_REQUIRE(mask.dtype() == DType::I32 || mask.dtype() == DType::I64,
                "attention: key_padding_mask must be i32 or i64, got {}", dtype_name(mask.dtype()));
    VKF_REQUIRE(mask.shape() == (Shape{dims.b, dims.tk}),
                "attention: key_padding_mask must be [batch, key_len] = [{}, {}], got {}", dims.b,
                dims.tk, shape_str(mask.shape()));
  }
  VKF_REQUIRE(std::isfinite(opts.scale), "attention: scale must be finite, got {}", opts.scale);
  VKF_REQUIRE(std::isfinite(opts.softcap) && opts.softcap >= 0,
              "attention: softcap must be 0 (none) or a positive finite value, got {}",
              opts.softcap);
  dropout_threshold(opts.dropout_p, "attention: dropout_p");  // in [0, 1]
  VKF_REQUIRE(opts.sliding_window >= 0,
              "attention: sliding_window must be 0 (none) or positive, got {}",
              opts.sliding_window);
  check_grid(dims.hq, "the query heads");
  check_grid(dims.b, "the batch");
  return dims;
}

AttnParams make_params(const Dims& dims, const AttentionOptions& opts) {
  AttnParams a{};
  a.tq = static_cast<uint32_t>(dims.tq);
  a.tk = static_cast<uint32_t>(dims.tk);
  a.hq = static_cast<uint32_t>(dims.hq);
  a.hkv = static_cast<uint32_t>(dims.hkv);
  a.d = static_cast<uint32_t>(dims.d);
  a.causal = opts.causal ? 1 : 0;
  // A window of Tk or more hides nothing (a query position is at most Tk - 1 past key 0).
  a.window = opts.sliding_window >= dims.tk ? 0 : static_cast<uint32_t>(opts.sliding_window);
  a.q_offset = static_cast<int32_t>(dims.tk - dims.tq);
  a.scale = opts.scale;
  a.softcap = opts.softcap;
  return a;
}

// Rough work of one pass over all (query, key) pairs, for profiles: 2 flops per multiply-add.
vk::DispatchCost pair_cost(const Dims& dims, double dots, double bytes) {
  const double pairs =
      static_cast<double>(dims.b * dims.hq * dims.tq) * static_cast<double>(dims.tk);
  return {2.0 * dots * pairs * static_cast<double>(dims.d), bytes};
}

// The dropout parameters as the kernels read them (struct AttnDropoutBuf in
// attention_common.glsl): seed and offset halves, the keep threshold and the scale's bits.
Tensor make_dropout_params(const AttentionOptions& opts) {
  const float scale = dropout_scale(opts.dropout_p);
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &scale, sizeof scale_bits);
  const uint32_t words[6] = {static_cast<uint32_t>(opts.dropout_seed),
                             static_cast<uint32_t>(opts.dropout_seed >> 32),
                             static_cast<uint32_t>(opts.dropout_offset),
                             static_cast<uint32_t>(opts.dropout_offset >> 32),
                             dropout_threshold(opts.dropout_p, "attention: dropout_p"),
                             scale_bits};
  return Tensor::from_bytes(words, DType::I32, {6});
}

struct SavedForward {
  Tensor q, k, v, mask, out, lse;
  Tensor dropout;  // six words, or undefined when dropout is off
  Dims dims;
  AttnParams params;
  AttentionKernels kernels = AttentionKernels::Plain;  // the family of forward and backward
  detail::FastAttentionModules fast_modules;           // with AttentionKernels::Fast

  uint32_t flags() const {
    return (mask.defined() ? kAttnFlagMask : 0) | (dropout.defined() ? kAttnFlagDropout : 0);
  }
  bool fast() const { return kernels == AttentionKernels::Fast; }
  bool coopmat() const { return kernels == AttentionKernels::Coopmat; }
  uint64_t mask_address() const { return mask.defined() ? mask.address() : 0; }
  uint64_t dropout_address() const { return dropout.defined() ? dropout.address() : 0; }
};

// The tensor-core and register-tiled kernels' flag for reading (and writing) rows as vec4:
// head_dim a multiple of 4 and every operand (undefined ones aside) starting 16-byte aligned.
uint32_t vec4_flag(int64_t d, std::initializer_list<const Tensor*> operands) {
  if (d % 4 != 0) return 0;
  for (const Tensor* t : operands)
    if (t->defined() && t->address() % 16 != 0) return 0;
  return detail::kFlashFlagVec4;
}

// The tensor-core backward kernels' specialization: QUAD_LAYOUT (flash_quad_rows); none for the
// others.
std::vector<uint32_t> quad_spec(const SavedForward& s) {
  if (!s.coopmat()) return {};
  return {detail::flash_quad_rows() ? 1u : 0u};
}

// The tensor-core kernels stage some operands tile by tile from f16 copies (flash_frag.glsl's
// stage_tile): the copies of a and b (rounded as the kernels round, to nearest even) and their
// flag bit; the other families read a and b themselves. The backward makes its copies again rather
// than keeping the forward's: they are transient, where kept ones would add to the peak between
// the passes (the 1B f16 step's peak sits 0.3 GiB under PyTorch's).
struct TileOperands {
  Tensor a, b;
  uint32_t flags = 0;
};
TileOperands tile_operands(const SavedForward& s, const Tensor& a, const Tensor& b) {
  if (!s.coopmat()) return {a, b, 0};
  TileOperands t{a.to(DType::F16), b.defined() ? b.to(DType::F16) : Tensor(), 0};
  if (s.dims.d % 8 == 0 && t.a.address() % 16 == 0 && (!b.defined() || t.b.address() % 16 == 0))
    t.flags = detail::kFlashFlagTilesVec8;
  return t;
}

// Bytes of the score gradients a backward of family `kernels` stores for its dq (`elements` =
// B Hq Tk Tq: floats for the fp32 register-tiled kernels, halves for the tensor-core ones where
// their dq_ds kernel is built), or 0 where it recomputes them (detail::fast_dq_from_stored_ds).
uint64_t stored_ds_bytes(AttentionKernels kernels, int64_t elements) {
  const bool fast = kernels == AttentionKernels::Fast;
  const bool coopmat =
      kernels == AttentionKernels::Coopmat && detail::flash_dq_from_stored_ds_available();
  if (!fast && !coopmat) return 0;
  const uint64_t bytes = static_cast<uint64_t>(elements) * (coopmat ? 2 : 4);
  return detail::fast_dq_from_stored_ds(bytes, fast || detail::kFlashStoresDsByDefault) ? bytes : 0;
}

// flash_attn_dq_ds.comp: dq from the stored f16 score gradients.
struct FlashDqFromDsPush {
  uint64_t k, ds, dq;
  AttnParams a;
  uint32_t flags;
};

void backward(const SavedForward& s, autograd::GradContext& ctx) {
  const Tensor& grad = ctx.grad_output(0);
  if (!grad.defined()) return;
  const Tensor dout = grad.is_contiguous() ? grad : grad.contiguous();
  const Dims& dims = s.dims;
  const int vi = variant_index(dims.d);
  const double qbytes = static_cast<double>(s.q.nbytes());
  Tensor dq, dk, dv;
  if (ctx.needs_grad(0)) dq = Tensor::empty(s.q.shape(), DType::F32);
  if (ctx.needs_grad(1) || ctx.needs_grad(2)) {
    dk = Tensor::empty(s.k.shape(), DType::F32);
    dv = Tensor::empty(s.v.shape(), DType::F32);
  }
  // The register-tiled kernels also write their gradients as vec4.
  const uint32_t flags =
      s.flags() | (s.coopmat() ? vec4_flag(dims.d, {&s.q, &s.k, &s.v, &dout})
                   : s.fast()  ? vec4_flag(dims.d, {&s.q, &s.k, &s.v, &dout, &dq, &dk, &dv})
                               : 0);

  Tensor delta = Tensor::empty({dims.b, dims.hq, dims.tq}, DType::F32);
  const DeltaPush dp{dout.address(),  s.out.address(),
                     delta.address(), checked_u32(delta.numel(), "attention: delta rows"),
                     s.params.tq,     s.params.hq,
                     s.params.d,      vec4_flag(dims.d, {&dout, &s.out}) != 0 ? 1u : 0u};
  constexpr int64_t kDeltaLanes = 16;  // invocations per row (LANES in attention_bwd_delta.comp)
  launch("attention_bwd_delta", dp, grid_1d(delta.numel() * kDeltaLanes, 128), {&dout, &s.out},
         {&delta}, {}, {2.0 * static_cast<double>(s.q.numel()), 2.0 * qbytes});

  // The fp32 register-tiled and tensor-core families can take dq from the score gradients their
  // dk/dv kernel stores (stored_ds_bytes): then dk/dv run first and dq reads them.
  const bool need_dq = ctx.needs_grad(0), need_dkv = ctx.needs_grad(1) || ctx.needs_grad(2);
  const int64_t ds_elements = dims.b * dims.hq * dims.tk * dims.tq;
  const bool stored_ds = need_dq && need_dkv && stored_ds_bytes(s.kernels, ds_elements) > 0;
  if (stored_ds) (void)checked_u32(ds_elements, "attention: stored score gradients");
  const Tensor ds = stored_ds ? Tensor::empty({dims.b, dims.hq, dims.tk, dims.tq},
                                              s.coopmat() ? DType::F16 : DType::F32)
                              : Tensor();
  // 16-byte rows of the stored ds: chunks of 4 floats, or of 8 halves.
  const uint32_t ds_flags =
      stored_ds && dims.tq % (s.coopmat() ? 8 : 4) == 0 ? detail::kFastFlagDsVec4 : 0u;

  const auto run_dq = [&] {
    if (stored_ds && s.coopmat()) {
      const TileOperands kv = tile_operands(s, s.k, Tensor());  // k alone
      const FlashDqFromDsPush push{kv.a.address(), ds.address(), dq.address(), s.params,
                                   flags | kv.flags | ds_flags};
      const int64_t rows = detail::flash_rows("dq_ds");
      const int64_t blocks = (dims.tq + rows - 1) / rows;
      check_grid(blocks, "the dq query blocks");
      launch(detail::flash_module("dq_ds"), push, block_grid(s.kernels, blocks, dims.hq, dims.b),
             {&kv.a, &ds}, {&dq}, quad_spec(s),
             pair_cost(dims, 1, qbytes / 2 + static_cast<double>(ds.nbytes()) / 2));
      return;
    }
    if (stored_ds) {
      const DqFromDsPush push{s.k.address(), s.mask_address(), ds.address(),
                              dq.address(),  s.params,         flags | ds_flags};
      const int64_t blocks = (dims.tq + kDqFromDsRows - 1) / kDqFromDsRows;
      check_grid(blocks, "the dq query blocks");
      launch("attention_fast_bwd_dq_ds", push, block_grid(s.kernels, blocks, dims.hq, dims.b),
             {&s.k, &s.mask, &ds}, {&dq}, {},
             pair_cost(dims, 1, 2.0 * qbytes + static_cast<double>(ds.nbytes()) / 2));
      return;
    }
    const TileOperands kv = tile_operands(s, s.k, s.v);
    const DqPush push{s.q.address(),       kv.a.address(),  kv.b.address(),  s.mask_address(),
                      dout.address(),      s.lse.address(), delta.address(), dq.address(),
                      s.dropout_address(), s.params,        flags | kv.flags};
    const int64_t rows = s.coopmat() ? detail::flash_rows("dq")
                         : s.fast()  ? s.fast_modules.dq_rows
                                     : kDqTiles[vi].bq;
    const int64_t blocks = (dims.tq + rows - 1) / rows;
    check_grid(blocks, "the dq query blocks");
    launch(s.coopmat() ? detail::flash_module("dq")
           : s.fast()  ? s.fast_modules.dq
                       : variant_name("attention_bwd_dq", vi),
           push, block_grid(s.kernels, blocks, dims.hq, dims.b),
           {&s.q, &kv.a, &kv.b, &s.mask, &dout, &s.lse, &delta, &s.dropout}, {&dq}, quad_spec(s),
           pair_cost(dims, 3, 3 * qbytes));
  };
  const auto run_dkv = [&] {
    // The register-tiled dk/dv kernel runs one workgroup per query head, and so does the
    // tensor-core one by default (flash_dkv_per_head); under GQA they write per-head partials
    // ([B, Tk, Hq, D], 16-byte aligned like every fresh tensor) that a second pass adds over each
    // group in head order.
    const bool per_head = s.fast() || (s.coopmat() && detail::flash_dkv_per_head());
    const bool partials = per_head && dims.hq != dims.hkv;
    const Tensor dk_out =
        partials ? Tensor::empty({dims.b, dims.tk, dims.hq, dims.d}, DType::F32) : dk;
    const Tensor dv_out =
        partials ? Tensor::empty({dims.b, dims.tk, dims.hq, dims.d}, DType::F32) : dv;
    const TileOperands qdo = tile_operands(s, s.q, dout);
    const DkvPush push{qdo.a.address(),
                       s.k.address(),
                       s.v.address(),
                       s.mask_address(),
                       qdo.b.address(),
                       s.lse.address(),
                       delta.address(),
                       dk_out.address(),
                       dv_out.address(),
                       stored_ds ? ds.address() : s.dropout_address(),
                       s.params,
                       flags | qdo.flags | ds_flags |
                           (s.coopmat() && partials ? detail::kFlashFlagHeadPartials : 0u)};
    const int64_t rows = s.coopmat() ? detail::flash_rows("dkv")
                         : s.fast()  ? s.fast_modules.dkv_rows
                                     : kDkvTiles[vi].bk;
    const int64_t blocks = (dims.tk + rows - 1) / rows;
    check_grid(blocks, "the dk/dv key blocks");
    launch(s.coopmat() ? detail::flash_module("dkv")
           : s.fast()  ? s.fast_modules.dkv
                       : variant_name("attention_bwd_dkv", vi),
           push, block_grid(s.kernels, blocks, per_head ? dims.hq : dims.hkv, dims.b),
           {&qdo.a, &s.k, &s.v, &s.mask, &qdo.b, &s.lse, &delta, &s.dropout},
           {&dk_out, &dv_out, &ds}, quad_spec(s),
           pair_cost(dims, 4,
                     2 * qbytes + 2.0 * static_cast<double>(s.k.nbytes() + dk_out.nbytes()) +
                         (stored_ds ? static_cast<double>(ds.nbytes()) / 2 : 0.0)));
    if (partials) {
      const GroupSumPush sum{dk_out.address(),
                             dv_out.address(),
                             dk.address(),
                             dv.address(),
                             checked_u32(dk.numel(), "attention: dk elements"),
                             s.params.d,
                             static_cast<uint32_t>(dims.hq / dims.hkv)};
      launch("attention_fast_bwd_dkv_group_sum", sum, grid_1d(dk.numel(), 256), {&dk_out, &dv_out},
             {&dk, &dv}, {},
             {2.0 * static_cast<double>(dk_out.numel()),
              2.0 * static_cast<double>(dk_out.nbytes() + dk.nbytes())});
    }
  };

  if (stored_ds) {
    run_dkv();
    run_dq();
  } else {
    if (need_dq) run_dq();
    if (need_dkv) run_dkv();
  }
  if (need_dq) ctx.add_grad(0, dq);
  if (need_dkv) {
    ctx.add_grad(1, dk);
    ctx.add_grad(2, dv);
  }
}

}  // namespace

uint64_t attention_backward_stored_ds_bytes(int64_t batch, int64_t tq, int64_t tk, int64_t hq,
                                            int64_t head_dim, float dropout_p) {
  return stored_ds_bytes(detail::attention_kernels(head_dim, dropout_p), batch * hq * tk * tq);
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding_mask,
                 const AttentionOptions& opts) {
  const Dims dims = validate(q, k, v, key_padding_mask, opts);
  const int vi = variant_index(dims.d);
  const AttentionKernels kernels = detail::attention_kernels(dims.d, opts.dropout_p);
  detail::FastAttentionModules fast_modules;
  if (kernels == AttentionKernels::Fast) fast_modules = detail::fast_attention_modules();
  const uint32_t rows = kernels == AttentionKernels::Coopmat ? detail::flash_rows("fwd")
                        : kernels == AttentionKernels::Fast  ? fast_modules.fwd_rows
                                                             : kForwardTiles[vi].bq;
  const int64_t blocks = (dims.tq + rows - 1) / rows;
  check_grid(blocks, "the query blocks");

  SavedForward s;
  s.kernels = kernels;
  s.fast_modules = fast_modules;
  s.dims = dims;
  s.params = make_params(dims, opts);
  s.q = q.is_contiguous() ? q : q.contiguous();
  s.k = k.is_contiguous() ? k : k.contiguous();
  s.v = v.is_contiguous() ? v : v.contiguous();
  if (key_padding_mask.defined()) {
    s.mask =
        key_padding_mask.dtype() == DType::I32
            ? (key_padding_mask.is_contiguous() ? key_padding_mask : key_padding_mask.contiguous())
            : key_padding_mask.to(DType::I32);
  }
  if (opts.dropout_p > 0) s.dropout = make_dropout_params(opts);
  s.out = Tensor::empty(q.shape(), DType::F32);
  s.lse = Tensor::empty({dims.b, dims.hq, dims.tq}, DType::F32);

  // The tensor-core forward reads q as f32 rows (k and v through their f16 copies).
  const uint32_t vec4 = s.coopmat() ? vec4_flag(dims.d, {&s.q})
                        : s.fast()  ? vec4_flag(dims.d, {&s.q, &s.k, &s.v, &s.out})
                                    : 0;
  const TileOperands kv = tile_operands(s, s.k, s.v);
  const ForwardPush push{s.q.address(),       kv.a.address(),  kv.b.address(),
                         s.mask_address(),    s.out.address(), s.lse.address(),
                         s.dropout_address(), s.params,        s.flags() | vec4 | kv.flags};
  launch(s.coopmat() ? detail::flash_module("fwd")
         : s.fast()  ? s.fast_modules.fwd
                     : variant_name("attention_fwd", vi),
         push, block_grid(s.kernels, blocks, dims.hq, dims.b),
         {&s.q, &kv.a, &kv.b, &s.mask, &s.dropout}, {&s.out, &s.lse},
         s.coopmat() ? std::vector<uint32_t>{detail::flash_row_shuffle() ? 1u : 0u,
                                             detail::flash_quad_rows() ? 1u : 0u}
                     : std::vector<uint32_t>{},
         pair_cost(dims, 2, 2.0 * static_cast<double>(s.q.nbytes() + s.k.nbytes())));

  Tensor out = s.out;
  autograd::record_op("attention", {s.q, s.k, s.v}, {out},
                      [s](autograd::GradContext& ctx) { backward(s, ctx); });
  return out;
}

}  // namespace vkf::ops
