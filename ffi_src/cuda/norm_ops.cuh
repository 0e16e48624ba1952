// LayerNorm / RMSNorm as ops of the shared row kernels (row_tiles.cuh). The forward is one op
// template with RMSNorm's statistic (the sum of squares) chosen at compile time; the backward
// treats RMSNorm as LayerNorm with the mean pinned at zero (a runtime flag). The residual-add
// variants (add_norm_*.cu) are these ops with other load/store hooks: the forward normalizes
// h = x + r as it loads x and r, and writes h beside y; the backward reads h's cotangent as it
// stores dx.
#pragma once

#include <type_traits>

#include "common/norm_math.h"
#include "common/stats.h"
#include "cuda/device_types.cuh"
#include "cuda/row_tiles.cuh"

namespace jaxnorm {

// The N columns of a pack of a float32 parameter (`split`: load_raw_split()'s), or `absent`
// where there is none.
template <int N>
__device__ __forceinline__ void load_param(const float* p, bool present, float absent, int64_t col,
                                           float (&out)[N], bool split = false) {
  if (present) {
    load_pack_split<float, N>(p + col, split, out);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = absent;
  }
}

// The norm forwards' tile budgets (tile_choice.h). Clusters of 16 one-shot only where that
// measured faster; the exchange by st.async for 16-bit LayerNorm only (row_reduce.cuh); every
// cluster tile staged (staged_fwd.cuh) but 16-bit LayerNorm's (staged at clusters of 8 and 16 it
// took 0.82x the speed at 131072-262144 bf16 columns: results/h200-wide16), 16-bit RMSNorm's as
// 512 threads of 4 packs: bf16 1.05-1.10x the 256x8 tiles at 65536-262144 columns
// (results/h200-f32-staged); the float32 norms' too: LayerNorm 1.05x at 32768-65536, RMSNorm
// 0.997-1.005x (results/h200-f32-bwd). Rows of one 512 x 8 tile take it in one CTA where a launch
// has 16 rows an SM (wide_alone, fwd_launch_tile): float32 RMSNorm 1.05-1.06x at 16384 columns
// (results/h200-bias-alone), 16-bit RMSNorm 1.06x at 32768 and 1.08x at 24576, 16-bit LayerNorm
// 1.04x and 1.13x (results/h200-wide16). Float32 LayerNorm takes 512 x 8 tiles from 8193 columns
// on (wide_first: one CTA, then clusters of 2-8, staged): 1.04x at 16384, 1.02x at 32768, level
// at 65536-131072; float32 RMSNorm's clusters of them lost (0.99x at 32768; results/h200-wide16).
// 16-bit LayerNorm's rows of 8193-16384 columns take one 256 x 8 CTA, three an SM, where 512 x 4
// ran two (with_cluster_cta_alone, as softmax): bf16 1.06x at 16384, 1.18x at 12288, 1.34x at 9000
// (fp16 1.06x, 1.20x, 1.37x), level at 8192; fwd+bwd 1.02-1.13x; rows of 4097-8192 one 128 x 8 CTA,
// seven an SM, where 256 x 4 ran three (with_narrow_cta_alone): bf16 1.08x at 8192, 1.19x at 6144,
// 1.32x at 4608 (fp16 1.08x, 1.14x, 1.24x; H200, one build, a launch switch, results/h200-cta-alone);
// rows of 2049-4096 one 64 x 8 CTA, fourteen an SM at 72 registers, where 128 x 4 ran eight: bf16
// 1.035x at 4096, 1.14x at 3072, 1.20x at 2560 (fp16 1.03x, 1.10x, 1.14x; results/h200-narrow-held).
template <class T, bool kCentered>
constexpr TileBudget norm_fwd_budget() {
  constexpr int kAllClusters = 2 | 4 | 8 | 16;
  if constexpr (sizeof(T) == 4) {
    const TileBudget b = with_cluster_tiles(kHeldRowPersistent16Budget, 0, 0);
    return with_staged_clusters(with_small_spread(kCentered ? with_wide_first(b, true) : with_wide_alone(b, true)),
                                kAllClusters);
  } else if constexpr (kCentered) {
    return with_narrow_cta_alone(
        with_cluster_cta_alone(with_async_exchange(with_small_spread(with_wide_alone(kHeldRowForwardBudget, true))), true),
        256, 1024);
  } else {
    return with_staged_clusters(
        with_small_spread(with_wide_alone(with_cluster_tiles(kHeldRowForwardBudget, 0, 0), true)), kAllClusters);
  }
}

// kCentered: LayerNorm, whose statistics are Welford's (count, mean, M2); else RMSNorm, whose
// statistic is the sum of squares alone (the count is the row's width), merged by adds. RMSNorm
// through the LayerNorm path paid for a sum pass, a subtraction of its zero mean an element in
// each of two passes and a merge of ~26 instructions at each of 10 levels: 27 instructions an
// element at 32768 bf16 columns against QuACK's 10 (results/h100-rows.md).
template <class T, bool kCentered>
struct NormFwdOp {
  using Type = T;
  using Stats = std::conditional_t<kCentered, Welford, float>;
  using Merge = std::conditional_t<kCentered, WelfordMerge, SumMerge>;
  static constexpr TileBudget kBudget = norm_fwd_budget<T, kCentered>();
  static constexpr bool kCanHoldRaw = true;  // store() needs only x again
  static constexpr int kRawMinPacks = 1;
  // 16-bit packs may be split (device_types.cuh) so the float32 scale and bias loads coalesce.
  static constexpr bool kSplitPacks = sizeof(T) == 2;

  const T* x;
  T* y;
  float* mean_out;
  float* rstd_out;
  const float* gamma;
  const float* beta;
  int64_t cols;
  float eps;
  // 1 / cols, rounded on the host: the variance is a product, where a division after the sums
  // took ~10 instructions and a slow-path check on a few-row launch's critical path.
  float inv_cols;
  bool has_scale, has_bias;
  bool split = false;  // whether the row's packs are split: run_norm_fwd, tile_fwd_kernel

  __device__ static Stats identity() {
    if constexpr (kCentered) return welford_identity();
    else return 0.f;
  }

  __device__ void prefetch(int64_t row0, int64_t nrows, int part, int parts) const {
    prefetch_l2_rows(x, row0, nrows, cols, part, parts);
  }

  template <int N>
  __device__ void restate(float (&)[N], Stats) const {}

  // Element values of x's pack at (row, col), as loaded by the row kernel.
  template <int N>
  __device__ void convert(int64_t, int64_t, const Pack<T, N>& raw, float (&v)[N]) const {
    unpack(raw, v);
  }

  __device__ void push(Stats& s, float v) const {
    if constexpr (kCentered) welford_push(s, v);
    else s = fmaf(v, v, s);
  }

  // A thread of up to 4 packs sums in 4 independent chains, added at the end: one chain of 32
  // dependent adds (4 bf16 packs) was ~130 cycles of a few-row launch's critical path. Wider
  // tiles (many rows or wide rows, bandwidth-bound) keep one chain. With the merges and the
  // variance below, same-call A/B at a016c39: 0.89-0.98x the time at 1-64 rows x 2048-32768,
  // 0.99-1.00x at 2^27 elements (results/h100-rows.md, v21).
  template <int P>
  static constexpr int kChains = P <= 4 ? 4 : 1;
  template <int C>
  __device__ static float chains_sum(const float (&c)[C]) {
    if constexpr (C == 4) return (c[0] + c[1]) + (c[2] + c[3]);
    else return c[0];
  }

  // The thread's statistics: RMSNorm's sum of squares in one pass, LayerNorm's below.
  template <class Held, int P>
  __device__ Stats thread_stats(const Held (&v)[P], const bool (&ok)[P]) const {
    constexpr int N = kVecOf<T>;
    if constexpr (!kCentered) {
      constexpr int C = kChains<P>;
      float m2[C] = {};
#pragma unroll
      for (int p = 0; p < P; ++p) {
        if (ok[p]) {
#pragma unroll
          for (int i = 0; i < N; ++i) {
            // A held bfloat16 by one shift or mask (element()'s cvt took two instructions for an odd
            // element); the store converts by unpack_again(), other instructions, so none is kept live.
            const float e = element_again(v[p], i);
            m2[i % C] = fmaf(e, e, m2[i % C]);
          }
        }
      }
      return chains_sum(m2);
    } else {
      return centered_stats(v, ok);
    }
  }

  // The thread's (count, mean, M2) computed exactly from its values (two passes over registers:
  // no division per element, no cancellation). A held 16-bit row is converted in each pass, by
  // different instructions, so no pass's floats are kept live for the next.
  template <class Held, int P>
  __device__ Welford centered_stats(const Held (&v)[P], const bool (&ok)[P]) const {
    constexpr int N = kVecOf<T>;
    constexpr int C = kChains<P>;
    float n = 0.f, sum[C] = {};
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (ok[p]) {
        n += N;
#pragma unroll
        for (int i = 0; i < N; ++i) sum[i % C] += element(v[p], i);
      }
    }
    const float mean = n > 0.f ? chains_sum(sum) / n : 0.f;
    float m2[C] = {};
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (ok[p]) {
#pragma unroll
        for (int i = 0; i < N; ++i) {
          const float d = element_again(v[p], i) - mean;
          m2[i % C] = fmaf(d, d, m2[i % C]);
        }
      }
    }
    return {n, mean, chains_sum(m2)};
  }

  struct Row {
    float mean, rstd;
  };

  // A held row is x as loaded, which is what store() takes.
  template <int N>
  __device__ void hold(int64_t, int64_t, Pack<T, N>&) const {}
  template <int N>
  __device__ void from_held(float (&)[N], Row) const {}

  __device__ Row finalize(Stats s, Stats, int64_t row, bool writer) const {
    Row r;
    // The variance as a product (the count of a reduced row is cols): no division after the sums.
    if constexpr (kCentered) r = {s.mean, norm_rstd(s.m2 * inv_cols, eps)};
    else r = {0.f, norm_rstd(s * inv_cols, eps)};
    if (writer) {
      mean_out[row] = r.mean;
      rstd_out[row] = r.rstd;
    }
    return r;
  }

  // The row kernel's stores (tiles holding x as loaded) with the flags of the common call as
  // constants, a copy of the op whose fields the compiler folds: the scale present, LayerNorm's
  // bias present and RMSNorm's absent, split packs (wide 16-bit rows). Each pack's two scale (and bias)
  // loads then sit at fixed offsets of one base, without RMSNorm's third load, the moves that keep
  // a default scale of 1 and bias of 0 in registers and the copies of the loaded values out of
  // the split/whole branch, and the stores need no branch: RMSNorm 67 -> 37 instructions a pack
  // in the bf16 256x8 tile, LayerNorm ~81 -> ~46 (16-bit LayerNorm forward +1-5% from 16384
  // columns, +5-22% at few rows: results/h100-rows.md v26). Other calls run the general code.
  static constexpr bool kSpecializes = true;
  template <class F>
  __device__ void specialize(F&& f) const {
    if (has_scale && has_bias == kCentered && split == kSplitPacks) {
      NormFwdOp o = *this;
      o.has_scale = true, o.has_bias = kCentered, o.split = kSplitPacks;
      f(o);
    } else {
      f(*this);
    }
  }

  // What store() takes beyond the row: the scale of N columns, and LayerNorm's bias, loaded beside
  // x (`early`) or, where `early` is null, in store(). jaxnorm.rms_norm has no bias, so RMSNorm's
  // registers hold none; a bias given to the handler anyway is loaded in store().
  template <int N>
  struct Params {
    float g[N], b[kCentered ? N : 1];
  };
  static constexpr int kParamFloats = kCentered ? 2 : 1;
  template <int N>
  __device__ void load_params(int64_t col, Params<N>& p) const {
    load_scale(col, p);
    load_bias(col, p);
  }
  template <int N>
  __device__ void load_scale(int64_t col, Params<N>& p) const {
    load_param<N>(gamma, has_scale, 1.f, col, p.g, split);
  }
  template <int N>
  __device__ void load_bias(int64_t col, Params<N>& p) const {
    if constexpr (kCentered) load_param<N>(beta, has_bias, 0.f, col, p.b, split);
  }

  template <int N>
  __device__ void store(int64_t row, int64_t col, const float (&v)[N], Row r, const Params<N>* early) const {
    Params<N> late;
    if (early == nullptr) load_params(col, late);
    const Params<N>& p = early ? *early : late;
    float out[N];
    if constexpr (kCentered) {
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] = norm_apply(v[i], r.mean, r.rstd, p.g[i], p.b[i]);
    } else {
      float b[N];
      load_param<N>(beta, has_bias, 0.f, col, b, split);
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] = v[i] * r.rstd * p.g[i] + b[i];  // norm_apply with the mean 0
    }
    store_pack_split<T, N>(y + row * cols + col, split, out);
  }
};

// The residual-add forward: the row normalized is h = x + r, summed in float32 and rounded to
// h's dtype H (what `x + r` gives in jnp), then written by store() beside y. The stores come
// after all of a thread's loads: a store of h between the loads of two packs would serialize
// them (the compiler cannot move a load of x or r across a store that may alias it).
template <class T, class R, class H, bool kCentered>
struct AddNormFwdOp : NormFwdOp<T, kCentered> {
  using Base = NormFwdOp<T, kCentered>;
  // 8-pack tiles hold h as stored, in x's packs (combine_held() below), where h has x's 16-bit
  // dtype and r is 16-bit; the 4-pack tiles hold h as floats. Rows of 2049-16384 columns take
  // them in one CTA (tile_choice.h, kAddNormHeldForwardBudget), where 64-256 threads of 4
  // packs (or 512 x 4) ran, every pack's x and r loaded at once (LoadsBeside; main's tiles waited
  // a memory round trip a pack): 64 x 8 at 2049-4096 columns, 128 x 8 at 4097-8192, 256 x 8 at
  // 8193-16384, the rows in flight an SM as before. Forward, H200, two rounds a side
  // (results/h200-add-held): first at 80 registers (one and a half times the rows in flight, x
  // and r two packs at a time: more at once spilled) against main's tiles, one build and a launch
  // switch: RMSNorm 1.01-1.13x at 3072-16384, bf16 LayerNorm 1.02-1.15x, fp16 LayerNorm
  // 0.97-1.07x; then at 128 registers against that, two builds: LayerNorm 1.03-1.25x at
  // 3072-16384 (both dtypes; bf16 at 8192 x 16384 3.01 -> 3.64 TB/s, 4096 x 16384 3.04 -> 3.47),
  // RMSNorm 1.03-1.11x at 9000-16384, 0.98-1.00x at 3072-8192; LayerNorm fwd+bwd 1.03-1.06x.
  static constexpr bool kHoldsH = sizeof(T) == 2 && sizeof(R) == 2 && std::is_same<H, T>::value;
  static constexpr bool kCanHoldRaw = kHoldsH;
  static constexpr int kRawMinPacks = 8;
  static constexpr bool kSplitPacks = false;  // r and h are read and written whole
  static constexpr bool kSpecializes = false;  // its store() is its own
  static constexpr TileBudget kBudget = kHoldsH ? kAddNormHeldForwardBudget : kForwardBudget;
  // row_tiles.cuh, tile_fwd_min_ctas: measured with r and h 16-bit.
  static constexpr int kFourPackRegs = sizeof(R) == 2 && sizeof(H) == 2 ? 64 : 0;
  // h held as stored and every pack's x and r in flight: 111-115 registers, no spills (bf16 and
  // fp16), two CTAs of 256 an SM.
  static constexpr int kEightPackRegs = kHoldsH ? 128 : 0;

  const R* residual;
  H* h;

  __device__ void prefetch(int64_t row0, int64_t nrows, int part, int parts) const {
    Base::prefetch(row0, nrows, part, parts);
    prefetch_l2_rows(residual, row0, nrows, this->cols, part, parts);
  }

  // r's packs load beside x's, all of a thread's before any is added (row_tiles.cuh, LoadsBeside).
  static constexpr bool kLoadsBeside = true;
  template <int N>
  using Beside = Pack<R, N>;
  template <int N>
  __device__ Pack<R, N> load_beside(int64_t row, int64_t col) const {
    return load_raw<R, N>(residual + row * this->cols + col);
  }
  // x's pack as loaded becomes h's as stored (kHoldsH: H is T); store() writes it back exactly.
  // On the packs' 32-bit words (unpack_again, pack_rounded): element by element the packs were
  // split into 16-bit halves, and the 8-pack tiles spilled 44-140 bytes.
  template <int N>
  __device__ void combine_held(Pack<T, N>& raw, const Pack<R, N>& r) const {
    float a[N], b[N];
    unpack_again(raw, a);
    unpack_again(r, b);
#pragma unroll
    for (int i = 0; i < N; ++i) a[i] += b[i];
    raw = pack_rounded<T, N>(a);
  }
  template <int N>
  __device__ void convert(int64_t row, int64_t col, const Pack<T, N>& raw, float (&v)[N]) const {
    float r[N];
    unpack(load_beside<N>(row, col), r);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = to_float(from_float<H>(to_float(raw.v[i]) + r[i]));
  }

  // The loop kernel converts a row twice and stores it once: h is written once either way.
  template <int N>
  __device__ void store(int64_t row, int64_t col, const float (&v)[N], typename Base::Row rs,
                        const typename Base::template Params<N>* p) const {
    store_pack<H, N>(h + row * this->cols + col, v);  // v holds h's values: stored exactly
    Base::store(row, col, v, rs, p);
  }
};

// Where the backward's dx goes. The norms store it as computed; the residual-add norm adds the
// cotangent of its second output h first, so the gradient of x + r is written once.
template <class D>
struct StoreDx {
  static constexpr bool kHoldsThirdRow = false;
  D* dx;
  template <int N>
  using Early = NoEarly;
  __device__ void prefetch(int64_t, int64_t, int64_t, int, int) const {}
  template <int N>
  __device__ void store(int64_t at, const float (&v)[N], NoEarly) const {
    store_pack<D, N>(dx + at, v);
  }
};

// h's cotangent is loaded beside the row where the tile affords it (Early, BwdRowPacks), else
// at the store.
template <class D>
struct StorePlusDh {
  static constexpr bool kHoldsThirdRow = sizeof(D) == 2;  // as loaded, beside the 16-bit rows
  D* dx;
  const D* dh;  // null where h's cotangent is a symbolic zero: nothing to read
  template <int N>
  using Early = Pack<D, N>;
  __device__ void prefetch(int64_t row0, int64_t nrows, int64_t cols, int part, int parts) const {
    prefetch_l2_rows(dh, row0, nrows, cols, part, parts);
  }
  // Through the read-only path: a plain load may not move above earlier packs' dx stores (they
  // could alias).
  template <int N>
  __device__ Pack<D, N> load_early(int64_t at) const {
    return dh != nullptr ? load_raw_nc<D, N>(dh + at) : Pack<D, N>{};
  }
  template <int N>
  __device__ void store(int64_t at, const float (&v)[N], NoEarly) const {
    store(at, v, load_early<N>(at));
  }
  template <int N>
  __device__ void store(int64_t at, const float (&v)[N], const Pack<D, N>& early) const {
    float out[N];
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = v[i];
    if (dh != nullptr) {
      float add[N];
      unpack(early, add);
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] += add[i];
    }
    store_pack<D, N>(dx + at, out);
  }
};

// T: dy's dtype (y's, x's). A: the dtype of the row the backward reads (x, the residual sum h,
// or y in memory-efficient mode). Dx: the store policy above. kBiasGrad: whether the bias
// gradient is summed beside the scale's (without a bias, RMSNorm's usual form, the partials and
// their shared-memory traffic are half as many). kFixed: the 16-bit norms' op in the default mode
// (LayerNorm with scale and bias, RMSNorm with a scale, x read back) with its flags as constants.
template <class T, class A = T, class Dx = StoreDx<T>, bool kBiasGrad = true, bool kFixed = false>
struct NormBwdOp {
  using Type = T;
  using RowType = A;
  static constexpr int kColumnSums = kBiasGrad ? 2 : 1;
  // Cluster tiles exchange by st.async (row_reduce.cuh says what it gained).
  // Rows of 520-4096 16-bit columns may take one pack a thread where the tile holds a third row
  // (one_pack_rows below).
  // The plain 16-bit RMSNorm backward's rows of 520-896 columns may take a warp of 4 packs
  // (tile_choice.h, warp_rows; norm_bwd_run.cuh), and its 256-thread CTAs of 2 packs fit 3 an SM
  // (row_tiles.cuh, bwd_min_ctas_per_sm).
  // The fixed-flag op's 256x2 tiles fit 3 an SM too, LayerNorm's included (80 registers, no
  // spills, where its runtime flags took 107; row_tiles.cuh says what it gained).
  // The residual-add LayerNorm backward with a 16-bit h has one too (it holds h's cotangent
  // beside h and dy; runtime flags took 112-123 registers, 2 an SM). At 3 an SM float16's fits
  // 80 registers without spills, bfloat16's spilled 20-64 bytes, so bfloat16's keeps 2 an SM
  // (~114-120 registers, fewer instructions). Its backward kernel, H200, one build, a launch
  // switch (results/h200-ln-staged, call 2): float16 0.90x the time at 32768 x 1024 and 8192 x
  // 4096, bfloat16 0.94-0.95x at 1024-4096 columns (at 3 an SM, spilling: 1.06-1.14x).
  // RMSNorm's residual-add backward takes one pack a thread with h's cotangent (one_pack_rows) and
  // keeps its runtime flags without it (not measured).
  static constexpr bool kPlainDx = std::is_same<Dx, StoreDx<T>>::value;
  static constexpr bool kFixable =
      sizeof(T) == 2 && std::is_same<A, T>::value && (kPlainDx || (std::is_same<Dx, StorePlusDh<T>>::value && kBiasGrad));
  static constexpr bool kPlain16 = kFixable && kPlainDx && !kBiasGrad;
  static_assert(kFixable || !kFixed, "only the 16-bit norms' backward reading a 16-bit row has a fixed-flag op");
  static constexpr int kFixedCtas = kPlainDx || std::is_same<T, __half>::value ? 3 : 2;
  static constexpr TileBudget kBudget = with_half_wide(
      with_bwd_256x2_ctas(
          with_warp_rows(with_one_pack_rows(with_async_exchange(norm_backward_budget(sizeof(T))),
                                            Dx::kHoldsThirdRow && sizeof(T) == 2 && sizeof(A) == 2),
                         kPlain16 ? 112 : 0),
          kPlain16 ? 3 : kFixed ? kFixedCtas : 2),
      kPlain16);

  const A* xin;  // x (or h), or y in memory-efficient mode
  const T* dy;
  const float* mean;
  const float* rstd;
  const float* gamma;
  const float* beta;
  Dx dx;
  int64_t cols;
  float inv_cols;
  float eps;
  NormFlags f;

  template <int N>
  using Early = typename Dx::template Early<N>;

  // The default mode's flags; the device code reads flags(), constants in the fixed-flag op, so
  // its kernels hold neither the other kind's path nor the recovery from y.
  __host__ __device__ static constexpr NormFlags default_flags() {
    return kBiasGrad ? NormFlags{true, true, true, false} : NormFlags{false, true, false, false};
  }
  __host__ __device__ NormFlags flags() const {
    if constexpr (kFixed) return default_flags();
    return f;
  }
  bool in_default_mode() const {
    const NormFlags d = default_flags();
    return f.centered == d.centered && f.has_scale == d.has_scale && f.has_bias == d.has_bias &&
           f.memory_efficient == d.memory_efficient;
  }
  NormBwdOp<T, A, Dx, kBiasGrad, true> fixed() const {
    return {xin, dy, mean, rstd, gamma, beta, dx, cols, inv_cols, eps, f};
  }

  struct RowIn {
    float mean, rstd;
  };
  struct Row {
    float rstd, c1, c2;
    RowIn in;
  };

  // Whether this call's CTA-wide rows take one pack a thread (tile_choice.h, one_pack_rows says
  // where it gained): RMSNorm's, with h's cotangent to add.
  bool one_pack_rows() const {
    if constexpr (kBudget.one_pack_rows) return !f.centered && dx.dh != nullptr;
    return false;
  }

  __device__ void prefetch(int64_t row0, int64_t nrows, int part, int parts) const {
    prefetch_l2_rows(xin, row0, nrows, cols, part, parts);
    prefetch_l2_rows(dy, row0, nrows, cols, part, parts);
    dx.prefetch(row0, nrows, cols, part, parts);
  }

  __device__ RowIn row_in(int64_t row, bool ok) const {
    if (!ok) return {0.f, 0.f};
    const NormFlags f = flags();
    return {f.centered && !f.memory_efficient ? mean[row] : 0.f, rstd[row]};
  }

  template <int N>
  __device__ void load_held(int64_t row, int64_t col, Pack<A, N>& a, Pack<T, N>& d) const {
    a = load_raw<A, N>(xin + row * cols + col);
    d = load_raw<T, N>(dy + row * cols + col);
  }

  template <int N>
  __device__ void load(int64_t row, int64_t col, float (&a)[N], float (&d)[N]) const {
    Pack<A, N> ra;
    Pack<T, N> rd;
    load_held(row, col, ra, rd);
    unpack(ra, a);
    unpack(rd, d);
  }

  template <int N>
  __device__ Early<N> load_early(int64_t row, int64_t col) const {
    return dx.template load_early<N>(row * cols + col);
  }

  // The scale's values at col.
  template <int N>
  __device__ void scale_at(int64_t col, float (&g)[N]) const {
    load_param<N>(gamma, flags().has_scale, 1.f, col, g);
  }

  // Row sums of g = dy * gamma and g * x_hat; a becomes x_hat, which emit() takes.
  template <int N>
  __device__ void terms(RowIn in, int64_t, int64_t col, float (&a)[N], const float (&d)[N], Sum2& s) const {
    float g[N];
    scale_at(col, g);
    terms_scaled(in, col, a, d, g, s);
  }
  // terms() and emit() with the scale's values at col given, by a tile that holds them in shared
  // memory for all its rows (row_tiles.cuh, warp_staged_bwd).
  template <int N>
  __device__ void terms_scaled(RowIn in, int64_t col, float (&a)[N], const float (&d)[N], const float (&g)[N],
                               Sum2& s) const {
    const NormFlags f = flags();
    float b[N];
    load_param<N>(beta, f.has_bias && f.memory_efficient, 0.f, col, b);  // only recovery from y uses the bias
#pragma unroll
    for (int i = 0; i < N; ++i) a[i] = norm_xhat(a[i], in.mean, in.rstd, g[i], b[i], eps, f);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float gd = d[i] * g[i];
      s.a += gd;
      s.b += gd * a[i];
    }
  }

  __device__ Row finalize(RowIn in, Sum2 s) const { return {in.rstd, s.a * inv_cols, s.b * inv_cols, in}; }

  // early: h's cotangent where the tile loaded it (Dx::Early), else NoEarly.
  template <int N, class E>
  __device__ void emit(int64_t row, int64_t col, const float (&xhat)[N], const float (&d)[N], Row r, float (&dg)[N],
                       float (&db)[N], const E& early) const {
    float g[N];
    scale_at(col, g);
    emit_scaled(row, col, xhat, d, r, g, dg, db, early);
  }
  template <int N, class E>
  __device__ void emit_scaled(int64_t row, int64_t col, const float (&xhat)[N], const float (&d)[N], Row r,
                              const float (&g)[N], float (&dg)[N], float (&db)[N], const E& early) const {
    float out[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      out[i] = norm_dx(d[i] * g[i], xhat[i], r.rstd, r.c1, r.c2, flags().centered);
      dg[i] += d[i] * xhat[i];
      db[i] += d[i];
    }
    dx.store(row * cols + col, out, early);
  }

  // One element's contribution to the scale and bias gradients (fallback column kernel).
  __device__ void column_terms(RowIn in, int64_t row, int64_t col, float& sg, float& sb) const {
    const float g = f.has_scale ? gamma[col] : 1.f;
    const float b = f.has_bias ? beta[col] : 0.f;
    const float d = to_float(dy[row * cols + col]);
    sg += d * norm_xhat(to_float(xin[row * cols + col]), in.mean, in.rstd, g, b, eps, f);
    sb += d;
  }
};

}  // namespace jaxnorm
