// The decode ops (see decode.h): validation and dispatch of argmax_rows.comp, kv_cache_write.comp,
// rope_kv_write.comp and attention_decode.comp; linear_accumulate through the GEMM entry point;
// gated_linear through matmul_skinny_f16.comp's gated variant.
#include "ops/decode.h"

#include <cmath>

#include "core/launch.h"
#include "ops/attention_params.h"
#include "ops/matmul.h"
#include "ops/matmul_kernels.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

using detail::AttnParams;
constexpr int64_t kMaxHeadDim = 256;  // attention_decode's DMAX
constexpr int64_t kMaxGroups = 65535;

void check_cache(const Tensor& cache, const char* op, const char* what) {
  VKF_REQUIRE(cache.defined() && cache.dtype() == DType::F32 && cache.rank() == 4 &&
                  cache.is_contiguous() && cache.numel() > 0,
              "{}: {} must be a contiguous f32 [batch, capacity, kv_heads, head_dim] cache, got {}",
              op, what,
              cache.defined() ? shape_str(cache.shape()) + " " + dtype_name(cache.dtype())
                              : std::string("an undefined tensor"));
  checked_u32(cache.numel(), "KV cache element count");
}

void check_counter(const Tensor& t, const char* op, const char* what) {
  VKF_REQUIRE(t.defined() && t.dtype() == DType::I32 && t.numel() >= 1,
              "{}: {} must be an I32 tensor whose first element is read on the device", op, what);
}

}  // namespace

Tensor argmax_rows(const Tensor& x_in) {
  VKF_REQUIRE(
      x_in.defined() && x_in.dtype() == DType::F32 && (x_in.rank() == 2 || x_in.rank() == 3),
      "argmax_rows: x must be f32 [rows, cols] or [rows, 1, cols], got {}",
      x_in.defined() ? shape_str(x_in.shape()) + " " + dtype_name(x_in.dtype()) : "undefined");
  VKF_REQUIRE(x_in.rank() == 2 || x_in.dim(1) == 1,
              "argmax_rows: x {} must have one position per row", shape_str(x_in.shape()));
  const int64_t rows = x_in.dim(0), cols = x_in.dim(-1);
  VKF_REQUIRE(rows > 0 && cols > 0, "argmax_rows: x {} is empty", shape_str(x_in.shape()));
  VKF_REQUIRE(rows <= kMaxGroups, "argmax_rows: {} rows exceed the {} a dispatch allows", rows,
              kMaxGroups);
  // Rows may be strided (the last position of [B, T, V] logits); their elements must be contiguous.
  const bool readable = x_in.strides().back() == 1 || cols == 1;
  const Tensor x = readable ? x_in : x_in.contiguous();
  const int64_t row_stride = rows == 1 ? 0 : x.strides()[0];
  checked_u32((rows - 1) * row_stride + cols, "argmax_rows extent");
  constexpr int64_t kChunk = 256 * 16;  // argmax_rows.comp's CHUNK
  const int64_t chunks = (cols + kChunk - 1) / kChunk;
  VKF_REQUIRE(chunks <= kMaxGroups, "argmax_rows: rows of {} values exceed what a dispatch covers",
              cols);
  Tensor value = Tensor::empty({rows, chunks}, DType::F32),
         index = Tensor::empty({rows, chunks}, DType::I32);
  Tensor out = Tensor::empty({rows}, DType::I32);
  struct {
    uint64_t x, value, index, out;
    uint32_t cols, row_stride, chunks;
  } push{x.address(),
         value.address(),
         index.address(),
         out.address(),
         static_cast<uint32_t>(cols),
         static_cast<uint32_t>(row_stride),
         static_cast<uint32_t>(chunks)};
  launch("argmax_rows_partial", push,
         Grid{static_cast<uint32_t>(chunks), static_cast<uint32_t>(rows), 1}, {&x},
         {&value, &index}, {},
         {static_cast<double>(rows * cols), 4.0 * static_cast<double>(rows * cols)});
  launch("argmax_rows_final", push, Grid{static_cast<uint32_t>(rows), 1, 1}, {&value, &index},
         {&out});
  return out;
}

void kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& cache_k, const Tensor& cache_v,
                    const Tensor& slot_buf) {
  const char* op = "kv_cache_write";
  check_cache(cache_k, op, "cache_k");
  check_cache(cache_v, op, "cache_v");
  check_counter(slot_buf, op, "slot");
  VKF_REQUIRE(cache_k.shape() == cache_v.shape(), "{}: cache_k {} and cache_v {} differ", op,
              shape_str(cache_k.shape()), shape_str(cache_v.shape()));
  const int64_t B = cache_k.dim(0), cap = cache_k.dim(1), row = cache_k.dim(2) * cache_k.dim(3);
  const Shape want{B, 1, cache_k.dim(2), cache_k.dim(3)};
  for (const Tensor* t : {&k, &v}) {
    VKF_REQUIRE(t->defined() && t->dtype() == DType::F32 && t->shape() == want,
                "{}: the new {} must be f32 {} for a cache {}, got {}", op,
                t == &k ? "keys" : "values", shape_str(want), shape_str(cache_k.shape()),
                t->defined() ? shape_str(t->shape()) : std::string("undefined"));
  }
  const Tensor kc = k.is_contiguous() ? k : k.contiguous();
  const Tensor vc = v.is_contiguous() ? v : v.contiguous();
  struct {
    uint64_t k, v, cache_k, cache_v, slot;
    uint32_t row, batch, capacity;
  } push{kc.address(),
         vc.address(),
         cache_k.address(),
         cache_v.address(),
         slot_buf.address(),
         static_cast<uint32_t>(row),
         static_cast<uint32_t>(B),
         static_cast<uint32_t>(cap)};
  const int64_t items = 2 * B * row;
  launch("kv_cache_write", push, grid_1d(items, 256), {&kc, &vc, &slot_buf}, {&cache_k, &cache_v},
         {}, {0.0, 8.0 * static_cast<double>(items)});
}

Tensor rope_kv_write(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cos,
                     const Tensor& sin, const Tensor& positions, const Tensor& cache_k,
                     const Tensor& cache_v, const Tensor& slot_buf, int64_t rotary_dim,
                     RopeLayout layout) {
  const char* op = "rope_kv_write";
  check_cache(cache_k, op, "cache_k");
  check_cache(cache_v, op, "cache_v");
  check_counter(slot_buf, op, "slot");
  VKF_REQUIRE(cache_k.shape() == cache_v.shape(), "{}: cache_k {} and cache_v {} differ", op,
              shape_str(cache_k.shape()), shape_str(cache_v.shape()));
  const int64_t B = cache_k.dim(0), cap = cache_k.dim(1), hkv = cache_k.dim(2), D = cache_k.dim(3);
  const Shape kv_shape{B, 1, hkv, D};
  for (const Tensor* t : {&k, &v}) {
    VKF_REQUIRE(t->defined() && t->dtype() == DType::F32 && t->shape() == kv_shape,
                "{}: the new {} must be f32 {} for a cache {}, got {}", op,
                t == &k ? "keys" : "values", shape_str(kv_shape), shape_str(cache_k.shape()),
                t->defined() ? shape_str(t->shape()) : std::string("undefined"));
  }
  VKF_REQUIRE(q.defined() && q.dtype() == DType::F32 && q.rank() == 4 && q.dim(0) == B &&
                  q.dim(1) == 1 && q.dim(3) == D && q.dim(2) > 0,
              "{}: q must be f32 [{}, 1, heads, {}], got {}", op, B, D,
              q.defined() ? shape_str(q.shape()) : std::string("undefined"));
  VKF_REQUIRE(rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= D,
              "{}: rotary_dim must be even and in [2, head_dim = {}], got {}", op, D, rotary_dim);
  const int64_t half = rotary_dim / 2;
  for (const Tensor* t : {&cos, &sin}) {
    VKF_REQUIRE(t->defined() && t->dtype() == DType::F32 && t->rank() == 2 && t->dim(0) > 0 &&
                    t->dim(1) == half && t->is_contiguous(),
                "{}: the cos/sin tables must be contiguous f32 [positions, {}]", op, half);
  }
  VKF_REQUIRE(cos.shape() == sin.shape(), "{}: cos {} and sin {} differ", op,
              shape_str(cos.shape()), shape_str(sin.shape()));
  VKF_REQUIRE(positions.defined() && positions.dtype() == DType::I32 && positions.is_contiguous() &&
                  positions.shape() == (Shape{B, 1}),
              "{}: positions must be a contiguous I32 [{}, 1] (one per row)", op, B);
  checked_u32(cos.numel(), "rope table element count");
  const Tensor qc = q.is_contiguous() ? q : q.contiguous();
  const Tensor kc = k.is_contiguous() ? k : k.contiguous();
  const Tensor vc = v.is_contiguous() ? v : v.contiguous();
  Tensor out = Tensor::empty(q.shape(), DType::F32);
  struct {
    uint64_t q, k, v, cos, sin, pos, slot, q_out, cache_k, cache_v;
    uint32_t hq, hkv, d, half, positions, capacity, batch, flags;
  } push{qc.address(),
         kc.address(),
         vc.address(),
         cos.address(),
         sin.address(),
         positions.address(),
         slot_buf.address(),
         out.address(),
         cache_k.address(),
         cache_v.address(),
         static_cast<uint32_t>(q.dim(2)),
         static_cast<uint32_t>(hkv),
         static_cast<uint32_t>(D),
         static_cast<uint32_t>(half),
         static_cast<uint32_t>(cos.dim(0)),
         static_cast<uint32_t>(cap),
         static_cast<uint32_t>(B),
         layout == RopeLayout::Interleaved ? 1u : 0u};
  const int64_t per_row = half + (D - rotary_dim);
  const int64_t items = B * (q.dim(2) + hkv) * per_row + B * hkv * D;
  launch("rope_kv_write", push, grid_1d(items, 256),
         {&qc, &kc, &vc, &cos, &sin, &positions, &slot_buf}, {&out, &cache_k, &cache_v}, {},
         {6.0 * static_cast<double>(B * (q.dim(2) + hkv) * half),
          4.0 * static_cast<double>(2 * qc.numel() + 4 * kc.numel())});
  return out;
}

void linear_accumulate(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& out) {
  const char* op = "linear_accumulate";
  VKF_REQUIRE(x.defined() && x.dtype() == DType::F32 && x.rank() >= 1 && x.numel() > 0,
              "{}: x must be a non-empty f32 [..., in] tensor", op);
  VKF_REQUIRE(weight.defined() && (weight.dtype() == DType::F32 || weight.dtype() == DType::F16) &&
                  weight.rank() == 2 && weight.dim(1) == x.dim(-1),
              "{}: weight must be f32 or f16 [out, {}] for x {}, got {}", op, x.dim(-1),
              shape_str(x.shape()),
              weight.defined() ? shape_str(weight.shape()) + " " + dtype_name(weight.dtype())
                               : "undefined");
  Shape want = x.shape();
  want.back() = weight.dim(0);
  VKF_REQUIRE(
      out.defined() && out.dtype() == DType::F32 && out.shape() == want && out.is_contiguous(),
      "{}: out must be a contiguous f32 {}, got {}", op, shape_str(want),
      out.defined() ? shape_str(out.shape()) : std::string("undefined"));
  if (bias.defined()) {
    VKF_REQUIRE(bias.dtype() == DType::F32 && bias.rank() == 1 && bias.dim(0) == weight.dim(0),
                "{}: bias must be f32 [{}]", op, weight.dim(0));
  }
  detail::gemm(detail::describe_rows(x), detail::describe_readable(weight).transposed(),
               detail::describe_rows(out), 1.0f, 1.0f, bias);
}

Tensor gated_linear(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, Activation act) {
  const char* op = "gated_linear";
  VKF_REQUIRE(x.defined() && x.dtype() == DType::F32 && x.rank() >= 1 && x.numel() > 0,
              "{}: x must be a non-empty f32 [..., in] tensor", op);
  for (const Tensor* w : {&w_gate, &w_up}) {
    VKF_REQUIRE(w->defined() && w->rank() == 2 && w->dim(1) == x.dim(-1) &&
                    w->shape() == w_gate.shape() && w->dtype() == w_gate.dtype(),
                "{}: w_gate and w_up must be [inner, {}] of one shape and dtype, got {} and {}", op,
                x.dim(-1), w_gate.defined() ? shape_str(w_gate.shape()) : "undefined",
                w_up.defined() ? shape_str(w_up.shape()) : "undefined");
  }
  VKF_REQUIRE(static_cast<uint32_t>(act) <= static_cast<uint32_t>(Activation::QuickGELU),
              "{}: unknown Activation value {}", op, static_cast<uint32_t>(act));
  const detail::MatDesc a = detail::describe_rows(x);
  const int64_t m = a.rows, n = w_gate.dim(0), k = a.cols;
  constexpr int64_t kMaxRows = 8;  // matmul_skinny_f16's MMAX
  constexpr int64_t kCols = 8;     // and its COLS
  constexpr int64_t kMaxGroups = 65535;
  if (w_gate.dtype() != DType::F16 || m > kMaxRows || !w_gate.is_contiguous() ||
      !w_up.is_contiguous() || div_up(n, kCols) > kMaxGroups || a.cs != 1) {
    return gated_act(linear(x, w_gate), linear(x, w_up), act);
  }
  Shape out_shape = x.shape();
  out_shape.back() = n;
  Tensor out = Tensor::empty(out_shape, DType::F32);
  const auto lda = static_cast<uint32_t>(m == 1 ? 0 : a.rs);
  // 16-byte loads need every row start of x and of both weights 16-byte aligned.
  const bool vec8 = k % 8 == 0 && a.t.address() % 16 == 0 && lda % 4 == 0 &&
                    w_gate.address() % 16 == 0 && w_up.address() % 16 == 0;
  checked_u32((m - 1) * a.rs + k, "gated_linear x extent");
  checked_u32(n * k, "gated_linear weight elements");
  struct {
    uint64_t a, gate, up, c;
    uint32_t m, n, k, lda, ldb, c_rs, sa, sb;
  } push{a.t.address(),
         w_gate.address(),
         w_up.address(),
         out.address(),
         static_cast<uint32_t>(m),
         static_cast<uint32_t>(n),
         static_cast<uint32_t>(k),
         lda,
         static_cast<uint32_t>(k),
         static_cast<uint32_t>(n),
         0,
         0};
  const std::vector<uint32_t> spec = {static_cast<uint32_t>(m), 0u, vec8 ? 1u : 0u,
                                      static_cast<uint32_t>(act)};
  launch("matmul_skinny_f16_gated", push, Grid{div_up(n, kCols), 1, 1}, {&a.t, &w_gate, &w_up},
         {&out}, spec,
         {4.0 * static_cast<double>(m * n * k),
          4.0 * static_cast<double>(n * k) + 4.0 * static_cast<double>(m * (k + n))});
  return out;
}

Tensor attention_decode(const Tensor& q, const Tensor& cache_k, const Tensor& cache_v,
                        const Tensor& key_padding_mask, const Tensor& cached,
                        const AttentionOptions& opts) {
  const char* op = "attention_decode";
  check_cache(cache_k, op, "cache_k");
  check_cache(cache_v, op, "cache_v");
  check_counter(cached, op, "cached");
  VKF_REQUIRE(cache_k.shape() == cache_v.shape(), "{}: cache_k {} and cache_v {} differ", op,
              shape_str(cache_k.shape()), shape_str(cache_v.shape()));
  const int64_t B = cache_k.dim(0), cap = cache_k.dim(1), hkv = cache_k.dim(2), D = cache_k.dim(3);
  VKF_REQUIRE(q.defined() && q.dtype() == DType::F32 && q.rank() == 4 && q.dim(0) == B &&
                  q.dim(1) == 1 && q.dim(3) == D && q.dim(2) > 0 && q.dim(2) % hkv == 0,
              "{}: q must be f32 [{}, 1, heads, {}] with heads a multiple of the cache's {} kv "
              "heads, got {}",
              op, B, D, hkv, q.defined() ? shape_str(q.shape()) : std::string("undefined"));
  VKF_REQUIRE(D <= kMaxHeadDim, "{}: head_dim {} exceeds the supported maximum {}", op, D,
              kMaxHeadDim);
  VKF_REQUIRE(q.dim(2) <= kMaxGroups && B <= kMaxGroups,
              "{}: {} heads x {} rows exceed a dispatch's grid", op, q.dim(2), B);
  if (key_padding_mask.defined()) {
    VKF_REQUIRE(
        key_padding_mask.dtype() == DType::I32 && key_padding_mask.is_contiguous() &&
            key_padding_mask.shape() == (Shape{B, cap}),
        "{}: key_padding_mask must be a contiguous I32 [{}, {}] (one entry per cache slot), got {}",
        op, B, cap, shape_str(key_padding_mask.shape()));
  }
  VKF_REQUIRE(std::isfinite(opts.scale), "{}: scale must be finite, got {}", op, opts.scale);
  VKF_REQUIRE(std::isfinite(opts.softcap) && opts.softcap >= 0,
              "{}: softcap must be 0 (none) or a positive finite value, got {}", op, opts.softcap);
  VKF_REQUIRE(opts.dropout_p == 0, "{}: attention dropout is for training; decoding has none", op);
  VKF_REQUIRE(opts.sliding_window >= 0, "{}: sliding_window must be 0 (none) or positive", op);
  const Tensor qc = q.is_contiguous() ? q : q.contiguous();
  Tensor out = Tensor::empty(q.shape(), DType::F32);
  AttnParams a{};
  a.tq = 1;
  a.tk = static_cast<uint32_t>(cap);
  a.hq = static_cast<uint32_t>(q.dim(2));
  a.hkv = static_cast<uint32_t>(hkv);
  a.d = static_cast<uint32_t>(D);
  a.causal = opts.causal ? 1 : 0;
  a.window = opts.sliding_window >= cap ? 0u : static_cast<uint32_t>(opts.sliding_window);
  a.scale = opts.scale;
  a.softcap = opts.softcap;
  struct {
    uint64_t q, k, v, mask, o, cached;
    AttnParams a;
    uint32_t flags;
  } push{qc.address(),
         cache_k.address(),
         cache_v.address(),
         key_padding_mask.defined() ? key_padding_mask.address() : 0,
         out.address(),
         cached.address(),
         a,
         key_padding_mask.defined() ? detail::kAttnFlagMask : 0u};
  // The cost counts the whole cache (the filled length is known only on the device).
  launch("attention_decode", push, Grid{a.hq, static_cast<uint32_t>(B), 1},
         {&qc, &cache_k, &cache_v, &key_padding_mask, &cached}, {&out}, {},
         {4.0 * static_cast<double>(B * q.dim(2) * cap * D),
          4.0 * static_cast<double>(cache_k.numel()) * 2});
  return out;
}

}  // namespace vkf::ops
