// Softmax / log-softmax as ops of the shared row kernels (row_tiles.cuh). Statistics are the
// online (max, sum) pair; masked positions enter the statistics as -inf (they add nothing) and
// the mask is read again when writing, so masked outputs follow jax.nn exactly.
#pragma once

#include "common/softmax_math.h"
#include "common/stats.h"
#include "cuda/device_types.cuh"
#include "cuda/row_tiles.cuh"

namespace jaxnorm {

template <int N>
__device__ __forceinline__ void load_keep(const bool* mask, int64_t offset, float (&keep)[N]) {
  if (mask == nullptr) {
#pragma unroll
    for (int i = 0; i < N; ++i) keep[i] = 1.f;
  } else {
    bool m[N];
    load_mask<N>(mask + offset, m);
#pragma unroll
    for (int i = 0; i < N; ++i) keep[i] = m[i] ? 1.f : 0.f;
  }
}

// What a forward of the softmax family reads (softmax, cross-entropy): rows of x and an optional
// mask, and the L2 prefetch of a worker's next rows of both.
template <class T>
struct MaskedRowsIn {
  const T* x;
  const bool* mask;  // nullptr when absent
  int64_t cols;

  __device__ void prefetch(int64_t row0, int64_t nrows, int part, int parts) const {
    prefetch_l2_rows(x, row0, nrows, cols, part, parts);
    prefetch_l2_rows(mask, row0, nrows, cols, part, parts);
  }
};

// The largest of a thread's loaded elements, NaN skipped (one fmaxf an element): -inf when none.
template <int P, int N>
__device__ __forceinline__ float thread_max(const float (&v)[P][N], const bool (&ok)[P]) {
  float m = -INFINITY;
#pragma unroll
  for (int p = 0; p < P; ++p)
    if (ok[p])
#pragma unroll
      for (int i = 0; i < N; ++i) m = fmaxf(m, v[p][i]);
  return m;
}

template <class T>
struct SoftmaxFwdOp : MaskedRowsIn<T> {
  using Type = T;
  using Stats = MaxSum;
  using Merge = MaxSumMerge;
  // 16-bit rows in 8-pack tiles are held as loaded, each exp taken twice (thread_stats(), then
  // from_held()): 256-thread cluster tiles, four a SM (64 registers), 2-6% faster than keeping the exps as
  // floats in 512-thread tiles of 4 packs (results/h100-rows.md, v11). Launches of few rows are
  // spread as the norms' are (spread_small_launch): same-call A/B at c36394d, 0.52-1.00x the time
  // at 1-64 rows x 2048-32768 (1-8 rows x 32768 bf16 0.52-0.60x; results/h100-rows.md, v22).
  // 16-bit rows exchange by st.async (row_reduce.cuh). Rows of 1025-2048 packs (8193-16384
  // 16-bit columns, 4097-8192 float32) in many-row launches take one 256-thread CTA of 8 packs, four
  // an SM, not 512 threads of 4 at two (with_cluster_cta_alone): H200, one build, a launch switch
  // (results/h200-fixed-flags): bf16 softmax 1.155x the speed at 12288 columns, 1.014-1.025x at
  // 16384, float32 1.12x at 6144, level at 8192. The 512 x 8 tile in one CTA at 16385-32768
  // (with_wide_alone, as the norms take it) lost: 0.99x at 24576-32768, float32 0.995x at 16384.
  // 16-bit rows of 513-768 packs (4097-6144 columns) take one 128 x 8 CTA, eight an SM, where
  // 256 x 4 ran (with_narrow_cta_alone; same call as the norms', results/h200-cta-alone): bf16 1.31x
  // at 4608, 1.10x at 6144 (fp16 1.28x, 1.10x), but 0.99x at 8192 (the 256 x 4 tile full there;
  // 6145-8191 not measured); float32 0.995x at 3072, level at 4096, so not taken.
  static constexpr TileBudget kBudget = with_narrow_cta_alone(
      with_cluster_cta_alone(with_async_exchange(with_small_spread(kHeldRowForwardBudget), sizeof(T) == 2), true),
      512, sizeof(T) == 2 ? 768 : 0);
  static constexpr bool kCanHoldRaw = true;
  static constexpr int kRawMinPacks = 8;  // below, thread_stats() leaves each exp for store()
  using MaskedRowsIn<T>::x, MaskedRowsIn<T>::mask, MaskedRowsIn<T>::cols;

  T* y;
  bool log;

  __device__ static Stats identity() { return maxsum_identity(); }

  // Masked positions become -inf: they add nothing to the statistics.
  template <int N>
  __device__ void convert(int64_t row, int64_t col, const Pack<T, N>& raw, float (&v)[N]) const {
    unpack(raw, v);
    if (mask != nullptr) {
      float keep[N];
      load_keep<N>(mask, row * cols + col, keep);
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = keep[i] != 0.f ? v[i] : -INFINITY;
    }
  }

  __device__ void push(Stats& s, float v) const { maxsum_push(s, v); }

  // exp(v - m) for the loop kernel, which pushes one element at a time.
  __device__ static float exp_from(float v, float m) { return m == -INFINITY ? 0.f : expf(v - m); }

  // Softmax keeps exp(v - m) relative to the thread's own max m in place of v, so each element
  // takes one exp: the output is that value times exp(m - row max) / sum. A 16-bit result is
  // rounded to 2^-9 or coarser, so its exp is the hardware ex2 (relative error ~2^-19 from the
  // argument's rounding), three instructions instead of expf's ten: the bf16 softmax forwards
  // were issue-bound (results/h100.md, Nsight Compute: 39 instructions an element against XLA's
  // 24). Softmax adds kExpBias to the exponent, so an exp below float's normal range (bf16 has
  // those outputs) is not flushed to zero; the sums carry the same 2^kExpBias, which cancels in
  // exp(m - row max) / sum. Float32 keeps expf.
  static constexpr float kExpBias = 64.f;
  __device__ float exp_shifted(float d) const {
    if constexpr (sizeof(T) == 2) {
      return ex2_approx(log ? d * kLog2e : fmaf(d, kLog2e, kExpBias));
    } else {
      return expf(d);
    }
  }

  // The thread's max ignores NaN (one instruction an element, not nan_max's three): a NaN still
  // makes its exp, and so the row's sum and every output, NaN, as in jax.nn. Only a thread whose
  // elements are all -inf or NaN (or none) has m == -inf, where exp(v - m) would be NaN for -inf.
  template <int P, int N>
  __device__ Stats thread_stats(float (&v)[P][N], const bool (&ok)[P]) const {
    const float m = thread_max(v, ok);
    float sum = 0.f;
    if (m == -INFINITY) {
#pragma unroll
      for (int p = 0; p < P; ++p)
        if (ok[p])
#pragma unroll
          for (int i = 0; i < N; ++i) {
            const float e = v[p][i] != v[p][i] ? v[p][i] : 0.f;
            sum += e;
            if (!log) v[p][i] = e;
          }
    } else if (log) {
#pragma unroll
      for (int p = 0; p < P; ++p)
        if (ok[p])
#pragma unroll
          for (int i = 0; i < N; ++i) sum += exp_shifted(v[p][i] - m);
    } else {
#pragma unroll
      for (int p = 0; p < P; ++p)
        if (ok[p])
#pragma unroll
          for (int i = 0; i < N; ++i) {
            v[p][i] = exp_shifted(v[p][i] - m);
            sum += v[p][i];
          }
    }
    return {m, sum};
  }

  // A held row: masked elements become -inf in the pack itself, as convert() makes them.
  template <int N>
  __device__ void hold(int64_t row, int64_t col, Pack<T, N>& raw) const {
    if (mask != nullptr) {
      float keep[N];
      load_keep<N>(mask, row * cols + col, keep);
#pragma unroll
      for (int i = 0; i < N; ++i)
        if (keep[i] == 0.f) raw.v[i] = from_float<T>(-INFINITY);
    }
  }

  // The same statistics from a held row: the max by packed 16-bit maxima before any conversion
  // (held_max), then each pack unpacked once for the sum, so no more than a pack of floats is
  // live. The sum takes exp_held(v, m) through its shift (exp_shift): no check of m an element.
  template <int P, int N>
  __device__ Stats thread_stats(const Pack<T, N> (&raw)[P], const bool (&ok)[P]) const {
    const float m = held_max(raw, [&](int p) { return ok[p]; }), shift = exp_shift(m);
    float sum = 0.f;
    each_held(raw, ok, [&](float v) { sum += exp_shifted(v - shift); });
    return {m, sum};
  }

  // What exp_held(v, m) subtracts: m, or 0 where m is -inf (a thread of only -inf and NaN, or
  // none), so that exp_shifted(v - exp_shift(m)) is exp_held(v, m) for every v: 0 for -inf, NaN
  // for NaN. One select a thread instead of a predicated pair a element.
  __device__ static float exp_shift(float m) { return m == -INFINITY ? 0.f : m; }

  // Each element of a thread's held packs as a float, by element_again(): one shift or mask a
  // bfloat16 (unpack()'s cvt took two for an odd element), other instructions than the stores'
  // unpack_again(), so no float is kept live between the two.
  template <int P, int N, class F>
  __device__ static void each_held(const Pack<T, N> (&raw)[P], const bool (&ok)[P], F f) {
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (ok[p]) {
#pragma unroll
        for (int i = 0; i < N; ++i) f(element_again(raw[p], i));
      }
  }

  // What thread_stats() leaves in place of an element (softmax), from the thread's max m: bit for
  // bit the value the float-holding path keeps.
  __device__ float exp_held(float v, float m) const {
    if (m == -INFINITY) return v != v ? v : 0.f;
    return exp_shifted(v - m);
  }

  // The loop kernel re-reads x: the same form, relative to the row's max.
  template <int N>
  __device__ void restate(float (&v)[N], Stats row) const {
    if (!log)
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = exp_from(v[i], row.max);
  }

  struct Row {
    SoftmaxRow row;
    float scale;  // softmax: exp(thread max - row max) / sum; 16-bit: exp(thread max - row max)
    float mine;   // exp_shift(the thread's max)
  };

  // 16-bit rows apply exp(thread max - row max) and 1/sum one after the other (scaled()): the sum
  // carries 2^kExpBias, and their product underflows float for a thread whose max lies ~60 below
  // the row's (one pack a thread in a spread launch), where each output is still a normal float.
  static constexpr bool kScaleApart = sizeof(T) == 2;
  __device__ float scaled(float v, const Row& r) const {
    if constexpr (kScaleApart) return (v * r.scale) * r.row.k;
    else return v * r.scale;
  }

  // An all -inf row gives exp(-inf - -inf) = NaN, as jax.nn.softmax does.
  __device__ Row finalize(Stats s, Stats mine, int64_t, bool) const {
    const SoftmaxRow r = softmax_row(s.max, s.sum, log);
    if constexpr (kScaleApart) return {r, log ? 0.f : expf(mine.max - s.max), exp_shift(mine.max)};
    else return {r, log ? 0.f : expf(mine.max - s.max) * r.k, exp_shift(mine.max)};
  }

  template <int N>
  __device__ void from_held(float (&v)[N], Row r) const {
    if (!log)
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = exp_shifted(v[i] - r.mine);  // exp_held(v[i], thread max)
  }

  // The row kernel's stores with the common flags as constants (a copy of the op whose fields
  // the compiler folds): no mask, softmax or log-softmax. No branch on either a pack.
  static constexpr bool kSpecializes = true;
  template <class F>
  __device__ void specialize(F&& f) const {
    if (mask == nullptr) {
      SoftmaxFwdOp o = *this;
      o.mask = nullptr;
      if (log) {
        o.log = true;
        f(o);
      } else {
        o.log = false;
        f(o);
      }
    } else {
      f(*this);
    }
  }

  template <int N>
  struct Params {};
  static constexpr int kParamFloats = 0;
  template <int N>
  __device__ void load_params(int64_t, Params<N>&) const {}

  template <int N>
  __device__ void store(int64_t row, int64_t col, const float (&v)[N], Row r, const Params<N>*) const {
    float out[N];
    // Branches per pack, not per element: without a mask every element is kept.
    if (mask == nullptr) {
      if (log) {
#pragma unroll
        for (int i = 0; i < N; ++i) out[i] = softmax_apply(v[i], true, r.row, true);
      } else {
#pragma unroll
        for (int i = 0; i < N; ++i) out[i] = scaled(v[i], r);
      }
    } else {
      float keep[N];
      load_keep<N>(mask, row * cols + col, keep);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        if (log) {
          out[i] = softmax_apply(v[i], keep[i] != 0.f, r.row, true);
        } else {
          out[i] = keep[i] != 0.f ? scaled(v[i], r) : 0.f;
        }
      }
    }
    store_pack<T, N>(y + row * cols + col, out);
  }
};

// kMasked: whether a mask is read. Without the masked path the 512 x 4 tiles fit 64 registers,
// two CTAs a SM; with it ptxas spilled ~200 bytes there, so masked tiles keep one CTA a SM.
template <class T, bool kMasked>
struct SoftmaxBwdOp {
  using Type = T;
  using RowType = T;  // y
  static constexpr int kColumnSums = 0;
  static constexpr bool kFitsTwice = !kMasked;
  static constexpr TileBudget kBudget = kSoftmaxBackwardBudget;

  const T* y;
  const T* dy;
  const bool* mask_in;  // read only when kMasked
  T* dx;
  int64_t cols;
  bool log;

  __device__ const bool* mask() const { return kMasked ? mask_in : nullptr; }

  struct RowIn {};
  __device__ RowIn row_in(int64_t, bool) const { return {}; }

  template <int N>
  using Early = NoEarly;

  __device__ void prefetch(int64_t row0, int64_t nrows, int part, int parts) const {
    prefetch_l2_rows(y, row0, nrows, cols, part, parts);
    prefetch_l2_rows(dy, row0, nrows, cols, part, parts);
    prefetch_l2_rows(mask(), row0, nrows, cols, part, parts);
  }

  template <int N>
  __device__ void load_held(int64_t row, int64_t col, Pack<T, N>& a, Pack<T, N>& d) const {
    a = load_raw<T, N>(y + row * cols + col);
    d = load_raw<T, N>(dy + row * cols + col);
  }

  template <int N>
  __device__ void load(int64_t row, int64_t col, float (&a)[N], float (&d)[N]) const {
    Pack<T, N> ra;
    Pack<T, N> rd;
    load_held(row, col, ra, rd);
    unpack(ra, a);
    unpack(rd, d);
  }

  template <int N>
  __device__ void terms(RowIn, int64_t row, int64_t col, float (&a)[N], const float (&d)[N], Sum2& s) const {
    float keep[N];
    load_keep<N>(mask(), row * cols + col, keep);
#pragma unroll
    for (int i = 0; i < N; ++i) s.a += softmax_bwd_term(a[i], d[i], keep[i] != 0.f, log);
  }

  __device__ float finalize(RowIn, Sum2 s) const { return s.a; }

  template <int N>
  __device__ void emit(int64_t row, int64_t col, const float (&a)[N], const float (&d)[N], float s, float (&)[N],
                       float (&)[N], NoEarly) const {
    float keep[N], out[N];
    load_keep<N>(mask(), row * cols + col, keep);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if constexpr (sizeof(T) == 2) {
        // A 16-bit dx is rounded to 2^-9 or coarser: exp(y) by the hardware's ex2 (relative error
        // ~2^-22 plus y's rounding times |y|), three instructions instead of expf's ten.
        if (log) {
          out[i] = keep[i] != 0.f ? d[i] - ex2_approx(a[i] * kLog2e) * s : 0.f;
          continue;
        }
      }
      out[i] = softmax_bwd_apply(a[i], d[i], keep[i] != 0.f, s, log);
    }
    store_pack<T, N>(dx + row * cols + col, out);
  }

  __device__ void column_terms(RowIn, int64_t, int64_t, float&, float&) const {}
};

}  // namespace jaxnorm
