// The GEMM machinery under ops/matmul.h, for code inside src/ops: matrices described by strides
// (so transposes and slices are views, never copies), one entry point that picks and dispatches
// the tiled or skinny kernel, and the deterministic column sum used for bias gradients.
// Nothing here records on the autodiff tape.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/norm.h"

namespace vkf::ops::detail {

// A batch of f32 matrices in one tensor's storage: element (z, r, c) is at element offset
// z*bs + r*rs + c*cs from t.address(). A batch of 1 has bs = 0, so such a matrix can be shared
// by every entry of a batched product. gemm's operand b may also be f16 (a weight stored in half
// precision for inference; offsets and strides then count halves).
// Whether products in the current settings read f16 copies of their f32 operands (F16 precision
// on tensor cores with set_coopmat_f16_operands on). A caller that feeds one operand to several
// products may then convert it once and pass the f16 tensor as `a` to each gemm() (a kernel that
// cannot read it gets it widened back, exactly).
bool f16_operands_active();
// Whether gemm() runs a product into a batch x m x n output on tensor cores with f16 operand
// copies (f16_operands_active, past the skinny kernel's range, a tile for the shape), where an f16
// operand is read as it is.
bool tensor_core_product(int64_t batch, int64_t m, int64_t n);

// The tensors an m x n x k product allocates for its duration under the current settings on the
// current device, as {elements, bytes per element}: split-K partial sums, the tensor-core
// kernel's f16 operand copies, the fp32 tiled kernel's transposed operand copies. One contiguous
// matrix per operand, f32 (a_f16: A is an f16 operand copy made before), A row-major (a_rows,
// else column-major) and B column-major (b_cols, else row-major): Y = X W^T is a_rows and b_cols,
// dX = dY W a_rows, dW = dY^T X neither; b_f16: B is an f16 copy already (a tensor-core product
// of two, ops::gated_projection's dW). Memory plans count them.
struct GemmTemporary {
  int64_t elements, element_bytes;
};
std::vector<GemmTemporary> gemm_temporaries(int64_t m, int64_t n, int64_t k, bool a_rows,
                                            bool b_cols, bool a_f16 = false, bool b_f16 = false);

struct MatDesc {
  Tensor t;
  int64_t batch = 1, rows = 0, cols = 0;
  int64_t bs = 0, rs = 0, cs = 0;

  MatDesc transposed() const { return {t, batch, cols, rows, bs, cs, rs}; }
  MatDesc transposed_if(bool on) const { return on ? transposed() : *this; }
  // The kernels read a matrix whose rows or columns are contiguous.
  bool kernel_readable() const { return cs == 1 || rs == 1 || rows == 1 || cols == 1; }
  // One matrix of batch*rows rows, when rows are evenly spaced across the batch.
  std::optional<MatDesc> rows_merged() const;
};

// Reuse of the f16 operand copies of tensor-core products (see f16_operands_active). While a
// Use of a live F16OperandReuse is in scope, an f32 operand that a product already converted
// under that object -- the same storage, view and operand position -- takes the earlier copy
// instead of being converted again. Only for operands that do not change while the object
// lives, which is the caller's promise: e.g. the LM head's weight across the chunks of
// ops::linear_cross_entropy. Each copy holds its source too, so that no other tensor takes the
// source's address while the object lives. The copies are freed with the object.
class F16OperandReuse {
 public:
  F16OperandReuse() = default;
  F16OperandReuse(const F16OperandReuse&) = delete;
  F16OperandReuse& operator=(const F16OperandReuse&) = delete;

  class Use {
   public:
    explicit Use(F16OperandReuse& reuse);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    F16OperandReuse* previous_;
  };

  // The copy of `d` made under this object, if any; remembers a new one.
  const MatDesc* find(const MatDesc& d, bool is_a) const;
  void keep(const MatDesc& d, bool is_a, const MatDesc& copy);
  size_t size() const { return copies_.size(); }
  void clear() { copies_.clear(); }  // frees the copies (the next products convert again)

 private:
  struct Copy {
    MatDesc source;  // its tensor held: the address stays its own
    bool is_a;
    MatDesc copy;
  };
  std::vector<Copy> copies_;
};

// The last two dimensions of t as matrices, the leading ones as one batch dimension; nullopt when
// the leading dimensions do not collapse to a single stride.
std::optional<MatDesc> describe(const Tensor& t);
// As describe(), but makes a contiguous copy when the view cannot be described or read by the
// kernels as it is.
MatDesc describe_readable(const Tensor& t);
// All of t (rank >= 1) as one [numel / last, last] matrix, copying when the leading dimensions
// are not evenly spaced or the last is not contiguous.
MatDesc describe_rows(const Tensor& t);

// c[z] = alpha * a[z] b[z] + beta * c[z] (+ bias[n] on every row) for every entry z of c's batch;
// a is [M, K], b is [K, N] (each of batch 1 or c's batch), c is [M, N]; a, c f32, b f32 or f16
// (f16 products accumulate in fp32: the skinny f16 kernel for M <= 8 over a weight with contiguous
// rows, else the tiled kernel's f16b variant; where a and b are both f16 operand copies and
// tensor_core_product() holds, the tensor cores read both as they are). a and b must be
// kernel_readable(); c may have any strides but must not overlap a or b. bias, when defined, is a
// rank-1 f32 tensor of N elements. With beta == 0, c is not read. With matmul_precision() F16,
// every element of a and b is rounded to f16 (as f32_to_f16_bits) before it is multiplied;
// products are still summed in f32 and the epilogue runs in f32.
void gemm(const MatDesc& a, const MatDesc& b, const MatDesc& c, float alpha, float beta,
          const Tensor& bias = {});

// Whether a tensor-core product into c of depth k with this alpha, beta and bias reads f16
// operand copies in the "tn" layout (f16_operand_relaid, matmul_relayout.h) under the current
// settings: for a caller that converts an operand itself, so that it converts it as gemm() would.
bool f16_relayout_wanted(const MatDesc& c, float alpha, float beta, const Tensor& bias, int64_t k);

// The two products of a linear layer's backward (y = x W^T, W [out, in]) for the gradient of y,
// g (as describe_rows gives it: [rows, out]): dx = g W into dx and dW = g^T x into dw, each
// accumulating with beta 1 (undefined: not wanted). With f16 operands on tensor cores g is
// converted once for both (and relaid for dx where the device prefers it); x may then be an f16
// operand copy itself (ops::gated_projection's activation), read as it is. Records nothing.
void linear_grads(const MatDesc& g, const Tensor& x, const Tensor& weight, const Tensor& dx,
                  float dx_beta, const Tensor& dw, float dw_beta);

// dst[n] = sum_r src(r, n) + beta * dst[n] over a single matrix src (batch 1, cs == 1) and a
// contiguous rank-1 dst; deterministic (fixed order, no atomics).
void column_sum(const MatDesc& src, const Tensor& dst, float beta);

// Tile choice of the tiled kernel. Auto picks by shape and device; the others force a size
// (for benchmarks and tuning).
enum class TileChoice { Auto, Medium, Large };
void set_tile_choice(TileChoice choice);
// Split-K (see matmul_kernels.cpp): 0 = by heuristic (Fast math mode on GPUs), N > 0 = force N
// chunks where K divides evenly (tests), -1 = never.
void set_split_k(int64_t chunks);
TileChoice tile_choice();
// The implementation of the fp32 tiled kernel. "new" (the default) is matmul_tiled_pipelined.comp:
// two shared buffers (one barrier per slice), 16-byte global loads where an operand is aligned,
// 8x4-thread warp blocks and rasterization in bands of tile rows. "old" is matmul_tiled.comp, its
// single-buffered predecessor, kept for A/B timing. Both give bitwise the same results. Options
// after "new" change one thing each, for timing: "/bk16" (16-deep slices for the 128x128 tile,
// 8 otherwise), "/single" (one shared buffer, two barriers per slice), "/scalar" (4-byte loads
// only), "/rowmajor" (no rasterization bands), "/gm4", "/gm16", "/gm32" (bands of that many
// tile rows instead of 8), "/warp16x2" (warps of two 16-thread rows), "/checked" (every chunk
// read with bounds tests, also in slices inside the matrix), e.g.
// "new/bk16/single". The default comes from VKF_TILED_GEMM; an unknown name throws, naming the
// choices. Where a device lacks the shared memory for two buffers, one is used.
void set_tiled_variant(const std::string& variant);
std::string tiled_variant();
// Dispatches of the pipelined tiled kernel so far, and how many of them read A / B with 16-byte
// loads and wrote C with 16-byte stores: for tests that must know which path they exercised.
struct TiledLoadCounts {
  uint64_t dispatches = 0, vector_a = 0, vector_b = 0, vector_c = 0;
};
TiledLoadCounts tiled_load_counts();
// Products run as stream-K so far (see matmul_tiling.h), for tests that must know.
uint64_t stream_k_dispatches();
// Largest workgroup count per grid dimension of one dispatch (default and maximum 65535); bigger
// grids are split into several dispatches. Lowered by tests to exercise the split cheaply.
void set_grid_limit(int64_t groups);
// The kernel and tile a problem of this shape would use under the current settings, e.g.
// "tiled 64x64x16", "skinny m=3", "coopmat 128x128x32/64x32 exact" (F16 precision on tensor
// cores, with its f16 conversion), "tiled 128x128x8 f16" (F16 precision on the portable kernel),
// with the tiled variant where it is not plain "new" ("tiled 128x128x8 old"), and " split-k N"
// when K is split; for benchmarks.
std::string gemm_plan(int64_t batch, int64_t m, int64_t n, int64_t k);

// Groups of 32 threads per workgroup of matmul_skinny_f16 (its COLS): a block covers
// kSkinnyF16Cols / skinny_f16_k_split() * skinny_f16_rows_per_thread() weight rows.
constexpr int64_t kSkinnyF16Cols = 8;

// Weight rows per thread of matmul_skinny_f16 (both variants) for m activation rows against n
// weight rows: with several activation rows, each thread reads its activations once for up to 4
// weight rows (16-byte loads only), as long as that leaves the grid at least 128 workgroups; with
// one activation row staged in shared memory (`staged`: skinny_f16_row_staged), or one plain row
// of k the K split cuts (the plain variant: not `gated`), 2. The sums are the same in every case.
uint32_t skinny_f16_rows_per_thread(int64_t m, int64_t n, bool vec8, bool staged = false,
                                    int64_t k = 0, bool gated = false);
// Forces that choice (1, 2 or 4; 0 restores the rule), for tests and benchmarks.
void set_skinny_f16_rows_per_thread(uint32_t rows);

// Workgroups of a matmul_skinny_f16 dispatch (both variants) over `blocks` blocks of weight rows:
// each workgroup takes every so-many-th block, so fewer workgroups than blocks overlap a block's
// epilogue with the next one's loads. The same sums in every case. The rule: for one activation
// row (m == 1) and whole rows per thread group (k_split 1), at most four workgroups per
// multiprocessor where the device reports its multiprocessors; else one per block.
uint32_t skinny_f16_groups(int64_t m, int64_t blocks, uint32_t k_split = 1);
// Forces the most workgroups of skinny f16 dispatches (0: one per block), for tests and
// benchmarks; nullopt restores the rule.
void set_skinny_f16_max_groups(std::optional<uint32_t> groups);

// Whether matmul_skinny_f16 (both variants) ends its fixed trees with subgroup shuffles: where
// subgroups are exactly 32 consecutive invocations with shuffles (the same additions in the same
// order as the shared-memory tree, so the same bits). set_skinny_f16_shuffle_tree(false) keeps
// the shared-memory tree everywhere (tests, benchmarks).
bool skinny_f16_shuffle_tree();
void set_skinny_f16_shuffle_tree(bool allowed);

// Groups of 32 threads that share one weight row of the plain matmul_skinny_f16 variant, each
// summing a contiguous slice of K (blocks then hold kSkinnyF16Cols / split * rpt rows): with
// 16-byte loads and one weight row per thread (or m == 1 activation row, with rpt rows per
// thread), as many as keep a whole round of loads per slice, up to 4: 2048 halves at one row per
// thread (the down projection's K = 8192: 4), and for one plain (not `staged`) activation row at
// two rows per thread 1024 (K = 2048: 2); else 1. The slices' totals are added in order, so a
// split changes the sums' grouping, not their determinism.
uint32_t skinny_f16_k_split(int64_t k, uint32_t rpt, bool vec8, int64_t m = 1, bool staged = false);
// Forces the split where it applies (1, 2, 4 or 8; 0 restores the rule), for tests and benches.
void set_skinny_f16_k_split(uint32_t split);
// Turns the half-round slices off (false: whole rounds at two rows per thread too, and then
// K = 2048 neither splits nor takes two rows) or back on, for A/B timing.
void set_skinny_f16_half_round_split(bool on);

// One matmul_skinny_f16 dispatch's launch by the rules above and below: weight rows per thread,
// thread groups per weight row (the K split; never in the gated variant), and whether its one
// activation row is staged. Both variants' hosts take it from here, so each rule is applied in
// one place.
struct SkinnyF16Plan {
  uint32_t rows_per_thread = 1;
  uint32_t k_split = 1;
  bool staged = false;
  // Weight rows per block (a workgroup's rows in one pass).
  uint32_t rows_per_block() const {
    return static_cast<uint32_t>(kSkinnyF16Cols) / k_split * rows_per_thread;
  }
};
SkinnyF16Plan plan_skinny_f16(int64_t m, int64_t n, int64_t k, bool vec8, uint32_t norm_mode,
                              bool gated);

// The specialization constants of a matmul_skinny_f16 dispatch (both variants; `act` is the gated
// variant's activation, 0 for the plain one) for m activation rows by `plan` and a grid of
// `groups` workgroups over `blocks` blocks of rows: BLOCK_LOOP where groups < blocks,
// SHUFFLE_TREE where skinny_f16_shuffle_tree(), the plan's rows per thread and K split, and its
// staged row (for one activation row with a folded norm and 16-byte loads, its normalized values
// in shared memory where they fit: K of them beside the kernel's 16 KiB of other shared arrays),
// and the plain variant's ARGMAX slots.
std::vector<uint32_t> skinny_f16_spec(const SkinnyF16Plan& plan, int64_t m, int64_t k, bool trans_a,
                                      bool vec8, uint32_t act, uint32_t norm_mode, uint32_t groups,
                                      uint32_t blocks, bool argmax = false);
// Turns that staging off (false) or back on, for A/B timing and the tests that compare the two.
void set_skinny_f16_stage_normed(bool staged);
// One activation row: the storing threads read the old C values and the bias before the main loop
// (true) instead of in the epilogue (false, the default: not yet timed on a GPU). The same bits.
void set_skinny_f16_early_epilogue(bool on);
// Whether the loops of a product of m activation rows run as often in every invocation (the
// shader's UNIFORM_LOOPS): by rule where lavapipe runs the memory-model builds (a CPU device while
// chained dispatches run them) and for one row, or forced: 1 on, 0 off, -1 back to the rule
// (benches, tests). The same bits either way.
bool skinny_f16_uniform_loops(int64_t m);
void set_skinny_f16_uniform_loops(int mode);
// Whether such a dispatch stages its normalized row (the rule plan_skinny_f16 applies).
bool skinny_f16_row_staged(int64_t m, int64_t k, bool vec8, uint32_t norm_mode);
// Restores every skinny f16 choice above that a test or benchmark forced to its rule.
void reset_skinny_f16_settings();

// matmul_skinny_f16's NORM spec constant for an RMSNorm folded into the product (0: none, 1:
// weight w, 2: weight 1 + w); the gated variant's host uses it too.
uint32_t skinny_norm_mode(const RowNorm* norm);

// c = a b (+ bias) by matmul_skinny_f16 with its NORM prologue: opA's rows are read as
// rms_norm(a, norm...) would store them. a is [M <= 8, K] f32 with contiguous rows, b a weight
// stored in f16 with contiguous rows (the [N, K] layout, transposed), norm.weight f32 [K]
// contiguous; the caller checks those conditions (ops::normed_linear). With `argmax` (one row of
// a, no bias), each workgroup also writes the best (value, index) of the outputs it stores under
// torch.argmax's order (matmul_skinny_f16.comp's ARGMAX): argmax->slots gets f32 values
// [workgroups] then the u32 indices [workgroups], for argmax_rows.comp's final fold. With
// fold_record defined (ops::argmax_fold_record), the dispatch folds the pairs itself and advances
// the decode step (the ARGMAX_FOLD builds), writing fold_state and fold_ring; slots stays
// undefined and workgroups tells whether it did (0: the product took several dispatches).
struct SkinnyArgmax {
  Tensor slots;
  int64_t workgroups = 0;
  Tensor fold_record, fold_state, fold_ring;
};
// With `embed` (one row, which the dispatch stages: skinny_f16_row_staged), opA is instead the
// row of an f16 embedding table [V, K] at the token id in ids (I32 [1], read on the device;
// matmul_skinny_f16.comp's `embed` build), and `a` only describes that row's shape; `store`
// (f32 [K], or undefined) is where the dispatch's first workgroup writes the row.
struct SkinnyEmbed {
  Tensor table, ids, store;
};
void skinny_f16_normed(const MatDesc& a, const MatDesc& b, const MatDesc& c, const Tensor& bias,
                       const RowNorm& norm, SkinnyArgmax* argmax = nullptr,
                       const SkinnyEmbed* embed = nullptr);

}  // namespace vkf::ops::detail
