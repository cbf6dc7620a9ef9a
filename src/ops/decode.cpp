// The decode ops of decode.h other than attention (ops/decode_attention.cpp): validation and
// dispatch of argmax_rows.comp and kv_cache_write.comp; linear_accumulate through the GEMM entry
// point; gated_linear through matmul_skinny_f16.comp's gated variant and normed_linear through
// its NORM prologue.
#include "ops/decode.h"

#include <cmath>
#include <cstddef>
#include <vector>

#include "core/autograd.h"
#include "core/launch.h"
#include "ops/decode_common.h"
#include "ops/matmul.h"
#include "ops/matmul_kernels.h"
#include "ops/norm.h"
#include "vk/context.h"
#include "vk/error.h"

namespace vkf::ops {
namespace {

using detail::check_caches;
constexpr int64_t kMaxGroups = 65535;

void check_row_norm(const RowNorm& norm, int64_t in, const char* op) {
  VKF_REQUIRE(norm.weight.defined() && norm.weight.dtype() == DType::F32 &&
                  norm.weight.rank() == 1 && norm.weight.dim(0) == in,
              "{}: the norm weight must be f32 [{}], got {}", op, in,
              norm.weight.defined()
                  ? shape_str(norm.weight.shape()) + " " + dtype_name(norm.weight.dtype())
                  : "undefined");
}

// Rows a fold takes (set_norm_fold_rows). One: on the H200 a batch-8 decode step with its norms
// folded took 3.21 ms against 2.50-2.51 with them stored (every workgroup normalizing 8 rows).
int64_t g_norm_fold_rows = 1;

// norm_folds()'s conditions (decode.h) on x described as rows.
bool foldable(const detail::MatDesc& a, const Tensor& weight, const RowNorm& norm) {
  return weight.dtype() == DType::F16 && weight.is_contiguous() && a.rows <= g_norm_fold_rows &&
         math_mode() == MathMode::Fast && a.cols % 8 == 0 && a.cs == 1 &&
         norm.weight.is_contiguous() && norm.weight.address() % 16 == 0;
}

// argmax_rows.comp's push block.
struct ArgmaxPush {
  uint64_t x, value, index, out;
  uint32_t cols, row_stride, chunks;
  uint64_t state;  // final_advance
  uint32_t rows, ring_rows;
};
static_assert(sizeof(ArgmaxPush) == 64);

// argmax_rows.comp's final pass: each row's argmax from its `chunks` (value, index) pairs (value,
// index: f32 and u32 [rows, chunks]). With `advance`, its final_advance form (one workgroup),
// whose ids are then advance->state's.
Tensor argmax_fold(const Tensor& value, const Tensor& index, int64_t rows, int64_t chunks,
                   const ArgmaxAdvance* advance) {
  if (advance) {
    const Tensor& state = advance->state;
    const Tensor& ring = advance->ring;
    const ArgmaxPush push{0,
                          value.address(),
                          index.address(),
                          ring.address(),
                          0,
                          0,
                          static_cast<uint32_t>(chunks),
                          state.address(),
                          static_cast<uint32_t>(rows),
                          static_cast<uint32_t>(ring.dim(0))};
    launch("argmax_rows_final_advance", push, Grid{1, 1, 1}, {&value, &index, &state},
           {&ring, &state});
    return state.slice(0, 0, rows);
  }
  Tensor out = Tensor::empty({rows}, DType::I32);
  const ArgmaxPush push{
      0, value.address(), index.address(), out.address(), 0, 0, static_cast<uint32_t>(chunks), 0, 0,
      0};
  launch("argmax_rows_final", push, Grid{static_cast<uint32_t>(rows), 1, 1}, {&value, &index},
         {&out});
  return out;
}

// The advance argmax_rows was given, checked against `rows`.
void check_argmax_advance(const ArgmaxAdvance* advance, int64_t rows, const char* op) {
  if (!advance) return;
  const Tensor& state = advance->state;
  const Tensor& ring = advance->ring;
  VKF_REQUIRE(rows <= kArgmaxAdvanceMaxRows, "{}: the advance takes at most {} rows, got {}", op,
              kArgmaxAdvanceMaxRows, rows);
  VKF_REQUIRE(state.defined() && state.dtype() == DType::I32 && state.rank() == 1 &&
                  state.numel() == 2 * rows + 1 && state.is_contiguous(),
              "{}: the advance's state must be a contiguous I32 [{}] tensor", op, 2 * rows + 1);
  VKF_REQUIRE(ring.defined() && ring.dtype() == DType::I32 && ring.rank() == 2 &&
                  ring.dim(1) == rows && ring.dim(0) >= 1 && ring.is_contiguous(),
              "{}: the advance's ring must be a contiguous I32 [slots, {}] tensor", op, rows);
}

bool g_argmax_fold_in_product = true;  // set_argmax_fold_in_product

}  // namespace

Tensor argmax_fold_record(const ArgmaxAdvance& advance) {
  check_argmax_advance(&advance, 1, "argmax_fold_record");
  if (!g_argmax_fold_in_product || !vk::Context::get().info().int64_atomics) return {};
  // matmul_skinny_f16.comp's ArgmaxFoldRecord: key (u64) 0, arrived 0, ring_rows, state, ring.
  const uint64_t state = advance.state.address(), ring = advance.ring.address();
  const std::vector<int32_t> record = {0,
                                       0,
                                       0,
                                       static_cast<int32_t>(advance.ring.dim(0)),
                                       static_cast<int32_t>(state & 0xffffffffu),
                                       static_cast<int32_t>(state >> 32),
                                       static_cast<int32_t>(ring & 0xffffffffu),
                                       static_cast<int32_t>(ring >> 32)};
  return Tensor::from_host_i32(record, {8});
}

void set_argmax_fold_in_product(bool on) {
  g_argmax_fold_in_product = on;
}

Tensor argmax_rows(const Tensor& x_in, const ArgmaxAdvance* advance) {
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
  check_argmax_advance(advance, rows, "argmax_rows");
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
  const ArgmaxPush push{x.address(),
                        value.address(),
                        index.address(),
                        0,
                        static_cast<uint32_t>(cols),
                        static_cast<uint32_t>(row_stride),
                        static_cast<uint32_t>(chunks)};
  launch("argmax_rows_partial", push,
         Grid{static_cast<uint32_t>(chunks), static_cast<uint32_t>(rows), 1}, {&x},
         {&value, &index}, {},
         {static_cast<double>(rows * cols), 4.0 * static_cast<double>(rows * cols)});
  return argmax_fold(value, index, rows, chunks, advance);
}

void kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& cache_k, const Tensor& cache_v,
                    const Tensor& slot_buf) {
  const char* op = "kv_cache_write";
  check_caches(cache_k, cache_v, slot_buf, op, "slot");
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

void set_norm_fold_rows(int64_t rows) {
  VKF_REQUIRE(rows >= 1 && rows <= 8, "norm fold rows: {} (use 1 to 8)", rows);
  g_norm_fold_rows = rows;
}

bool norm_folds(const Tensor& x, const Tensor& weight, const RowNorm& norm) {
  if (!x.defined() || x.dtype() != DType::F32 || x.rank() < 1 || !x.is_contiguous() ||
      !weight.defined() || !norm.weight.defined())
    return false;
  return foldable(detail::describe_rows(x), weight, norm);
}

namespace {

// normed_linear, and with `ids` (one row of x) normed_linear_argmax.
Tensor normed_product(const char* op, const Tensor& x, const RowNorm& norm, const Tensor& weight,
                      const Tensor& bias, Tensor* ids, const ArgmaxAdvance* advance) {
  VKF_REQUIRE(x.defined() && x.dtype() == DType::F32 && x.rank() >= 1 && x.numel() > 0,
              "{}: x must be a non-empty f32 [..., in] tensor", op);
  check_row_norm(norm, x.dim(-1), op);
  VKF_REQUIRE(weight.defined() && weight.rank() == 2 && weight.dim(1) == x.dim(-1),
              "{}: weight must be [out, {}], got {}", op, x.dim(-1),
              weight.defined() ? shape_str(weight.shape()) : "undefined");
  VKF_REQUIRE(!ids || x.numel() == x.dim(-1), "{}: x must be one row, got {}", op,
              shape_str(x.shape()));
  check_argmax_advance(advance, 1, op);
  const Tensor xc = x.is_contiguous() ? x : x.contiguous();
  const detail::MatDesc a = detail::describe_rows(xc);
  const int64_t n = weight.dim(0);
  if (!foldable(a, weight, norm) || (bias.defined() && bias.dtype() != DType::F32)) {
    Tensor out = linear(rms_norm(x, norm.weight, norm.eps, norm.one_plus), weight, bias);
    if (ids) *ids = argmax_rows(out.reshape({1, n}), advance);
    return out;
  }
  Shape out_shape = x.shape();
  out_shape.back() = n;
  Tensor out = Tensor::empty(out_shape, DType::F32);
  autograd::NoGradScope no_grad;
  detail::SkinnyArgmax slots;
  if (advance && advance->fold_record.defined()) {
    slots.fold_record = advance->fold_record;
    slots.fold_state = advance->state;
    slots.fold_ring = advance->ring;
  }
  detail::skinny_f16_normed(a, detail::describe_readable(weight).transposed(),
                            detail::describe_rows(out), bias, norm, ids ? &slots : nullptr);
  if (ids) {
    const int64_t groups = slots.workgroups;  // 0: the product took more than one dispatch
    if (groups > 0 && slots.fold_record.defined())
      *ids = advance->state.slice(0, 0, 1);  // the product's dispatch advanced the step
    else
      *ids = groups > 0 ? argmax_fold(slots.slots.slice(0, 0, groups),
                                      slots.slots.slice(0, groups, 2 * groups), 1, groups, advance)
                        : argmax_rows(out.reshape({1, n}), advance);
  }
  return out;
}

}  // namespace

namespace {
bool g_embedding_fold = true;  // set_embedding_fold
}  // namespace

void set_embedding_fold(bool on) {
  g_embedding_fold = on;
}

EmbeddedInput make_embedded_input(const Tensor& table, const Tensor& ids, const Tensor& store) {
  const char* op = "make_embedded_input";
  VKF_REQUIRE(
      table.defined() && table.dtype() == DType::F16 && table.rank() == 2 && table.is_contiguous(),
      "{}: the table must be a contiguous f16 [vocab, hidden] tensor", op);
  VKF_REQUIRE(ids.defined() && ids.dtype() == DType::I32 && ids.numel() == 1,
              "{}: ids must be one I32 token id", op);
  VKF_REQUIRE(store.defined() && store.dtype() == DType::F32 && store.is_contiguous() &&
                  store.numel() == table.dim(1),
              "{}: the store must be a contiguous f32 tensor of {} values", op, table.dim(1));
  return EmbeddedInput{table, ids, store};
}

bool embedding_folds(const EmbeddedInput& in, const Tensor& weight, const RowNorm& norm) {
  if (!g_embedding_fold || !in.table.defined() || !weight.defined() || !norm.weight.defined())
    return false;
  const int64_t k = in.table.dim(1);
  const detail::MatDesc a = detail::describe_rows(in.store.reshape({1, k}));
  return weight.dim(1) == k && foldable(a, weight, norm) && in.table.address() % 16 == 0 &&
         in.store.address() % 16 == 0 &&
         detail::skinny_f16_row_staged(1, k, true, detail::skinny_norm_mode(&norm));
}

Tensor normed_linear_of_embedding(const EmbeddedInput& in, bool store, const RowNorm& norm,
                                  const Tensor& weight, const Tensor& bias) {
  const char* op = "normed_linear_of_embedding";
  VKF_REQUIRE(embedding_folds(in, weight, norm),
              "{}: this product does not take the embedding row itself (embedding_folds)", op);
  VKF_REQUIRE(!bias.defined() || (bias.dtype() == DType::F32 && bias.numel() == weight.dim(0)),
              "{}: the bias must be f32 [{}]", op, weight.dim(0));
  const int64_t k = in.table.dim(1), n = weight.dim(0);
  Tensor out = Tensor::empty({1, 1, n}, DType::F32);
  autograd::NoGradScope no_grad;
  const detail::SkinnyEmbed embed{in.table, in.ids, store ? in.store : Tensor()};
  detail::skinny_f16_normed(detail::describe_rows(in.store.reshape({1, k})),
                            detail::describe_readable(weight).transposed(),
                            detail::describe_rows(out), bias, norm, nullptr, &embed);
  return out;
}

Tensor normed_linear(const Tensor& x, const RowNorm& norm, const Tensor& weight,
                     const Tensor& bias) {
  return normed_product("normed_linear", x, norm, weight, bias, nullptr, nullptr);
}

Tensor normed_linear_argmax(const Tensor& x, const RowNorm& norm, const Tensor& weight, Tensor& ids,
                            const ArgmaxAdvance* advance) {
  return normed_product("normed_linear_argmax", x, norm, weight, Tensor(), &ids, advance);
}

Tensor gated_linear(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, Activation act,
                    const RowNorm* norm) {
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
  if (norm) check_row_norm(*norm, x.dim(-1), op);
  const detail::MatDesc a = detail::describe_rows(x);
  const int64_t m = a.rows, n = w_gate.dim(0), k = a.cols;
  constexpr int64_t kMaxRows = 8;  // matmul_skinny_f16's MMAX
  if (w_gate.dtype() != DType::F16 || m > kMaxRows || !w_gate.is_contiguous() ||
      !w_up.is_contiguous() || div_up(n, detail::kSkinnyF16Cols) > kMaxGroups || a.cs != 1 ||
      (norm && !foldable(a, w_gate, *norm))) {
    if (norm)
      return gated_linear(rms_norm(x, norm->weight, norm->eps, norm->one_plus), w_gate, w_up, act);
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
  const RowNorm sn = norm ? *norm : RowNorm{};
  struct {
    uint64_t a, gate, up, c;
    uint32_t m, n, k, lda, ldb, c_rs, sa, sb;
    uint64_t norm_w;
    float norm_eps;
    uint32_t norm_tpr_log2;
    vk::ChainSync chain;  // filled by the stream
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
         0,
         norm ? sn.weight.address() : 0,
         sn.eps,
         norm ? detail::norm_threads_per_row_log2(k) : 0u,
         {}};
  const uint32_t norm_mode = detail::skinny_norm_mode(norm ? &sn : nullptr);
  const detail::SkinnyF16Plan plan = detail::plan_skinny_f16(m, n, k, vec8, norm_mode, true);
  const uint32_t blocks = div_up(n, plan.rows_per_block());
  const uint32_t groups = detail::skinny_f16_groups(m, blocks);
  const std::vector<uint32_t> spec = detail::skinny_f16_spec(
      plan, m, k, false, vec8, static_cast<uint32_t>(act), norm_mode, groups, blocks);
  vk::DispatchCost cost{4.0 * static_cast<double>(m * n * k),
                        4.0 * static_cast<double>(n * k) + 4.0 * static_cast<double>(m * (k + n))};
  if (vk::Context::get().stream().profiling_detail())
    cost.detail = fmt::format("2x {}x{}x{}{}", m, n, k, norm ? " normed" : "");
  launch_chained_rows(m, "matmul_skinny_f16_gated", push, offsetof(decltype(push), chain),
                      Grid{groups, 1, 1}, {&a.t, &w_gate, &w_up, &sn.weight}, {&out}, spec, cost);
  return out;
}

}  // namespace vkf::ops
